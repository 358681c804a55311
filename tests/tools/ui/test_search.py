"""Search in ``turnlog ui``: a word of the demo finds its message and opens the branch at its version."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import expect

from ._support import Served, serve


def test_a_word_of_the_demo_finds_the_message_and_opens_the_branch_at_its_version(
    page: Any, demo_ui: Served, demo_ids: dict[str, Any]
) -> None:
    demo_id, _ = demo_ids["branches"]["demo"]
    page.goto(demo_ui.url + "/")
    page.get_by_role("link", name="Search", exact=True).click()
    page.fill("form.search input[name=q]", "umbrella Lyon")
    page.press("form.search input[name=q]", "Enter")
    hits = page.locator("ol.search-hits li.hit")
    expect(hits.first).to_be_visible()
    first = hits.first
    expect(first.locator("mark").first).to_be_visible()
    href = first.locator("a").get_attribute("href") or ""
    assert href.startswith(f"/branches/{demo_id}?at=")
    version = int(href.rpartition("=")[2])
    first.locator("a").click()
    expect(page).to_have_url(f"{demo_ui.url}/branches/{demo_id}?at={version}")
    expect(page.locator("main")).to_contain_text("umbrella")
    page.goto(demo_ui.url + "/search?q=demo-fork")
    expect(page.locator("ol.search-hits li.kind-branch")).to_have_count(1)
    page.goto(demo_ui.url + "/search?q=%22%20OR%20*")  # FTS syntax in a query is only text
    expect(page.locator("p.note")).to_contain_text("0 hit(s)")
    assert page.errors == []


def test_a_message_redacted_after_it_was_indexed_is_no_longer_found(demo_store: Path, tmp_path: Path) -> None:
    copy = tmp_path / "demo.db"
    source, dest = sqlite3.connect(demo_store), sqlite3.connect(copy)
    try:
        source.backup(dest)
    finally:
        source.close()
        dest.close()
    served = serve(copy)
    app = next(served)
    try:
        word = "advise"  # only in the ReAct's first analysis (version 17)
        before = httpx.get(f"{app.url}/search", params={"q": word}, timeout=30).text
        assert "@ 17" in before
        out = subprocess.run(
            [sys.executable, "-m", "turnlog.tools", "redact", "demo", "--version", "17", "--reason", "gdpr",
             "--store", str(copy)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        after = httpx.get(f"{app.url}/search", params={"q": word}, timeout=30).text
        assert "@ 17" not in after and "0 hit(s)" in after
    finally:
        served.close()
