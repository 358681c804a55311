"""Fixtures shared by the event-store tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The backend conformance suite lives next to the backend tests (conformance.py); test
# modules import it as ``from conformance import StoreConformance``.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    """A fresh SQLite store file (not yet created)."""
    return tmp_path / "store.db"


@pytest.fixture
def sqlite_url(sqlite_path: Path) -> str:
    """The URL of ``sqlite_path`` for ``open_store``."""
    return f"sqlite:///{sqlite_path}"
