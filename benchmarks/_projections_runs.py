"""The run-heavy branch of ``turnlog bench projections``: snapshot size and time travel with many runs.

An agent branch is mostly runs: a ``run.started``, an instruction, an answer and a
``run.ended`` per turn, so a branch of 100k events holds 25k runs. Every snapshot head has to
give the runs of its state. This measures, side by side on one such branch in one SQLite
file:

- ``keyframe_every=1``: every head holds every run, link and override (the format before
  deltas), O(runs) per head;
- ``keyframe_every=16`` (the default): one head in 16 holds them all, the others only what
  changed since the head before.

For each: the time ``write_snapshots`` takes (every 1,000 versions), the bytes of snapshot
payload next to the bytes of event payload, and a time-travel session from an empty
``StateCache`` (every query timed, the first included).
"""

from __future__ import annotations

import random
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

from turnlog.eventstore import NewEvent, open_store
from turnlog.projections import (
    AssistantResponse,
    BranchCreated,
    Instruction,
    MessageAdded,
    RunEnded,
    RunStarted,
    SnapshotPolicy,
    StateCache,
    Usage,
    new_event,
    rebuild,
    write_snapshots,
)

__all__ = ["measure_runs"]

_VARIANTS = (1, 16)


def _events(size: int, text_bytes: int) -> list[NewEvent]:
    out = [new_event(BranchCreated(branch_id="runs", name="runs"))]
    turn = 0
    while len(out) < size:
        run_id = f"run-{turn}"
        turn += 1
        out += [
            new_event(RunStarted(run_id=run_id, verb="chat", provider="openai", model="gpt-4.1-mini")),
            new_event(MessageAdded(message=Instruction.create("q" * text_bytes), run_id=run_id)),
            new_event(MessageAdded(message=AssistantResponse.create("a" * text_bytes), run_id=run_id)),
            new_event(
                RunEnded(
                    run_id=run_id,
                    verb="chat",
                    duration_ms=12.5,
                    usage=Usage(input_tokens=120, output_tokens=40),
                )
            ),
        ]
    return out[:size]


def _payload_bytes(path: Path, table: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"SELECT coalesce(sum(length(data)), 0) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50": round(statistics.median(ordered), 2),
        "p95": round(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 2),
        "first": round(values[0], 2),
    }


async def measure_runs(size: int, workdir: Path, queries: int, seed: int, text_bytes: int) -> dict[str, Any]:
    """Write a run-heavy branch of ``size`` events and measure both snapshot variants on it."""
    path = workdir / f"projections-runs-{size}.db"
    events = _events(size, text_bytes)
    runs = sum(1 for e in events if e.type == "run.started")
    rng = random.Random(seed)
    targets = [rng.randint(1, size) for _ in range(queries)]
    report: dict[str, Any] = {"events": size, "runs": runs, "variants": {}}
    async with open_store(f"sqlite:///{path}") as store:
        for i in range(0, len(events), 20_000):
            await store.append("branch-runs", events[i : i + 20_000])
        del events
        report["event_payload_bytes"] = _payload_bytes(path, "events")
        for keyframe_every in _VARIANTS:
            await store.delete_snapshots()
            t0 = time.perf_counter()
            await write_snapshots(store, "runs", SnapshotPolicy(every=1000, keyframe_every=keyframe_every))
            write_s = time.perf_counter() - t0
            session = StateCache(store)
            spent = []
            for v in targets:
                t0 = time.perf_counter()
                state = await rebuild(store, "runs", at_version=v, cache=session)
                spent.append((time.perf_counter() - t0) * 1000)
                assert state.version == v
            report["variants"][str(keyframe_every)] = {
                "write_s": round(write_s, 2),
                "snapshot_payload_bytes": _payload_bytes(path, "snapshots"),
                "session_ms": _percentiles(spent),
            }
    return report
