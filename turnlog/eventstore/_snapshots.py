"""Snapshots: validation, the binding to the log's chain, and the check on load.

``save_snapshot`` binds a snapshot to the hash of the stream's event at its version (kept in
the stored ``meta`` under ``turnlog_chain``); ``load_snapshot`` returns only a snapshot that
matches its digest and stands on this log's event (``first_intact``); ``verify`` reports any
other (``snapshot_problem``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ._decoding import decode_payload
from ._encoding import as_bytes, encode_object, from_micros, length_prefix
from ._errors import CorruptEventError, EventTooLarge, InvalidEventError
from ._records import NewSnapshot, Snapshot
from ._upcasting import Upcasters
from ._validation import MAX_TYPE_LEN, TYPE_RE, check_stream_name

__all__ = [
    "SNAPSHOT_BINDING",
    "PreparedSnapshot",
    "bind_snapshot",
    "decode_snapshot",
    "first_intact",
    "prepare_snapshot",
    "snapshot_digest",
    "snapshot_problem",
]

_OPTS = orjson.OPT_SORT_KEYS
_LEN = length_prefix
_TYPE_RE = TYPE_RE
_as_bytes = as_bytes


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
    version: object = snapshot.version
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise InvalidEventError(f"snapshot version must be an int >= 0, not {version!r}", stream=name)
    stype: object = snapshot.type
    if not isinstance(stype, str) or len(stype) > MAX_TYPE_LEN or not _TYPE_RE.match(stype):
        raise InvalidEventError(f"malformed snapshot type {stype!r}", stream=name)
    schema: object = snapshot.schema
    if isinstance(schema, bool) or not isinstance(schema, int) or schema < 1:
        raise InvalidEventError(f"snapshot schema must be an int >= 1, not {schema!r}", stream=name)
    data = encode_object(snapshot.data, "snapshot data", name, 0)
    meta = encode_object({} if snapshot.meta is None else snapshot.meta, "snapshot meta", name, 0)
    if SNAPSHOT_BINDING in (snapshot.meta or {}):
        raise InvalidEventError(f"snapshot meta key {SNAPSHOT_BINDING!r} is the store's own", stream=name)
    if len(data) + len(meta) > max_event_bytes:
        raise EventTooLarge(len(data) + len(meta), max_event_bytes, stream=name)
    return PreparedSnapshot(name, version, stype, schema, data, meta)


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
        # next one written, so it is not worth a warning on every load until then. logging is
        # imported here, when there is something to say: a read that finds none never needs it.
        import logging

        logging.getLogger("turnlog.eventstore").log(
            logging.INFO if problem is _UNBOUND else logging.WARNING,
            "ignoring snapshot %r of stream %r at version %s: %s; the state is folded from the events",
            row[1],
            row[0],
            row[2],
            problem,
        )
    return None
