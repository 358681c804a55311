"""Fixtures of the ``turnlog otel`` tests: the demo's store, copies of it, and a receiver."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._receiver import Receiver, otlp_receiver


@pytest.fixture(scope="session")
def otel_demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store ``turnlog demo`` leaves: communicate, operate, a two-round ReAct, a crashed and a resumed CLI run."""
    path = tmp_path_factory.mktemp("otel-demo") / "demo.db"
    out = subprocess.run(
        [sys.executable, "-m", "turnlog.tools", "demo", "--store", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return path


@pytest.fixture
def demo_copy(otel_demo_store: Path, tmp_path: Path) -> Path:
    """A private copy of the demo store, for a test that writes to it."""
    target = tmp_path / "demo.db"
    source = sqlite3.connect(otel_demo_store)
    dest = sqlite3.connect(target)
    try:
        source.backup(dest)
    finally:
        source.close()
        dest.close()
    return target


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A real OTLP/HTTP receiver on loopback that decodes with the official protobuf classes."""
    with otlp_receiver() as got:
        yield got


@pytest.fixture(scope="session")
def demo_last_run(otel_demo_store: Path) -> int:
    """The position of the demo's last run terminal: where ``--follow`` checkpoints after the demo."""
    with sqlite3.connect(otel_demo_store) as db:
        (position,) = db.execute(
            "SELECT max(position) FROM events WHERE type IN ('run.ended', 'run.failed')"
        ).fetchone()
    return int(position)


@pytest.fixture(scope="session")
def demo_head(otel_demo_store: Path) -> int:
    """The demo store's head position."""
    with sqlite3.connect(otel_demo_store) as db:
        (position,) = db.execute("SELECT max(position) FROM events").fetchone()
    return int(position)
