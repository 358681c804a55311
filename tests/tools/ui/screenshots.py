"""Make the screenshots of docs/img from the store a reader gets: ``turnlog demo`` in a clean folder.

Run from the repository root (the system Chromium and Playwright are needed, as for the browser
tests)::

    .venv/bin/python tests/tools/ui/screenshots.py docs/img

It makes a fresh folder ``$TMPDIR/turnlog-demo``, runs ``turnlog demo`` there (so the store is
``./turnlog-demo.db`` and the page header says ``sqlite:///turnlog-demo.db``, as on a reader's
machine), copies it to ``tampered.db`` and alters one answer there with sqlite3 (as
docs/eventstore.md shows), serves each with ``turnlog ui`` and saves one PNG per page.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

VIEWPORT = {"width": 1400, "height": 900}


def _turnlog(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnlog", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )


@contextmanager
def _served(folder: Path, store: str) -> Iterator[str]:
    """``turnlog ui --store STORE`` run in ``folder`` (the path as a reader types it); its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "turnlog", "ui", "--store", store, "--port", "0"],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the ui prints its URL once it is serving
            found = re.search(r"serving (http://\S+/)", line)
            if found:
                yield found.group(1).rstrip("/")
                return
        raise RuntimeError("turnlog ui did not start")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _ids(store: Path) -> dict[str, str]:
    conn = sqlite3.connect(store)
    try:
        ids = {}
        for stream, data in conn.execute("SELECT stream, CAST(data AS TEXT) FROM events WHERE version = 1"):
            if stream.startswith("branch-"):
                name = re.search(r'"name":"([^"]+)"', data)
                ids[name.group(1) if name else stream] = stream.removeprefix("branch-")
        run = conn.execute("SELECT stream FROM events WHERE stream LIKE 'run-%' ORDER BY position").fetchone()
        ids["run"] = run[0].removeprefix("run-")
        return ids
    finally:
        conn.close()


def _tamper(store: Path) -> None:
    """Alter the first answer behind the store's back: Paris becomes Lyon."""
    conn = sqlite3.connect(store)
    try:
        stream, version, data = conn.execute(
            "SELECT stream, version, data FROM events WHERE type = 'message.added' "
            "AND CAST(data AS TEXT) LIKE '%Paris%' ORDER BY position"
        ).fetchone()
        forged = bytes(data).replace(b"Paris", b"Lyon", 1)
        conn.execute("UPDATE events SET data = ? WHERE stream = ? AND version = ?", (forged, stream, version))
        conn.commit()
    finally:
        conn.close()


def _shoot(page: Any, url: str, out: Path, name: str, wait_for: str) -> None:
    page.goto(url)
    page.wait_for_selector(wait_for)
    page.wait_for_selector("body[data-ready='1']", state="attached")
    page.screenshot(path=str(out / f"{name}.png"), full_page=False)
    print(f"{out / name}.png  <- {url}")


def main(out: Path) -> None:
    """Make every screenshot into ``out``."""
    from playwright.sync_api import sync_playwright

    folder = Path(tempfile.gettempdir()) / "turnlog-demo"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    _turnlog(folder, "demo")
    ids = _ids(folder / "turnlog-demo.db")
    shutil.copyfile(folder / "turnlog-demo.db", folder / "tampered.db")
    _tamper(folder / "tampered.db")
    out.mkdir(parents=True, exist_ok=True)
    executable = os.environ.get("PLAYWRIGHT_CHROMIUM_EXECUTABLE_PATH") or shutil.which("chromium")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        page = browser.new_page(viewport=VIEWPORT)
        demo = ids["demo"]
        with _served(folder, "turnlog-demo.db") as url:
            _shoot(page, f"{url}/", out, "branches", "table.branches")
            _shoot(page, f"{url}/branches/{demo}", out, "branch", "#conversation article.msg")
            _shoot(page, f"{url}/branches/{demo}/diff?a=6&b=14", out, "diff", ".diff article.added")
            _shoot(page, f"{url}/forks", out, "forks", "ul.tree")
            _shoot(page, f"{url}/runs/{ids['run']}", out, "run", "#chunk-rows tr")
            _shoot(page, f"{url}/analytics", out, "analytics", "#charts svg rect.bar")
        with _served(folder, "tampered.db") as url:
            _shoot(page, f"{url}/verify", out, "verify-damaged", "#verify-status")
            _shoot(page, f"{url}/branches/{demo}?at=6", out, "branch-tampered", ".banner.tampered")
        browser.close()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img"))
