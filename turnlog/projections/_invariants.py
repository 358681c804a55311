"""The log's invariants, beyond its hashes: what ``verify`` checks of the conversation domain.

A hash chain proves that nothing was altered after it was written; it cannot prove that what
was written makes sense. These invariants can, each found as a ``Problem`` with the stream
and version of the event at fault:

- a run has at most one terminal (``run.ended`` / ``run.failed``): a second one is damage;
- a terminal follows its run's ``run.started`` in the same branch stream;
- no chunk of a run (``stream.chunk`` in ``run-<run_id>``) is recorded after its run's
  terminal, and a ``run.ended`` that counts its chunks counts all of them;
- a fork's ``branch.forked`` names a parent stream that holds its ``parent_version``.

Run ids are unique across the store, so runs are keyed by id alone. A payload that was
redacted (no readable ``run_id``) is skipped: its event is proven by the chain, not here.

Example::

    problems = await check_invariants(store)            # every stream
    problems = await check_invariants(store, "branch-…")  # what concerns one stream
"""

from __future__ import annotations

from dataclasses import dataclass, field

from turnlog.eventstore import EventStore, Problem, RecordedEvent

__all__ = ["check_invariants"]

_BRANCH_TYPES = ("run.started", "run.ended", "run.failed", "branch.forked")
_TERMINALS = ("run.ended", "run.failed")


@dataclass(slots=True)
class _Run:
    started: RecordedEvent | None = None
    terminal: RecordedEvent | None = None
    problems: list[Problem] = field(default_factory=list)


def _problem(event: RecordedEvent, what: str) -> Problem:
    return Problem(event.stream, event.version, what, event.position)


async def check_invariants(store: EventStore, stream: str | None = None) -> tuple[Problem, ...]:
    """The violations of the log's invariants (see the module docstring), in log order.

    Args:
        store: The store.
        stream: Only report problems of this stream (the whole log is read all the same:
            a run's events span two streams).
    """
    runs: dict[str, _Run] = {}
    problems: list[Problem] = []
    forks: list[RecordedEvent] = []
    async for event in store.read_all(types=_BRANCH_TYPES, stream_prefix="branch-"):
        if event.type == "branch.forked":
            forks.append(event)
            continue
        run_id = event.data.get("run_id")
        if not isinstance(run_id, str):
            continue  # redacted, or not a run event this code can read
        run = runs.setdefault(run_id, _Run())
        if event.type == "run.started":
            if run.started is not None:
                problems.append(_problem(event, f"run {run_id} started a second time"))
            else:
                run.started = event
            continue
        if run.terminal is not None:
            first = run.terminal
            problems.append(
                _problem(
                    event,
                    f"run {run_id} has a second terminal ({event.type}); it was closed by "
                    f"{first.type} at {first.stream} v{first.version}",
                )
            )
            continue
        run.terminal = event
        if run.started is None or run.started.stream != event.stream:
            problems.append(
                _problem(event, f"{event.type} of run {run_id}, which has no run.started before it")
            )
    for run_id, run in runs.items():
        if run.terminal is not None:
            problems.extend(await _chunks_after(store, run_id, run.terminal))
    for event in forks:
        problems.extend(await _fork_parent(store, event))
    problems.sort(key=lambda p: (p.position or 0, p.stream, p.version))
    return tuple(p for p in problems if stream is None or p.stream == stream)


async def _chunks_after(store: EventStore, run_id: str, terminal: RecordedEvent) -> list[Problem]:
    """Chunks recorded after the run's terminal, or beyond the count its ``run.ended`` gives."""
    counted = terminal.data.get("chunks") if terminal.type == "run.ended" else None
    counted = counted if isinstance(counted, int) and not isinstance(counted, bool) else None
    found: list[Problem] = []
    # Newest first, and only as far back as the chunks that can be at fault: usually one read.
    async for chunk in store.read_stream(f"run-{run_id}", backwards=True):
        late = chunk.position > terminal.position
        extra = counted is not None and chunk.version > counted
        if not (late or extra):
            break
        why = (
            f"recorded after its run's terminal ({terminal.type} at {terminal.stream} v{terminal.version})"
            if late
            else f"beyond the {counted} chunks that {terminal.type} at {terminal.stream} v{terminal.version} counts"
        )
        found.append(_problem(chunk, f"chunk {chunk.version} of run {run_id} {why}"))
    return found[::-1]


async def _fork_parent(store: EventStore, event: RecordedEvent) -> list[Problem]:
    parent = event.data.get("parent_stream")
    version = event.data.get("parent_version")
    if not isinstance(parent, str) or not isinstance(version, int):
        return []
    held = await store.stream_version(parent)
    if 1 <= version <= held:
        return []
    return [
        _problem(event, f"fork of {parent} at version {version}, which does not exist ({parent} has {held})")
    ]
