"""The ``turnlog`` command: one entry point, one module per subcommand."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from ._command import Command, UserError

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
)


def _commands() -> list[Command]:
    return [importlib.import_module(name).COMMAND for name in _COMMAND_MODULES]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the whole command."""
    parser = argparse.ArgumentParser(
        prog="turnlog",
        description="turnlog: an event-sourced conversation store and operation kernel for LLM agents.",
        epilog="Run 'turnlog COMMAND --help' for a command's options and an example.",
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 0
    try:
        return int(args._run(args))
    except UserError as exc:
        print(f"turnlog {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
