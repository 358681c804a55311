"""``turnlog bench timetravel``: a fresh process opens the store and reads a branch at a past version.

Per size (100 / 500 / 2,000 turns by default) each peer writes one conversation of that many
turns (an instruction and an answer of 200 characters each) into its own SQLite file:

- **turnlog**: ``Branch.communicate`` with a model that answers at once (so the store holds
  what an agent's store holds: runs, model calls, the kernel's snapshots);
- **LangGraph** (``pip install 'turnlog[bench]'``): a one-node ``StateGraph`` over
  ``MessagesState`` with ``SqliteSaver``, one ``invoke`` per turn on one thread.

Then, in rounds, each peer runs in a fresh Python process (the order rotates every round, so a
drift of the machine's speed touches both alike). The child imports its library and LangGraph's
compiles its graph (not timed), then times opening the store and reading the state at the middle
of the conversation: turnlog's ``open_store`` + ``rebuild(at_version=)`` (what ``turnlog show
--at`` does), LangGraph's ``sqlite3.connect`` + ``SqliteSaver`` + ``get_state`` at the
checkpoint of that turn. Whatever either imports lazily while it reads is timed. Each child
also reports the CPU time of that part (user + system, all its threads), printed as a p50
beside the wall figures: on a machine shared with other jobs the wall times mostly measure
the wait for a core. It prints its time and the number of messages it read (checked: both
peers must read the same number). The figures are p50 / p95 over the rounds, with the ratio.

Target: turnlog at most 0.5x LangGraph's time at p50 and 0.7x at p95, at every size.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from turnlog.tools._command import emit_json

from ._options import add_format, at_least, sqlite_url

__all__ = ["add_arguments", "run"]

TARGET_P50 = 0.5
TARGET_P95 = 0.7
_TEXT = 200

_TURNLOG_CHILD = """
import sys, time, anyio
from turnlog.eventstore import open_store
from turnlog.projections import catalogue_upcasters, rebuild

async def main(url, branch_id, version):
    started, cpu = time.perf_counter(), time.process_time()
    async with open_store(url, upcasters=catalogue_upcasters()) as store:
        state = await rebuild(store, branch_id, at_version=version)
    print(time.perf_counter() - started, time.process_time() - cpu, len(state.messages))

anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
"""

_LANGGRAPH_CHILD = """
import sqlite3, sys, time
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph

def answer(state):
    return {}

builder = StateGraph(MessagesState)
builder.add_node("answer", answer)
builder.add_edge(START, "answer")
# compiled before the clock starts (about 0.2 s of lazy imports): only the store is timed
graph = builder.compile(checkpointer=SqliteSaver(sqlite3.connect(":memory:")))
started, cpu = time.perf_counter(), time.process_time()
conn = sqlite3.connect(sys.argv[1], check_same_thread=False)
graph.checkpointer = SqliteSaver(conn)
config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": sys.argv[2]}}
state = graph.get_state(config)
conn.close()
print(time.perf_counter() - started, time.process_time() - cpu, len(state.values["messages"]))
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sizes",
        default="100,500,2000",
        help="conversation lengths in turns, comma-separated (default 100,500,2000)",
    )
    parser.add_argument(
        "--rounds", type=at_least(2), default=15, help="fresh processes per peer and size (default 15)"
    )
    add_format(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _sizes(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() and int(p) >= 2 for p in parts):
        raise SystemExit(f"--sizes {text!r}: give whole numbers of turns of 2 or more, e.g. 100,500,2000")
    return sorted({int(p) for p in parts})


class _InstantModel:
    """A chat model that answers at once with the same 200-character text."""

    provider = "test"
    model = "instant"
    endpoint = "test"

    async def invoke(self, request: Any) -> Any:
        from turnlog.kernel.models import ModelResponse, Usage

        return ModelResponse(text="a" * _TEXT, raw={}, usage=Usage(10, 1, None), provider="test")


def _question(i: int) -> str:
    return f"question {i} ".ljust(_TEXT, "q")


async def _write_turnlog(path: Path, turns: int, format_version: int | None = None) -> tuple[str, int]:
    """Write ``turns`` turns; return the branch id and the version after the middle turn."""
    from turnlog.eventstore import open_store
    from turnlog.kernel import Branch
    from turnlog.projections import catalogue_upcasters

    middle = 0
    url = sqlite_url(path, format_version)
    async with open_store(url, upcasters=catalogue_upcasters()) as store:
        branch = Branch(store=store, system="You are a benchmark.", chat_model=_InstantModel())
        for i in range(turns):
            await branch.communicate(_question(i))
            if i + 1 == turns // 2:
                middle = branch.version
        return branch.id, middle


def _write_langgraph(path: Path, turns: int) -> str:
    """Write ``turns`` turns; return the id of the checkpoint after the middle turn."""
    import sqlite3

    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph

    def answer(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content="a" * _TEXT)]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        graph = builder.compile(checkpointer=SqliteSaver(conn))
        config: Any = {"configurable": {"thread_id": "t"}}
        middle = ""
        for i in range(turns):
            graph.invoke({"messages": [HumanMessage(content=_question(i))]}, config)
            if i + 1 == turns // 2:
                middle = str(graph.get_state(config).config["configurable"]["checkpoint_id"])
        return middle
    finally:
        conn.close()


def _child(argv: list[str]) -> tuple[float, float, int]:
    env = dict(os.environ)
    # The warm-up writes the bytecode the timed children load, as an installed package has it:
    # with PYTHONDONTWRITEBYTECODE set, every module a read imports on first use (inside the
    # timed part) would be compiled again in each child, a cost no user pays.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run([sys.executable, "-c", *argv], capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the child failed ({done.returncode}): {done.stderr[-800:]}")
    took, cpu, count = done.stdout.split()
    return float(took) * 1000, float(cpu) * 1000, int(count)


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _measure(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    rows: dict[int, dict[str, Any]] = {}
    for turns in _sizes(args.sizes):
        ours_path, theirs_path = directory / f"turnlog-{turns}.db", directory / f"langgraph-{turns}.db"
        branch_id, version = anyio.run(_write_turnlog, ours_path, turns, args.format)
        checkpoint = _write_langgraph(theirs_path, turns)
        peers = {
            "turnlog": [_TURNLOG_CHILD, f"sqlite:///{ours_path}", branch_id, str(version)],
            "langgraph": [_LANGGRAPH_CHILD, str(theirs_path), checkpoint],
        }
        samples: dict[str, list[float]] = {name: [] for name in peers}
        cpu: dict[str, list[float]] = {name: [] for name in peers}
        counts: dict[str, set[int]] = {name: set() for name in peers}
        names = list(peers)
        for name in names:  # warm-up: bytecode compiled, files in the page cache
            _child(peers[name])
        for r in range(args.rounds):
            for name in names[r % 2 :] + names[: r % 2]:  # rotated
                took, used, count = _child(peers[name])
                samples[name].append(took)
                cpu[name].append(used)
                counts[name].add(count)
        if counts["turnlog"] != counts["langgraph"]:
            raise RuntimeError(f"the peers read different states at {turns} turns: {counts}")
        row: dict[str, Any] = {
            name: {
                "p50_ms": statistics.median(s),
                "p95_ms": _p95(s),
                "cpu_p50_ms": statistics.median(cpu[name]),
            }
            for name, s in samples.items()
        }
        row["messages"] = counts["turnlog"].pop()
        row["ratio_p50"] = row["turnlog"]["p50_ms"] / row["langgraph"]["p50_ms"]
        row["ratio_p95"] = row["turnlog"]["p95_ms"] / row["langgraph"]["p95_ms"]
        row["ratio_cpu_p50"] = row["turnlog"]["cpu_p50_ms"] / row["langgraph"]["cpu_p50_ms"]
        rows[turns] = row
    return {
        "benchmark": "timetravel",
        "rounds": args.rounds,
        "rows": rows,
        "targets": {
            f"p50 turnlog/langgraph <= {TARGET_P50} at {turns}": row["ratio_p50"] <= TARGET_P50
            for turns, row in rows.items()
        }
        | {
            f"p95 turnlog/langgraph <= {TARGET_P95} at {turns}": row["ratio_p95"] <= TARGET_P95
            for turns, row in rows.items()
        },
    }


def _print(report: dict[str, Any]) -> None:
    print(
        f"cold time travel: a fresh process opens the store and reads the state at the middle turn; "
        f"{report['rounds']} rounds, peers rotated"
    )
    print(
        f"{'turns':>6} {'messages':>9} {'turnlog p50/p95 ms':>20} {'langgraph p50/p95 ms':>22} {'ratio p50/p95':>15}"
    )
    for turns, row in report["rows"].items():
        ours, theirs = row["turnlog"], row["langgraph"]
        print(
            f"{turns:>6} {row['messages']:>9} {ours['p50_ms']:>11.1f} / {ours['p95_ms']:<6.1f} "
            f"{theirs['p50_ms']:>13.1f} / {theirs['p95_ms']:<6.1f} "
            f"{row['ratio_p50']:>6.2f}x / {row['ratio_p95']:.2f}x "
            f"{ours['cpu_p50_ms']:>8.1f} / {theirs['cpu_p50_ms']:.1f} ({row['ratio_cpu_p50']:.2f}x)"
        )
    for name, ok in report["targets"].items():
        print(f"target {name}: {'met' if ok else 'MISSED'}")


def run(args: argparse.Namespace) -> int:
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401
    except ImportError:
        print("LangGraph is not installed: pip install 'turnlog[bench]'", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-timetravel-") as tmp:
        report = _measure(args, Path(tmp))
    if args.json:
        emit_json(json.loads(json.dumps(report)))
    else:
        _print(report)
    return 0
