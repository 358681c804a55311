"""Errors raised by ``turnlog.tools``: the command and the loopback fakes.

The whole tree is drawn in ``docs/errors.md``; this module's part of it::

    TurnlogError                      (turnlog._errors)
    └── UsageError                    (ValueError)
        ├── UserError                 a mistake at the terminal: printed as one line, exit status 2
        └── ScriptError               a fake-server script cannot be read: names file and entry

The store the UI opens read-only refuses writes with ``turnlog.tools.ui.WriteRefused``.
"""

from __future__ import annotations

from turnlog._errors import TurnlogError, UsageError

__all__ = ["ScriptError", "TurnlogError", "UsageError", "UserError"]


class UserError(UsageError):
    """A mistake of the person at the terminal: printed as one line, exit status 2."""


class ScriptError(UsageError):
    """A fake-server script that cannot be read; the message names the file and entry."""
