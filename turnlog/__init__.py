"""turnlog: an event-sourced conversation store and operation kernel for LLM agents.

The layers are subpackages: ``turnlog.eventstore`` (the append-only log),
``turnlog.projections`` (the conversation domain),
``turnlog.analytics`` (fact tables over the log), ``turnlog.kernel`` (the command side),
``turnlog.testing`` (test doubles and fakes for testing an agent) and ``turnlog.tools`` (the
``turnlog`` command). ``python -m turnlog`` runs the command.
Every error turnlog raises is a ``TurnlogError``; a mistake in using it is a ``UsageError``
(the tree is drawn in docs/errors.md).
"""

from turnlog._errors import TurnlogError, UsageError
from turnlog._version import __version__

__all__ = ["TurnlogError", "UsageError", "__version__"]
