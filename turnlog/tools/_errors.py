"""Errors raised by ``turnlog.tools``: the command line.

The whole tree is drawn in ``docs/errors.md``; this module's part of it::

    TurnlogError                      (turnlog._errors)
    └── UsageError                    (ValueError)
        └── UserError                 a mistake at the terminal: printed as one line, exit status 2
    └── ExportFailed                  an OTLP receiver was unreachable or refused spans: exit status 1

A fake-server script that cannot be read raises ``turnlog.testing.ScriptError``. The store
the UI opens read-only refuses writes with ``turnlog.tools.ui.WriteRefused``.
"""

from __future__ import annotations

from turnlog._errors import TurnlogError, UsageError

__all__ = ["ExportFailed", "TurnlogError", "UsageError", "UserError"]


class UserError(UsageError):
    """A mistake of the person at the terminal: printed as one line, exit status 2."""


class ExportFailed(TurnlogError):
    """An OTLP receiver could not be reached or refused the spans (after the exporter's retries).

    The message names the endpoint without its credentials; what was not acknowledged is sent
    again by the next export (``--follow`` keeps its checkpoint before it).
    """
