"""``turnlog bench startup``: the whole-process time of short commands next to a bare Python.

Each command is started as a fresh process (``python -m turnlog ...``) and timed from
outside, start-up and exit included, the way a user or a script sees it:

- ``python -c pass``: the floor (the interpreter's own start);
- ``turnlog --version`` and ``turnlog --help``: the command line alone;
- ``turnlog show BRANCH --at N``: open a store and read a branch at a past version;
- ``turnlog verify``: check the whole store (hash chains, SQLite integrity, invariants).

The commands run in turn (one of each, then again) so that a change in the machine's speed
touches all of them alike; each figure is the median of its runs, wall time and CPU time (user
+ system of the child). ``show --at`` and ``verify`` read the store ``turnlog demo`` leaves; without
``--store`` the benchmark runs the demo into a temporary directory first (not timed). The
children run without ``PYTHONDONTWRITEBYTECODE``, so the warm-up writes the bytecode they load.

Targets: ``--version`` and ``--help`` at most 0.15 s, ``show --at`` at most 0.3 s (wall).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from turnlog.tools._command import emit_json

from ._options import at_least

__all__ = ["add_arguments", "run"]

TARGETS_S = {"version": 0.15, "help": 0.15, "show --at": 0.3}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runs", type=at_least(1), default=10, help="timed runs of each command (default 10)"
    )
    parser.add_argument(
        "--store",
        default=None,
        help="a store that `turnlog demo` wrote (default: run the demo into a temporary directory)",
    )
    parser.add_argument("--branch", default="demo", help="the branch `show` reads (default: demo)")
    parser.add_argument("--at", type=at_least(1), default=6, help="the version `show --at` reads (default 6)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _time(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``argv`` (it must exit 0)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _demo_store(directory: Path, env: dict[str, str]) -> str:
    path = directory / "demo.db"
    done = subprocess.run(
        [sys.executable, "-m", "turnlog", "demo", "--store", str(path)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"turnlog demo failed ({done.returncode}): {done.stderr[-500:]}")
    return str(path)


def _measure(args: argparse.Namespace, store: str, env: dict[str, str]) -> dict[str, Any]:
    python = sys.executable
    commands = {
        "python -c pass": [python, "-c", "pass"],
        "version": [python, "-m", "turnlog", "--version"],
        "help": [python, "-m", "turnlog", "--help"],
        "show --at": [python, "-m", "turnlog", "show", args.branch, "--at", str(args.at), "--store", store],
        "verify": [python, "-m", "turnlog", "verify", "--store", store],
    }
    for argv in commands.values():  # warm-up: bytecode compiled, files in the page cache
        _time(argv, env)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(args.runs):
        for name, argv in commands.items():
            samples[name].append(_time(argv, env))
    rows = {
        name: {
            "wall_s": statistics.median(w for w, _ in runs),
            "cpu_s": statistics.median(c for _, c in runs),
        }
        for name, runs in samples.items()
    }
    floor = rows["python -c pass"]["wall_s"]
    for row in rows.values():
        row["x_python"] = row["wall_s"] / floor
    return {
        "benchmark": "startup",
        "runs": args.runs,
        "commands": {name: " ".join(argv[1:]) for name, argv in commands.items()},
        "rows": rows,
        "targets": {
            f"{name} <= {limit} s": rows[name]["wall_s"] <= limit for name, limit in TARGETS_S.items()
        },
    }


def _print(report: dict[str, Any]) -> None:
    print(f"whole process, median of {report['runs']} runs each, commands in turn")
    print(f"{'command':<14} {'wall s':>8} {'cpu s':>8} {'x python':>9}")
    for name, row in report["rows"].items():
        print(f"{name:<14} {row['wall_s']:>8.3f} {row['cpu_s']:>8.3f} {row['x_python']:>8.1f}x")
    for name, ok in report["targets"].items():
        print(f"target {name}: {'met' if ok else 'MISSED'}")


def run(args: argparse.Namespace) -> int:
    env = dict(os.environ)
    # The warm-up run writes the bytecode every later run loads, as an installed package has it
    # (pip compiles on install); with PYTHONDONTWRITEBYTECODE set every run would compile
    # turnlog again, about 0.1 to 0.2 s of CPU that no user pays.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-startup-") as tmp:
        store = args.store or _demo_store(Path(tmp), env)
        report = _measure(args, store, env)
    if args.json:
        emit_json(report)
    else:
        _print(report)
    return 0
