"""``turnlog import FILE``: load a JSON Lines export (the native envelope) into a store.

The events are stored exactly as exported: the same ids, versions, ``recorded_at`` times
and hashes (through the store's raw copy, as ``turnlog migrate`` does), so the copy verifies
with the original's hashes and time queries see the original times; only the global
positions are those of the target store. Before anything is written the whole file is
checked: every line is an event envelope, every stream's versions are contiguous and every
hash recomputes from the content (an altered file is refused, naming the line), and every
``branch-``, ``run-``, ``session-`` and ``graph-`` stream is named by a canonical UUID.
Then the file is written in one transaction: all of it or nothing.

Importing is idempotent: events the store already holds (same hashes) are skipped, so
importing the same file twice adds nothing and a file that extends an earlier import adds
only the rest. A store that does not exist is created, and removed again if the import fails.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import anyio
import orjson

from turnlog.eventstore import (
    REDACTIONS_STREAM,
    EventStore,
    RawEvent,
    RecordedEvent,
    encode_json,
    event_hash_matches,
    is_redacted,
    open_store,
    verify_raw_events,
)

from ._command import Command, UserError, add_store_argument, emit_json, sqlite_file, store_url
from ._outfile import store_files
from ._output import busy

__all__ = ["COMMAND", "ImportReport", "check_chains", "import_events", "read_export"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ID_STREAMS = ("branch-", "run-", "session-", "graph-")
_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_\-]*(\.[A-Za-z][A-Za-z0-9_\-]*)*\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MAX_NAME = 200


@dataclass(frozen=True, slots=True)
class _Line:
    """One event of the file and the line it came from."""

    number: int
    event: RecordedEvent


@dataclass(slots=True)
class ImportReport:
    """What an import did: events added, events already present, streams touched."""

    added: int = 0
    present: int = 0
    streams: set[str] = field(default_factory=set)


def _field(obj: dict[str, Any], name: str, kind: type, number: int) -> Any:
    value = obj.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise UserError(f"line {number}: field {name!r} must be {kind.__name__}, got {value!r:.60}")
    return value


def _canonical_uuid(text: str) -> bool:
    try:
        return str(UUID(text)) == text
    except ValueError:
        return False


def _check_names(stream: str, etype: str, number: int) -> None:
    """A stream name the store would accept, an id where a file name is made of it, a dotted type."""
    if not stream or len(stream) > _MAX_NAME or _CONTROL.search(stream):
        raise UserError(f"line {number}: {stream!r:.80} is not a valid stream name")
    try:
        stream.encode()
    except UnicodeEncodeError as exc:
        raise UserError(f"line {number}: the stream name {stream!r:.80} is not valid UTF-8") from exc
    for prefix in _ID_STREAMS:
        if stream.startswith(prefix) and not _canonical_uuid(stream.removeprefix(prefix)):
            raise UserError(
                f"line {number}: stream {stream!r:.80} is not named by an id "
                f"({prefix}<lower-case UUID>); refused"
            )
    if len(etype) > _MAX_NAME or not _TYPE.match(etype):
        raise UserError(f"line {number}: {etype!r:.80} is not a valid event type")


def _event(obj: dict[str, Any], number: int) -> RecordedEvent:
    text = _field(obj, "recorded_at", str, number)  # a UserError of its own (a ValueError too)
    try:
        recorded_at = datetime.fromisoformat(text)
    except ValueError as exc:
        raise UserError(f"line {number}: recorded_at is not an ISO 8601 time") from exc
    if recorded_at.tzinfo is None:
        raise UserError(f"line {number}: recorded_at has no time zone")
    event_id = _field(obj, "id", str, number)
    if not _canonical_uuid(event_id):
        raise UserError(f"line {number}: id {event_id!r:.60} is not a lower-case UUID")
    stream, etype = _field(obj, "stream", str, number), _field(obj, "type", str, number)
    _check_names(stream, etype, number)
    version, schema = _field(obj, "version", int, number), _field(obj, "schema", int, number)
    if version < 1 or schema < 1:
        raise UserError(f"line {number}: version and schema start at 1")
    return RecordedEvent(
        id=UUID(event_id),
        stream=stream,
        version=version,
        position=_field(obj, "position", int, number),
        type=etype,
        schema=schema,
        data=_field(obj, "data", dict, number),
        meta=_field(obj, "meta", dict, number),
        recorded_at=recorded_at,
        prev_hash=_field(obj, "prev_hash", str, number),
        hash=_field(obj, "hash", str, number),
    )


def read_export(path: Path) -> list[_Line]:
    """Parse every line of an export; a malformed line is an error naming its number."""
    lines: list[_Line] = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise UserError(f"line {number}: not JSON ({exc})") from exc
            if not isinstance(obj, dict):
                raise UserError(f"line {number}: expected a JSON object (an event envelope)")
            lines.append(_Line(number, _event(obj, number)))
    return lines


def _micros(moment: datetime) -> int:
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def check_chains(lines: list[_Line]) -> None:
    """Versions are contiguous per stream and every hash recomputes from the content."""
    last: dict[str, _Line] = {}
    for line in lines:
        before = last.get(line.event.stream)
        expected_version = before.event.version + 1 if before else line.event.version
        if line.event.version != expected_version:
            raise UserError(
                f"line {line.number}: stream {line.event.stream!r} jumps from version "
                f"{before.event.version if before else 0} to {line.event.version}"
            )
        if before is not None and line.event.prev_hash != before.event.hash:
            raise UserError(
                f"line {line.number}: stream {line.event.stream!r} version {line.event.version} does not chain "
                "to the previous event (prev_hash differs)"
            )
        if not event_hash_matches(
            line.event.prev_hash,
            str(line.event.id),
            line.event.stream,
            line.event.version,
            line.event.type,
            line.event.schema,
            encode_json(line.event.data),
            encode_json(line.event.meta),
            _micros(line.event.recorded_at),
            line.event.hash,
        ):
            raise UserError(
                f"line {line.number}: stream {line.event.stream!r} version {line.event.version}: the content "
                "does not match its hash (altered after export?)"
            )
        last[line.event.stream] = line


def _raw(line: _Line, position: int) -> RawEvent:
    event = line.event
    return RawEvent(
        position=position,
        id=str(event.id),
        stream=event.stream,
        version=event.version,
        type=event.type,
        schema=event.schema,
        data=encode_json(event.data),
        meta=encode_json(event.meta),
        recorded_at_us=_micros(event.recorded_at),
        prev_hash=event.prev_hash,
        hash=event.hash,
    )


async def _stored_hashes(store: EventStore, stream: str, low: int, high: int) -> dict[int, str]:
    """Version -> hash of the events ``low..high`` of ``stream`` the store holds."""
    return {e.version: e.hash async for e in store.read_stream(stream, low, high)}


async def import_events(store: EventStore, lines: list[_Line]) -> ImportReport:
    """Store the events of ``lines`` the store lacks, unchanged, in one transaction.

    Events the store holds already (same stream, version and hash) are skipped; a stream
    whose stored events differ from the file's, or that the file does not continue, is an
    error and nothing is written.
    """
    if "raw_copy" not in store.capabilities:
        raise UserError(
            "this store cannot take events as they were stored (raw copy); import into a SQLite "
            "file or PostgreSQL"
        )
    raw: Any = store
    report = ImportReport()
    versions: dict[str, int] = {}
    present: dict[str, dict[int, str]] = {}
    tips: dict[str, int] = {}
    new: list[_Line] = []
    for line in lines:
        event = line.event
        report.streams.add(event.stream)
        if event.stream not in versions:
            versions[event.stream] = await store.stream_version(event.stream)
            present[event.stream] = {}
        current = versions[event.stream]
        if event.version <= current:
            hashes = present[event.stream]
            if event.version not in hashes:
                hashes.update(await _stored_hashes(store, event.stream, event.version, current))
            if hashes.get(event.version) != event.hash:
                raise UserError(
                    f"line {line.number}: stream {event.stream!r} already has a different event at "
                    f"version {event.version}; the store and the file have diverged"
                )
            report.present += 1
            continue
        if event.version != tips.get(event.stream, current) + 1:
            raise UserError(
                f"line {line.number}: stream {event.stream!r} is at version "
                f"{tips.get(event.stream, current)} in the store, the file continues at {event.version}"
            )
        tips[event.stream] = event.version
        new.append(line)
    if new:
        head = await store.head()
        await _check_redactions(store, new, head)
        await raw.import_raw([_raw(line, head + i) for i, line in enumerate(new, 1)])
    report.added = len(new)
    return report


async def _check_redactions(store: EventStore, new: list[_Line], head: int) -> None:
    """Refuse new redaction records or markers unless the result verifies as a whole.

    A record is an event of the reserved stream, hashed like any other, so ``check_chains``
    accepts a forged one; and a marker counts by the digest it names. Before anything is
    written, every stream such a line touches (the records' stream, the streams they name,
    the streams holding a new marker) is checked whole, stored events and new ones together,
    as ``verify`` would check the store afterwards.
    """
    reserved = [line for line in new if line.event.stream.startswith("turnlog.")]
    marked = {
        line.event.stream for line in new if is_redacted(line.event.data) or is_redacted(line.event.meta)
    }
    if not reserved and not marked:
        return
    streams = {REDACTIONS_STREAM, *marked, *(line.event.stream for line in reserved)}
    async for record in store.read_stream(REDACTIONS_STREAM):
        streams.add(str(record.data.get("stream")))
    streams.update(
        str(line.event.data.get("stream")) for line in reserved if line.event.stream == REDACTIONS_STREAM
    )
    rows = [RawEvent(e.position, str(e.id), e.stream, e.version, e.type, e.schema, encode_json(e.data),
                     encode_json(e.meta), _micros(e.recorded_at), e.prev_hash, e.hash)
            for name in sorted(streams) async for e in store.read_stream(name)]  # fmt: skip
    rows.extend(_raw(line, head + i) for i, line in enumerate(new, 1) if line.event.stream in streams)
    report = verify_raw_events(rows)
    if not report.ok:
        first = report.problems[0]
        line = next(
            (x for x in new if (x.event.stream, x.event.version) == (first.stream, first.version)), None
        )
        where = f"line {line.number}: " if line is not None else ""
        raise UserError(
            f"{where}the redaction records would not verify after this import ({len(report.problems)} "
            f"problems, first: {first}); refused, nothing was imported"
        )


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="a JSON Lines export (turnlog export --format jsonl)")
    add_store_argument(parser)


async def _import(args: argparse.Namespace, lines: list[_Line]) -> ImportReport:
    async with open_store(store_url(args.store)) as store:
        return await import_events(store, lines)


def _remove_new_store(url: str) -> None:
    """Remove the SQLite files a failed import created (the store did not exist before)."""
    for path in store_files(url):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _run(args: argparse.Namespace) -> int:
    if not args.file.is_file():
        raise UserError(f"no such file: {args.file}")
    lines = read_export(args.file)
    check_chains(lines)
    url = store_url(args.store)
    if not lines:
        print(f"nothing to import: {args.file} holds no events")
        return 0
    path = sqlite_file(url)
    created = path is not None and not path.exists()
    try:
        with busy(f"importing {len(lines)} events"):
            report = anyio.run(_import, args, lines)
    except BaseException:
        if created:
            _remove_new_store(url)
        raise
    if args.json:
        emit_json({"added": report.added, "present": report.present, "streams": len(report.streams)})
    else:
        print(
            f"imported {report.added} new events into {len(report.streams)} streams "
            f"({report.present} were already there)"
        )
    return 0


COMMAND = Command(
    name="import",
    help="load a JSON Lines export into a store, unchanged (ids, times, hashes); all or nothing",
    description="Check the whole file first (envelopes, versions, every hash, stream ids), then store its\n"
    "events exactly as exported in one transaction. Events already in the store are skipped,\n"
    "so importing a file twice adds nothing. A store that does not exist is created.",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog import export.jsonl --store copy.db",
)
