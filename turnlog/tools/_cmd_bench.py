"""``turnlog bench NAME``: benchmarks that run peers side by side and print ratios.

The benchmarks are not part of the installed package: they live in ``benchmarks/`` at the top
of a source checkout (next to ``turnlog/``), import private modules of several layers and
optional peers (eventsourcing, lionagi), and are run from there. An installed wheel has no
``benchmarks/``: the command says so and how to get a checkout.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import turnlog

from ._command import Command, UserError

__all__ = ["BENCHMARKS", "COMMAND", "benchmarks_dir"]

# name -> module of benchmarks/ exposing add_arguments(parser) and run(args) -> int
BENCHMARKS: dict[str, str] = {
    "append": "_append",
    "projections": "_projections",
    "kernel": "_kernel",
    "stream": "_stream",
    "analytics": "_analytics",
    "subscribe": "_subscribe",
    "ui": "_ui",
    "writers": "_writers",
    "otel": "_otel",
    "startup": "_startup",
    "proxy": "_proxy",
    "timetravel": "_timetravel",
    "storage": "_storage",
}


def benchmarks_dir() -> Path | None:
    """The checkout's ``benchmarks/`` next to the ``turnlog`` package, or None (an installed wheel)."""
    found = Path(turnlog.__file__).resolve().parent.parent / "benchmarks"
    return found if (found / "__init__.py").is_file() else None


def _package() -> ModuleType | None:
    """The checkout's ``benchmarks`` package, imported from its own directory.

    It is loaded by path (not found on ``sys.path``) so that another distribution's top-level
    ``benchmarks`` cannot stand in for it, and registered under ``benchmarks`` so that its
    modules import each other as usual.
    """
    loaded = sys.modules.get("benchmarks")
    where = benchmarks_dir()
    if where is None:
        return None
    if loaded is not None and Path(str(loaded.__file__)).resolve().parent == where:
        return loaded
    spec = importlib.util.spec_from_file_location(
        "benchmarks", where / "__init__.py", submodule_search_locations=[str(where)]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules["benchmarks"] = package
    spec.loader.exec_module(package)
    return package


def _load(name: str | None) -> Any:
    if name is None or _package() is None:
        raise UserError(
            f"turnlog bench runs from a source checkout: there is no benchmarks/ next to "
            f"{Path(turnlog.__file__).resolve().parent} (clone the repository and pip install -e '.[dev,bench]')"
        )
    return importlib.import_module(f"benchmarks.{BENCHMARKS[name]}")


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    if _package() is None:
        # No checkout: take any words, so that running a benchmark says what is missing
        # (rather than argparse refusing options it cannot know).
        parser.add_argument("argv", nargs=argparse.REMAINDER, help="NAME and its options (needs a checkout)")
        parser.set_defaults(bench=None)
        return
    sub = parser.add_subparsers(dest="bench", metavar="NAME", required=True)
    for name, module in BENCHMARKS.items():
        loaded = importlib.import_module(f"benchmarks.{module}")
        # The one-line help is what the module's docstring says after "``turnlog bench NAME``: ".
        first = (loaded.__doc__ or "").strip().splitlines()[0] if loaded.__doc__ else ""
        about = (
            first.split("``: ", 1)[1].rstrip(".").replace("``", "")
            if "``: " in first
            else f"benchmark {name}"
        )
        p = sub.add_parser(name, help=about, description=first or None)
        loaded.add_arguments(p)


def _run(args: argparse.Namespace) -> int:
    return int(_load(args.bench).run(args))


COMMAND = Command(
    name="bench",
    help="run a benchmark beside its peers (from a source checkout; turnlog bench --help lists them)",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog bench append --json",
)
