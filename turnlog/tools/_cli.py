"""The ``turnlog`` command: one entry point, one module per subcommand."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from ._command import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, Command, failure
from ._version import __version__

__all__ = ["main"]

# Each module exposes ``COMMAND: Command``. The order here is the order of ``--help``.
_COMMAND_MODULES: tuple[str, ...] = (
    "turnlog.tools._cmd_demo",
    "turnlog.tools._cmd_chat",
    "turnlog.tools._cmd_run",
    "turnlog.tools._cmd_bench",
    "turnlog.tools._cmd_fake_openai",
    "turnlog.tools._cmd_fake_upstream",
    "turnlog.tools._cmd_fake_cli",
    "turnlog.tools._cmd_branches",
    "turnlog.tools._cmd_log",
    "turnlog.tools._cmd_show",
    "turnlog.tools._cmd_diff",
    "turnlog.tools._cmd_fork",
    "turnlog.tools._cmd_replay",
    "turnlog.tools._cmd_verify",
    "turnlog.tools._cmd_recover",
    "turnlog.tools._cmd_tail",
    "turnlog.tools._cmd_migrate",
    "turnlog.tools._cmd_stats",
    "turnlog.tools._cmd_export",
    "turnlog.tools._cmd_import",
    "turnlog.tools._cmd_ui",
    "turnlog.tools._cmd_proxy",
    "turnlog.tools._cmd_redact",
    "turnlog.tools._cmd_forget",
)


def _commands() -> list[Command]:
    return [importlib.import_module(name).COMMAND for name in _COMMAND_MODULES]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the whole command."""
    parser = argparse.ArgumentParser(
        prog="turnlog",
        description="turnlog: an event-sourced conversation store and operation kernel for LLM agents.",
        epilog="Run 'turnlog COMMAND --help' for a command's options and an example.\n"
        "Exit status: 0 ok; 1 a check found a problem or a model call failed; 2 a wrong option, "
        "input, branch or store path; 3 the store cannot be used (unreachable, damaged, newer); "
        "4 an unexpected error (--debug shows its traceback); 130 interrupted.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"turnlog {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full traceback of an unexpected error (also: TURNLOG_DEBUG=1)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in _commands():
        epilog = f"example:\n  {command.example}" if command.example else None
        p = sub.add_parser(
            command.name,
            help=command.help,
            description=command.description or command.help,
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.add_arguments(p)
        p.set_defaults(_run=command.run)
    return parser


def _leaf(exc: BaseException) -> BaseException:
    """The one error inside nested exception groups (a task group that failed once)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the reader having gone away (``| head``) stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # pragma: no cover - stdout is not a file descriptor
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status.

    Every error ends as one line on stderr (``turnlog COMMAND: what went wrong``) and an exit
    status that says what kind of error it was (see ``turnlog --help``); with ``--debug`` or
    ``TURNLOG_DEBUG=1`` an unexpected one also shows its traceback.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return EXIT_OK
    debug = args.debug or os.environ.get("TURNLOG_DEBUG", "") not in ("", "0")
    try:
        return int(args._run(args))
    except BaseException as raised:
        exc = _leaf(raised)
        if isinstance(exc, KeyboardInterrupt):
            return EXIT_INTERRUPTED
        if isinstance(exc, BrokenPipeError):  # piped into `head`: the reader had enough
            _silence_stdout()
            return EXIT_OK
        if isinstance(exc, SystemExit | GeneratorExit) or not isinstance(exc, Exception):
            raise
        status, message = failure(exc)
        if status == EXIT_INTERNAL:
            if debug:
                raise
            message += " (a bug in turnlog; run again with --debug for the traceback)"
        print(f"turnlog {args.command}: {message}", file=sys.stderr)
        return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
