"""Canonical JSON and the hashes over it: the bytes every backend stores and chains.

Every backend stores ``data`` and ``meta`` as the canonical bytes made here (orjson with
sorted keys), so the hash of an event can be recomputed from what is stored, on any
backend, and a copy between backends keeps its hashes. Validation of what is appended lives
in ``_validation``, decoding of what is read in ``_decoding``, the snapshot binding in
``_snapshots`` and ``verify``'s walk in ``_chain``.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from ._errors import InvalidEventError
from ._records import EncodedEvent

__all__ = [
    "CHAIN_TAG",
    "EPOCH",
    "as_bytes",
    "chain_hashes",
    "check_all_finite",
    "check_finite",
    "decode_json",
    "digest_event_hash",
    "dump_dict",
    "encode_json",
    "encode_object",
    "event_hash",
    "from_micros",
    "legacy_event_hash",
    "length_prefix",
    "payload_digest",
    "to_micros",
]

_OPTS = orjson.OPT_SORT_KEYS
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""The Unix epoch, aware (``recorded_at`` counts microseconds from it)."""
_EPOCH = EPOCH
length_prefix = struct.Struct(">Q").pack
"""The 8-byte big-endian length prefix of every hashed part."""
_LEN = length_prefix


def encode_json(value: Mapping[str, Any], *, what: str = "value") -> bytes:
    """Encode a JSON object canonically (sorted keys, UTF-8, no whitespace).

    Raises:
        InvalidEventError: ``value`` holds a NaN or an infinity, which JSON cannot express
            (the message names the place, starting with ``what``).
        TypeError: ``value`` holds something orjson cannot serialize.
    """
    raw = orjson.dumps(value, option=_OPTS)
    if raw.find(b"null") >= 0:  # cheaper than "in" on bytes
        check_finite(value, what, None, None, raw)
    return raw


def check_finite(
    value: object, what: str, stream: str | None, index: int | None, raw: bytes | None = None
) -> None:
    """Raise ``InvalidEventError`` naming the place of the first NaN or infinity inside ``value``.

    orjson would write it as ``null``: the payload would be stored changed, and what a
    reader folds would differ from what the writer had. The encoders call this only when the
    encoded bytes contain ``null``, which every non-finite float becomes, so a payload
    without one costs nothing more.

    ``raw``, the bytes orjson made of ``value``, allows a faster test first: when decoding
    them gives a value equal to ``value``, no float became ``null`` (a NaN or an infinity
    never equals the ``None`` it turned into), and the walk is skipped. Values that do not
    survive the round trip as equal (tuples, dataclasses, enums, datetimes) take the walk.
    """
    if raw is not None and _round_trips(raw, value):
        return
    if not _any_non_finite(value, 0):  # the common case: real nulls only, no path strings made
        return
    found = _non_finite(value, what, 0)
    if found is not None:
        where, number = found
        raise InvalidEventError(
            f"{where} is {number!r}: JSON has no NaN or Infinity; store a string or null instead",
            stream=stream,
            index=index,
        )


def _round_trips(raw: bytes, value: object) -> bool:
    """Whether ``raw`` decodes to a value equal to ``value`` (so that nothing in it became null).

    Decoding and comparing run in C: about 1 µs for a chat message, against about 2 µs for
    ``_any_non_finite`` walking it in Python, and the gap grows with the payload. Only a
    container or float subclass whose ``==`` claims equality with anything could pass with a
    NaN inside; orjson writes such subclasses as their base types, and none of the store's
    callers makes one.
    """
    try:
        return bool(orjson.loads(raw) == value)
    except Exception:  # a comparison that raises proves nothing: take the walk
        return False


_PLAIN = frozenset({str, int, bool, type(None)})
"""Types that hold no float, skipped at once by ``_any_non_finite``."""


def _any_non_finite(value: object, depth: int) -> bool:
    """Whether ``value`` holds a NaN or an infinity; fast on plain dicts, lists and scalars.

    A loop over a stack rather than recursion: a float ``x`` is finite exactly when
    ``x - x`` is ``0.0`` (it is NaN for NaN and the infinities, and NaN is true).
    """
    stack: list[Any] = [value]
    pop, extend, plain = stack.pop, stack.extend, _PLAIN
    while stack:
        item = pop()
        cls = item.__class__
        if cls is float:
            if item - item:
                return True
        elif cls is dict:
            extend(item.values())
        elif cls is list or cls is tuple:
            extend(item)
        elif cls not in plain and _non_finite(item, "", depth) is not None:
            return True  # mappings, dataclasses, enums, subclasses: the thorough walk
    return False


def _non_finite(value: object, path: str, depth: int) -> tuple[str, float] | None:
    """The path and value of the first non-finite float in ``value`` (as orjson walks it), or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, value)
    if depth > 256:  # orjson refuses anything deeper
        return None
    items: Iterable[tuple[str, object]]
    if isinstance(value, Mapping):
        items = ((f"{path}[{key!r}]", item) for key, item in value.items())
    elif isinstance(value, list | tuple):
        items = ((f"{path}[{number}]", item) for number, item in enumerate(value))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = ((f"{path}.{f.name}", getattr(value, f.name, None)) for f in dataclasses.fields(value))
    elif isinstance(value, enum.Enum):
        items = ((path, value.value),)
    else:
        return None
    for where, item in items:
        found = _non_finite(item, where, depth + 1)
        if found is not None:
            return found
    return None


def decode_json(raw: bytes | str) -> Any:
    """Decode JSON bytes; raises ``orjson.JSONDecodeError`` (a ValueError) when malformed."""
    return orjson.loads(raw)


def encode_object(value: object, what: str, stream: str | None, index: int | None) -> bytes:
    """Canonical bytes of a JSON object (``data`` or ``meta``); ``InvalidEventError`` naming ``what``."""
    if type(value) is not dict:  # the exact-type test first: isinstance on an ABC is slow
        if not isinstance(value, Mapping):
            raise InvalidEventError(
                f"{what} must be a JSON object (a mapping), not {type(value).__name__}",
                stream=stream,
                index=index,
            )
        value = dict(value)
    raw = dump_dict(value, what, stream, index)
    if raw.find(b"null") >= 0:  # cheaper than "in" on bytes
        check_finite(value, what, stream, index, raw)
    return raw


def dump_dict(value: dict[str, Any], what: str, stream: str | None, index: int | None) -> bytes:
    """Canonical bytes of a dict, not yet checked for NaN: ``encode_object`` without ``check_finite``.

    For a caller that checks the values whose bytes hold ``null`` itself, later
    (``check_all_finite``); ``InvalidEventError`` naming ``what`` if orjson cannot encode it.
    """
    try:
        return orjson.dumps(value, option=_OPTS)
    except TypeError as exc:
        raise InvalidEventError(
            f"{what} is not JSON-serializable: {exc}", stream=stream, index=index
        ) from exc


def check_all_finite(
    values: Sequence[object], raws: Sequence[bytes], what: str, stream: str | None, indexes: Sequence[int]
) -> None:
    """``check_finite(values[k], what, stream, indexes[k], raws[k])`` for each k in turn, in fewer steps.

    The round trip of ``check_finite`` is taken for up to ``_FINITE_CHUNK`` values at once:
    their bytes joined into one JSON array, decoded and compared with the list of values in
    one call each (both in C), where a loop over the values pays two Python calls per value.
    A chunk that does not round-trip as equal is checked value by value, so the first error
    in order is raised, the one the loop would raise.
    """
    if len(values) == 1:
        check_finite(values[0], what, stream, indexes[0], raws[0])
        return
    for start in range(0, len(values), _FINITE_CHUNK):
        end = start + _FINITE_CHUNK
        chunk = values[start:end]
        try:
            if orjson.loads(b"[%b]" % b",".join(raws[start:end])) == chunk:
                continue
        except Exception:  # a comparison that raises proves nothing: check one by one
            pass
        for value, raw, index in zip(chunk, raws[start:end], indexes[start:end], strict=True):
            check_finite(value, what, stream, index, raw)


_FINITE_CHUNK = 256
"""Values decoded at once by ``check_all_finite``: the bytes of a chunk are copied to be joined."""


CHAIN_TAG = b"turnlog-chain-2"
"""The first part of every hash of the digest chain: no input of the legacy chain starts so."""


def payload_digest(raw: bytes) -> str:
    """SHA-256 of the canonical bytes of a ``data`` or ``meta`` object, in hexadecimal.

    The chain commits to these digests rather than to the bytes, so a payload can be erased
    (``EventStore.redact``) while its digest, and with it the chain, stays checkable.
    """
    return hashlib.sha256(raw).hexdigest()


def event_hash(
    prev_hash: str,
    event_id: str,
    stream: str,
    version: int,
    type_: str,
    schema: int,
    data: bytes,
    meta: bytes,
    recorded_at_us: int,
) -> str:
    """The hash of one event in the digest chain, from its canonical ``data`` and ``meta`` bytes.

    SHA-256 over the chain tag, the previous hash, the envelope fields and the SHA-256 digests
    of ``data`` and ``meta`` (see ``digest_event_hash``). Every event appended by this version
    of turnlog is hashed so; ``legacy_event_hash`` is the scheme of older stores.
    """
    return digest_event_hash(
        prev_hash, event_id, stream, version, type_, schema, payload_digest(data), payload_digest(meta),
        recorded_at_us,
    )  # fmt: skip


def digest_event_hash(
    prev_hash: str,
    event_id: str,
    stream: str,
    version: int,
    type_: str,
    schema: int,
    data_digest: str,
    meta_digest: str,
    recorded_at_us: int,
) -> str:
    """The digest-chain hash of an event given the digests of its payload and meta.

    Fields are length-prefixed so that no two different events share an input. The global
    position is not part of the hash: it belongs to the store, not the event, so a copy to
    another backend keeps every hash.
    """
    parts = (
        CHAIN_TAG, prev_hash.encode(), event_id.encode(), stream.encode(), str(version).encode(),
        type_.encode(), str(schema).encode(), data_digest.encode(), meta_digest.encode(),
        str(recorded_at_us).encode(),
    )  # fmt: skip
    return hashlib.sha256(b"".join(_LEN(len(part)) + part for part in parts)).hexdigest()


def legacy_event_hash(
    prev_hash: str,
    event_id: str,
    stream: str,
    version: int,
    type_: str,
    schema: int,
    data: bytes,
    meta: bytes,
    recorded_at_us: int,
) -> str:
    """SHA-256 over the previous hash and the canonical bytes of one event (the legacy chain).

    Stores written by turnlog before the digest chain hold events hashed so; they are read
    and verified as they are. Such an event commits to its bytes, so it cannot be redacted
    until the store is upgraded (``upgrade_chain``).
    """
    a, b, c = prev_hash.encode(), event_id.encode(), stream.encode()
    d, e, f = str(version).encode(), type_.encode(), str(schema).encode()
    g = str(recorded_at_us).encode()
    return hashlib.sha256(
        b"".join(
            (
                _LEN(len(a)), a, _LEN(len(b)), b, _LEN(len(c)), c,
                _LEN(len(d)), d, _LEN(len(e)), e, _LEN(len(f)), f,
                _LEN(len(data)), data, _LEN(len(meta)), meta, _LEN(len(g)), g,
            )
        )
    ).hexdigest()  # fmt: skip


def chain_hashes(
    stream: str, version: int, prev_hash: str, events: Sequence[EncodedEvent], recorded_at_us: int
) -> list[str]:
    """The hashes of ``events`` appended to ``stream`` after ``version``, whose hash is ``prev_hash``.

    The same values as ``event_hash`` called for each event in turn (event k gets version
    ``version + k`` and the previous event's hash), with fewer steps per event: what the events
    share (the stream, the time, and a type, schema or meta equal to the previous event's) is
    encoded, digested and length-prefixed once, and the digest of a small meta is remembered
    across calls (most appends carry one of a few correlation objects).
    """
    if len(events) == 1:  # a single-event append: its own shorter path
        return [_one_hash(stream, version + 1, prev_hash, events[0], recorded_at_us)]
    sha256, length, lengths = hashlib.sha256, _LEN, _SHORT_LENGTHS
    stream_b = stream.encode()
    time_b = b"%d" % recorded_at_us
    # What every event of this call hashes after its data digest: the meta digest and the time
    # (whose length prefixes are fixed), and before its id: the tag and the previous hash.
    time_part = (lengths[len(time_b)] if len(time_b) < 256 else length(len(time_b))) + time_b
    stream_part = (lengths[len(stream_b)] if len(stream_b) < 256 else length(len(stream_b))) + stream_b
    prev_b = prev_hash.encode()
    head = _TAG_PART + (_HASH_LENGTH if len(prev_b) == 64 else length(len(prev_b))) + prev_b
    last_type: str | None = None
    last_schema = last_meta = None
    kind = tail = b""
    digests = _META_DIGESTS
    hashes: list[str] = []
    append = hashes.append
    join = b"".join
    for eid, etype, schema, data, meta in events:
        version += 1
        if etype is not last_type or schema != last_schema:
            type_b, schema_b = etype.encode(), b"%d" % schema
            kind = length(len(type_b)) + type_b + length(len(schema_b)) + schema_b
            last_type, last_schema = etype, schema
        if meta is not last_meta and meta != last_meta:  # equal metas share one digest
            meta_digest = digests.get(meta)
            if meta_digest is None:
                meta_digest = _meta_digest(meta)
            tail = _HASH_LENGTH + meta_digest + time_part
            last_meta = meta
        id_b, version_b = eid.encode(), b"%d" % version
        digest = sha256(
            join(
                (
                    head,
                    lengths[len(id_b)] if len(id_b) < 256 else length(len(id_b)), id_b,
                    stream_part,
                    lengths[len(version_b)], version_b,
                    kind,
                    _HASH_LENGTH, sha256(data).hexdigest().encode(),
                    tail,
                )
            )
        ).hexdigest()  # fmt: skip
        append(digest)
        head = _TAG_HASH + digest.encode()
    return hashes


def _one_hash(stream: str, version: int, prev_hash: str, event: EncodedEvent, recorded_at_us: int) -> str:
    """``event_hash`` of one event at ``version``, its meta digest and type part remembered."""
    eid, etype, schema, data, meta = event
    meta_digest = _META_DIGESTS.get(meta)
    if meta_digest is None:
        meta_digest = _meta_digest(meta)
    kind = _KINDS.get((etype, schema))
    if kind is None:
        kind = _kind(etype, schema)
    id_b, stream_b, prev_b = eid.encode(), stream.encode(), prev_hash.encode()
    version_b, time_b = b"%d" % version, b"%d" % recorded_at_us
    lengths = _SHORT_LENGTHS
    if len(id_b) > 255 or len(stream_b) > 255 or len(prev_b) > 255 or len(time_b) > 255:
        return event_hash(prev_hash, eid, stream, version, etype, schema, data, meta, recorded_at_us)
    return hashlib.sha256(
        b"".join(
            (
                _TAG_PART, lengths[len(prev_b)], prev_b, lengths[len(id_b)], id_b,
                lengths[len(stream_b)], stream_b, lengths[len(version_b)], version_b, kind,
                _HASH_LENGTH, hashlib.sha256(data).hexdigest().encode(),
                _HASH_LENGTH, meta_digest, lengths[len(time_b)], time_b,
            )
        )
    ).hexdigest()  # fmt: skip


def _meta_digest(meta: bytes) -> bytes:
    """The hex digest of a meta, remembered when the meta is small."""
    digest = hashlib.sha256(meta).hexdigest().encode()
    if len(meta) <= _META_CACHE_BYTES:
        if len(_META_DIGESTS) >= _META_CACHE_SIZE:
            _META_DIGESTS.clear()
        _META_DIGESTS[meta] = digest
    return digest


def _kind(etype: str, schema: int) -> bytes:
    """The hashed type and schema parts of an event, length-prefixed, remembered."""
    type_b, schema_b = etype.encode(), b"%d" % schema
    kind = _LEN(len(type_b)) + type_b + _LEN(len(schema_b)) + schema_b
    if len(_KINDS) >= _META_CACHE_SIZE:
        _KINDS.clear()
    _KINDS[(etype, schema)] = kind
    return kind


_KINDS: dict[tuple[str, int], bytes] = {}
"""The hashed type and schema parts of recently appended kinds of event."""
_SHORT_LENGTHS = tuple(_LEN(n) for n in range(256))
"""The length prefixes of parts shorter than 256 bytes, made once."""
_HASH_LENGTH = _LEN(64)
"""The length prefix of a previous hash (64 hexadecimal digits)."""
_TAG_PART = _LEN(len(CHAIN_TAG)) + CHAIN_TAG
"""The chain tag with its length prefix: the first part of every hash."""
_TAG_HASH = _TAG_PART + _HASH_LENGTH
"""The chain tag and the length prefix of a previous hash: what precedes it in every hash but a first."""
_META_DIGESTS: dict[bytes, bytes] = {b"{}": hashlib.sha256(b"{}").hexdigest().encode()}
"""Hex digests of recently hashed small metas (the empty one to start with)."""
_META_CACHE_BYTES = 1024
"""Metas up to this size have their digest remembered."""
_META_CACHE_SIZE = 256
"""Distinct metas remembered; the cache starts over when it is full."""


def to_micros(moment: datetime) -> int:
    """UTC microseconds since the Unix epoch."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(micros: int) -> datetime:
    """The inverse of ``to_micros`` (an aware UTC datetime)."""
    # Epoch plus a timedelta is about twice as fast as fromtimestamp().replace() on the read path.
    return _EPOCH + timedelta(microseconds=micros)


def as_bytes(raw: bytes | str | memoryview) -> bytes:
    """Stored ``data`` or ``meta`` as bytes, however the backend's driver handed it back."""
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, str):
        return raw.encode()
    return bytes(raw)
