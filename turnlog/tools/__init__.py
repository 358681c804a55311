"""turnlog.tools: the turnlog command line and the ui.

The test doubles and loopback fake providers are ``turnlog.testing``'s; the benchmarks
(``turnlog bench``) live in the checkout's ``benchmarks/``.
"""

from ._errors import ExportFailed, TurnlogError, UsageError, UserError

__all__ = ["ExportFailed", "TurnlogError", "UsageError", "UserError"]
