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


# ------------------------------------------------------------------ the waterfall and search


@pytest.fixture
def demo_copy(demo_store: Path, tmp_path: Path) -> Path:
    """A copy of the demo store, to alter on disk without touching the shared one."""
    copy = tmp_path / "demo.db"
    source, dest = sqlite3.connect(demo_store), sqlite3.connect(copy)
    try:
        source.backup(dest)
    finally:
        source.close()
        dest.close()
    return copy


def _alter(path: Path, position: int, old: bytes, new: bytes) -> None:
    """Rewrite one event's payload behind the store's back, as a raw UPDATE would."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        (data,) = conn.execute("SELECT data FROM events WHERE position = ?", (position,)).fetchone()
        assert old in bytes(data)
        conn.execute(
            "UPDATE events SET data = ? WHERE position = ?", (bytes(data).replace(old, new, 1), position)
        )
    finally:
        conn.close()


def _react(path: Path) -> tuple[str, list[int]]:
    """The demo's ReAct run and the positions of its model calls."""
    conn = sqlite3.connect(path)
    try:
        (run_id,) = conn.execute(
            "SELECT json_extract(data, '$.run_id') FROM events "
            "WHERE type = 'run.started' AND json_extract(data, '$.verb') = 'ReAct'"
        ).fetchone()
        calls = conn.execute(
            "SELECT position FROM events WHERE type = 'model.called' AND json_extract(data, '$.run_id') = ? "
            "ORDER BY position",
            (run_id,),
        ).fetchall()
    finally:
        conn.close()
    return str(run_id), [p for (p,) in calls]


def _first_run(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        (run_id,) = conn.execute(
            "SELECT json_extract(data, '$.run_id') FROM events WHERE type = 'run.started' ORDER BY position"
        ).fetchone()
    finally:
        conn.close()
    return str(run_id)


def _spans(html: str) -> list[tuple[str, str]]:
    """(opening tag, whole row) of each waterfall row, in order."""
    rows = html.split('<li class="span ')[1:]
    return [(r.split(">")[0], r.split("</details></li>")[0]) for r in rows]


def test_the_waterfall_marks_the_span_of_an_altered_model_call(demo_copy: Path) -> None:
    run_id, calls = _react(demo_copy)
    assert len(calls) == 3
    _alter(demo_copy, calls[1], b'"input_tokens":420', b'"input_tokens":421')
    server = serve(demo_copy)
    ui = next(server)
    try:
        html = get(ui, f"/runs/{run_id}")
        assert html.count('class="banner tampered"') == 1 and 'href="/verify"' in html
        # the banner is on top of the page, above the facts, naming the altered call
        banner = html.split('class="banner tampered"')[1].split("</div>")[0]
        assert html.index('class="banner tampered"') < html.index('<table class="facts">')
        assert banner.count("<li>") == 1 and "hash does not match the stored bytes" in banner
        rows = _spans(html)
        assert [i for i, (tag, _) in enumerate(rows) if "tampered" in tag] == [5]  # the second chat span
        assert 'data-name="chat gpt-4.1-mini"' in rows[5][0] and BADGE in rows[5][1]
        assert sum(BADGE in row for _, row in rows) == 1
        # another run of the same branch stands on none of it
        other = _first_run(demo_copy)
        assert other != run_id and BADGE not in get(ui, f"/runs/{other}")
    finally:
        server.close()


def test_the_waterfall_is_clean_and_names_the_branch_when_nothing_is_altered(demo_copy: Path) -> None:
    run_id, _ = _react(demo_copy)
    server = serve(demo_copy)
    ui = next(server)
    try:
        html = get(ui, f"/runs/{run_id}")
        assert BADGE not in html and "banner tampered" not in html
        # names before ids: the branch reads as its name, its id beside it
        assert re.search(r'of branch <a href="/branches/[^"]+">demo</a> <code class="id">', html)
        assert re.search(r'recorded at <a href="/branches/[^"]+\?at=\d+">demo version \d+</a>', html)
    finally:
        server.close()


def test_an_altered_chunk_marks_its_run_span_under_one_banner(demo_copy: Path) -> None:
    conn = sqlite3.connect(demo_copy)
    try:
        run_id, position = conn.execute(
            "SELECT substr(stream, 5), max(position) FROM events WHERE stream LIKE 'run-%' "
            "AND CAST(data AS TEXT) LIKE '%Picking up%' GROUP BY stream"
        ).fetchone()
    finally:
        conn.close()
    _alter(demo_copy, position, b"Picking up", b"Making up")
    server = serve(demo_copy)
    ui = next(server)
    try:
        html = get(ui, f"/runs/{run_id}")
        assert html.count('class="banner tampered"') == 1  # the chunk is named once, not per section
        assert re.search(r'<tr class="chunk type-\w+ tampered"', html)
        marked = [tag for tag, _ in _spans(html) if "tampered" in tag]
        assert len(marked) == 1 and "kind-run" in marked[0]
    finally:
        server.close()


def test_a_search_hit_from_an_altered_message_is_marked(demo_copy: Path) -> None:
    conn = sqlite3.connect(demo_copy)
    try:
        (position,) = conn.execute(
            "SELECT position FROM events WHERE type = 'message.added' AND CAST(data AS TEXT) LIKE '%advise%'"
        ).fetchone()
        (plain,) = conn.execute(
            "SELECT count(*) FROM events WHERE type = 'message.added' AND CAST(data AS TEXT) LIKE '%umbrella%' AND position != ?",
            (position,),
        ).fetchone()
    finally:
        conn.close()
    assert plain > 0
    _alter(demo_copy, position, b"advise", b"advise (forged)")
    server = serve(demo_copy)
    ui = next(server)
    try:
        hits = get(ui, "/search?q=advise").split('<li class="hit ')[1:]
        assert len(hits) == 1 and "tampered" in hits[0].split(">")[0] and BADGE in hits[0]
        assert "forged" in hits[0]
        # names before ids: the hit reads "demo @ version", the id set apart beside it
        assert re.search(r'<a class="where" href="[^"]+">demo @ \d+</a> <code class="id">', hits[0])
        others = get(ui, "/search?q=umbrella").split('<li class="hit ')[1:]
        assert others and not any(BADGE in hit for hit in others)
    finally:
        server.close()
