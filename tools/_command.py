"""The shape of one ``turnlog`` subcommand, and helpers every command shares."""

from __future__ import annotations

import argparse
import os
import sys
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

__all__ = ["Command", "UserError", "add_store_argument", "emit_json", "store_url"]


class UserError(Exception):
    """A mistake of the person at the terminal: printed as one line, exit status 2."""


@dataclass(frozen=True, slots=True)
class Command:
    """A subcommand: its name, one-line help, an example, its arguments and its handler.

    ``run`` receives the parsed arguments and returns the exit status.
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    example: str = ""
    description: str = ""


def add_store_argument(parser: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    """Add ``--store`` (URL or plain path) and, by default, ``--json``."""
    parser.add_argument(
        "--store",
        default=None,
        help="store URL (sqlite:///path.db, postgresql://...) or a plain file path; "
        "default: $TURNLOG_STORE, else ./turnlog.db",
    )
    if json_flag:
        parser.add_argument("--json", action="store_true", help="machine-readable output")


def store_url(value: str | None) -> str:
    """Turn ``--store`` (or its absence) into a store URL."""
    raw = value or os.environ.get("TURNLOG_STORE") or "./turnlog.db"
    if "://" in raw:
        return raw
    # a plain path is a file name as it is: quoted, so that a "?" or "%" in it stays in it
    return f"sqlite:///{urllib.parse.quote(raw, safe='/:')}"


def sqlite_file(url: str) -> Path | None:
    """The file a ``sqlite:///`` URL names (its parameters dropped, its path decoded), else None.

    None for ``sqlite:///:memory:`` and for other schemes.
    """
    if not url.startswith("sqlite:///"):
        return None
    path = urllib.parse.unquote(url.removeprefix("sqlite:///").partition("?")[0])
    return None if path == ":memory:" else Path(path)


def emit_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout."""
    sys.stdout.write(
        orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str).decode() + "\n"
    )
