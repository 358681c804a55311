"""Errors raised by ``turnlog.tools.ui`` to its callers.

The whole tree is drawn in ``docs/errors.md``; this module's part of it::

    TurnlogError                      (turnlog._errors)
    └── StoreError                    (turnlog.eventstore)
        └── WriteRefused              a write reached a store the app opened read-only

The error pages the app answers with (``PageError`` and its subclasses, in
``_http_status.py``) are not turnlog errors: they never leave the app.
"""

from __future__ import annotations

from turnlog._errors import TurnlogError
from turnlog.eventstore import StoreError

__all__ = ["TurnlogError", "WriteRefused"]


class WriteRefused(StoreError):
    """A write reached a store opened read-only (``turnlog ui`` without ``--allow-writes``)."""
