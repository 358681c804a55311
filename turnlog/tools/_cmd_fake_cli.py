"""``turnlog fake-cli``: run a fake Claude Code, Codex or Gemini CLI (for tests and demos)."""

from __future__ import annotations

import argparse

from turnlog.testing._fake_cli import CLIS, main

from ._command import Command

__all__ = ["COMMAND"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cli", choices=CLIS, help="which CLI to imitate")
    parser.add_argument(
        "argv",
        nargs=argparse.REMAINDER,
        help="[--script FILE] [--record FILE] [--state-dir DIR] then the real CLI's arguments",
    )


def _run(args: argparse.Namespace) -> int:
    return main([args.cli, *args.argv])


COMMAND = Command(
    name="fake-cli",
    help="run a fake claude/codex/gemini CLI that prints the real NDJSON",
    description=(
        "Imitate a CLI agent: validate its argv like the real one, print exactly its NDJSON on "
        "stdout, exit with its exit statuses, keep sessions for --resume, and follow a script "
        "(--script FILE or $TURNLOG_FAKE_CLI_SCRIPT). $TURNLOG_FAKE_CLI_RECORD names a JSON-lines "
        "record of the argv, environment and every line printed."
    ),
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog fake-cli claude --script reply.json -p hello --output-format stream-json --verbose",
)
