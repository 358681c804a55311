"""``turnlog bench projections``: fold rate, time-travel latency and memory of branch rebuilds.

For each size (default 10k, 100k and 1M events) it writes one branch into a fresh SQLite file
(``branch.created`` then message.added events whose message text is ``--text-bytes`` long,
appended in batches) and measures, side by side in one process run:

- ``fold``: decode + validate + fold only, over events already read (events/s);
- ``rebuild``: ``rebuild(store, id, snapshots=False)``: read from SQLite, decode, fold (events/s),
  with a ``StateCache`` attached (it keeps a checkpoint every 64 events);
- ``fold, second pass``: the same fold again once the first state is gone, so the process
  reuses memory it already has instead of asking the kernel for fresh pages (the first pass
  needs one fresh page per ~5 folded messages; on some virtual machines that costs more than
  the fold itself). Both passes report user and system CPU time;
- ``time travel, cached``: ``rebuild(at_version=random)`` with the ``StateCache`` that the full
  rebuild filled: what a long-lived process (kernel, notebook, viewer) pays once warm;
- ``time travel, session``: the same queries with store snapshots (``--snapshot-every``, by
  default the kernel's 1,000) and a ``StateCache`` that starts empty, every query timed,
  the first one included: what a time-travel session in a fresh process pays;
- ``time travel, store snapshots only``: single queries with no cache at all, each in a
  process with nothing in memory: what one ``turnlog show --at`` pays;
- peak RSS of the process after each size;
- the peer, when eventsourcing is installed (``pip install 'turnlog[bench]'``), for sizes up to
  ``--peer-max``: the same messages as events of an eventsourcing aggregate in its SQLite
  persistence, replayed (next to our ``rebuild``) and read at the same past versions with its
  snapshots (next to our single queries with snapshots only). See ``_es_conversation``.

Targets: fold >= 200k events/s; p95 time travel <= 20 ms at 1M; time travel flat (within 2x)
from 10k to 1M.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import resource
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import orjson

from turnlog.eventstore import EventStore, NewEvent, RecordedEvent, open_store, uuid7
from turnlog.projections import (
    AssistantResponse,
    BranchCreated,
    BranchState,
    Instruction,
    MessageAdded,
    SnapshotPolicy,
    StateCache,
    fold,
    new_event,
    rebuild,
    write_snapshots,
)
from turnlog.tools._command import emit_json

from ._options import at_least, sizes
from ._projections_runs import measure_runs

__all__ = ["add_arguments", "run"]

TARGETS = {"fold_events_per_s": 200_000, "p95_ms_at_1m": 20.0, "flatness": 2.0}
_WORDS = "the model reads a file then calls a tool and answers with a short plan for the next step".split()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sizes",
        type=sizes,
        default="10000,100000,1000000",
        help="comma-separated branch sizes in events (default 10k,100k,1M)",
    )
    parser.add_argument(
        "--queries", type=at_least(1), default=200, help="cached time-travel queries per size (default 200)"
    )
    parser.add_argument(
        "--cold-queries",
        type=at_least(1),
        default=5,
        help="uncached time-travel queries per size (default 5)",
    )
    parser.add_argument(
        "--snapshot-every",
        type=at_least(1),
        default=1000,
        help="snapshot policy of the session queries, in versions (default 1000, as the kernel)",
    )
    parser.add_argument(
        "--run-heavy",
        type=at_least(0),
        default=100_000,
        help="events of the run-heavy branch (snapshot size with many runs; default 100k, 0: skip)",
    )
    parser.add_argument(
        "--peer-max",
        type=at_least(0),
        default=100_000,
        help="largest size the eventsourcing peer runs at (default 100k; 0: no peer)",
    )
    parser.add_argument(
        "--text-bytes", type=at_least(1), default=200, help="message text length (default 200)"
    )
    parser.add_argument("--batch", type=at_least(1), default=20_000, help="events per append (default 20000)")
    parser.add_argument("--seed", type=int, default=1, help="random seed of the queried versions")
    parser.add_argument(
        "--dir", default=None, help="where the SQLite files go (default: a temporary directory)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


@dataclass(slots=True)
class SizeResult:
    """Every figure measured for one branch size."""

    events: int
    payload_bytes: int
    write_s: float = 0.0
    fold_rate: float = 0.0
    fold_cpu_rate: float = 0.0
    fold_user_s: float = 0.0
    fold_sys_s: float = 0.0
    fold_faults: int = 0
    fold2_rate: float = 0.0
    fold2_user_s: float = 0.0
    fold2_sys_s: float = 0.0
    fold2_faults: int = 0
    rebuild_rate: float = 0.0
    snapshots: int = 0
    snapshot_s: float = 0.0
    cold_ms: list[float] = field(default_factory=list)
    session_ms: list[float] = field(default_factory=list)
    peer: dict[str, Any] | None = None
    warm_ms: list[float] = field(default_factory=list)
    warm_cpu_ms: list[float] = field(default_factory=list)
    peak_rss_mb: float = 0.0

    def summary(self) -> dict[str, Any]:
        """The figures as a JSON object."""
        return {
            "events": self.events,
            "payload_bytes": self.payload_bytes,
            "write_s": round(self.write_s, 2),
            "fold_events_per_s": round(self.fold_rate),
            "fold_events_per_cpu_s": round(self.fold_cpu_rate),
            "fold_user_s": round(self.fold_user_s, 2),
            "fold_sys_s": round(self.fold_sys_s, 2),
            "fold_page_faults": self.fold_faults,
            "fold_second_pass_events_per_s": round(self.fold2_rate),
            "fold_second_pass_user_s": round(self.fold2_user_s, 2),
            "fold_second_pass_sys_s": round(self.fold2_sys_s, 2),
            "fold_second_pass_page_faults": self.fold2_faults,
            "rebuild_events_per_s": round(self.rebuild_rate),
            "snapshots_written": self.snapshots,
            "snapshot_write_s": round(self.snapshot_s, 2),
            "time_travel_store_snapshots_ms": _percentiles(self.cold_ms),
            "time_travel_session_ms": _percentiles(self.session_ms),
            "time_travel_session_first_ms": round(self.session_ms[0], 2) if self.session_ms else None,
            "time_travel_cached_ms": _percentiles(self.warm_ms),
            "time_travel_cached_cpu_ms": _percentiles(self.warm_cpu_ms),
            "peak_rss_mb": round(self.peak_rss_mb),
            "eventsourcing": self._peer(),
        }

    def _peer(self) -> dict[str, Any] | None:
        if self.peer is None:
            return None
        travel = _percentiles(self.peer["time_travel_ms"])
        ours = _percentiles(self.cold_ms)
        return {
            "write_s": round(self.peer["write_s"], 2),
            "replay_events_per_s": round(self.peer["replay_events_per_s"]),
            "snapshot_every": self.peer["snapshot_every"],
            "snapshot_write_s": round(self.peer["snapshot_write_s"], 2),
            "time_travel_ms": travel,
            "rebuild_vs_replay": round(self.rebuild_rate / self.peer["replay_events_per_s"], 2),
            "time_travel_p50_peer_over_ours": round(travel["p50"] / ours["p50"], 2)
            if ours.get("p50")
            else None,
        }


def _percentiles(values: Sequence[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 2),
        "p95": round(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 2),
        "max": round(ordered[-1], 2),
    }


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _events(size: int, text_bytes: int, rng: random.Random) -> list[NewEvent]:
    """branch.created, then alternating instructions and answers of ``text_bytes`` characters."""
    words = [rng.choice(_WORDS) for _ in range(text_bytes)]
    base = " ".join(words)[:text_bytes]
    templates = [
        dict(new_event(MessageAdded(message=Instruction.create(base))).data),
        dict(new_event(MessageAdded(message=AssistantResponse.create(base))).data),
    ]
    out = [new_event(BranchCreated(branch_id="bench", name="bench"))]
    stamp = templates[0]["message"]["created_at"]
    for i in range(size - 1):
        tpl = templates[i % 2]
        message = dict(tpl["message"])
        message["id"] = str(uuid7())
        message["created_at"] = stamp
        out.append(NewEvent("message.added", {"message": message, "run_id": None}))
    return out


async def _write(store: EventStore, events: list[NewEvent], batch: int) -> None:
    for i in range(0, len(events), batch):
        await store.append("branch-bench", events[i : i + batch])


@dataclass(slots=True)
class _FoldPass:
    rate: float
    cpu_rate: float
    user_s: float
    sys_s: float
    faults: int


async def _fold_rate(store: EventStore, page: int = 50_000) -> _FoldPass:
    """Decode + fold rate over events already in memory (reading is not timed)."""
    state: BranchState | None = None
    folded, spent, cpu, user, system, faults = 0, 0.0, 0.0, 0.0, 0.0, 0
    start = 1
    while True:
        events: list[RecordedEvent] = [
            e async for e in store.read_stream("branch-bench", start, start + page - 1)
        ]
        if not events:
            break
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0, c0 = time.perf_counter(), time.process_time()
        state = fold(events, state)
        spent += time.perf_counter() - t0
        cpu += time.process_time() - c0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        user += r1.ru_utime - r0.ru_utime
        system += r1.ru_stime - r0.ru_stime
        faults += r1.ru_minflt - r0.ru_minflt
        folded += len(events)
        start += page
        del events
    return _FoldPass(folded / spent, folded / cpu, user, system, faults)


async def _measure(size: int, args: argparse.Namespace, workdir: Path) -> SizeResult:
    rng = random.Random(args.seed)
    events = _events(size, args.text_bytes, rng)
    result = SizeResult(size, len(orjson.dumps(dict(events[-1].data))))
    url = f"sqlite:///{workdir / f'projections-{size}.db'}"
    async with open_store(url) as store:
        t0 = time.perf_counter()
        await _write(store, events, args.batch)
        result.write_s = time.perf_counter() - t0
        del events
        gc.collect()

        first = await _fold_rate(store)
        gc.collect()
        second = await _fold_rate(store)
        gc.collect()
        result.fold_rate, result.fold_cpu_rate = first.rate, first.cpu_rate
        result.fold_user_s, result.fold_sys_s, result.fold_faults = first.user_s, first.sys_s, first.faults
        result.fold2_rate = second.rate
        result.fold2_user_s, result.fold2_sys_s, result.fold2_faults = (
            second.user_s,
            second.sys_s,
            second.faults,
        )

        # the full rebuild also fills the cache used by the cached time-travel queries below
        cache = StateCache(store)
        t0 = time.perf_counter()
        state = await rebuild(store, "bench", snapshots=False, cache=cache)
        result.rebuild_rate = size / (time.perf_counter() - t0)
        assert state.version == size and len(state) == size - 1
        del state
        gc.collect()

        targets = [rng.randint(1, size) for _ in range(max(args.queries, args.cold_queries))]
        for v in targets[: args.queries]:
            t0, c0 = time.perf_counter(), time.process_time()
            got = await rebuild(store, "bench", at_version=v, cache=cache)
            result.warm_ms.append((time.perf_counter() - t0) * 1000)
            result.warm_cpu_ms.append((time.process_time() - c0) * 1000)
            assert got.version == v and len(got) == v - 1
        del cache, got
        gc.collect()

        t0 = time.perf_counter()
        result.snapshots = await write_snapshots(store, "bench", SnapshotPolicy(every=args.snapshot_every))
        result.snapshot_s = time.perf_counter() - t0
        gc.collect()

        session = StateCache(store)
        for v in targets[: args.queries]:
            t0 = time.perf_counter()
            got = await rebuild(store, "bench", at_version=v, cache=session)
            result.session_ms.append((time.perf_counter() - t0) * 1000)
            assert got.version == v and len(got) == v - 1
        del session, got
        gc.collect()

        for v in targets[: args.cold_queries]:
            t0 = time.perf_counter()
            got = await rebuild(store, "bench", at_version=v)
            result.cold_ms.append((time.perf_counter() - t0) * 1000)
            assert got.version == v
            del got
        gc.collect()
    result.peak_rss_mb = _peak_rss_mb()
    if 0 < size <= args.peer_max and _peer_available():
        messages = [
            dict(e.data["message"]) for e in _events(size, args.text_bytes, random.Random(args.seed))[1:]
        ]
        path = workdir / f"eventsourcing-{size}.db"
        queries = targets[: args.cold_queries]
        result.peer = await anyio.to_thread.run_sync(lambda: _peer_measure(messages, path, queries))
        del messages
        gc.collect()
    return result


def _peer_available() -> bool:
    from ._es_conversation import AVAILABLE

    return AVAILABLE


def _peer_measure(messages: list[dict[str, Any]], path: Path, targets: list[int]) -> dict[str, Any]:
    from ._es_conversation import measure

    return dict(measure(messages, path, targets))


def _report(results: list[SizeResult]) -> dict[str, Any]:
    smallest, largest = results[0], results[-1]

    def p95(values: list[float]) -> float:
        return float(_percentiles(values).get("p95", 0.0))

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 2) if b else None

    flat = ratio(p95(largest.warm_ms), p95(smallest.warm_ms))
    flat_session = ratio(p95(largest.session_ms), p95(smallest.session_ms))
    return {
        "sizes": [r.summary() for r in results],
        "targets": TARGETS,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "checks": {
            "fold_rate_min": round(min(r.fold_rate for r in results)),
            "fold_cpu_rate_min": round(min(r.fold_cpu_rate for r in results)),
            "fold_rate_met": min(r.fold_rate for r in results) >= TARGETS["fold_events_per_s"],
            "fold_second_pass_rate_min": round(min(r.fold2_rate for r in results)),
            "fold_second_pass_met": min(r.fold2_rate for r in results) >= TARGETS["fold_events_per_s"],
            "p95_cached_ms_largest": p95(largest.warm_ms),
            "p95_met": p95(largest.warm_ms) <= TARGETS["p95_ms_at_1m"],
            "flatness_cached_p95": flat,
            "flat_met": flat is not None and flat <= TARGETS["flatness"],
            "p95_session_ms_largest": p95(largest.session_ms),
            "p95_session_met": p95(largest.session_ms) <= TARGETS["p95_ms_at_1m"],
            "flatness_session_p95": flat_session,
            "flat_session_met": flat_session is not None and flat_session <= TARGETS["flatness"],
        },
    }


def _print(report: dict[str, Any]) -> None:
    print(
        f"{'events':>9} {'fold ev/s':>10} {'user/sys s':>11} {'2nd pass':>9} {'user/sys s':>11} "
        f"{'rebuild':>8} {'RSS MB':>7}"
    )
    for s in report["sizes"]:
        print(
            f"{s['events']:>9} {s['fold_events_per_s']:>10,} "
            f"{s['fold_user_s']:>5.2f}/{s['fold_sys_s']:<5.2f} {s['fold_second_pass_events_per_s']:>9,} "
            f"{s['fold_second_pass_user_s']:>5.2f}/{s['fold_second_pass_sys_s']:<5.2f} "
            f"{s['rebuild_events_per_s']:>8,} {s['peak_rss_mb']:>7}"
        )
    print()
    print(
        f"{'events':>9} {'time travel p50/p95 ms:':<24} {'cached':>13} {'session':>15} "
        f"{'(first)':>9} {'snapshots only':>18}"
    )
    for s in report["sizes"]:
        warm, session, cold = (
            s["time_travel_cached_ms"],
            s["time_travel_session_ms"],
            s["time_travel_store_snapshots_ms"],
        )
        first = s["time_travel_session_first_ms"] or 0.0
        print(
            f"{s['events']:>9} {'':<24} {warm.get('p50', 0):>6.2f}/{warm.get('p95', 0):<6.2f} "
            f"{session.get('p50', 0):>7.2f}/{session.get('p95', 0):<7.2f} {first:>9.1f} "
            f"{cold.get('p50', 0):>8.1f}/{cold.get('p95', 0):<9.1f}"
        )
    peers = [s for s in report["sizes"] if s["eventsourcing"] is not None]
    if peers:
        print()
        print(
            f"{'events':>9} {'eventsourcing replay ev/s':>26} {'turnlog rebuild':>16} {'ratio':>6} "
            f"{'its time travel p50/p95 ms':>27} {'ours (snapshots only)':>22} {'ratio':>6}"
        )
        for s in peers:
            es, cold = s["eventsourcing"], s["time_travel_store_snapshots_ms"]
            travel = es["time_travel_ms"]
            print(
                f"{s['events']:>9} {es['replay_events_per_s']:>26,} {s['rebuild_events_per_s']:>16,} "
                f"{es['rebuild_vs_replay']:>5.2f}x "
                f"{travel.get('p50', 0):>13.1f}/{travel.get('p95', 0):<13.1f} "
                f"{cold.get('p50', 0):>10.1f}/{cold.get('p95', 0):<11.1f} "
                f"{es['time_travel_p50_peer_over_ours'] or 0:>5.2f}x"
            )
        print(
            "eventsourcing: snapshots of the whole aggregate every size/10 versions (ours: deltas "
            "every --snapshot-every); it does not validate the messages, turnlog does"
        )
    elif report["sizes"] and report["sizes"][0]["events"]:
        print("\neventsourcing peer: not run (not installed, or --peer-max below every size)")
    heavy = report.get("run_heavy")
    if heavy:
        print(
            f"\nrun-heavy branch: {heavy['events']:,} events, {heavy['runs']:,} runs, "
            f"{heavy['event_payload_bytes'] / 1e6:.1f} MB of event payload; snapshots every 1,000 versions"
        )
        print(
            f"{'keyframe_every':>15} {'write s':>8} {'snapshot MB':>12} {'session p50/p95 ms':>20} {'(first)':>9}"
        )
        for name, v in heavy["variants"].items():
            ms = v["session_ms"]
            print(
                f"{name:>15} {v['write_s']:>8.2f} {v['snapshot_payload_bytes'] / 1e6:>12.1f} "
                f"{ms['p50']:>9.2f}/{ms['p95']:<10.2f} {ms['first']:>9.1f}"
            )
    c = report["checks"]
    print(f"load average during the run: {report['load_average']}")
    print(
        f"fold >= 200k ev/s: first pass {'yes' if c['fold_rate_met'] else 'no'} (min {c['fold_rate_min']:,}), "
        f"second pass {'yes' if c['fold_second_pass_met'] else 'no'} (min {c['fold_second_pass_rate_min']:,})"
    )
    print(
        f"time travel p95 at the largest size <= 20 ms: cached {'yes' if c['p95_met'] else 'no'} "
        f"({c['p95_cached_ms_largest']} ms), session {'yes' if c['p95_session_met'] else 'no'} "
        f"({c['p95_session_ms_largest']} ms); flat within 2x: cached {'yes' if c['flat_met'] else 'no'} "
        f"(ratio {c['flatness_cached_p95']}), session {'yes' if c['flat_session_met'] else 'no'} "
        f"(ratio {c['flatness_session_p95']})"
    )


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; return 0."""
    sizes = sorted(int(s) for s in args.sizes.split(",") if s.strip())
    if not sizes or min(sizes) < 2:
        raise SystemExit("--sizes needs sizes >= 2")

    async def main(workdir: Path) -> tuple[list[SizeResult], dict[str, Any] | None]:
        results = [await _measure(size, args, workdir) for size in sizes]
        heavy = None
        if args.run_heavy > 0:
            heavy = await measure_runs(args.run_heavy, workdir, args.queries, args.seed, args.text_bytes)
        return results, heavy

    if args.dir is not None:
        results, heavy = anyio.run(main, Path(args.dir))
    else:
        with tempfile.TemporaryDirectory(prefix="turnlog-bench-") as tmp:
            results, heavy = anyio.run(main, Path(tmp))
    report = _report(results)
    report["run_heavy"] = heavy
    if args.json:
        emit_json(report)
    else:
        _print(report)
    return 0
