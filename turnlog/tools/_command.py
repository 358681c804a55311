"""The shape of one ``turnlog`` subcommand, and helpers every command shares."""

from __future__ import annotations

import argparse
import os
import sys
import urllib.parse
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from turnlog.tools._errors import UserError

if TYPE_CHECKING:
    from turnlog.testing._loopback import LoopbackServer

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_STORE",
    "EXIT_USAGE",
    "Command",
    "UserError",
    "add_loopback_arguments",
    "add_store_argument",
    "emit_json",
    "failure",
    "one_line",
    "run_on_store",
    "serve_loopback",
    "store_url",
]

T = TypeVar("T")

EXIT_OK = 0
"""The command did what was asked."""
EXIT_FAILED = 1
"""The command ran and found a problem: ``verify`` or ``replay`` saw one, a model call failed."""
EXIT_USAGE = 2
"""The command line or its input is wrong: an option, a file, a branch, no store at the path."""
EXIT_STORE = 3
"""The store cannot be used: unreachable, damaged, not a store, or written by a newer turnlog."""
EXIT_INTERNAL = 4
"""An unexpected error: a bug in turnlog (``--debug`` or ``TURNLOG_DEBUG=1`` shows the traceback)."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C)."""

_MAX_LINE = 600


def one_line(text: str) -> str:
    """``text`` on one line (whitespace runs collapsed), cut at a readable length."""
    line = " ".join(text.split())
    return line if len(line) <= _MAX_LINE else line[: _MAX_LINE - 3] + "..."


def failure(exc: BaseException) -> tuple[int, str]:
    """The exit status and the one-line message of an error that ended a command.

    ``UserError`` and turnlog's input errors (a ``TurnlogError`` that is also a
    ``ValueError`` or ``LookupError``) are usage errors; the store's other errors mean the
    store cannot be used; other turnlog errors (a provider, a kernel rule) mean the command
    failed; anything else is a bug.
    """
    from turnlog.eventstore import StoreError, StoreNotFound, TurnlogError
    from turnlog.projections import ProjectionError

    message = one_line(str(exc)) or type(exc).__name__
    if isinstance(exc, UserError):
        return EXIT_USAGE, message
    if isinstance(exc, TurnlogError):
        if isinstance(exc, ValueError | LookupError | ImportError | StoreNotFound):
            return EXIT_USAGE, message
        if isinstance(exc, StoreError | ProjectionError):
            return EXIT_STORE, message
        return EXIT_FAILED, f"{type(exc).__name__}: {message}"
    return EXIT_INTERNAL, f"unexpected error: {type(exc).__name__}: {message}"


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


def run_on_store(fn: Callable[[argparse.Namespace], Coroutine[Any, Any, T]], args: argparse.Namespace) -> T:
    """Run a command's coroutine ``fn(args)`` on the store ``args.store`` names; return its result.

    On a SQLite store it runs without an event loop (``turnlog.eventstore.run_inline``): the
    store reads inline, so a read awaits nothing a loop must deliver, and the command spares
    the import of asyncio and anyio and the start of a loop (about a quarter of a short
    command's process). Other stores (PostgreSQL's driver needs a loop) run under ``anyio.run``.
    """
    if store_url(args.store).partition("://")[0].lower() == "sqlite":
        from turnlog.eventstore import run_inline

        return run_inline(fn, args)
    import anyio

    return anyio.run(fn, args)


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


def add_loopback_arguments(parser: argparse.ArgumentParser, *, api_key_help: str) -> None:
    """Add ``--port``, ``--host``, ``--api-key`` and ``--record``: the options of a fake server."""
    parser.add_argument("--port", type=int, default=0, help="port to listen on; 0 picks a free one (default)")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    parser.add_argument("--api-key", default=None, help=api_key_help)
    parser.add_argument("--record", default=None, help="append every received request to this JSONL file")


def serve_loopback(server: LoopbackServer, args: argparse.Namespace) -> int:
    """Run a fake server until interrupted, after printing ``<name> listening on <base URL>``.

    The first line of output is the contract with whoever started the command: the base URL.
    A port that cannot be bound is exit status 1 with one line on stderr.
    """
    import asyncio  # here, not at the top: every command's start pays for what this module imports

    async def serve() -> None:
        await server.start()
        print(f"{server.name} listening on {server.base_url}", flush=True)
        await server.serve_forever()

    try:
        asyncio.run(serve())
    except OSError as exc:
        print(
            f"turnlog {server.name}: cannot listen on {args.host}:{args.port}: {exc.strerror}",
            file=sys.stderr,
        )
        return 1
    return 0
