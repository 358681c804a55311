"""The ui checks what it shows: a payload altered on disk is marked TAMPERED on every page showing it."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from ._support import Served, ready, serve

BADGE = '<span class="badge tampered"'


def get(ui: Served, path: str) -> str:
    r = httpx.get(ui.url + path, timeout=30)
    assert r.status_code == 200, r.text
    return r.text


@pytest.fixture
def damaged_ui(damaged_store: Path) -> Iterator[Served]:
    yield from serve(damaged_store)


def _article(html: str, text: str) -> str:
    """The opening tag and meta line of the message block holding ``text``."""
    for block in (part.split("</article>")[0] for part in html.split("<article ")[1:]):
        if text in block:
            return block
    raise AssertionError(f"no message holds {text!r}")


def test_the_branch_page_marks_the_altered_message(damaged_ui: Served) -> None:
    html = get(damaged_ui, "/branches/b-bad")
    assert 'class="banner tampered"' in html and "branch-b-bad</code> v2" in html
    altered = _article(html, "pay 99")
    assert "tampered" in altered.split(">")[0] and BADGE in altered
    assert BADGE not in _article(html, "thanks")
    row = re.search(r'<tr class="[^"]*tampered[^"]*" data-version="(\d+)"', html)
    assert row is not None and row.group(1) == "2"
    # the scrubber's fragment carries the marks too; a version before the damage has none
    assert BADGE in get(damaged_ui, "/branches/b-bad/conversation?at=3")
    assert BADGE not in get(damaged_ui, "/branches/b-bad/conversation?at=1")
    assert BADGE not in get(damaged_ui, "/branches/b-ok")


def test_the_diff_and_tail_pages_mark_it(damaged_ui: Served) -> None:
    diff = get(damaged_ui, "/branches/b-bad/diff?a=1&b=3")
    assert 'class="banner tampered"' in diff and BADGE in _article(diff, "pay 99")
    tail = get(damaged_ui, "/tail")
    rows = [r for r in tail.split("<tr ") if "tampered" in r.split(">")[0]]
    assert len(rows) == 1 and "branch-b-bad@2" in rows[0]


def test_the_run_page_marks_an_altered_chunk(open_run_store: Path) -> None:
    conn = sqlite3.connect(open_run_store, isolation_level=None)
    try:
        (data,) = conn.execute("SELECT data FROM events WHERE stream = 'run-r-live'").fetchone()
        conn.execute(
            "UPDATE events SET data = ? WHERE stream = 'run-r-live'", (bytes(data).replace(b"one", b"ONE"),)
        )
    finally:
        conn.close()
    server = serve(open_run_store)
    ui = next(server)
    try:
        html = get(ui, "/runs/r-live")
        assert 'class="banner tampered"' in html
        assert re.search(r'<tr class="chunk type-text tampered"', html)
    finally:
        server.close()


def test_the_badge_is_visible_in_a_browser(page: Any, damaged_ui: Served) -> None:
    page.goto(damaged_ui.url + "/branches/b-bad")
    ready(page)
    banner = page.locator(".banner.tampered")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("do not match the hash chain")
    altered = page.locator("#conversation article.msg.tampered")
    expect(altered).to_have_count(1)
    expect(altered).to_contain_text("pay 99")
    badge = altered.locator(".badge.tampered")
    expect(badge).to_be_visible()
    expect(badge).to_have_css("background-color", "rgb(197, 48, 48)")  # var(--bad): loud, not muted
    assert page.errors == []


def test_the_live_tail_feed_marks_it(damaged_ui: Served) -> None:
    """Events the live tail sends are checked as they go: the altered one carries ``tampered``."""
    seen: dict[str, bool] = {}
    with httpx.stream("GET", damaged_ui.url + "/tail/live?after=0", timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line.removeprefix("data: "))
                seen[f"{event['stream']}@{event['version']}"] = event["tampered"]
            if len(seen) == 5:  # every event of the store: b-ok 1-2, b-bad 1-3
                break
    assert {k for k, altered in seen.items() if altered} == {"branch-b-bad@2"}


def test_the_branch_list_marks_a_name_altered_on_disk(damaged_store: Path) -> None:
    conn = sqlite3.connect(damaged_store, isolation_level=None)
    try:
        (data,) = conn.execute(
            "SELECT data FROM events WHERE stream = 'branch-b-ok' AND version = 1"
        ).fetchone()
        conn.execute(
            "UPDATE events SET data = ? WHERE stream = 'branch-b-ok' AND version = 1",
            (bytes(data).replace(b'"fine"', b'"forged"'),),
        )
    finally:
        conn.close()
    server = serve(damaged_store)
    ui = next(server)
    try:
        html = get(ui, "/")
        rows = [r.split("</tr>")[0] for r in html.split("<tr>")[1:]]
        forged = [r for r in rows if ">forged<" in r]
        assert len(forged) == 1 and BADGE in forged[0]
        assert not any(BADGE in r for r in rows if ">tampered<" in r)  # b-bad's name event is intact
    finally:
        server.close()
