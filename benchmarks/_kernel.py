"""``turnlog bench kernel``: per-turn overhead of ``communicate`` as the history grows.

A zero-latency model answers at once, so what is timed is the kernel: prompt assembly,
the model-call record, three appends per turn (``run.started``; instruction, ``model.called``
and response; ``run.ended``), each durably committed to a SQLite file, the fold and the
observers. It runs at history lengths 0, 100 and 500 turns (``--histories`` picks others,
e.g. ``0,500,2000``); when lionagi is importable, lionagi's ``Branch.communicate`` with its
scripted model runs the same turns in the same process run (up to ``--lionagi-max-history``
turns of history), and the ratios are printed.

Targets: at most 1 ms per turn at 500 turns, at least 10x lionagi at 500 turns, and at most
3x growth from 0 to 500 turns; with 2,000 turns of history: at most 1 ms per turn and at most
1.3x the cost with an empty history (a flat cost per turn).

The timed turns run in blocks; the figure compared is the best block's mean (as ``timeit``
does: other load on the machine only ever adds time), with the median of every turn and
the overall mean printed beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio

from turnlog.eventstore import open_store
from turnlog.kernel import Branch
from turnlog.kernel.models import ModelRequest, ModelResponse, Usage
from turnlog.projections import catalogue_upcasters
from turnlog.tools._command import emit_json

from ._options import Durability, add_format, at_least, sqlite_url

__all__ = ["add_arguments", "run"]

HISTORIES = (0, 100, 500)
TARGET_MS_AT_500 = 1.0
TARGET_MS_AT_2000 = 1.0
TARGET_FLAT_GROWTH = 1.3
TARGET_SPEEDUP = 10.0
TARGET_GROWTH = 3.0


class InstantModel:
    """A chat model that answers at once with the same short text."""

    provider = "test"
    model = "instant"
    endpoint = "test"

    def __init__(self) -> None:
        self._response = ModelResponse(
            text="ok",
            raw={"choices": [{"message": {"content": "ok"}}]},
            usage=Usage(10, 1, None),
            provider="test",
        )

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        return self._response


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--turns", type=at_least(1), default=200, help="timed turns per history length (default 200)"
    )
    parser.add_argument(
        "--lionagi-turns",
        type=at_least(1),
        default=20,
        help="timed lionagi turns per history length (default 20)",
    )
    parser.add_argument(
        "--blocks", type=at_least(1), default=5, help="timed turns are split in this many blocks (default 5)"
    )
    parser.add_argument(
        "--histories",
        type=_histories,
        default=HISTORIES,
        help="history lengths in turns, comma-separated (default 0,100,500; e.g. 0,500,2000)",
    )
    parser.add_argument(
        "--lionagi-max-history",
        type=at_least(0),
        default=500,
        help="longest history lionagi runs at (default 500: its turns grow costly)",
    )
    parser.add_argument("--no-lionagi", action="store_true", help="skip lionagi even when it is installed")
    parser.add_argument(
        "--durability",
        choices=("normal", "full"),
        default="normal",
        help="SQLite durability (default normal)",
    )
    add_format(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _histories(text: str) -> tuple[int, ...]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers of turns, e.g. 0,500,2000")
    return tuple(sorted({int(p) for p in parts}))


async def _time_turns(
    turn: Callable[[int], Awaitable[Any]], history: int, turns: int, blocks: int
) -> dict[str, float]:
    for i in range(history):
        await turn(i)
    gc.collect()
    samples: list[float] = []
    block_means: list[float] = []
    block_cpu: list[float] = []  # CPU per turn: what the kernel costs when other jobs share the cores
    per_block = max(1, turns // max(1, blocks))
    done = history
    while len(samples) < turns:
        block: list[float] = []
        cpu_started = time.process_time()
        for _ in range(min(per_block, turns - len(samples))):
            started = time.perf_counter()
            await turn(done)
            block.append((time.perf_counter() - started) * 1000)
            done += 1
        block_cpu.append((time.process_time() - cpu_started) * 1000 / len(block))
        samples.extend(block)
        block_means.append(statistics.fmean(block))
    return {
        "best_ms": min(block_means),
        "cpu_ms": min(block_cpu),
        "p50_ms": statistics.median(samples),
        "mean_ms": statistics.fmean(samples),
        "turns": turns,
    }


async def _turnlog(
    history: int,
    turns: int,
    blocks: int,
    directory: Path,
    durability: Durability,
    format_version: int | None = None,
) -> dict[str, float]:
    url = sqlite_url(directory / f"kernel-{history}.db", format_version)
    async with open_store(url, upcasters=catalogue_upcasters(), durability=durability) as store:
        branch = Branch(store=store, system="You are a benchmark.", chat_model=InstantModel())
        await branch.save()

        async def turn(i: int) -> Any:
            return await branch.communicate(f"question {i}")

        result = await _time_turns(turn, history, turns, blocks)
        result["events"] = branch.version
        return result


def _lionagi_available() -> bool:
    try:
        import lionagi.testing  # noqa: F401
    except Exception:
        return False
    return True


async def _lionagi(history: int, turns: int, blocks: int, directory: Path) -> dict[str, float]:
    from lionagi.protocols.generic.log import DataLoggerConfig
    from lionagi.testing import TestBranch

    config = DataLoggerConfig(persist_dir=str(directory / "lionagi-logs"), auto_save_on_exit=False)
    branch = TestBranch.from_text(
        ["ok"] * (history + turns + 1), system="You are a benchmark.", log_config=config
    )

    async def turn(i: int) -> Any:
        return await branch.communicate(f"question {i}")

    return await _time_turns(turn, history, turns, blocks)


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    rows: dict[int, dict[str, Any]] = {}
    with_lionagi = not args.no_lionagi and _lionagi_available()
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-kernel-") as tmp:
        directory = Path(tmp)
        for history in args.histories:
            rows[history] = {
                "turnlog": await _turnlog(
                    history, args.turns, args.blocks, directory, args.durability, args.format
                )
            }
            if with_lionagi and history <= args.lionagi_max_history:
                with warnings.catch_warnings(), _quiet(), _cwd(directory):
                    warnings.simplefilter("ignore")
                    rows[history]["lionagi"] = await _lionagi(
                        history, args.lionagi_turns, args.blocks, directory
                    )
    return _report(rows, with_lionagi, args)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    # lionagi logs every dump at INFO; keep the benchmark's output readable.
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(previous)


@contextlib.contextmanager
def _cwd(directory: Path) -> Iterator[None]:
    # lionagi writes relative files (logs) into the current directory; keep them in the temp dir.
    before = Path.cwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(before)


def _report(rows: dict[int, dict[str, Any]], with_lionagi: bool, args: argparse.Namespace) -> dict[str, Any]:
    ours = {h: r["turnlog"]["best_ms"] for h, r in rows.items()}
    first, last = min(ours), max(ours)
    report: dict[str, Any] = {
        "benchmark": "kernel",
        "durability": args.durability,
        "histories": {str(h): r for h, r in rows.items()},
        f"growth_{first}_to_{last}": ours[last] / ours[first],
        f"cpu_growth_{first}_to_{last}": rows[last]["turnlog"]["cpu_ms"] / rows[first]["turnlog"]["cpu_ms"],
        "lionagi": "compared" if with_lionagi else "skipped" if args.no_lionagi else "not installed",
    }
    if 0 in ours and 500 in ours:
        report["growth_0_to_500"] = ours[500] / ours[0]
    compared = {h: r for h, r in rows.items() if "lionagi" in r}
    if with_lionagi and compared:
        report["speedup"] = {
            str(h): r["lionagi"]["best_ms"] / r["turnlog"]["best_ms"] for h, r in compared.items()
        }
    targets: dict[str, bool] = {}
    if 500 in ours:
        targets["ms_per_turn_at_500 <= 1"] = ours[500] <= TARGET_MS_AT_500
    if "growth_0_to_500" in report:
        targets["growth_0_to_500 <= 3"] = report["growth_0_to_500"] <= TARGET_GROWTH
    if 2000 in ours:
        targets["ms_per_turn_at_2000 <= 1"] = ours[2000] <= TARGET_MS_AT_2000
    if 0 in ours and 2000 in ours:
        report["growth_0_to_2000"] = ours[2000] / ours[0]
        targets["growth_0_to_2000 <= 1.3"] = report["growth_0_to_2000"] <= TARGET_FLAT_GROWTH
    if "speedup" in report and "500" in report["speedup"]:
        targets["speedup_at_500 >= 10"] = report["speedup"]["500"] >= TARGET_SPEEDUP
    report["targets"] = targets
    return report


def _print(report: dict[str, Any]) -> None:
    print(f"communicate, zero-latency model, SQLite file ({report['durability']} durability)")
    print("ms per turn: best block mean / median / mean / best block's CPU (user + system)")
    header = f"{'history':>8}  {'turnlog':>32}"
    with_lionagi = "speedup" in report
    if with_lionagi:
        header += f"  {'lionagi':>24}  {'speedup':>8}"
    print(header)
    for history, row in report["histories"].items():
        line = f"{history:>8}  {_figures(row['turnlog']):>32}"
        if with_lionagi and history in report["speedup"]:
            line += f"  {_figures(row['lionagi']):>24}  {report['speedup'][history]:>7.1f}x"
        print(line)
    for key, value in report.items():
        if key.startswith(("growth_", "cpu_growth_")):
            start, _, end = key.removeprefix("cpu_").removeprefix("growth_").partition("_to_")
            what = "CPU growth" if key.startswith("cpu_") else "growth"
            print(f"{what} {start} -> {end} turns: {value:.2f}x")
    if report["lionagi"] == "not installed":
        print("lionagi: not installed (pip install lionagi to compare)")
    for name, ok in report["targets"].items():
        print(f"target {name}: {'met' if ok else 'MISSED'}")


def _figures(result: dict[str, float]) -> str:
    figures = f"{result['best_ms']:.3f} / {result['p50_ms']:.3f} / {result['mean_ms']:.3f}"
    return figures + (f" / {result['cpu_ms']:.3f}" if "cpu_ms" in result else "")


def run(args: argparse.Namespace) -> int:
    report = anyio.run(_main, args)
    if args.json:
        emit_json(report)
    else:
        _print(report)
    return 0
