"""``verify``'s walk: the hash chain, version contiguity and decodability of stored rows.

Every backend feeds its rows to one ``ChainChecker``, so ``verify`` means the same on each.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

import orjson

from ._encoding import as_bytes, digest_event_hash, event_hash, legacy_event_hash, payload_digest
from ._ids import CANONICAL_ID
from ._problem import Problem
from ._records import VerifyReport
from ._redaction import REDACTIONS_STREAM, RedactionRecords, part_digest
from ._snapshots import snapshot_problem

__all__ = ["ChainChecker", "verify_raw_events"]

_as_bytes = as_bytes


class ChainChecker:
    """Check stored events of each stream in version order: chain, contiguity, decodability.

    Feed it every stored row ordered by ``(stream, version)``; it collects ``Problem`` s.
    Backends share it so ``verify`` means the same on each of them.
    """

    __slots__ = (
        "_altered",
        "_next_version",
        "_part_digest",
        "_prev_hash",
        "_prev_position",
        "_scope",
        "_stream",
        "derived_prev",
        "events",
        "problems",
        "redacted",
        "redactions",
        "snapshots",
        "streams",
    )

    def __init__(self, redactions: Any = None, *, derived_prev: bool = False) -> None:
        """``redactions``: the store's ``RedactionRecords`` (none when None).

        ``derived_prev``: rows give as ``prev_hash`` the hash of the stream's row at the previous
        version ("" when there is none), not a stored value (SQLite format 3). A missing
        predecessor then breaks the chain and leaves the hash uncheckable, and a hash that does
        not match may be this event's or its predecessor's: the problems say so.
        """
        self.redactions = redactions if redactions is not None else RedactionRecords()
        self.derived_prev = derived_prev
        self._altered = (
            "hash does not match the stored bytes and the hash of the previous version "
            "(this event or the previous one was altered)"
            if derived_prev
            else "hash does not match the stored bytes (the event was altered)"
        )
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

    def add_row(self, row: Iterable[Any]) -> None:
        """Check one stored row whose fields come in ``RawEvent`` order.

        That is ``(position, id, stream, version, type, schema, data, meta, recorded_at_us,
        prev_hash, hash)``, the order every backend selects for ``verify``; rows must come
        ordered by stream, then version.
        """
        row = tuple(row)
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
        broken = prev_hash != self._prev_hash
        if broken:
            problem("prev_hash does not match the hash of the previous version (broken chain)")
        data_b, meta_b = _as_bytes(data), _as_bytes(meta)
        if not (broken and self.derived_prev):  # derived: the predecessor is missing, nothing to hash with
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
            if erased.event_id != event_id or erased.event_type not in (None, type_):
                problem("its redaction record names another event (its id or type differs)")
        data_d, data_gone = self._part_digest(
            data_b,
            None if erased is None else erased.data_digest,
            "payload",
            problem,
            None if erased is None else erased.kept,
            None if erased is None else erased.data_record,
        )
        meta_d, meta_gone = self._part_digest(
            meta_b,
            None if erased is None else erased.meta_digest,
            "meta",
            problem,
            None,
            None if erased is None else erased.meta_record,
        )
        args = (prev_hash, event_id, stream, version, type_, schema)
        if digest_event_hash(*args, data_d, meta_d, recorded_at_us) == hash_:
            if data_gone or meta_gone:
                if erased is None:
                    problem("its payload was removed without a redaction record")
                    return
                self.redacted += 1
                # A record of the payload does not cover a marker put in place of the meta
                # (or the reverse): that part was erased without a record.
                for what, gone, recorded in (("payload", data_gone, erased.data_digest),
                                             ("meta", meta_gone, erased.meta_digest)):  # fmt: skip
                    if gone and recorded is None:
                        problem(f"its {what} was erased without a redaction record")
            return
        if (data_gone or meta_gone) and (erased is None or _unrecorded_marker(erased, data_gone, meta_gone)):
            # A payload that merely looks like a marker is the user's own data.
            if erased is None and event_hash(*args, data_b, meta_b, recorded_at_us) == hash_:
                return
            if erased is not None and self._as_user_data(args, erased, data_b, meta_b, recorded_at_us, hash_):
                self.redacted += 1
                return
            problem("its payload was removed without a redaction record (or altered)")
            return
        if data_gone or meta_gone:
            problem("the redaction record's digest does not match the chain (a forged or altered record)")
            return
        if legacy_event_hash(*args, data_b, meta_b, recorded_at_us) != hash_:
            problem(self._altered)

    @staticmethod
    def _as_user_data(
        args: tuple[str, str, str, int, str, int],
        erased: Any,
        data_b: bytes,
        meta_b: bytes,
        recorded_at_us: int,
        hash_: str,
    ) -> bool:
        """Whether the chain holds when a part that looks like a marker, but that no record erased, is user data."""
        data_d = erased.data_digest or payload_digest(data_b)
        meta_d = erased.meta_digest or payload_digest(meta_b)
        return digest_event_hash(*args, data_d, meta_d, recorded_at_us) == hash_

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


def verify_raw_events(events: Iterable[Iterable[Any]]) -> VerifyReport:
    """``verify`` of a log given as stored rows (``RawEvent`` s), before any store holds it.

    Each stream must be given whole, from version 1; redaction records (stream
    ``turnlog.redactions``) are checked against the events they name as a store's ``verify``
    checks them. ``turnlog import`` runs it on what an import would add before writing it.

    Example::

        report = verify_raw_events(await store.raw_events(0, 1000))
    """
    rows = sorted((tuple(event) for event in events), key=lambda row: (str(row[2]), row[3]))
    checker = ChainChecker(
        RedactionRecords.from_rows((row[3], row[6], row[1]) for row in rows if row[2] == REDACTIONS_STREAM)
    )
    for row in rows:
        checker.add_row(row)
    checker.finish(None)
    return checker.report()


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


def _unrecorded_marker(erased: Any, data_gone: bool, meta_gone: bool) -> bool:
    """Whether a part holds a marker that the event's redaction records do not account for."""
    return (data_gone and erased.data_digest is None) or (meta_gone and erased.meta_digest is None)


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
