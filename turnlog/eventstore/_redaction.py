"""Redaction: erase the payload of an event and keep the chain provable.

The digest chain (``event_hash``) commits to the SHA-256 digests of an event's ``data`` and
``meta``, not to the bytes. ``EventStore.redact`` replaces the bytes with a *marker* (a JSON
object with the single key ``turnlog_redacted``) and, in the same transaction, appends a
*redaction record* to the reserved stream ``turnlog.redactions``. The record holds the digest
of what was erased, the reason and the actor; being an event, it is hashed and chained like
any other, so it is append-only evidence. ``verify`` takes the digest from the record for a
redacted event and proves the rest of the chain as before.

Example:
    >>> marker = redacted_marker({"turnlog_redacted": {"digest": "ab", "reason": "gdpr", "record": "r"}})
    >>> marker.reason
    'gdpr'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ._encoding import digest_event_hash, encode_json, legacy_event_hash, payload_digest
from ._errors import InvalidEventError, RedactionError
from ._problem import Problem
from ._records import NewEvent
from ._validation import check_stream_name

__all__ = [
    "MARKER_KEY",
    "RECORD_TYPE",
    "REDACTIONS_STREAM",
    "Redacted",
    "Redaction",
    "RedactionResult",
    "RedactionRecords",
    "event_hash_matches",
    "is_redacted",
    "marker_bytes",
    "record_event",
    "redacted_marker",
]

REDACTIONS_STREAM = "turnlog.redactions"
"""The reserved stream holding one ``store.redacted`` record per redacted event."""
RECORD_TYPE = "store.redacted"
"""The event type of a redaction record."""
MARKER_KEY = "turnlog_redacted"
"""The single key of a redaction marker, the object stored in place of an erased payload."""
_MARKER_PREFIX = b'{"' + MARKER_KEY.encode() + b'":'


@dataclass(frozen=True, slots=True)
class Redaction:
    """One event to redact: its stream and version, why, by whom, and whether its meta goes too.

    Attributes:
        stream: The stream of the event.
        version: Its version.
        reason: Why it is erased (kept in the record; say it without repeating the content).
        actor: Who asked for it (kept in the record).
        include_meta: Erase the event's meta as well as its payload.
        keep: Fields of the payload to keep beside the marker (the structure a reader needs,
            e.g. a message's id and role); they are copied into the record, so ``verify``
            proves them against the chain too. None keeps nothing.
    """

    stream: str
    version: int
    reason: str
    actor: str = ""
    include_meta: bool = False
    keep: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RedactionResult:
    """What ``redact`` did with one event.

    Attributes:
        stream: The stream of the event.
        version: Its version.
        type: Its event type.
        changed: False when it was redacted already (a no-op).
        erased_bytes: How many bytes of payload (and meta) were erased.
    """

    stream: str
    version: int
    type: str
    changed: bool
    erased_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Redacted:
    """A redaction marker read back: the digest of what was erased, why, and its record's id."""

    digest: str
    reason: str
    record: str
    kept: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"digest": self.digest, "reason": self.reason, "record": self.record}
        if self.kept is not None:
            out["kept"] = self.kept
        return out


def redacted_marker(value: object) -> Redacted | None:
    """The marker held by a decoded ``data`` or ``meta`` object, or None when it is not one."""
    if not isinstance(value, Mapping) or len(value) != 1:
        return None
    inner = value.get(MARKER_KEY)
    if not isinstance(inner, Mapping):
        return None
    digest, reason, record = inner.get("digest"), inner.get("reason"), inner.get("record")
    kept = inner.get("kept")
    if not (isinstance(digest, str) and isinstance(reason, str) and isinstance(record, str)):
        return None
    return Redacted(digest, reason, record, dict(kept) if isinstance(kept, Mapping) else None)


def is_redacted(data: object) -> bool:
    """Whether a decoded ``data`` (or ``meta``) object is a redaction marker."""
    return redacted_marker(data) is not None


def stored_marker(raw: bytes) -> Redacted | None:
    """The marker held by stored canonical bytes, or None (cheap for a payload that is none)."""
    if not raw.startswith(_MARKER_PREFIX):
        return None
    try:
        return redacted_marker(orjson.loads(raw))
    except orjson.JSONDecodeError:
        return None


def marker_bytes(digest: str, reason: str, record: str, kept: Mapping[str, Any] | None = None) -> bytes:
    """The canonical bytes stored in place of an erased object."""
    return encode_json(
        {MARKER_KEY: Redacted(digest, reason, record, None if kept is None else dict(kept)).as_dict()}
    )


def record_event(
    target: Redaction,
    event_id: str,
    event_type: str,
    data_digest: str | None,
    meta_digest: str | None,
) -> NewEvent:
    """The ``store.redacted`` record of one redaction (``None`` digests: that part stays)."""
    return NewEvent(
        RECORD_TYPE,
        {
            "stream": target.stream,
            "version": target.version,
            "event_id": event_id,
            "event_type": event_type,
            "data_digest": data_digest,
            "meta_digest": meta_digest,
            "reason": target.reason,
            "actor": target.actor,
            "kept": None if target.keep is None or data_digest is None else dict(target.keep),
        },
        {"actor": target.actor} if target.actor else None,
    )


@dataclass(frozen=True, slots=True)
class _Erased:
    """What the records of one event say: the digests, and the record that erased each part.

    ``data_record`` and ``meta_record`` are ``(record id, reason)`` of the record that erased
    that part (the id is None when the rows were read without ids); a marker must name that
    record and that reason. ``event_type`` is None when no record named it.
    """

    event_id: str
    data_digest: str | None
    meta_digest: str | None
    reasons: tuple[str, ...]
    kept: Any = None
    event_type: str | None = None
    data_record: tuple[str | None, str] | None = None
    meta_record: tuple[str | None, str] | None = None


@dataclass(slots=True)
class RedactionRecords:
    """The redaction records of a store, by (stream, version), for ``verify``.

    Build it with ``from_rows`` from the stored ``data`` bytes of ``turnlog.redactions``.
    """

    by_event: dict[tuple[str, int], _Erased] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    seen: set[tuple[str, int]] = field(default_factory=set)

    @classmethod
    def from_rows(cls, rows: Iterable[Sequence[Any]]) -> RedactionRecords:
        """Parse ``(version, data, id)`` rows of the reserved stream; malformed ones become problems.

        ``id`` (the record's event id, which markers name) may be left out: ``(version, data)``.
        A part of an event erased by two records is a problem: a redaction of a part already
        erased writes no record, so the second one was forged.
        """
        records = cls()
        for row in rows:
            version, raw = row[0], row[1]
            record_id = str(row[2]) if len(row) > 2 else None
            raw_b = _as_bytes(raw) if isinstance(raw, (bytes, str, memoryview)) else str(raw).encode()
            try:
                body = orjson.loads(raw_b)
                stream, target = body["stream"], body["version"]
                event_id, reason = str(body["event_id"]), str(body["reason"])
                data_d, meta_d = body.get("data_digest"), body.get("meta_digest")
                event_type = body.get("event_type")
                if not isinstance(stream, str) or not isinstance(target, int):
                    raise TypeError("stream or version of the wrong type")
                if not all(d is None or isinstance(d, str) for d in (data_d, meta_d, event_type)):
                    raise TypeError("a digest or the event type is not a string")
            except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
                if stored_marker(raw_b) is not None:
                    what = "a redaction record was itself erased"
                else:
                    what = f"malformed redaction record: {exc}"
                records.problems.append(Problem(REDACTIONS_STREAM, version, what))
                continue
            records._add(version, (stream, target), body, _Erased(
                event_id, data_d, meta_d, (reason,), body.get("kept") if data_d else None, event_type,
                (record_id, reason) if data_d else None, (record_id, reason) if meta_d else None,
            ))  # fmt: skip
        return records

    def _add(self, version: int, key: tuple[str, int], body: dict[str, Any], new: _Erased) -> None:
        """Merge the record at ``version`` of the reserved stream into what is known of its event."""
        old = self.by_event.get(key)
        if old is None:
            self.by_event[key] = new
            return

        def problem(what: str) -> None:
            self.problems.append(
                Problem(
                    REDACTIONS_STREAM, version, f"the redaction record of {key[0]!r} version {key[1]} {what}"
                )
            )

        if new.data_digest and old.data_digest:
            problem("erases its payload a second time (a forged record?)")
        if new.meta_digest and old.meta_digest:
            problem("erases its meta a second time (a forged record?)")
        types = {new.event_type, old.event_type} - {None}
        if new.event_id != old.event_id or len(types) > 1:
            problem("names another event than the earlier record of that version")
        self.by_event[key] = _Erased(
            old.event_id,
            old.data_digest or new.data_digest,
            old.meta_digest or new.meta_digest,
            (*old.reasons, *new.reasons),
            old.kept if old.data_digest else new.kept,
            old.event_type or new.event_type,
            old.data_record or new.data_record,
            old.meta_record or new.meta_record,
        )

    def reasons(self, stream: str | None = None) -> set[str]:
        """The distinct reasons of the records (of one stream's events when given)."""
        return {
            reason
            for (name, _), erased in self.by_event.items()
            if stream is None or name == stream
            for reason in erased.reasons
        }

    def unmatched(self, stream: str | None) -> list[Problem]:
        """Problems for records naming an event that the checked log does not hold."""
        return [
            Problem(name, version, "a redaction record names an event that is not in the log")
            for (name, version) in sorted(self.by_event)
            if (stream is None or name == stream) and (name, version) not in self.seen
        ]


def part_digest(
    raw: bytes,
    recorded: str | None,
    what: str,
    problem: Any,
    kept: Any = None,
    record: tuple[str | None, str] | None = None,
) -> tuple[str, bool]:
    """The digest of a stored ``data`` or ``meta`` for the chain, and whether it was erased.

    ``recorded`` is the digest a redaction record gives for it (None without a record), and
    ``record`` that record's ``(id, reason)``: every field of a marker (digest, reason, record
    id, kept fields) must be the record's, since only the digest is under the hash chain.
    ``problem`` is called with a sentence for each inconsistency.
    """
    marker = stored_marker(raw)
    if marker is None:
        if recorded is not None:
            problem(f"a redaction record names its {what}, but the {what} is still stored")
        return payload_digest(raw), False
    if recorded is None:
        return marker.digest, True  # the caller tells a forged marker from user data
    if marker.digest != recorded:
        problem(f"the redaction marker of its {what} disagrees with the redaction record's digest")
    if what == "payload" and marker.kept != kept:
        problem("the fields kept by its redaction marker differ from those of the redaction record")
    if record is not None:
        record_id, reason = record
        if record_id is not None and marker.record != record_id:
            problem(f"the redaction marker of its {what} names another record than the one that erased it")
        if marker.reason != reason:
            problem(f"the reason in the redaction marker of its {what} differs from the redaction record's")
    return recorded, True


def check_targets(targets: Sequence[Redaction]) -> None:
    """Refuse malformed redaction requests before anything is read or written."""
    if not targets:
        raise InvalidEventError("redact needs at least one event")
    for target in targets:
        if not isinstance(target, Redaction):
            raise InvalidEventError(f"expected a Redaction, got {type(target).__name__}")
        check_stream_name(target.stream)
        if target.stream == REDACTIONS_STREAM:
            raise RedactionError(target.stream, target.version, "redaction records cannot be redacted")
        version: object = target.version
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise InvalidEventError(f"version must be an int >= 1, not {version!r}", stream=target.stream)
        reason: object = target.reason
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidEventError("a redaction needs a reason (a non-empty str)", stream=target.stream)
        if not isinstance(target.actor, str):
            raise InvalidEventError("actor must be a str", stream=target.stream)


@dataclass(frozen=True, slots=True)
class Plan:
    """What a backend writes for one redaction: the record to append and the new stored bytes."""

    target: Redaction
    type: str
    record: NewEvent
    data: bytes
    meta: bytes
    erased_bytes: int

    def result(self) -> RedactionResult:
        return RedactionResult(self.target.stream, self.target.version, self.type, True, self.erased_bytes)


def plan_redaction(target: Redaction, row: Iterable[Any]) -> Plan | RedactionResult:
    """Plan the redaction of one stored row (``RawEvent`` order); a result when it is a no-op.

    Raises:
        RedactionError: the row is hashed by the legacy chain, or its bytes do not match its
            hash (a damaged event is never re-blessed: run ``verify``).
    """
    _, event_id, stream, version, type_, schema, data, meta, recorded_at, prev_hash, hash_ = row
    event_id = str(event_id)
    data_b, meta_b = _as_bytes(data), _as_bytes(meta)
    data_m, meta_m = stored_marker(data_b), stored_marker(meta_b)
    erase_data = data_m is None
    erase_meta = target.include_meta and meta_m is None
    if not erase_data and not erase_meta:
        return RedactionResult(stream, version, type_, False)
    data_d = data_m.digest if data_m is not None else payload_digest(data_b)
    meta_d = meta_m.digest if meta_m is not None else payload_digest(meta_b)
    if (
        digest_event_hash(prev_hash, event_id, stream, version, type_, schema, data_d, meta_d, recorded_at)
        != hash_
    ):
        if (
            legacy_event_hash(
                prev_hash, event_id, stream, version, type_, schema, data_b, meta_b, recorded_at
            )
            == hash_
        ):
            why = "it was written by an older turnlog whose chain commits to its bytes (the legacy chain)"
        else:
            why = "its stored bytes do not match its hash; run verify"
        raise RedactionError(stream, version, why)
    record = record_event(
        target, event_id, type_, data_d if erase_data else None, meta_d if erase_meta else None
    )
    rid = str(record.id)
    return Plan(
        target,
        type_,
        record,
        marker_bytes(data_d, target.reason, rid, target.keep) if erase_data else data_b,
        marker_bytes(meta_d, target.reason, rid) if erase_meta else meta_b,
        (len(data_b) if erase_data else 0) + (len(meta_b) if erase_meta else 0),
    )


def merge_targets(targets: Sequence[Redaction]) -> list[Redaction]:
    """The targets with each event once (its meta erased when any request for it asks so)."""
    merged: dict[tuple[str, int], Redaction] = {}
    for target in targets:
        key = (target.stream, target.version)
        old = merged.get(key)
        if old is None or (target.include_meta and not old.include_meta):
            merged[key] = target
    return list(merged.values())


def _as_bytes(raw: Any) -> bytes:
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, str):
        return raw.encode()
    return bytes(raw)


def event_hash_matches(
    prev_hash: str,
    event_id: str,
    stream: str,
    version: int,
    type_: str,
    schema: int,
    data: bytes,
    meta: bytes,
    recorded_at_us: int,
    hash_: str,
) -> bool:
    """Whether ``hash_`` is the hash of an event stored with these bytes, by either chain.

    A redaction marker counts by the digest it names (``verify`` then checks that digest
    against the redaction record); an event of the legacy chain by its bytes.
    """
    args = (prev_hash, event_id, stream, version, type_, schema)
    data_m, meta_m = stored_marker(data), stored_marker(meta)
    data_d = data_m.digest if data_m is not None else payload_digest(data)
    meta_d = meta_m.digest if meta_m is not None else payload_digest(meta)
    if digest_event_hash(*args, data_d, meta_d, recorded_at_us) == hash_:
        return True
    if data_m is not None or meta_m is not None:  # user data that merely looks like a marker
        if digest_event_hash(*args, payload_digest(data), payload_digest(meta), recorded_at_us) == hash_:
            return True
    return legacy_event_hash(*args, data, meta, recorded_at_us) == hash_
