"""Validation, canonical encoding and the hash chain, shared by every backend.

Every backend stores ``data`` and ``meta`` as the canonical bytes made here (orjson with
sorted keys), so the hash of an event can be recomputed from what is stored, on any
backend, and a copy between backends keeps its hashes.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import logging
import math
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple
from uuid import UUID, SafeUUID

import orjson

from ._errors import CorruptEventError, EventTooLarge, IdempotencyError, InvalidEventError
from ._ids import CANONICAL_ID, check_event_id
from ._records import (
    ANY,
    STREAM_EXISTS,
    AppendResult,
    EncodedEvent,
    ExpectedVersion,
    NewEvent,
    NewSnapshot,
    Problem,
    RecordedEvent,
    Snapshot,
    VerifyReport,
    sealed_encoded,
)
from ._upcasting import Upcasters

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "SNAPSHOT_BINDING",
    "bind_snapshot",
    "first_intact",
    "snapshot_digest",
    "snapshot_problem",
    "ChainChecker",
    "PreparedAppend",
    "PreparedSnapshot",
    "chain_hashes",
    "check_event_type",
    "check_expected_version",
    "check_finite",
    "check_read_range",
    "check_stream_name",
    "check_stream_prefix",
    "check_type_filter",
    "decode_event",
    "decode_json",
    "decode_payload",
    "decode_snapshot",
    "encode_json",
    "encode_new_events",
    "encode_object",
    "event_hash",
    "digest_event_hash",
    "legacy_event_hash",
    "payload_digest",
    "CHAIN_TAG",
    "from_micros",
    "match_resent",
    "prepare_batch",
    "prepare_events",
    "prepare_snapshot",
    "to_micros",
    "version_matches",
]

DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
MAX_STREAM_LEN = 200
MAX_TYPE_LEN = 200

_TYPE_RE = re.compile(r"[A-Za-z][A-Za-z0-9_\-]*(\.[A-Za-z][A-Za-z0-9_\-]*)*\Z")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_OPTS = orjson.OPT_SORT_KEYS
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_LEN = struct.Struct(">Q").pack


def encode_json(value: Mapping[str, Any], *, what: str = "value") -> bytes:
    """Encode a JSON object canonically (sorted keys, UTF-8, no whitespace).

    Raises:
        InvalidEventError: ``value`` holds a NaN or an infinity, which JSON cannot express
            (the message names the place, starting with ``what``).
        TypeError: ``value`` holds something orjson cannot serialize.
    """
    raw = orjson.dumps(value, option=_OPTS)
    if raw.find(b"null") >= 0:  # cheaper than "in" on bytes
        check_finite(value, what, None, None)
    return raw


def check_finite(value: object, what: str, stream: str | None, index: int | None) -> None:
    """Raise ``InvalidEventError`` naming the place of the first NaN or infinity inside ``value``.

    orjson would write it as ``null``: the payload would be stored changed, and what a
    reader folds would differ from what the writer had. The encoders call this only when the
    encoded bytes contain ``null``, which every non-finite float becomes, so a payload
    without one costs nothing more.
    """
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


def check_stream_name(stream: object) -> str:
    """Return ``stream`` if it is a valid stream name, else raise ``InvalidEventError``."""
    if not isinstance(stream, str):
        raise InvalidEventError(f"stream name must be a str, not {type(stream).__name__}")
    if not stream:
        raise InvalidEventError("stream name must not be empty")
    if len(stream) > MAX_STREAM_LEN:
        raise InvalidEventError(
            f"stream name is {len(stream)} characters, over the limit of {MAX_STREAM_LEN}"
        )
    if _CONTROL_RE.search(stream):
        raise InvalidEventError(f"stream name {stream!r} contains a control character")
    if not stream.isascii():
        _check_text(stream, "stream name")
    return stream


def check_stream_prefix(prefix: object) -> str | None:
    """Return a ``stream_prefix`` or ``prefix`` argument of a read if valid (None or text)."""
    if prefix is None:
        return None
    if not isinstance(prefix, str):
        raise InvalidEventError(f"stream prefix must be a str, not {type(prefix).__name__}")
    if not prefix.isascii():
        _check_text(prefix, "stream prefix")
    return prefix


def check_type_filter(types: Iterable[str] | None) -> list[str] | None:
    """The ``types`` argument of a read as a list (None: every type); each must be a str of text."""
    if types is None:
        return None
    wanted = [types] if isinstance(types, str) else list(types)
    for name in wanted:
        if not isinstance(name, str):
            raise InvalidEventError(f"an event type to read must be a str, not {type(name).__name__}")
        if not name.isascii():
            _check_text(name, "event type")
    return wanted


def _check_text(value: str, what: str) -> None:
    """Refuse a str that is not Unicode text (a lone surrogate cannot be stored or hashed)."""
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise InvalidEventError(
            f"{what} {value!r} holds a lone surrogate at index {exc.start}: not valid Unicode text"
        ) from None


def check_expected_version(stream: str, expected: object) -> ExpectedVersion:
    """Validate the type and range of an ``expected_version`` argument."""
    if expected is ANY or expected is STREAM_EXISTS:
        return expected
    if isinstance(expected, bool) or not isinstance(expected, int):
        raise InvalidEventError(
            "expected_version must be an int, ANY, NO_STREAM or STREAM_EXISTS, "
            f"not {type(expected).__name__} {expected!r}",
            stream=stream,
        )
    if expected < 0:
        raise InvalidEventError(f"expected_version must be >= 0, not {expected}", stream=stream)
    return expected


def check_read_range(low_name: str, low: object, high_name: str, high: object, limit: object) -> None:
    """Validate the bounds and limit of a read (ints >= 0; the upper bound and limit may be None)."""
    for name, value, optional in ((low_name, low, False), (high_name, high, True), ("limit", limit, True)):
        if value is None and optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidEventError(f"{name} must be an int >= 0, not {value!r}")


def version_matches(expected: ExpectedVersion, actual: int) -> bool:
    """Tell whether a stream at ``actual`` satisfies ``expected``."""
    if expected is ANY:
        return True
    if expected is STREAM_EXISTS:
        return actual > 0
    return expected == actual


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
    try:
        raw = orjson.dumps(value, option=_OPTS)
    except TypeError as exc:
        raise InvalidEventError(
            f"{what} is not JSON-serializable: {exc}", stream=stream, index=index
        ) from exc
    if raw.find(b"null") >= 0:  # cheaper than "in" on bytes
        check_finite(value, what, stream, index)
    return raw


valid_types: set[str] = set()
"""Event type names already validated: a store sees few distinct ones, again and again."""


def check_event_type(etype: object, stream: str | None, index: int | None) -> None:
    """Raise ``InvalidEventError`` unless ``etype`` is a dotted event type name (remembered when it is)."""
    if not isinstance(etype, str) or not etype:
        raise InvalidEventError("event type must be a non-empty str", stream=stream, index=index)
    if len(etype) > MAX_TYPE_LEN or not _TYPE_RE.match(etype):
        raise InvalidEventError(
            f"malformed event type {etype!r}: use dotted names such as 'message.added'",
            stream=stream,
            index=index,
        )
    if type(etype) is str and len(valid_types) < 10_000:
        valid_types.add(etype)


def prepare_events(
    stream: object, events: Sequence[NewEvent], max_event_bytes: int
) -> tuple[str, list[EncodedEvent]]:
    """Validate a batch and encode it canonically; nothing is written if this raises."""
    name = check_stream_name(stream)
    return name, encode_new_events(events, max_event_bytes, name)


def encode_new_events(events: object, max_event_bytes: int, stream: str | None) -> list[EncodedEvent]:
    """Validate and encode a non-empty sequence of ``NewEvent`` s; errors name ``stream`` when given."""
    if isinstance(events, NewEvent) or not isinstance(events, Sequence):
        raise InvalidEventError("events must be a sequence of NewEvent", stream=stream)
    if not events:
        raise InvalidEventError("an append needs at least one event", stream=stream)
    prepared: list[EncodedEvent] = []
    seen: set[str] = set()
    for index, event in enumerate(events):
        if not isinstance(event, NewEvent):
            hint = " (append EncodedEvents with append_encoded)" if isinstance(event, EncodedEvent) else ""
            raise InvalidEventError(
                f"expected a NewEvent, got {type(event).__name__}{hint}", stream=stream, index=index
            )
        etype = event.type
        if type(etype) is not str or etype not in valid_types:
            check_event_type(etype, stream, index)
        if type(event.schema) is not int or event.schema < 1:
            raise InvalidEventError(
                f"schema must be an int >= 1, not {event.schema!r}", stream=stream, index=index
            )
        data = encode_object(event.data, "data", stream, index)
        meta = encode_object({} if event.meta is None else event.meta, "meta", stream, index)
        size = len(data) + len(meta)
        if size > max_event_bytes:
            raise EventTooLarge(size, max_event_bytes, stream=stream, index=index)
        eid = event.id
        eid = str(eid) if eid.__class__ is UUID else check_event_id(eid, stream, index)
        if eid in seen:
            raise InvalidEventError(f"event id {eid} appears twice in one batch", stream=stream, index=index)
        seen.add(eid)
        prepared.append(sealed_encoded((eid, etype, event.schema, data, meta)))
    return prepared


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
    encoded, digested and length-prefixed once.
    """
    sha256, length, lengths = hashlib.sha256, _LEN, _SHORT_LENGTHS
    stream_b = stream.encode()
    stream_part = length(len(stream_b)) + stream_b
    time_b = str(recorded_at_us).encode()
    time_part = length(len(time_b)) + time_b
    tag_part = length(len(CHAIN_TAG)) + CHAIN_TAG
    prev_b = prev_hash.encode()
    prev_length = length(len(prev_b))
    last_type: str | None = None
    last_schema = last_meta = None
    kind = tail = b""
    hashes: list[str] = []
    for eid, etype, schema, data, meta in events:
        version += 1
        if etype is not last_type or schema != last_schema:
            type_b, schema_b = etype.encode(), str(schema).encode()
            kind = length(len(type_b)) + type_b + length(len(schema_b)) + schema_b
            last_type, last_schema = etype, schema
        if meta is not last_meta and meta != last_meta:  # equal metas share one digest
            tail = _HASH_LENGTH + (
                _EMPTY_DIGEST if meta == b"{}" else sha256(meta).hexdigest().encode()
            ) + time_part  # fmt: skip
            last_meta = meta
        id_b, version_b = eid.encode(), b"%d" % version
        digest = sha256(
            b"".join(
                (
                    tag_part,
                    prev_length, prev_b,
                    lengths[len(id_b)] if len(id_b) < 256 else length(len(id_b)), id_b,
                    stream_part,
                    lengths[len(version_b)], version_b,
                    kind,
                    _HASH_LENGTH, sha256(data).hexdigest().encode(),
                    tail,
                )
            )
        ).hexdigest()  # fmt: skip
        hashes.append(digest)
        prev_b = digest.encode()
        prev_length = _HASH_LENGTH
    return hashes


_SHORT_LENGTHS = tuple(_LEN(n) for n in range(256))
"""The length prefixes of parts shorter than 256 bytes, made once."""
_EMPTY_DIGEST = hashlib.sha256(b"{}").hexdigest().encode()
"""The digest of the empty meta object, which most events carry."""
_HASH_LENGTH = _LEN(64)
"""The length prefix of a previous hash (64 hexadecimal digits)."""


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


class PreparedAppend(NamedTuple):
    """One validated entry of an append: the stream, its encoded events, the expected version."""

    stream: str
    events: Sequence[EncodedEvent]
    expected: ExpectedVersion


def prepare_batch(entries: object, max_event_bytes: int) -> list[PreparedAppend]:
    """Validate every entry of an ``append_batch`` call; nothing is written if this raises.

    Each entry is ``(stream, events, expected_version)``. An event id may appear only once
    in the whole call, across entries too.
    """
    if not isinstance(entries, Sequence) or isinstance(entries, str | bytes):
        raise InvalidEventError("append_batch needs a sequence of (stream, events, expected_version)")
    if not entries:
        raise InvalidEventError("append_batch needs at least one entry")
    prepared: list[PreparedAppend] = []
    seen: set[str] = set()
    for number, entry in enumerate(entries):
        if not isinstance(entry, tuple | list) or len(entry) != 3:
            raise InvalidEventError(
                f"append_batch entry #{number} must be (stream, events, expected_version)"
            )
        stream, events, expected = entry
        name, evs = prepare_events(stream, events, max_event_bytes)
        expected = check_expected_version(name, expected)
        for index, ev in enumerate(evs):
            if ev.id in seen:
                raise InvalidEventError(
                    f"event id {ev.id} appears twice in one append_batch", stream=name, index=index
                )
            seen.add(ev.id)
        prepared.append(PreparedAppend(name, evs, expected))
    return prepared


@dataclass(frozen=True, slots=True)
class PreparedSnapshot:
    """A validated snapshot with its canonical bytes."""

    stream: str
    version: int
    type: str
    schema: int
    data: bytes
    meta: bytes


def prepare_snapshot(snapshot: object, max_event_bytes: int) -> PreparedSnapshot:
    """Validate and encode a ``NewSnapshot``; raises ``InvalidEventError`` when malformed."""
    if not isinstance(snapshot, NewSnapshot):
        raise InvalidEventError(f"expected a NewSnapshot, got {type(snapshot).__name__}")
    name = check_stream_name(snapshot.stream)
    version = snapshot.version
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise InvalidEventError(f"snapshot version must be an int >= 0, not {version!r}", stream=name)
    stype = snapshot.type
    if not isinstance(stype, str) or len(stype) > MAX_TYPE_LEN or not _TYPE_RE.match(stype):
        raise InvalidEventError(f"malformed snapshot type {stype!r}", stream=name)
    schema = snapshot.schema
    if isinstance(schema, bool) or not isinstance(schema, int) or schema < 1:
        raise InvalidEventError(f"snapshot schema must be an int >= 1, not {schema!r}", stream=name)
    data = encode_object(snapshot.data, "snapshot data", name, 0)
    meta = encode_object({} if snapshot.meta is None else snapshot.meta, "snapshot meta", name, 0)
    if SNAPSHOT_BINDING in (snapshot.meta or {}):
        raise InvalidEventError(f"snapshot meta key {SNAPSHOT_BINDING!r} is the store's own", stream=name)
    if len(data) + len(meta) > max_event_bytes:
        raise EventTooLarge(len(data) + len(meta), max_event_bytes, stream=name)
    return PreparedSnapshot(name, version, stype, schema, data, meta)


def _as_bytes(raw: bytes | str | memoryview) -> bytes:
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, str):
        return raw.encode()
    return bytes(raw)


def decode_payload(
    upcasters: Upcasters | None,
    type_: str,
    schema: int,
    data: bytes | str,
    meta: bytes | str,
    *,
    stream: str,
    version: int,
    position: int | None,
) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Decode stored ``data`` and ``meta`` and upcast ``data``; return ``(schema, data, meta)``.

    Raises:
        CorruptEventError: a payload is not valid JSON, not an object, or an upcaster failed.
    """
    try:
        data_obj = orjson.loads(data)
        # Most events carry no meta; skip the parser for the canonical empty object.
        meta_obj = {} if meta == b"{}" or meta == "{}" else orjson.loads(meta)
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise CorruptEventError(
            stream, version, f"payload is not valid JSON: {exc}", position=position
        ) from exc
    if not isinstance(data_obj, dict) or not isinstance(meta_obj, dict):
        raise CorruptEventError(stream, version, "payload is not a JSON object", position=position)
    if upcasters and not (len(data_obj) == 1 and _MARKER_KEY in data_obj):  # a redacted payload stays so
        try:
            schema, data_obj = upcasters.upcast(type_, schema, data_obj)
        except Exception as exc:
            raise CorruptEventError(
                stream,
                version,
                f"upcasting {type_!r} from schema {schema} failed: {exc!r}",
                position=position,
            ) from exc
        if not isinstance(data_obj, dict):
            raise CorruptEventError(
                stream, version, f"an upcaster of {type_!r} returned a non-object", position=position
            )
    return schema, data_obj, meta_obj


_MARKER_KEY = "turnlog_redacted"
"""The key of a redaction marker (``_redaction.MARKER_KEY``): upcasters never see one."""
_new_uuid = object.__new__
_set_field = object.__setattr__
_UNKNOWN_SAFETY = SafeUUID.unknown


def _parse_id(eid: Any) -> UUID:
    """The ``UUID`` of a stored id; ``ValueError`` (or ``TypeError``) when it is not one.

    The canonical 36-character form, the one every backend stores, takes a path about twice
    as fast as ``UUID(text)`` and builds the same object: the same hexadecimal digits are
    parsed by ``int(..., 16)``, and any other form goes through ``UUID`` itself.
    """
    if eid.__class__ is str and len(eid) == 36:
        digits = eid.replace("-", "")
        if len(digits) == 32:
            value = int(digits, 16)
            uuid = _new_uuid(UUID)
            _set_field(uuid, "int", value)
            _set_field(uuid, "is_safe", _UNKNOWN_SAFETY)
            return uuid
    return UUID(eid)


_last_moment: tuple[int, datetime] = (0, _EPOCH)
"""The latest ``recorded_at`` decoded: the events of one append share their timestamp."""


def decode_event(upcasters: Upcasters, row: Sequence[Any]) -> RecordedEvent:
    """Turn a stored row in ``RawEvent`` field order into a ``RecordedEvent`` (decoded, upcast).

    The id may be stored as text or as a ``UUID``.

    Raises:
        CorruptEventError: the payload cannot be decoded or the id is not a UUID.
    """
    global _last_moment
    position, eid, stream, version, type_, schema, data, meta, recorded_at, prev_hash, digest = row
    if upcasters:
        schema, data_obj, meta_obj = decode_payload(
            upcasters, type_, schema, data, meta, stream=stream, version=version, position=position
        )
    else:
        # decode_payload without upcasters, inlined: this runs once per event read.
        try:
            data_obj = orjson.loads(data)
            meta_obj = {} if meta == b"{}" or meta == "{}" else orjson.loads(meta)
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise CorruptEventError(
                stream, version, f"payload is not valid JSON: {exc}", position=position
            ) from exc
        if data_obj.__class__ is not dict or meta_obj.__class__ is not dict:
            raise CorruptEventError(stream, version, "payload is not a JSON object", position=position)
    if eid.__class__ is not UUID:
        try:
            eid = _parse_id(eid)
        except (ValueError, TypeError, AttributeError) as exc:
            raise CorruptEventError(
                stream, version, f"malformed event id {eid!r}", position=position
            ) from exc
    last = _last_moment
    if last[0] == recorded_at:
        moment = last[1]
    else:
        try:
            moment = from_micros(recorded_at)
        except (TypeError, ValueError, OverflowError) as exc:
            raise CorruptEventError(
                stream, version, f"recorded_at {recorded_at!r:.40} is not a time: {exc}", position=position
            ) from exc
        _last_moment = (recorded_at, moment)
    return RecordedEvent(
        eid, stream, version, position, type_, schema, data_obj, meta_obj, moment, prev_hash, digest
    )


def decode_snapshot(upcasters: Upcasters, row: Sequence[Any]) -> Snapshot:
    """Turn a stored snapshot row in ``RawSnapshot`` field order into a decoded, upcast ``Snapshot``.

    The store's chain binding is taken out of ``meta`` into ``event_hash`` and ``digest``;
    check it first with ``snapshot_problem``.

    Raises:
        CorruptEventError: the payload cannot be decoded.
    """
    stream, type_, version, schema, data, meta, recorded_at = row[:7]
    schema, data_obj, meta_obj = decode_payload(
        upcasters, type_, schema, data, meta, stream=stream, version=version, position=None
    )
    binding = meta_obj.pop(SNAPSHOT_BINDING, None)
    event_hash = digest = ""
    if isinstance(binding, dict):
        event_hash, digest = str(binding.get("event_hash", "")), str(binding.get("digest", ""))
    try:
        moment = from_micros(recorded_at)
    except (TypeError, ValueError, OverflowError) as exc:
        raise CorruptEventError(
            stream, version, f"snapshot recorded_at {recorded_at!r:.40} is not a time"
        ) from exc
    return Snapshot(stream, version, type_, schema, data_obj, meta_obj, moment, event_hash, digest)


SNAPSHOT_BINDING = "turnlog_chain"
"""The key of a stored snapshot's ``meta`` that binds it to the log (``event_hash``, ``digest``)."""

log = logging.getLogger("turnlog.eventstore")


def snapshot_digest(
    stream: str, type_: str, version: int, schema: int, data: bytes, meta: bytes, event_hash: str
) -> str:
    """SHA-256 over a snapshot's fields, ``data``, ``meta`` and the hash of the event it stands at.

    ``data`` and ``meta`` are the canonical bytes (``meta`` without the binding); each part is
    prefixed with its length, as in ``event_hash``.
    """
    parts = (
        stream.encode(), type_.encode(), str(version).encode(), str(schema).encode(), data, meta,
        event_hash.encode(),
    )  # fmt: skip
    return hashlib.sha256(b"".join(_LEN(len(part)) + part for part in parts)).hexdigest()


def bind_snapshot(snap: PreparedSnapshot, event_hash: str | None) -> bytes:
    """The ``meta`` bytes to store for ``snap``: its meta plus the binding to the log.

    ``event_hash`` is the hash of the stream's event at the snapshot's version (None, stored
    as ``""``, when there is no such event).
    """
    bound = event_hash or ""
    digest = snapshot_digest(snap.stream, snap.type, snap.version, snap.schema, snap.data, snap.meta, bound)
    meta = orjson.loads(snap.meta)
    meta[SNAPSHOT_BINDING] = {"digest": digest, "event_hash": bound}
    return orjson.dumps(meta, option=_OPTS)


_UNBOUND = "it carries no binding to the log (written by an older turnlog, or stripped)"


def snapshot_problem(row: Sequence[Any], log_hash: str | None) -> str | None:
    """Why a stored snapshot row (``RawSnapshot`` order) must not be trusted, or None when it may.

    It may when its digest matches its stored bytes and the hash it stands at is that of the
    log's event at its version (``log_hash``; None when the log has no such event).
    """
    try:
        stream, type_, version, schema, data, meta = row[:6]
        meta_obj = orjson.loads(_as_bytes(meta))
        binding = meta_obj.pop(SNAPSHOT_BINDING, None) if isinstance(meta_obj, dict) else None
        if not isinstance(binding, dict):
            return _UNBOUND
        event_hash, digest = binding.get("event_hash"), binding.get("digest")
        if not isinstance(event_hash, str) or not isinstance(digest, str):
            return "its binding to the log is malformed"
        expected = snapshot_digest(
            stream, type_, version, schema, _as_bytes(data), orjson.dumps(meta_obj, option=_OPTS), event_hash
        )
    except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError) as exc:
        return f"it cannot be read: {exc}"
    if expected != digest:
        return "its digest does not match its stored bytes (the snapshot was altered)"
    if event_hash != (log_hash or ""):
        if log_hash is None:
            return "the event it stands at is not in the log"
        return "it stands at an event whose hash differs from the log's (not this log's history)"
    return None


def first_intact(upcasters: Upcasters, rows: Iterable[Sequence[Any]]) -> Snapshot | None:
    """The first row that passes ``snapshot_problem``, decoded; the others are ignored with a warning.

    Each row holds the ``RawSnapshot`` fields, then the log's hash at its version (or None).
    """
    for row in rows:
        problem = snapshot_problem(row, row[7])
        if problem is None:
            return decode_snapshot(upcasters, row)
        # A snapshot of an older turnlog is expected after an upgrade: it is replaced by the
        # next one written, so it is not worth a warning on every load until then.
        log.log(
            logging.INFO if problem is _UNBOUND else logging.WARNING,
            "ignoring snapshot %r of stream %r at version %s: %s; the state is folded from the events",
            row[1],
            row[0],
            row[2],
            problem,
        )
    return None


class ChainChecker:
    """Check stored events of each stream in version order: chain, contiguity, decodability.

    Feed it every stored row ordered by ``(stream, version)``; it collects ``Problem`` s.
    Backends share it so ``verify`` means the same on each of them.
    """

    __slots__ = (
        "_next_version",
        "_part_digest",
        "_prev_hash",
        "_prev_position",
        "_scope",
        "_stream",
        "events",
        "problems",
        "redacted",
        "redactions",
        "snapshots",
        "streams",
    )

    def __init__(self, redactions: Any = None) -> None:
        """``redactions``: the store's ``RedactionRecords`` (none when None)."""
        from ._redaction import RedactionRecords, part_digest

        self.redactions = redactions if redactions is not None else RedactionRecords()
        self._part_digest = part_digest
        self._scope: str | None = None
        self.redacted = 0
        self.problems: list[Problem] = []
        self.streams = 0
        self.events = 0
        self.snapshots = 0
        self._stream: str | None = None
        self._next_version = 1
        self._prev_hash = ""
        self._prev_position = 0

    def add(
        self,
        *,
        position: int,
        event_id: str,
        stream: str,
        version: int,
        type_: str,
        schema: int,
        data: bytes | str | memoryview,
        meta: bytes | str | memoryview,
        recorded_at_us: int,
        prev_hash: str,
        hash_: str,
    ) -> None:
        """Check one stored event (rows must come ordered by stream, then version)."""
        self.add_row(
            (position, event_id, stream, version, type_, schema, data, meta, recorded_at_us, prev_hash, hash_)
        )

    def add_row(self, row: Sequence[Any]) -> None:
        """Check one stored row whose fields come in ``RawEvent`` order.

        That is ``(position, id, stream, version, type, schema, data, meta, recorded_at_us,
        prev_hash, hash)``, the order every backend selects for ``verify``; rows must come
        ordered by stream, then version.
        """
        position, event_id, stream, version, _, _, data, meta, _, prev_hash, hash_ = row
        if stream != self._stream:
            self._stream = stream
            self.streams += 1
            self._next_version = 1
            self._prev_hash = ""
            self._prev_position = 0
        self.events += 1
        name = stream if isinstance(stream, str) else repr(stream)
        where = version if _is_int(version) else 0

        def problem(what: str) -> None:
            self.problems.append(Problem(name, where, what, position if _is_int(position) else None))

        damage = _row_damage(row)
        if damage is not None:
            # A row whose fields have the wrong types or text that is not Unicode: the
            # database was damaged or written by something else. Report it and go on.
            problem(f"the stored row is damaged: {damage}")
            self._next_version = where + 1
            self._prev_hash = hash_ if isinstance(hash_, str) else ""
            self._prev_position = position if _is_int(position) else self._prev_position
            return
        if version != self._next_version:
            problem(f"version gap: expected version {self._next_version}")
        if position <= self._prev_position:
            problem(f"global position {position} is not after that of the previous version")
        if prev_hash != self._prev_hash:
            problem("prev_hash does not match the hash of the previous version (broken chain)")
        data_b, meta_b = _as_bytes(data), _as_bytes(meta)
        self._check_hash(row, data_b, meta_b, problem)
        try:
            decoded = (orjson.loads(data_b), orjson.loads(meta_b))
        except orjson.JSONDecodeError as exc:
            problem(f"payload is not valid JSON: {exc}")
        else:
            if not all(isinstance(part, dict) for part in decoded):
                problem("payload is not a JSON object")
        if not (isinstance(event_id, UUID) or CANONICAL_ID.match(str(event_id))):
            problem(f"event id {event_id!r} is not a canonical UUID")
        self._next_version = version + 1
        self._prev_hash = hash_
        self._prev_position = position

    def _check_hash(self, row: Sequence[Any], data_b: bytes, meta_b: bytes, problem: Any) -> None:
        """Check the hash of a row by the digest chain (the legacy chain for older events).

        A redacted ``data`` or ``meta`` counts by the digest its redaction record gives; a
        marker without a record, or a record whose digest the chain does not confirm, is a
        problem.
        """
        _, event_id, stream, version, type_, schema, _, _, recorded_at_us, prev_hash, hash_ = row
        event_id = str(event_id)
        erased = self.redactions.by_event.get((stream, version)) if self.redactions.by_event else None
        if erased is not None:
            self.redactions.seen.add((stream, version))
        data_d, data_gone = self._part_digest(
            data_b, erased and erased.data_digest, "payload", problem, erased and erased.kept
        )
        meta_d, meta_gone = self._part_digest(meta_b, erased and erased.meta_digest, "meta", problem)
        args = (prev_hash, event_id, stream, version, type_, schema)
        if digest_event_hash(*args, data_d, meta_d, recorded_at_us) == hash_:
            if data_gone or meta_gone:
                if erased is None:
                    problem("its payload was removed without a redaction record")
                else:
                    self.redacted += 1
            return
        if (data_gone or meta_gone) and erased is None:
            # A payload that merely looks like a marker is the user's own data.
            if event_hash(*args, data_b, meta_b, recorded_at_us) == hash_:
                return
            problem("its payload was removed without a redaction record (or altered)")
            return
        if data_gone or meta_gone:
            problem("the redaction record's digest does not match the chain (a forged or altered record)")
            return
        if legacy_event_hash(*args, data_b, meta_b, recorded_at_us) != hash_:
            problem("hash does not match the stored bytes (the event was altered)")

    def add_snapshot(self, row: Sequence[Any], log_hash: Any) -> None:
        """Check one stored snapshot (``RawSnapshot`` order) against its digest and the log.

        ``log_hash`` is the hash of the log's event at the snapshot's version (None when the
        log has no event there).
        """
        self.snapshots += 1
        if log_hash is not None and not isinstance(log_hash, str):
            log_hash = repr(log_hash)
        why = snapshot_problem(row, log_hash)
        if why is not None:
            stream, type_, version = row[0], row[1], row[2]
            self.problems.append(
                Problem(
                    stream if isinstance(stream, str) else repr(stream),
                    version if _is_int(version) else 0,
                    f"snapshot {type_!r}: {why}; it is ignored",
                )
            )

    def report(self, problems: Iterable[Problem] = (), checks: Sequence[str] = ()) -> VerifyReport:
        """The ``verify`` result: ``problems`` found outside the chains first, then the chains' own."""
        return VerifyReport(
            (*problems, *self.redactions.problems, *self.problems),
            self.streams,
            self.events,
            self.snapshots,
            ("chains", "snapshots", *checks),
            self.redacted,
            tuple(sorted(self.redactions.reasons(self._scope))),
        )

    def finish(self, stream: str | None) -> None:
        """After the last row: report redaction records naming events that were not checked."""
        self._scope = stream
        self.problems.extend(self.redactions.unmatched(stream))


_ROW_TYPES: tuple[tuple[str, tuple[type, ...]], ...] = (
    ("position", (int,)),
    ("id", (str, UUID)),
    ("stream", (str,)),
    ("version", (int,)),
    ("type", (str,)),
    ("schema", (int,)),
    ("data", (bytes, str, memoryview)),
    ("meta", (bytes, str, memoryview)),
    ("recorded_at", (int,)),
    ("prev_hash", (str,)),
    ("hash", (str,)),
)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _row_damage(row: Sequence[Any]) -> str | None:
    """What is wrong with the field types of a stored event row, or None when they are right."""
    for (name, kinds), value in zip(_ROW_TYPES, row, strict=True):
        if not isinstance(value, kinds) or isinstance(value, bool):
            return f"its {name} is a {type(value).__name__} ({value!r:.60})"
        if isinstance(value, str) and not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError:
                return f"its {name} is not valid UTF-8 text ({value!r:.60})"
    return None


def match_resent(entries: list[PreparedAppend], stored: Mapping[str, Sequence[Any]]) -> list[AppendResult]:
    """Compare a re-sent append with what is already stored; return the original results.

    ``stored`` maps each event id found in the store to ``(position, stream, version, type,
    schema, data, meta)``. Call it when at least one id of the append is stored.

    Raises:
        IdempotencyError: an id is stored with other content or in another stream, or the
            append mixes stored and new events.
    """
    results: list[AppendResult] = []
    for entry in entries:
        positions: list[int] = []
        last_version = 0
        for index, ev in enumerate(entry.events):
            row = stored.get(ev.id)
            if row is None:
                raise IdempotencyError(
                    ev.id,
                    entry.stream,
                    "this batch mixes events already stored with new ones; "
                    f"event #{index} is new while others are stored",
                )
            position, stream, version, type_, schema, data, meta = row
            if stream != entry.stream:
                raise IdempotencyError(ev.id, entry.stream, f"the id is already stored in stream {stream!r}")
            if (type_, schema, bytes(data), bytes(meta)) != (ev.type, ev.schema, ev.data, ev.meta):
                raise IdempotencyError(ev.id, entry.stream, "the id is already stored with different content")
            if positions and version != last_version + 1:
                raise IdempotencyError(ev.id, entry.stream, "the events were stored in another order")
            positions.append(position)
            last_version = version
        results.append(AppendResult(tuple(positions), last_version))
    return results
