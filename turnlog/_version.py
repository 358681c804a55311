"""The version of turnlog: the one place it is written (pyproject.toml reads it from here).

A literal rather than a package-metadata lookup: ``importlib.metadata`` (with the email and
zipfile modules it pulls in) cost more than the rest of ``turnlog --version`` together.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
