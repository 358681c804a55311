"""The ``turnlog`` command: one entry point, one module per subcommand."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Collection, Sequence

from turnlog._version import __version__

from ._command import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, Command, failure

__all__ = ["main"]

# name -> (module exposing ``COMMAND: Command``, its one-line help). The order here is the order
# of ``--help``. The help is repeated here so that ``turnlog --help`` and ``--version`` import
# no command module, and ``turnlog COMMAND`` imports only its own: a command's imports (the
# kernel, the projections, the fakes) cost far more than the Python start itself.
# tests/tools/test_cli_startup.py checks that each help equals its module's ``COMMAND.help``.
_COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "turnlog.tools._cmd_demo",
        "the main job, offline: verbs, a killed stream recovered and resumed, time travel, replay, stats",
    ),
    "chat": (
        "turnlog.tools._cmd_chat",
        "send one message to an OpenAI-compatible model and record the exchange",
    ),
    "run": (
        "turnlog.tools._cmd_run",
        "stream one turn of a CLI agent (claude, codex, gemini), shown live and recorded",
    ),
    "bench": (
        "turnlog.tools._cmd_bench",
        "run a benchmark beside its peers (from a source checkout; turnlog bench --help lists them)",
    ),
    "fake-openai": (
        "turnlog.tools._cmd_fake_openai",
        "serve a scripted OpenAI-compatible Chat Completions API on 127.0.0.1",
    ),
    "fake-upstream": (
        "turnlog.tools._cmd_fake_upstream",
        "serve scripted Anthropic, OpenAI Responses and Gemini APIs on 127.0.0.1 (for the real CLIs)",
    ),
    "fake-cli": (
        "turnlog.tools._cmd_fake_cli",
        "run a fake claude/codex/gemini CLI that prints the real NDJSON",
    ),
    "branches": ("turnlog.tools._cmd_branches", "list branches: id, name, version, fork origin, last change"),
    "log": ("turnlog.tools._cmd_log", "show a branch's timeline: version, position, time, type, summary"),
    "show": ("turnlog.tools._cmd_show", "show a branch's state now, --at a version or --at-time a moment"),
    "diff": (
        "turnlog.tools._cmd_diff",
        "show messages added/removed, runs and provider sessions changed between two versions",
    ),
    "fork": (
        "turnlog.tools._cmd_fork",
        "start a new branch from a branch as it was at a version (the prefix is referenced, not copied)",
    ),
    "replay": (
        "turnlog.tools._cmd_replay",
        "audit-replay a branch from its events; --execute re-runs its verbs against recorded responses",
    ),
    "verify": (
        "turnlog.tools._cmd_verify",
        "check hash chains, version gaps, integrity and the log's invariants; non-zero exit on any problem",
    ),
    "recover": (
        "turnlog.tools._cmd_recover",
        "import leftover stream buffers and close runs a crash left open",
    ),
    "tail": (
        "turnlog.tools._cmd_tail",
        "print the last events of the log; --follow keeps printing live ones",
    ),
    "migrate": (
        "turnlog.tools._cmd_migrate",
        "copy a store to another backend (ids, versions, positions, hashes, snapshots) and verify it",
    ),
    "stats": (
        "turnlog.tools._cmd_stats",
        "tokens, cost, latency and TTFT percentiles, errors and tools, by model, day, tool, ...",
    ),
    "export": (
        "turnlog.tools._cmd_export",
        "write the log as JSON Lines (every envelope field) or Parquet event and fact tables",
    ),
    "otel": (
        "turnlog.tools._cmd_otel",
        "export runs as OpenTelemetry traces over OTLP/HTTP (otel export)",
    ),
    "import": (
        "turnlog.tools._cmd_import",
        "load a JSON Lines export into a store, unchanged (ids, times, hashes); all or nothing",
    ),
    "ui": (
        "turnlog.tools._cmd_ui",
        "serve a time-travel debugger for the store in the browser (needs turnlog[ui])",
    ),
    "proxy": (
        "turnlog.tools._cmd_proxy",
        "serve the LLM APIs on loopback and record every model call that passes",
    ),
    "redact": (
        "turnlog.tools._cmd_redact",
        "erase event payloads (bytes gone, chain still provable); see docs/redaction.md",
    ),
    "forget": (
        "turnlog.tools._cmd_forget",
        "erase all conversation content of a branch: messages, model calls, errors, chunks (the structure stays)",
    ),
}


def _command(name: str) -> Command:
    return importlib.import_module(_COMMANDS[name][0]).COMMAND  # type: ignore[no-any-return]


def _chosen(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names, if any.

    That is its first word that is not an option (no top-level option takes a value).
    """
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in _COMMANDS else None
    return None


def build_parser(load: Collection[str] | None = None, *, list_all: bool = True) -> argparse.ArgumentParser:
    """The argument parser of the whole command.

    Args:
        load: The commands whose modules and options to load; the others are listed with their
            help only, which is all ``turnlog --help`` shows of them. None loads every command.
        list_all: Whether to list the commands not loaded. Only the top-level help shows them:
            a run of one command spares building a parser for each of the others (about 3 ms).
    """
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
    for name, (_, help_text) in _COMMANDS.items():
        if load is not None and name not in load:
            if list_all:
                sub.add_parser(name, help=help_text)
            continue
        command = _command(name)
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
    words = sys.argv[1:] if argv is None else list(argv)
    # With no command named (``--help``, ``--version``, a typo) no command module is loaded.
    chosen = _chosen(words)
    # the other commands are listed only where the top-level help may be printed
    helped = chosen is None or any(w in ("-h", "--help") for w in words[: words.index(chosen)])
    parser = build_parser(load=[chosen] if chosen else [], list_all=helped)
    args = parser.parse_args(words)
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
