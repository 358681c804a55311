"""The root of every error turnlog raises, and the error for a mistake in using it.

This module imports nothing of turnlog, so every layer (the event store, the projections,
the kernel, the providers, the command) can derive its errors from it without importing
another layer. Each layer re-exports both names. The whole tree is drawn in
``docs/errors.md``::

    TurnlogError
    ├── UsageError          the API was used wrongly; nothing was written (ValueError)
    ├── StoreError          turnlog.eventstore
    ├── ProjectionError     turnlog.projections (and its analytics)
    ├── KernelError         turnlog.kernel
    └── ProviderError       turnlog.kernel.models (RuntimeError)
"""

from __future__ import annotations

__all__ = ["TurnlogError", "UsageError"]


class TurnlogError(Exception):
    """Root of every error raised by turnlog."""


class UsageError(TurnlogError, ValueError):
    """The API was used in a way it does not support; nothing was written.

    A wrong argument, a call that the object's state does not allow (a verb on a read-only
    view), a registration made twice. It is a ``ValueError`` too, so code written against
    the bare ``ValueError`` turnlog raised before keeps working. Fix the call; retrying it
    as it is fails the same way.
    """
