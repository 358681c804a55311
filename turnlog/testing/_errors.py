"""Errors raised by ``turnlog.testing``: the fake servers' scripts.

The whole tree is drawn in ``docs/errors.md``; this module's part of it::

    TurnlogError                      (turnlog._errors)
    └── UsageError                    (ValueError)
        └── ScriptError               a fake-server script cannot be read: names file and entry

The fake CLIs end with ``CLIExit`` / ``ArgvError`` (``_fake_cli_runner``): exit statuses of a
child process, not errors a caller catches.
"""

from __future__ import annotations

from turnlog._errors import TurnlogError, UsageError

__all__ = ["ScriptError", "TurnlogError", "UsageError"]


class ScriptError(UsageError):
    """A fake-server script that cannot be read; the message names the file and entry."""
