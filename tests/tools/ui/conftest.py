"""Fixtures of the ``turnlog ui`` tests: stores to show, a served app, a real Chromium.

The browser tests drive the system Chromium (Debian's ``chromium``) through Playwright. On a
machine without it they skip with the reason; with ``TURNLOG_REQUIRE_BROWSER=1`` (set by CI)
they fail instead, so that CI can never pass by skipping them.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from turnlog.eventstore import open_store
from turnlog.projections import Instruction

from ._support import Served, branch_events, damaged, hostile, open_run, run_async, serve


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store ``turnlog demo`` leaves (a branch of 38 versions, a fork, a crashed run)."""
    path = tmp_path_factory.mktemp("demo") / "demo.db"
    out = subprocess.run(
        [sys.executable, "-m", "turnlog.tools", "demo", "--store", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return path


@pytest.fixture(scope="session")
def demo_ui(demo_store: Path) -> Iterator[Served]:
    """``turnlog ui`` over the demo store."""
    yield from serve(demo_store)


async def _ids(path: Path) -> dict[str, Any]:
    async with open_store(f"sqlite:///{path}") as store:
        branches = {}
        for stream, version in await store.list_streams("branch-"):
            async for first in store.read_stream(stream, 1, 1):
                branches[first.data.get("name")] = (stream.removeprefix("branch-"), version)
        runs = [s.removeprefix("run-") for s, _ in await store.list_streams("run-")]
    return {"branches": branches, "runs": runs}


@pytest.fixture(scope="session")
def demo_ids(demo_store: Path) -> dict[str, Any]:
    """Names of the demo store: ``branches`` name -> (id, version), ``runs`` with chunks."""
    return run_async(_ids, demo_store)


@pytest.fixture
def hostile_store(tmp_path: Path) -> Path:
    """A branch whose name and messages are HTML that would run script if not escaped."""
    path = tmp_path / "hostile.db"
    run_async(hostile, path)
    return path


@pytest.fixture
def open_run_store(tmp_path: Path) -> Path:
    """A branch with a run that started, streamed one chunk and has not ended."""
    path = tmp_path / "live.db"
    run_async(open_run, path)
    return path


@pytest.fixture
def damaged_store(tmp_path: Path) -> Path:
    """Two branches; one has an event rewritten behind the store's back (its chain breaks at 2)."""
    path = tmp_path / "damaged.db"
    run_async(damaged, path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        row = conn.execute("SELECT data FROM events WHERE stream = 'branch-b-bad' AND version = 2").fetchone()
        conn.execute(
            "UPDATE events SET data = ? WHERE stream = 'branch-b-bad' AND version = 2",
            (bytes(row[0]).replace(b"pay 10", b"pay 99"),),
        )
    finally:
        conn.close()
    return path


@pytest.fixture
def small_store(tmp_path: Path) -> Path:
    """One branch of three messages."""
    path = tmp_path / "small.db"

    async def fill() -> None:
        async with open_store(f"sqlite:///{path}") as store:
            events = branch_events("b-1", "one", *(Instruction.create(f"m{i}") for i in range(3)))
            await store.append("branch-b-1", events)

    run_async(fill)
    return path


# ------------------------------------------------------------------------------------ browser


def chromium_path() -> str | None:
    """The system Chromium, if any (``$PLAYWRIGHT_CHROMIUM_EXECUTABLE_PATH`` first)."""
    given = os.environ.get("PLAYWRIGHT_CHROMIUM_EXECUTABLE_PATH")
    if given:
        return given if Path(given).exists() else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless system Chromium driven by Playwright.

    Module-scoped: Playwright's sync API runs an event loop in this thread while it is open,
    and the async tests that follow need the thread to themselves.
    """
    required = os.environ.get("TURNLOG_REQUIRE_BROWSER") == "1"
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if required:
            pytest.fail("TURNLOG_REQUIRE_BROWSER=1 but playwright is not installed")
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    if executable is None:
        if required:
            pytest.fail("TURNLOG_REQUIRE_BROWSER=1 but no chromium was found (apt-get install chromium)")
        pytest.skip("no system Chromium (apt-get install chromium) to drive the browser tests")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page; ``page.errors`` collects script errors and console errors."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.errors = errors
    try:
        yield page
    finally:
        context.close()
