"""``recover``: close the runs a crashed process left open, losing no chunk that reached it.

Steps (each idempotent, so running ``recover`` twice changes nothing the second time):

1. Every live buffer ``<persist_dir>/<branch_id>.<run_id>.jsonl`` is read. A torn last line
   (a write cut by the crash) is tolerated; a line that is not a chunk event is reported with
   its line number, and the good lines after it are still used. Events whose ids the run
   stream does not hold yet are appended, with the same ids.
2. Runs that started and never ended are found from the run lifecycle events of the branch
   streams (one filtered scan of the log, no fold of everything).
3. For each such run (and each buffered run), the chunk rules of ``run`` are replayed over
   its chunks against what is already recorded. Missing messages are recorded; text received
   after the last recorded response becomes an ``AssistantResponse`` marked
   ``metadata["interrupted"] = True``; a tool call without its result gets an error
   ``ActionResponse``; the provider session is bound if it was not; and the run gets
   ``run.failed`` with reason ``crashed`` and the counts in ``recovered``. All of this is
   one atomic append per run. Before the replay, a CLI run is reconciled with the CLI's own
   session record (``_cli_reconcile``): what only the CLI persisted is appended to the run
   stream, source-marked, and ``recovered["cli_session"]`` says how that went.
4. A buffer whose events are all committed is removed (one with bad lines is kept, renamed
   ``*.jsonl.corrupt``, for inspection).

Run it when no process is streaming into the same store (at start-up, or from the
``turnlog recover`` command): a run in progress elsewhere would be closed as crashed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import anyio
import orjson
from pydantic import ValidationError
from turnlog.eventstore import EventStore, NewEvent
from turnlog.kernel._cli_reconcile import reconcile_with_cli
from turnlog.kernel._persist import CHUNK_TYPE, default_persist_dir
from turnlog.kernel.models import StreamChunk
from turnlog.projections import (
    ActionResponse,
    AnyMessage,
    ChunkReceived,
    EventData,
    MessageAdded,
    ProviderSessionBound,
    RunFailed,
    RunStarted,
    UsageData,
)

__all__ = ["BufferProblem", "RecoveredRun", "RecoveryReport", "recover"]

_LIFECYCLE = ("run.started", "run.ended", "run.failed")
_CRASH_TYPE = "ProcessCrashed"
_CRASH_MESSAGE = "the process streaming this run ended before closing it; closed by recovery"
_TOOL_LOST = "interrupted: the run crashed before the tool result arrived"


@dataclass(frozen=True, slots=True)
class BufferProblem:
    """A line of a buffer that could not be used.

    Attributes:
        path: The buffer file.
        line_number: 1-based line number.
        what: What is wrong with it.
    """

    path: str
    line_number: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line_number}: {self.what}"


@dataclass(frozen=True, slots=True)
class RecoveredRun:
    """What recovery did for one run.

    Attributes:
        branch_id: The branch.
        run_id: The run (its chunks are in ``run-<run_id>``).
        verb: The verb that started it.
        chunks: Chunks the run stream holds after recovery.
        imported: Chunks imported from the buffer.
        messages: Messages recorded by recovery.
        interrupted_text: Characters of text materialized as an interrupted response.
        closed_tools: Tool calls closed with an error response.
        session_id: The provider session to resume, if the stream announced one.
        closed: True when recovery appended ``run.failed`` (crashed).
    """

    branch_id: str
    run_id: str
    verb: str
    chunks: int
    imported: int
    messages: int
    interrupted_text: int
    closed_tools: int
    session_id: str | None
    closed: bool

    def to_dict(self) -> dict[str, Any]:
        """A JSON object of the fields."""
        return {
            "branch_id": self.branch_id,
            "run_id": self.run_id,
            "verb": self.verb,
            "chunks": self.chunks,
            "imported": self.imported,
            "messages": self.messages,
            "interrupted_text": self.interrupted_text,
            "closed_tools": self.closed_tools,
            "session_id": self.session_id,
            "closed": self.closed,
        }


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """The outcome of ``recover``.

    Attributes:
        persist_dir: The directory searched for buffers.
        runs: One entry per run that was closed or had chunks imported.
        buffers: Buffer files read.
        removed: Buffer files removed (every event committed).
        kept: Buffer files kept (renamed ``*.corrupt``) because some lines were bad.
        imported: Chunk events imported from buffers, in total.
        problems: Bad buffer lines (a torn last line is not one).
        torn: Buffers whose last line was torn (tolerated).
    """

    persist_dir: str
    runs: tuple[RecoveredRun, ...] = ()
    buffers: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    imported: int = 0
    problems: tuple[BufferProblem, ...] = ()
    torn: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """True when recovery wrote to the store or touched a file."""
        return bool(
            self.imported or self.removed or self.kept or any(r.closed or r.messages for r in self.runs)
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON object of the report."""
        return {
            "persist_dir": self.persist_dir,
            "runs": [r.to_dict() for r in self.runs],
            "buffers": list(self.buffers),
            "removed": list(self.removed),
            "kept": list(self.kept),
            "imported": self.imported,
            "problems": [
                {"path": p.path, "line_number": p.line_number, "what": p.what} for p in self.problems
            ],
            "torn": list(self.torn),
        }


# ------------------------------------------------------------------------------------- buffers


@dataclass(slots=True)
class _Buffer:
    path: Path
    branch_id: str
    run_id: str
    events: list[NewEvent] = field(default_factory=list)
    received: dict[int, datetime] = field(default_factory=dict)
    problems: list[BufferProblem] = field(default_factory=list)
    torn: bool = False


def _parse_name(path: Path) -> tuple[str, str] | None:
    parts = path.name[: -len(".jsonl")].split(".")
    return (parts[0], parts[1]) if len(parts) == 2 and all(parts) else None


def _decode_line(raw: bytes, stream: str) -> tuple[NewEvent, datetime | None]:
    """The event of one buffer line; ``ValueError`` saying what is wrong."""
    try:
        line = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from exc
    if not isinstance(line, dict):
        raise ValueError("not a JSON object")
    if line.get("stream") != stream:
        raise ValueError(f"stream {line.get('stream')!r} is not {stream!r}")
    if line.get("type") != CHUNK_TYPE:
        raise ValueError(f"type {line.get('type')!r} is not {CHUNK_TYPE!r}")
    try:
        event_id = UUID(str(line["id"]))
        schema = int(line["schema"])
        data = line["data"]
        ChunkReceived.model_validate(data)
    except (KeyError, ValueError, TypeError, ValidationError) as exc:
        raise ValueError(f"not a valid chunk event ({exc})".replace("\n", " ")) from exc
    meta = line.get("meta") or {}
    received = None
    if isinstance(line.get("recorded_at"), str):
        try:
            received = datetime.fromisoformat(line["recorded_at"])
        except ValueError:
            received = None
    return NewEvent(CHUNK_TYPE, data, meta, event_id, schema), received


def _read_buffer(path: Path) -> _Buffer | None:
    names = _parse_name(path)
    if names is None:
        return None
    buffer = _Buffer(path, *names)
    stream = f"run-{buffer.run_id}"
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    last_index = len(lines) - 1  # the piece after the final newline ("" when the file ends cleanly)
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        number = index + 1
        try:
            event, received = _decode_line(line, stream)
        except ValueError as exc:
            if index == last_index:
                buffer.torn = True  # cut off by the crash: tolerated
                continue
            buffer.problems.append(BufferProblem(str(path), number, str(exc)))
            continue
        buffer.events.append(event)
        if received is not None:
            buffer.received[int(event.data["seq"])] = received
    return buffer


async def _import(store: EventStore, buffer: _Buffer) -> int:
    """Append the buffered events the run stream lacks (same ids); return how many."""
    stream = f"run-{buffer.run_id}"
    stored = {str(e.id) async for e in store.read_stream(stream)}
    seen: set[str] = set()
    new: list[NewEvent] = []
    for event in sorted(buffer.events, key=lambda e: int(e.data["seq"])):
        key = str(event.id)
        if key in stored or key in seen:
            continue
        seen.add(key)
        new.append(event)
    if new:
        await store.append(stream, new, await store.stream_version(stream))
    return len(new)


# ---------------------------------------------------------------------------------------- runs


@dataclass(slots=True)
class _Open:
    branch_id: str
    run_id: str
    verb: str
    provider: str
    model: str
    started_at: datetime | None
    lifecycle: bool


async def _open_runs(store: EventStore) -> tuple[dict[str, _Open], set[str]]:
    started: dict[str, _Open] = {}
    ended: set[str] = set()
    async for event in store.read_all(types=_LIFECYCLE, stream_prefix="branch-"):
        run_id = event.data.get("run_id")
        if not isinstance(run_id, str):
            continue
        if event.type == "run.started":
            data = RunStarted.model_validate(event.data)
            started[run_id] = _Open(
                event.stream.removeprefix("branch-"),
                run_id,
                data.verb,
                data.provider or "",
                data.model or "",
                event.recorded_at,
                True,
            )
            ended.discard(run_id)
        else:
            ended.add(run_id)
    return {k: v for k, v in started.items() if k not in ended}, ended


def _range(message: AnyMessage) -> tuple[int, int] | None:
    value = message.metadata.get("chunk_range")
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return int(value[0]), int(value[1])
    return None


async def _recover_run(
    store: EventStore, run: _Open, imported: int, received: Mapping[int, datetime]
) -> RecoveredRun:
    from turnlog.kernel._assembler import StreamAssembler
    from turnlog.kernel._branch import Branch
    from turnlog.kernel._kernel import AddMessages

    branch = await Branch.load(store, run.branch_id)
    existing: dict[tuple[str, int, int], AnyMessage] = {}
    for message in branch.messages:
        if message.metadata.get("run_id") == run.run_id and (span := _range(message)) is not None:
            existing[(message.kind, *span)] = message
    # Reconciliation with the CLI's own session record: what only the CLI persisted is
    # appended to the run stream (source-marked) before the chunk rules replay it.
    cli = await reconcile_with_cli(store, run.run_id, run.provider, run.started_at) if run.lifecycle else None
    assembler = StreamAssembler(branch_id=branch.id, user=branch.user, run_id=run.run_id, existing=existing)
    known = {m.id for m in existing.values()}
    produced: list[AnyMessage] = []
    chunks = 0
    last_seen = run.started_at
    async for event in store.read_stream(f"run-{run.run_id}"):
        data = ChunkReceived.model_validate(event.data)
        chunks += 1
        seen_at = received.get(data.seq, event.recorded_at)
        last_seen = seen_at if last_seen is None or seen_at > last_seen else last_seen
        if assembler.finished or assembler.error is not None:
            continue  # the live run stopped reading here
        chunk = StreamChunk.from_dict(data.model_dump())
        produced.extend(m for m in assembler.feed(data.seq, chunk) if m.id not in known)
    trailing = [m for m in assembler.flush(interrupted=True) if m.id not in known]
    interrupted_text = sum(len(m.content.text) for m in trailing if hasattr(m.content, "text"))
    produced.extend(trailing)
    closed: list[AnyMessage] = []
    state_after = branch.state
    for request in assembler.unanswered.values():
        if state_after.response_for(request.id) is not None:
            continue
        span = _range(request) or (0, 0)
        closed.append(
            ActionResponse.create(
                request,
                error=_TOOL_LOST,
                sender=assembler.user,
                recipient=branch.id,
                metadata={"run_id": run.run_id, "chunk_range": list(span), "interrupted": True},
            )
        )
    items: list[EventData] = [MessageAdded(message=m, run_id=run.run_id) for m in (*produced, *closed)]
    session = assembler.session_id
    if session is not None and run.provider and branch.provider_session(run.provider, run.model) != session:
        items.append(ProviderSessionBound(provider=run.provider, model=run.model, session_id=session))
    if run.lifecycle:
        duration = (
            (last_seen - run.started_at).total_seconds() * 1000 if last_seen and run.started_at else 0.0
        )
        u = assembler.usage
        items.append(
            RunFailed(
                run_id=run.run_id,
                verb=run.verb,
                duration_ms=max(0.0, duration),
                usage=UsageData(
                    input_tokens=u.input_tokens, output_tokens=u.output_tokens, cost_usd=u.cost_usd
                ),
                error_type=_CRASH_TYPE,
                error_message=_CRASH_MESSAGE,
                reason="crashed",
                recovered={
                    "chunks": chunks,
                    "imported": imported,
                    "messages": len(produced) + len(closed),
                    "interrupted_text": interrupted_text,
                    "closed_tools": len(closed),
                    "session_id": session,
                    **(cli.recovered() if cli is not None else {}),
                },
            )
        )
    if items:
        await branch._execute(AddMessages(tuple(items)), run_id=run.run_id, terminal=run.lifecycle)
    return RecoveredRun(
        branch.id,
        run.run_id,
        run.verb,
        chunks,
        imported,
        len(produced) + len(closed),
        interrupted_text,
        len(closed),
        session,
        run.lifecycle,
    )


async def _all_committed(store: EventStore, buffer: _Buffer) -> bool:
    stored = {str(e.id) async for e in store.read_stream(f"run-{buffer.run_id}")}
    return all(str(e.id) in stored for e in buffer.events)


async def recover(store: EventStore, persist_dir: str | os.PathLike[str] | None = None) -> RecoveryReport:
    """Import leftover stream buffers and close every run a crash left open.

    Args:
        store: The store (opened with ``catalogue_upcasters()`` ideally).
        persist_dir: Where ``stream_persist`` buffers are (default: as ``run`` chooses it).

    Returns:
        What was imported, recorded, removed and reported.
    """
    directory = Path(persist_dir) if persist_dir is not None else default_persist_dir(store)
    paths = sorted(directory.glob("*.jsonl")) if directory.is_dir() else []
    buffers = [b for b in [await anyio.to_thread.run_sync(_read_buffer, p) for p in paths] if b is not None]
    imported: dict[str, int] = {}
    received: dict[str, dict[int, datetime]] = {}
    for buffer in buffers:
        imported[buffer.run_id] = imported.get(buffer.run_id, 0) + await _import(store, buffer)
        received.setdefault(buffer.run_id, {}).update(buffer.received)
    open_runs, ended = await _open_runs(store)
    for buffer in buffers:
        if buffer.run_id not in open_runs and buffer.run_id not in ended:
            # A run without a lifecycle of its own (nested in another run): messages only.
            open_runs[buffer.run_id] = _Open(buffer.branch_id, buffer.run_id, "run", "", "", None, False)
    runs: list[RecoveredRun] = []
    for run in open_runs.values():
        runs.append(await _recover_run(store, run, imported.get(run.run_id, 0), received.get(run.run_id, {})))
    for run_id, count in imported.items():
        if count and run_id not in open_runs:
            branch_id = next(b.branch_id for b in buffers if b.run_id == run_id)
            runs.append(RecoveredRun(branch_id, run_id, "run", 0, count, 0, 0, 0, None, False))
    removed: list[str] = []
    kept: list[str] = []
    for buffer in buffers:
        if not await _all_committed(store, buffer):
            continue
        if buffer.problems:
            target = buffer.path.with_name(buffer.path.name + ".corrupt")
            await anyio.to_thread.run_sync(os.replace, buffer.path, target)
            kept.append(str(target))
        else:
            await anyio.to_thread.run_sync(buffer.path.unlink)
            removed.append(str(buffer.path))
    return RecoveryReport(
        persist_dir=str(directory),
        runs=tuple(runs),
        buffers=tuple(str(b.path) for b in buffers),
        removed=tuple(removed),
        kept=tuple(kept),
        imported=sum(imported.values()),
        problems=tuple(p for b in buffers for p in b.problems),
        torn=tuple(str(b.path) for b in buffers if b.torn),
    )
