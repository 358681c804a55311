"""``turnlog import FILE``: load a JSON Lines export (the native envelope) into a store.

Importing is idempotent: events keep their ids, so importing the same file twice adds
nothing, and an import interrupted half-way completes when run again. Before anything is
written, the file's own hash chains are checked, so a file altered after export is refused
with the line, stream and version that do not verify (``--no-verify`` skips that check).
The target store computes its own chain for what it stores; ``turnlog verify`` passes after.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import anyio
import orjson
from turnlog.eventstore import (
    EventStore,
    NewEvent,
    RecordedEvent,
    StoreError,
    encode_json,
    event_hash,
    open_store,
)

from ._command import Command, UserError, add_store_argument, emit_json, store_url
from ._output import fancy

__all__ = ["COMMAND", "ImportReport", "import_events", "read_export"]

_BATCH = 1000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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
            try:
                recorded_at = datetime.fromisoformat(_field(obj, "recorded_at", str, number))
                UUID(_field(obj, "id", str, number))
            except ValueError as exc:
                raise UserError(f"line {number}: {exc}") from exc
            lines.append(
                _Line(
                    number,
                    RecordedEvent(
                        id=UUID(obj["id"]),
                        stream=_field(obj, "stream", str, number),
                        version=_field(obj, "version", int, number),
                        position=_field(obj, "position", int, number),
                        type=_field(obj, "type", str, number),
                        schema=_field(obj, "schema", int, number),
                        data=_field(obj, "data", dict, number),
                        meta=_field(obj, "meta", dict, number),
                        recorded_at=recorded_at,
                        prev_hash=_field(obj, "prev_hash", str, number),
                        hash=_field(obj, "hash", str, number),
                    ),
                )
            )
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
        digest = event_hash(
            line.event.prev_hash,
            str(line.event.id),
            line.event.stream,
            line.event.version,
            line.event.type,
            line.event.schema,
            encode_json(line.event.data),
            encode_json(line.event.meta),
            _micros(line.event.recorded_at),
        )
        if digest != line.event.hash:
            raise UserError(
                f"line {line.number}: stream {line.event.stream!r} version {line.event.version}: the content "
                "does not match its hash (altered after export?)"
            )
        last[line.event.stream] = line


def _batches(lines: list[_Line]) -> Iterator[list[list[_Line]]]:
    """Runs of consecutive events of one stream, grouped into batches (a stream once per batch)."""
    batch: list[list[_Line]] = []
    size = 0
    streams: set[str] = set()
    for line in lines:
        if batch and batch[-1][0].event.stream == line.event.stream:
            batch[-1].append(line)
        else:
            if line.event.stream in streams or size >= _BATCH:
                yield batch
                batch, size, streams = [], 0, set()
            batch.append([line])
            streams.add(line.event.stream)
        size += 1
    if batch:
        yield batch


async def _already_there(store: EventStore, run: list[_Line], current: int) -> int:
    """How many leading events of ``run`` the store holds already (same ids), else an error."""
    overlap = [line for line in run if line.event.version <= current]
    if not overlap:
        return 0
    stored = {
        e.version: str(e.id)
        async for e in store.read_stream(
            run[0].event.stream, overlap[0].event.version, overlap[-1].event.version
        )
    }
    for line in overlap:
        if stored.get(line.event.version) != str(line.event.id):
            raise UserError(
                f"line {line.number}: stream {line.event.stream!r} already has a different event at "
                f"version {line.event.version}; the store and the file have diverged"
            )
    return len(overlap)


async def import_events(store: EventStore, lines: list[_Line], progress: Any = None) -> ImportReport:
    """Append ``lines`` in their order, skipping events the store already holds."""
    report = ImportReport()
    versions: dict[str, int] = {}
    for batch in _batches(lines):
        entries = []
        for run in batch:
            stream = run[0].event.stream
            report.streams.add(stream)
            if stream not in versions:
                versions[stream] = await store.stream_version(stream)
            skip = await _already_there(store, run, versions[stream])
            report.present += skip
            rest = run[skip:]
            if not rest:
                continue
            if rest[0].event.version != versions[stream] + 1:
                raise UserError(
                    f"line {rest[0].number}: stream {stream!r} is at version {versions[stream]} in the "
                    f"store, the file continues at {rest[0].event.version}"
                )
            events = [
                NewEvent(x.event.type, x.event.data, x.event.meta, id=x.event.id, schema=x.event.schema)
                for x in rest
            ]
            entries.append((stream, events, versions[stream]))
            versions[stream] = rest[-1].event.version
            report.added += len(rest)
        if entries:
            await store.append_batch(entries)
        if progress is not None:
            progress(sum(len(run) for run in batch))
    return report


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="a JSON Lines export (turnlog export --format jsonl)")
    parser.add_argument("--no-verify", action="store_true", help="do not check the file's hash chains first")
    add_store_argument(parser)


async def _import(args: argparse.Namespace, lines: list[_Line]) -> ImportReport:
    try:
        async with open_store(store_url(args.store)) as store:
            if not fancy():
                return await import_events(store, lines)
            from rich.progress import Progress

            with Progress(transient=True) as bar:
                task = bar.add_task("importing", total=len(lines))
                return await import_events(store, lines, lambda n: bar.advance(task, n))
    except StoreError as exc:
        raise UserError(str(exc)) from exc


def _run(args: argparse.Namespace) -> int:
    if not args.file.is_file():
        raise UserError(f"no such file: {args.file}")
    lines = read_export(args.file)
    if not args.no_verify:
        check_chains(lines)
    report = anyio.run(_import, args, lines)
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
    help="load a JSON Lines export into a store (idempotent; checks the file's hash chains first)",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog import export.jsonl --store copy.db",
)
