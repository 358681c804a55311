"""turnlog: an event-sourced conversation store and operation kernel for LLM agents.

The layers are subpackages: ``turnlog.eventstore`` (the append-only log),
``turnlog.projections`` (the conversation domain), ``turnlog.kernel`` (the command side)
and ``turnlog.tools`` (the ``turnlog`` command). ``python -m turnlog`` runs the command.
"""

from turnlog.tools._version import __version__

__all__ = ["__version__"]
