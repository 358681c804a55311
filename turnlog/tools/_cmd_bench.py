"""``turnlog bench NAME``: benchmarks that run peers side by side and print ratios."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from ._command import Command, UserError

__all__ = ["BENCHMARKS", "COMMAND"]

# name -> module under turnlog.tools.bench exposing add_arguments(parser) and run(args) -> int
BENCHMARKS: dict[str, str] = {
    "append": "turnlog.tools.bench._append",
    "projections": "turnlog.tools.bench._projections",
    "kernel": "turnlog.tools.bench._kernel",
    "stream": "turnlog.tools.bench._stream",
    "analytics": "turnlog.tools.bench._analytics",
    "subscribe": "turnlog.tools.bench._subscribe",
    "ui": "turnlog.tools.bench._ui",
    "writers": "turnlog.tools.bench._writers",
    "otel": "turnlog.tools.bench._otel",
    "startup": "turnlog.tools.bench._startup",
    "proxy": "turnlog.tools.bench._proxy",
    "timetravel": "turnlog.tools.bench._timetravel",
}


def _load(name: str) -> Any:
    try:
        return importlib.import_module(BENCHMARKS[name])
    except ModuleNotFoundError as exc:
        if exc.name == BENCHMARKS[name]:
            raise UserError(f"benchmark {name!r} is not built yet") from exc
        raise


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", metavar="NAME", required=True)
    for name, module in BENCHMARKS.items():
        p = sub.add_parser(name, help=f"benchmark {name}")
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        mod.add_arguments(p)


def _run(args: argparse.Namespace) -> int:
    return int(_load(args.bench).run(args))


COMMAND = Command(
    name="bench",
    help="run a benchmark (append, subscribe, writers, projections, kernel, stream, analytics, otel, startup, proxy)",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog bench append --json",
)
