"""Faithful fake Claude Code, Codex and Gemini CLIs for tests and demos.

Run as ``python -m turnlog.testing._fake_cli claude|codex|gemini [FAKE OPTIONS] REAL ARGV...``
or ``turnlog fake-cli ...``. The fake validates the real CLI's argv the way the real one
does, prints only what the real CLI prints (NDJSON on stdout, messages on stderr), exits
with the real exit statuses, and keeps sessions in a state directory so that a resume in a
later process finds them (an unknown id fails like the real CLI).

Fake options (before the real argv) and environment variables:

- ``--script FILE`` / ``TURNLOG_FAKE_CLI_SCRIPT`` (a path, or inline JSON starting with
  ``{``): what the agent does (see ``docs/providers.md`` for the format).
- ``--record FILE`` / ``TURNLOG_FAKE_CLI_RECORD``: append a JSON-lines record of the run:
  ``start`` (argv, cwd, pid, pgid, selected environment), every ``stdout`` line as it was
  flushed (with a timestamp), ``stderr`` text, ``grandchild`` pids, ``signal`` and ``exit``.
- ``--state-dir DIR`` / ``TURNLOG_FAKE_CLI_STATE``: where sessions are kept (default: a
  directory under the system temp dir).

This module is the entry point; each CLI speaks from its own module (``_fake_cli_claude``,
``_fake_cli_codex``, ``_fake_cli_gemini``) over the shared runner in ``_fake_cli_runner``.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ._fake_cli_claude import run_claude
from ._fake_cli_codex import run_codex
from ._fake_cli_gemini import run_gemini
from ._fake_cli_runner import (
    ArgvError,
    CLIExit,
    Out,
    Run,
    Sessions,
    load_script,
    own_options,
    selected_env,
    stdin_kind,
)

__all__ = ["CLIS", "RECORD_ENV", "SCRIPT_ENV", "STATE_ENV", "main"]

SCRIPT_ENV = "TURNLOG_FAKE_CLI_SCRIPT"
RECORD_ENV = "TURNLOG_FAKE_CLI_RECORD"
STATE_ENV = "TURNLOG_FAKE_CLI_STATE"
CLIS = ("claude", "codex", "gemini")


def main(argv: Sequence[str] | None = None) -> int:
    """Run a fake CLI: ``claude|codex|gemini [--script F] [--record F] [--state-dir D] REAL ARGV...``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in CLIS:
        sys.stderr.write(f"usage: fake-cli {{{','.join(CLIS)}}} [--script FILE] [--record FILE] ARGV...\n")
        return 2
    cli = args.pop(0)
    try:
        own = own_options(args)
        script = load_script(own.get("script") or os.environ.get(SCRIPT_ENV), cli)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"fake-cli: invalid script or options: {exc}\n")
        return 2
    out = Out(own.get("record") or os.environ.get(RECORD_ENV), float(script.get("delay", 0.0)))
    out.record(
        event="start",
        cli=cli,
        argv=args,
        cwd=os.getcwd(),
        pid=os.getpid(),
        pgid=os.getpgid(0),
        env=selected_env(),
        stdin=stdin_kind(),
    )

    def on_term(signum: int, frame: object) -> None:
        out.record(event="signal", signal="SIGTERM")
        os._exit(143)

    signal.signal(signal.SIGTERM, signal.SIG_IGN if script.get("ignore_sigterm") else on_term)
    state = Path(
        own.get("state_dir") or os.environ.get(STATE_ENV) or Path(tempfile.gettempdir()) / "turnlog-fake-cli"
    )
    run = Run(cli, script, out, Sessions(state, cli))
    runner = {"claude": run_claude, "codex": run_codex, "gemini": run_gemini}[cli]
    try:
        code = runner(args, run)
    except ArgvError as exc:
        out.err(str(exc))
        code = exc.code
    except CLIExit as exc:
        code = exc.code
    out.record(event="exit", code=code)
    return code


if __name__ == "__main__":
    sys.exit(main())
