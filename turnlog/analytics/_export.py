"""Export: the log as JSON Lines (the native envelope) and flat Parquet tables.

JSON Lines writes one ``RecordedEvent`` per line with every field (``id``, ``stream``,
``version``, ``position``, ``type``, ``schema``, ``data``, ``meta``, ``recorded_at``,
``prev_hash``, ``hash``), so hashes can be re-verified from the file. Parquet writes one
file per table into a directory: ``events.parquet`` (the envelope, flat, with ``data`` and
``meta`` as JSON text and the correlation ids pulled out) and one file per fact table.
Parquet needs pyarrow: ``pip install 'turnlog[analytics]'``.

``content=False`` writes every payload without its conversation content, as the event
catalogue declares it (``turnlog.projections.without_content``, the declaration ``redact``
and ``forget`` use), and leaves the tool facts' error text out: a file to share for
analysis that holds no one's words. Its hashes then no longer match its payloads.
"""

from __future__ import annotations

import heapq
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import anyio
import orjson

from turnlog.eventstore import EventStore, RecordedEvent, is_redacted
from turnlog.projections import without_content

from ._errors import MissingExtraError
from ._facts import branch_of
from ._projection import AnalyticsProjection
from ._tables import FACT_TABLES, FactTable

__all__ = ["EVENT_COLUMNS", "envelope", "events_of", "export_jsonl", "export_parquet"]

EVENT_COLUMNS: tuple[str, ...] = (
    "position", "id", "stream", "version", "type", "schema", "recorded_at",
    "branch_id", "session_id", "run_id", "data", "meta", "prev_hash", "hash",
)  # fmt: skip
"""Columns of ``events.parquet``."""

_ROW_GROUP = 50_000


_CONTENT_FACT_COLUMNS = frozenset({"turnlog.error"})
"""Fact columns copied from content (a tool result's error text), left out by ``content=False``."""


def payload_of(event: RecordedEvent, *, content: bool = True) -> dict[str, Any]:
    """The event's ``data``; with ``content=False``, without its content (the catalogue's declaration)."""
    if content or is_redacted(event.data):
        return event.data
    return without_content(event.type, event.data)


def envelope(event: RecordedEvent, *, content: bool = True) -> dict[str, Any]:
    """Every field of a recorded event as a JSON-ready dict (``recorded_at`` in ISO 8601 UTC).

    With ``content=False`` the ``data`` holds no conversation content (see ``payload_of``).
    """
    return {
        "id": str(event.id),
        "stream": event.stream,
        "version": event.version,
        "position": event.position,
        "type": event.type,
        "schema": event.schema,
        "data": payload_of(event, content=content),
        "meta": event.meta,
        "recorded_at": event.recorded_at.astimezone(UTC).isoformat(timespec="microseconds"),
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


async def events_of(
    store: EventStore, branch: str | None = None, *, upto: int | None = None
) -> AsyncIterator[RecordedEvent]:
    """Every event by position (up to position ``upto``); with ``branch``, its stream and its runs' streams.

    A fork's stream references its parent's prefix rather than copying it; export the parent
    too when you need that prefix.
    """
    if branch is None:
        async for event in store.read_all(1, upto):
            yield event
        return
    own = [e async for e in store.read_stream(f"branch-{branch}")]
    runs = sorted(
        {e.data["run_id"] for e in own if e.type == "run.started" and isinstance(e.data.get("run_id"), str)}
    )
    streams: list[Iterable[RecordedEvent]] = [own]
    for run_id in runs:
        streams.append([e async for e in store.read_stream(f"run-{run_id}")])
    for event in heapq.merge(*streams, key=lambda e: e.position):
        if upto is not None and event.position > upto:
            return
        yield event


async def export_jsonl(
    store: EventStore, out: IO[bytes], *, branch: str | None = None, content: bool = True
) -> int:
    """Write the envelope of every event (of one branch) to ``out``, one line each; return the count.

    With ``content=False`` no payload holds conversation content (see ``payload_of``).
    """
    count = 0
    dumps, newline = orjson.dumps, orjson.OPT_APPEND_NEWLINE
    async for event in events_of(store, branch):
        out.write(dumps(envelope(event, content=content), option=newline))
        count += 1
    return count


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        raise MissingExtraError("pyarrow", "analytics", "Parquet export") from exc
    return pyarrow


async def export_parquet(
    store: EventStore,
    projection: AnalyticsProjection,
    out_dir: str | Path,
    *,
    branch: str | None = None,
    content: bool = True,
) -> dict[str, int]:
    """Write ``events.parquet`` and one Parquet file per fact table into ``out_dir``.

    The projection is brought up to date first, and the events written stop at its
    checkpoint, so events and facts describe the same moment. With ``branch``, events are
    those of ``events_of(store, branch)`` and facts those whose ``gen_ai.conversation.id``
    is the branch. With ``content=False`` the events' payloads hold no conversation content
    and the facts copied from content (a tool's error text) are left empty.

    Returns:
        Rows written per file name.

    Raises:
        MissingExtraError: pyarrow is not installed.
    """
    pa = _pyarrow()
    out = Path(out_dir)
    await anyio.Path(out).mkdir(parents=True, exist_ok=True)
    # Events and facts of one moment: the facts' checkpoint bounds the events written.
    report = await projection.update()
    written = {
        "events.parquet": await _write_events(
            pa, store, out / "events.parquet", branch, report.to_position, content
        )
    }
    for table in FACT_TABLES:
        where, params = ("", ()) if branch is None else (' WHERE "gen_ai.conversation.id" = ?', (branch,))
        rows = await projection.sql(f"SELECT * FROM {table.name}{where} ORDER BY position", params)
        if not content:
            rows = _without_content_facts(table, rows)
        name = f"{table.name.removeprefix('analytics_')}.parquet"
        written[name] = _write_facts(pa, table, rows, out / name)
    return written


def _event_schema(pa: Any) -> Any:
    text, i64 = pa.string(), pa.int64()
    types = {
        "position": i64,
        "version": i64,
        "schema": pa.int32(),
        "recorded_at": pa.timestamp("us", tz="UTC"),
    }
    return pa.schema([(name, types.get(name, text)) for name in EVENT_COLUMNS])


def _without_content_facts(table: FactTable, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    blank = {i for i, column in enumerate(table.columns) if column.name in _CONTENT_FACT_COLUMNS}
    if not blank:
        return rows
    return [tuple(None if i in blank else value for i, value in enumerate(row)) for row in rows]


async def _write_events(
    pa: Any, store: EventStore, path: Path, branch: str | None, upto: int, content: bool = True
) -> int:
    schema = _event_schema(pa)
    count = 0
    columns: dict[str, list[Any]] = {name: [] for name in EVENT_COLUMNS}
    with pa.parquet.ParquetWriter(path, schema) as writer:
        async for event in events_of(store, branch, upto=upto):
            meta = event.meta
            for name, value in (
                ("position", event.position), ("id", str(event.id)), ("stream", event.stream),
                ("version", event.version), ("type", event.type), ("schema", event.schema),
                ("recorded_at", event.recorded_at), ("branch_id", branch_of(event)),
                ("session_id", meta.get("session_id")),
                ("run_id", meta.get("run_id") or event.data.get("run_id")),
                ("data", orjson.dumps(payload_of(event, content=content)).decode()),
                ("meta", orjson.dumps(meta).decode()),
                ("prev_hash", event.prev_hash), ("hash", event.hash),
            ):  # fmt: skip
                columns[name].append(value)
            count += 1
            if len(columns["position"]) >= _ROW_GROUP:
                writer.write_table(pa.table(columns, schema=schema))
                columns = {name: [] for name in EVENT_COLUMNS}
        if columns["position"] or count == 0:
            writer.write_table(pa.table(columns, schema=schema))
    return count


def _write_facts(pa: Any, table: FactTable, rows: list[tuple[Any, ...]], path: Path) -> int:
    kinds = {"int": pa.int64(), "float": pa.float64(), "text": pa.string(), "bool": pa.bool_()}
    fields, arrays = [], []
    for i, column in enumerate(table.columns):
        values = [row[i] for row in rows]
        if column.name in ("recorded_at", "ended_at"):
            kind = pa.timestamp("us", tz="UTC")
            values = [None if v is None else datetime.fromisoformat(v) for v in values]
        elif column.kind == "bool":
            kind = kinds["bool"]
            values = [None if v is None else bool(v) for v in values]
        else:
            kind = kinds[column.kind]
        fields.append(pa.field(column.name, kind))
        arrays.append(pa.array(values, type=kind))
    pa.parquet.write_table(pa.Table.from_arrays(arrays, schema=pa.schema(fields)), path)
    return len(rows)
