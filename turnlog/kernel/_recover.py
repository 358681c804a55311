"""``recover``: close the runs a crashed process left open, losing no chunk that reached it.

Steps (each idempotent, so running ``recover`` twice changes nothing the second time):

1. Every buffer ``<persist_dir>/<branch_id>.<run_id>.jsonl`` is locked (as its writer locks it)
   and read. A buffer is skipped, reported and left untouched when it is in use (a live run,
   or another ``recover``), when its name or header is not a buffer's, when it was written by
   a newer turnlog, for another store (another ``store_id``, or the store file it names still
   exists elsewhere: this store is a copy of that one), or for a branch this store does not
   hold. A torn last line (a write cut by the crash) is tolerated; any other line that is not
   a chunk event of the run is reported with its line number. A buffer whose header carries
   its run's opening (``turnlog proxy`` forwards a stream's first chunks before it commits the
   run's new messages and ``run.started``) gets that opening appended when the store lacks the
   run's ``run.started`` (``_apply_openings``), so its branch may be one the store does not
   hold yet.
2. Per run, the run stream is read once and completed from the buffer so that chunk ``seq`` k
   stays stream version k: chunks are appended (same ids, through ``append_encoded``) from the
   version after the stored ones up to the first gap; a missing or unreadable line, or one
   seq on two lines with different ids, stops the import there and is reported, and a buffer
   line whose id differs from the stored chunk at its seq makes the whole buffer refused.
3. Runs that started and never ended are found from the run lifecycle events of the branch
   streams (one filtered scan of the log, no fold of everything).
4. For each such run (and each buffered run), the chunk rules of ``run`` are replayed over
   its chunks against what is already recorded. Missing messages are recorded; text received
   after the last recorded response becomes an ``AssistantResponse`` marked
   ``metadata["interrupted"] = True``; a tool call without its result gets an error
   ``ActionResponse``; the provider session is bound if it was not; and the run gets
   ``run.failed`` with reason ``crashed`` and the counts in ``recovered``. All of this is
   one atomic append per run. Before the replay, a CLI run is reconciled with the CLI's own
   session record (``_cli_reconcile``): what only the CLI persisted is appended to the run
   stream, source-marked, and ``recovered["cli_session"]`` says how that went.
5. A buffer whose chunks are all stored is removed; one with problems is kept, renamed
   ``*.jsonl.corrupt``, for inspection.

One run's failure (the store unreachable half-way, a race with another ``recover``, a chunk
the store refuses) is reported in ``RecoveryReport.failed`` and the other runs go on.

Only runs whose writer is gone are closed. A process holds the liveness lease of each run it
has open (``turnlog.eventstore.acquire_lease``: a ``flock`` beside a store file, a session
advisory lock on PostgreSQL), from before ``run.started`` until its terminal is written; an
open run whose lease is held, or whose buffer is locked, is left alone and reported in
``RecoveryReport.live``. Recovery may therefore run at any time, next to live processes.
A run started by a turnlog older than the leases has none, and is closed as before.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import anyio

from turnlog.eventstore import (
    ANY,
    NO_STREAM,
    EventEncoder,
    EventStore,
    IdempotencyError,
    TurnlogError,
    held_leases,
    uuid7,
)
from turnlog.kernel._cli_reconcile import Reconciliation, reconcile_with_cli
from turnlog.kernel.models import StreamChunk
from turnlog.projections import (
    CATALOGUE,
    ActionResponse,
    AnyMessage,
    AssistantResponse,
    BranchCreated,
    ChunkReceived,
    EventData,
    MessageAdded,
    ProviderSessionBound,
    RunFailed,
    RunStarted,
    new_event,
    new_events,
)

from ._errors import RunClosed
from ._lifecycle import run_lease_key
from ._recover_buffers import IN_USE, Buffer, check_branch, dispose, open_buffer, plan_import
from ._run_buffer import (
    CHUNK_TYPE,
    BufferedChunk,
    default_persist_dir,
    parse_buffer_name,
    store_location,
)

__all__ = ["BufferProblem", "LiveRun", "RecoveredRun", "RecoveryReport", "RunRecoveryError", "recover"]

LEASE_HELD = "its writer is alive: a process holds the run's lease"
BUFFER_LOCKED = "its writer is alive: a process holds the lock of its stream buffer"

_LIFECYCLE = ("run.started", "run.ended", "run.failed")
_CRASH_TYPE = "ProcessCrashed"
_CRASH_MESSAGE = "the process streaming this run ended before closing it; closed by recovery"
_TOOL_LOST = "interrupted: the run crashed before the tool result arrived"


@dataclass(frozen=True, slots=True)
class BufferProblem:
    """A buffer, or a line of one, that could not be used.

    Attributes:
        path: The buffer file.
        line_number: 1-based line number; 0 when the whole buffer is concerned.
        what: What is wrong with it.
    """

    path: str
    line_number: int
    what: str

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line_number}: {self.what}"
            if self.line_number
            else f"{self.path}: {self.what}"
        )


@dataclass(frozen=True, slots=True)
class RunRecoveryError:
    """A run whose recovery failed; the others went on.

    Attributes:
        branch_id: The branch.
        run_id: The run.
        error_type: The exception's class name.
        message: What went wrong.
    """

    branch_id: str
    run_id: str
    error_type: str
    message: str

    def __str__(self) -> str:
        return f"run {self.run_id} (branch {self.branch_id}): {self.error_type}: {self.message}"


@dataclass(frozen=True, slots=True)
class LiveRun:
    """An open run that ``recover`` left open because its writer is alive.

    Attributes:
        branch_id: The branch.
        run_id: The run.
        verb: The verb that started it.
        reason: Why it counts as live (the run's lease is held, or its buffer is locked).
    """

    branch_id: str
    run_id: str
    verb: str
    reason: str

    def __str__(self) -> str:
        return f"run {self.run_id} (branch {self.branch_id}, {self.verb}): {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON object of the fields."""
        return {"branch_id": self.branch_id, "run_id": self.run_id, "verb": self.verb, "reason": self.reason}


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
        cli_session: How the CLI's own session record compared (``reconciled``,
            ``in_agreement``, ``complete``, ``no_session``, ``unreconciled``); None for a run
            that is not a CLI run.
        note: What the user should know before resuming the run's provider session (set when
            the CLI's record could not be read: the session may hold more than the log).
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
    cli_session: str | None = None
    note: str | None = None

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
            "cli_session": self.cli_session,
            "note": self.note,
        }


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """The outcome of ``recover``.

    Attributes:
        persist_dir: The directory searched for buffers.
        runs: One entry per run that was closed or had chunks imported.
        buffers: Buffer files read.
        removed: Buffer files removed (every chunk stored).
        kept: Buffer files kept (renamed ``*.corrupt``) because some lines were bad or not imported.
        imported: Chunk events imported from buffers, in total.
        problems: Bad buffer lines, gaps, and buffers skipped (line 0) with the reason; a torn
            last line is not one.
        torn: Buffers whose last line was torn (tolerated).
        skipped: Buffer files left untouched (their reasons are in ``problems``).
        failed: Runs whose recovery failed.
        live: Open runs left open because their writer is alive (skipped, with the reason).
    """

    persist_dir: str
    runs: tuple[RecoveredRun, ...] = ()
    buffers: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    imported: int = 0
    problems: tuple[BufferProblem, ...] = ()
    torn: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    failed: tuple[RunRecoveryError, ...] = ()
    live: tuple[LiveRun, ...] = ()

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
            "skipped": list(self.skipped),
            "failed": [
                {
                    "branch_id": f.branch_id,
                    "run_id": f.run_id,
                    "error_type": f.error_type,
                    "message": f.message,
                }
                for f in self.failed
            ],
            "live": [r.to_dict() for r in self.live],
        }


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


@dataclass(slots=True)
class _Chunks:
    """The chunks of one run's stream after the buffer was imported."""

    items: list[tuple[ChunkReceived, datetime | None]]
    imported: int


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


async def _complete_stream(store: EventStore, run_id: str, buffer: Buffer | None) -> _Chunks:
    """Read the run stream once and append what the buffer holds beyond it (same ids, seq == version)."""
    stream = f"run-{run_id}"
    stored = [event async for event in store.read_stream(stream)]
    items: list[tuple[ChunkReceived, datetime | None]] = [
        (ChunkReceived.model_validate(event.data), event.recorded_at) for event in stored
    ]
    if buffer is None:
        return _Chunks(items, 0)
    new = plan_import(buffer, [str(event.id) for event in stored])
    if new:
        encoder = EventEncoder(
            CHUNK_TYPE,
            schema=ChunkReceived.schema_version,
            meta=new[0].meta,
            max_event_bytes=store.max_event_bytes,
        )
        batch = [encoder.encode(chunk.data, UUID(chunk.id)) for chunk in new]
        await _append_reassigning(store, stream, len(stored), buffer, new, batch, encoder)
        items.extend((chunk.chunk, chunk.received) for chunk in new)
    return _Chunks(items, len(new))


async def _append_reassigning(
    store: EventStore,
    stream: str,
    after: int,
    buffer: Buffer,
    new: list[BufferedChunk],
    batch: list[Any],
    encoder: EventEncoder,
) -> None:
    """Append ``batch``; a line whose id another stream's event holds gets a fresh id, reported.

    The batch is atomic, so one such line would otherwise keep every chunk of the run out of
    the store. When the batch is refused for an id, its chunks go one by one (only then), and
    a chunk whose id is taken keeps its data (seq == version still holds) under a fresh id;
    the problem names the line, and the buffer is kept for inspection.
    """
    try:
        await store.append_encoded(stream, batch, after)
        return
    except IdempotencyError:
        pass
    for index, chunk in enumerate(new):
        try:
            await store.append_encoded(stream, [batch[index]], after + index)
            continue
        except IdempotencyError as exc:
            fresh = uuid7()
            buffer.problem(
                chunk.line_number,
                f"id {chunk.id} is taken by another event ({exc.reason}): chunk {chunk.seq} imported as {fresh}",
            )
        batch[index] = encoder.encode(chunk.data, fresh)
        new[index] = dataclasses.replace(chunk, id=str(fresh))
        await store.append_encoded(stream, [batch[index]], after + index)


def _range(message: AnyMessage) -> tuple[int, int] | None:
    value = message.metadata.get("chunk_range")
    if isinstance(value, list) and len(value) == 2:
        first, last = value
        if isinstance(first, int) and isinstance(last, int):
            return first, last
    return None


async def _close_run(
    store: EventStore, run: _Open, chunks: _Chunks, cli: Reconciliation | None = None
) -> RecoveredRun:
    """Replay the chunk rules over the run's chunks; record what is missing and close the run."""
    from turnlog.kernel._assembler import StreamAssembler
    from turnlog.kernel._branch import Branch
    from turnlog.kernel._commands import AddMessages

    branch = await Branch.load(store, run.branch_id)
    existing: dict[tuple[str, int, int], AnyMessage] = {}
    for message in branch.messages:
        if message.metadata.get("run_id") == run.run_id and (span := _range(message)) is not None:
            existing[(message.kind, *span)] = message
    assembler = StreamAssembler(branch_id=branch.id, user=branch.user, run_id=run.run_id, existing=existing)
    known = {m.id for m in existing.values()}
    produced: list[AnyMessage] = []
    last_seen = run.started_at
    for data, seen_at in chunks.items:
        if seen_at is not None and (last_seen is None or seen_at > last_seen):
            last_seen = seen_at
        if assembler.finished or assembler.error is not None:
            continue  # the live run stopped reading here
        chunk = StreamChunk.from_dict(data.model_dump())
        produced.extend(m for m in assembler.feed(data.seq, chunk) if m.id not in known)
    trailing = [m for m in assembler.flush(interrupted=True) if m.id not in known]
    interrupted_text = sum(len(m.content.text) for m in trailing if hasattr(m.content, "text"))
    produced.extend(trailing)
    wire_calls, wire_text = await _restore_wire(store, run, branch, produced)
    closed = _close_tools(branch, run, assembler.unanswered.values(), assembler.user)
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
                usage=u,
                error_type=_CRASH_TYPE,
                error_message=_CRASH_MESSAGE,
                reason="crashed",
                recovered={
                    "chunks": len(chunks.items),
                    "imported": chunks.imported,
                    "messages": len(produced) + len(closed),
                    "interrupted_text": interrupted_text,
                    "closed_tools": len(closed),
                    "session_id": session,
                    **({"wire_calls": wire_calls, "wire_text": wire_text} if wire_calls else {}),
                    **(cli.recovered() if cli is not None else {}),
                },
            )
        )
    if items:
        await branch.execute(AddMessages(tuple(items)), run_id=run.run_id, terminal=run.lifecycle)
    return RecoveredRun(
        branch.id,
        run.run_id,
        run.verb,
        len(chunks.items),
        chunks.imported,
        len(produced) + len(closed),
        interrupted_text,
        len(closed),
        session,
        run.lifecycle,
        cli.status if cli is not None else None,
        _note(cli, session),
    )


async def _restore_wire(
    store: EventStore, run: _Open, branch: Any, produced: list[AnyMessage]
) -> tuple[int, int]:
    """The text of the run's last upstream call that reached the wire and was never printed.

    A run recorded at the wire (``kernel/wire/_run.py``) whose last call did not end with its
    answer: what crossed the wire past what the CLI printed becomes an ``AssistantResponse``
    marked ``source: "wire"`` (appended to ``produced``); calls the crash left open are closed.
    Returns the number of wire calls and the characters restored.
    """
    from turnlog.kernel.wire._run import (
        close_open_wire_calls,
        last_cut,
        read_wire_calls,
        wire_message,
        wire_remainder,
    )

    records = await read_wire_calls(store, run.run_id)
    if not records:
        return 0, 0
    rest = ""
    last = last_cut(records)
    if last is not None:
        printed = "".join(
            m.response
            for m in (*branch.messages, *produced)
            if isinstance(m, AssistantResponse) and m.metadata.get("run_id") == run.run_id
        )
        rest = wire_remainder(printed, last.text)
        if rest:
            produced.append(
                wire_message(
                    rest,
                    stream=last.stream,
                    run_id=run.run_id,
                    branch_id=branch.id,
                    user=branch.user,
                    whole=last.text,
                )
            )
    await close_open_wire_calls(store, run.run_id, records)
    return len(records), len(rest)


def _note(cli: Reconciliation | None, session: str | None) -> str | None:
    """The one thing to say before a resume: the CLI's record of the session was not read."""
    if cli is None or cli.status != "unreconciled":
        return None
    return (
        f"the CLI's own session record was not read ({cli.reason}): resuming session {session} "
        "may show the model turns this log does not hold"
    )


def _close_tools(branch: Any, run: _Open, unanswered: Iterable[Any], user: str) -> list[AnyMessage]:
    """An error ``ActionResponse`` for every tool call of the run left without its result."""
    closed: list[AnyMessage] = []
    for request in unanswered:
        if branch.state.response_for(request.id) is not None:
            continue
        span = _range(request) or (0, 0)
        closed.append(
            ActionResponse.create(
                request,
                error=_TOOL_LOST,
                sender=user,
                recipient=branch.id,
                metadata={"run_id": run.run_id, "chunk_range": list(span), "interrupted": True},
            )
        )
    return closed


async def _recover_run(
    store: EventStore, run: _Open, buffer: Buffer | None, ended: bool
) -> RecoveredRun | None:
    """Recover one run, step by step: each step takes what the one before it established.

    1. ``_complete_stream``: the run stream, read once and completed from the buffer;
    2. ``reconcile_with_cli``: a CLI run whose CLI kept its own session record gets what only
       that record holds appended to its stream (source-marked), before anything is materialized;
    3. ``_close_run``: the chunk rules replayed, what is missing recorded, the run closed.
    """
    if ended:
        # Its terminal is written: its stream is closed with it, so nothing is appended to it
        # (run.ended counts the chunks the run recorded); what only the buffer holds is reported.
        if buffer is not None:
            await _refuse_after_end(store, run.run_id, buffer)
        return None
    chunks = await _complete_stream(store, run.run_id, buffer)
    cli: Reconciliation | None = None
    if run.lifecycle:
        cli = await reconcile_with_cli(
            store, run.run_id, run.provider, run.started_at, [c for c, _ in chunks.items]
        )
        if cli is not None:
            chunks.items.extend((c, None) for c in cli.appended)
    return await _close_run(store, run, chunks, cli)


async def _refuse_after_end(store: EventStore, run_id: str, buffer: Buffer) -> None:
    """Note the buffered chunks an ended run's stream lacks: never imported, reported by line."""
    stored = await store.stream_version(f"run-{run_id}")
    late = sorted({c.seq: c for c in buffer.chunks if c.seq > stored}.values(), key=lambda c: c.seq)
    buffer.complete = not late
    if late:
        buffer.problem(
            late[0].line_number,
            f"run {run_id} has ended: chunks {late[0].seq}..{late[-1].seq} ({len(late)}) not imported "
            "(a run's stream is closed by its terminal)",
        )


# -------------------------------------------------------------------------------------- recover


async def recover(store: EventStore, persist_dir: str | os.PathLike[str] | None = None) -> RecoveryReport:
    """Import leftover stream buffers and close every run a crash left open.

    Args:
        store: The store (opened with ``catalogue_upcasters()`` ideally).
        persist_dir: Where ``stream_persist`` buffers are (default: as ``run`` chooses it).

    Returns:
        What was imported, recorded, removed, skipped and reported; a run whose recovery
        failed is in ``failed``, and the others are recovered all the same.

    Raises:
        StoreError: the store cannot be read at all (the scan for open runs failed).
    """
    await store.head()  # opens a lazily opened store, so that its store_id is known
    directory = Path(persist_dir) if persist_dir is not None else default_persist_dir(store)
    paths = sorted(directory.glob("*.jsonl")) if directory.is_dir() else []
    here = store_location(store)
    problems: list[BufferProblem] = []
    skipped: list[str] = []
    buffers: dict[str, Buffer] = {}
    live: set[str] = set()
    try:
        for path in paths:
            opened = await anyio.to_thread.run_sync(open_buffer, path, store.store_id, here)
            if opened == IN_USE and (names := parse_buffer_name(path)) is not None:
                live.add(names[1])  # its run is streaming: not crashed
            if isinstance(opened, Buffer):
                await check_branch(store, opened)
                if opened.refused is None and opened.run_id not in buffers:
                    buffers[opened.run_id] = opened
                    continue
                opened.release()
                opened = opened.refused or "a second buffer of the same run"
            problems.append(BufferProblem(str(path), 0, opened))
            skipped.append(str(path))
        await _apply_openings(store, buffers)
        return await _recover_all(store, directory, buffers, live, problems, skipped, [str(p) for p in paths])
    finally:
        for buffer in buffers.values():
            buffer.release()


async def _apply_openings(store: EventStore, buffers: dict[str, Buffer]) -> None:
    """Record the opening a buffer carries when the store lacks its run's ``run.started``.

    A writer that forwards chunks before it commits its run's opening (``turnlog proxy``)
    journals that opening in the buffer's header; when it died before the commit, the opening
    is appended here, so the run is open in the store and closed like any crashed run. A
    non-streamed call forwarded before its commit is journaled whole (its close included):
    it is recorded here as it would have been.
    """
    waiting = {b.run_id: b for b in buffers.values() if b.header is not None and b.header.opening}
    if not waiting:
        return
    async for event in store.read_all(types=["run.started"], stream_prefix="branch-"):
        waiting.pop(str(event.data.get("run_id")), None)  # committed before the crash
    for buffer in waiting.values():
        try:
            await _append_opening(store, buffer)
        except (TurnlogError, ValueError) as exc:
            buffer.problem(0, f"its opening could not be recorded: {exc}")


async def _append_opening(store: EventStore, buffer: Buffer) -> None:
    """Append the buffer's opening to its branch, as the writer's kernel would have."""
    assert buffer.header is not None and buffer.header.opening is not None
    datas: list[EventData] = []
    for item in buffer.header.opening:
        schema = CATALOGUE.get(item["type"])
        if schema is None:
            raise ValueError(f"the opening holds an unknown event type {item['type']!r}")
        datas.append(schema.model_validate(item["data"]))
    if not any(isinstance(d, RunStarted) and d.run_id == buffer.run_id for d in datas):
        raise ValueError("the opening holds no run.started of the run")
    stream = f"branch-{buffer.branch_id}"
    exists = await store.stream_version(stream) > 0
    meta = {"branch_id": buffer.branch_id, "run_id": buffer.run_id, "session_id": None}
    events = []
    if isinstance(datas[0], BranchCreated):
        created, datas = datas[0], datas[1:]
        if created.branch_id != buffer.branch_id:
            raise ValueError(f"the opening creates branch {created.branch_id}, not {buffer.branch_id}")
        if not exists:  # else another call created it meanwhile
            # a branch created with its first run's events belongs to no run itself (as the kernel)
            events.append(new_event(created, meta={"branch_id": buffer.branch_id, "session_id": None}))
    events += new_events(datas, meta=meta)
    await store.append(stream, events, ANY if exists else NO_STREAM)


async def _recover_all(
    store: EventStore,
    directory: Path,
    buffers: dict[str, Buffer],
    live: set[str],
    problems: list[BufferProblem],
    skipped: list[str],
    paths: list[str],
) -> RecoveryReport:
    open_runs, ended = await _open_runs(store)
    alive = [
        LiveRun(r.branch_id, r.run_id, r.verb, BUFFER_LOCKED) for r in open_runs.values() if r.run_id in live
    ]
    for run_id in live:
        open_runs.pop(run_id, None)
    # The lease is asked only now, after the scan: a run that started after it is not in
    # open_runs, and a run whose lease is free now has no writer that could still close it.
    leased = await held_leases(store, [run_lease_key(run_id) for run_id in open_runs])
    for run_id, run in list(open_runs.items()):
        if run_lease_key(run_id) in leased:
            alive.append(LiveRun(run.branch_id, run_id, run.verb, LEASE_HELD))
            del open_runs[run_id]
    alive_ids = {r.run_id for r in alive}
    for run_id, buffer in buffers.items():
        if run_id in alive_ids:
            continue  # its writer still commits its chunks
        if run_id not in open_runs:
            # Ended, or without a lifecycle of its own (nested in another run): chunks and messages only.
            open_runs[run_id] = _Open(buffer.branch_id, run_id, "run", "", "", None, False)
    runs: list[RecoveredRun] = []
    failed: list[RunRecoveryError] = []
    removed: list[str] = []
    kept: list[str] = []
    for run in open_runs.values():
        found = buffers.get(run.run_id)
        try:
            done = await _recover_run(store, run, found, run.run_id in ended)
            if found is not None:
                left = await anyio.to_thread.run_sync(dispose, found)
                (kept if left else removed).append(left or str(found.path))
        except RunClosed:
            # Its writer closed it after the scan (and then gave up its lease): nothing to do.
            continue
        except (TurnlogError, OSError, ValueError) as exc:
            failed.append(RunRecoveryError(run.branch_id, run.run_id, type(exc).__name__, str(exc)))
            continue
        if done is not None:
            runs.append(done)
    return RecoveryReport(
        persist_dir=str(directory),
        runs=tuple(runs),
        buffers=tuple(paths),
        removed=tuple(removed),
        kept=tuple(kept),
        imported=sum(r.imported for r in runs),
        problems=tuple(
            [
                *problems,
                *(BufferProblem(str(b.path), n, what) for b in buffers.values() for n, what in b.problems),
            ]
        ),
        torn=tuple(str(b.path) for b in buffers.values() if b.torn),
        skipped=tuple(skipped),
        failed=tuple(failed),
        live=tuple(alive),
    )
