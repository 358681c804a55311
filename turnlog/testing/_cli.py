"""The command line that starts a fake agent CLI, for ``TURNLOG_CLAUDE_BIN`` and friends."""

from __future__ import annotations

import shlex
import sys
from typing import Literal

__all__ = ["fake_cli_command"]


def fake_cli_command(cli: Literal["claude", "codex", "gemini"]) -> str:
    """The shell words that run the fake ``cli`` in a child process (this Python, ``-m``).

    Set it as ``TURNLOG_CLAUDE_BIN`` (``TURNLOG_CODEX_BIN``, ``TURNLOG_GEMINI_BIN``) and the
    kernel's CLI models start the fake instead of the real agent: it validates the real argv,
    prints the real NDJSON and keeps sessions for ``--resume``. What it answers comes from
    ``TURNLOG_FAKE_CLI_SCRIPT`` (a path, or inline JSON; see ``docs/testing.md``).
    """
    return shlex.join([sys.executable, "-m", "turnlog.testing._fake_cli", cli])
