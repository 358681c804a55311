"""``turnlog ui`` in a real Chromium: what a person sees and does on each page."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

from playwright.sync_api import expect

from ._support import XSS_IMG, XSS_SCRIPT, Served, append_to_open_run, ready, screenshot, serve


def test_branch_list_shows_the_demo_branches_with_full_ids(
    page: Any, demo_ui: Served, demo_ids: dict[str, Any]
) -> None:
    page.goto(demo_ui.url + "/")
    demo_id, demo_version = demo_ids["branches"]["demo"]
    fork_id, _ = demo_ids["branches"]["demo-fork"]
    rows = page.locator("table.branches tbody tr")
    expect(rows).to_have_count(2)
    demo_row = rows.filter(has=page.get_by_role("link", name="demo", exact=True))
    expect(demo_row.locator("code.id")).to_have_text(demo_id)  # the full id, never truncated
    expect(demo_row).to_contain_text(str(demo_version))
    expect(demo_row.locator(".state")).to_have_text("ok")  # the last run ended
    expect(rows.filter(has=page.get_by_role("link", name="demo-fork"))).to_contain_text(f"{demo_id}@6")
    screenshot(page, "branches")
    page.fill("input[name=q]", fork_id[:18])
    page.press("input[name=q]", "Enter")
    expect(page.locator("table.branches tbody tr")).to_have_count(1)
    expect(page.locator("table.branches tbody tr code.id")).to_have_text(fork_id)
    assert page.errors == []


def test_opening_the_demo_branch_and_scrubbing_to_version_6(
    page: Any, demo_ui: Served, demo_ids: dict[str, Any]
) -> None:
    demo_id, head = demo_ids["branches"]["demo"]
    page.goto(demo_ui.url + "/")
    page.get_by_role("link", name="demo", exact=True).click()
    expect(page).to_have_url(re.compile(f"/branches/{demo_id}$"))
    ready(page)
    expect(page.locator("#at")).to_have_text(str(head))
    expect(page.locator(".timeline tbody tr")).to_have_count(head)
    expect(page.locator("#conversation .kind-ActionRequest").first).to_contain_text("get_weather")
    expect(page.locator("#conversation .badge.interrupted")).to_have_count(1)  # the text a crash cut off
    screenshot(page, "branch")
    page.locator("#scrubber").fill("8")  # the slider
    expect(page.locator("#at")).to_have_text("8")
    page.locator("#scrubber").focus()
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    expect(page).to_have_url(re.compile(r"\?at=6$"))
    expect(page.locator("#conversation .conv-head")).to_have_text(re.compile("version 6: 2 message"))
    messages = page.locator("#conversation article.msg:not(.role-system)")
    expect(messages).to_have_count(2)
    expect(messages.nth(0)).to_contain_text("Which is the largest city of France")
    expect(messages.nth(1)).to_contain_text('"city":"Paris"')
    expect(page.locator(".timeline tr.current")).to_have_attribute("data-version", "6")
    page.reload()  # the URL carries the version
    expect(page.locator("#conversation article.msg:not(.role-system)")).to_have_count(2)
    assert page.errors == []


def test_diff_highlights_added_and_removed_messages(
    page: Any, demo_ui: Served, demo_ids: dict[str, Any]
) -> None:
    demo_id, _ = demo_ids["branches"]["demo"]
    page.goto(f"{demo_ui.url}/branches/{demo_id}/diff?a=6&b=14")
    added = page.locator(".diff article.added")
    expect(added.first).to_be_visible()
    expect(page.locator(".diff-summary")).to_contain_text("0 removed")
    n_added = added.count()
    assert n_added >= 3
    expect(added.filter(has_text="get_weather").first).to_be_visible()
    screenshot(page, "diff")
    # backwards: the same messages, removed
    page.fill("input[name=a]", "14")
    page.fill("input[name=b]", "6")
    page.click("text=compare")
    expect(page.locator(".diff article.removed")).to_have_count(n_added)
    expect(page.locator(".diff article.added")).to_have_count(0)


def test_fork_tree_links_parent_and_fork(page: Any, demo_ui: Served, demo_ids: dict[str, Any]) -> None:
    demo_id, _ = demo_ids["branches"]["demo"]
    fork_id, _ = demo_ids["branches"]["demo-fork"]
    page.goto(demo_ui.url + "/forks")
    root = page.locator("ul.tree > li.fork-node")
    expect(root).to_have_count(1)
    expect(root.locator("> code.id")).to_have_text(demo_id)
    child = root.locator("ul > li.fork-node")
    expect(child).to_contain_text("shares versions 1-6 of its parent")
    screenshot(page, "forks")
    child.locator("a").click()
    expect(page).to_have_url(re.compile(f"/branches/{fork_id}$"))
    expect(page.locator(".facts")).to_contain_text(f"forked from {demo_id} at version 6")
    expect(page.locator("#conversation article.msg:not(.role-system)")).to_have_count(2)


def test_run_page_shows_chunks_on_a_time_axis(page: Any, demo_ui: Served, demo_ids: dict[str, Any]) -> None:
    run_id = demo_ids["runs"][0]  # the run killed mid-stream and closed by recovery
    page.goto(f"{demo_ui.url}/runs/{run_id}")
    expect(page.locator("#run-status")).to_contain_text("failed (crashed")
    facts = page.locator("table.facts")
    expect(facts).to_contain_text("claude_code / sonnet")
    expect(facts).to_contain_text("working directory")
    chunks = page.locator("#chunk-rows tr")
    assert chunks.count() == 10
    expect(page.locator("#chunk-axis rect.chunk-mark")).to_have_count(10)
    expect(page.locator("#chunk-rows tr.type-thinking").first).to_be_visible()
    screenshot(page, "run")
    assert page.errors == []


def test_an_open_run_updates_live_from_another_process(page: Any, open_run_store: Path) -> None:
    server = serve(open_run_store)
    ui = next(server)
    try:
        page.goto(f"{ui.url}/runs/r-live")
        ready(page)
        expect(page.locator("#run-status")).to_have_text("running")
        expect(page.locator("#chunk-rows tr")).to_have_count(1)
        page.wait_for_timeout(300)  # let the event stream connect before the writer starts
        writer = threading.Thread(target=append_to_open_run, args=(open_run_store,))
        writer.start()
        expect(page.locator("#chunk-rows tr")).to_have_count(3, timeout=20_000)
        expect(page.locator("#chunk-rows tr").nth(2)).to_contain_text("three <b>bold?</b>")
        expect(page.locator("#run-status")).to_have_text("ended", timeout=20_000)
        expect(page.locator("#chunk-count")).to_have_text("3")
        writer.join()
    finally:
        server.close()


def test_recorded_html_renders_as_text(page: Any, hostile_store: Path) -> None:
    server = serve(hostile_store)
    ui = next(server)
    try:
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{ui.url}/")
        expect(page.locator("table.branches tbody tr a").first).to_have_text(XSS_IMG)
        page.goto(f"{ui.url}/branches/b-xss")
        ready(page)
        expect(page.locator("#conversation .kind-Instruction pre")).to_have_text(XSS_SCRIPT)
        expect(page.locator("#conversation .kind-AssistantResponse pre.text").last).to_have_text(XSS_IMG)
        expect(page.locator("h1")).to_have_text(XSS_IMG)
        page.locator("#scrubber").focus()
        page.keyboard.press("ArrowLeft")  # the fragment the scrubber swaps in is escaped too
        expect(page.locator("#conversation .conv-head")).to_contain_text("version 2")
        assert page.evaluate("window.__xss") is None
        assert page.locator("#conversation img, #conversation script, main img").count() == 0
        assert dialogs == []
    finally:
        server.close()


def test_a_damaged_stream_is_shown_as_damaged(page: Any, damaged_store: Path) -> None:
    server = serve(damaged_store)
    ui = next(server)
    try:
        page.goto(f"{ui.url}/verify")
        banner = page.locator("#verify-status")
        expect(banner).to_have_class(re.compile("damaged"))
        expect(banner).to_contain_text("DAMAGED: 1 stream(s)")
        expect(banner).to_contain_text("branch-b-bad")
        expect(banner).to_contain_text("version 2")
        rows = page.locator("table.streams tbody tr")
        expect(rows.nth(0)).to_contain_text("branch-b-bad")
        expect(rows.nth(0).locator(".state")).to_have_text("DAMAGED")
        expect(rows.filter(has_text="branch-b-ok").locator(".state")).to_have_text("ok")
        screenshot(page, "verify-damaged")
    finally:
        server.close()


def test_analytics_charts_and_live_tail(page: Any, demo_ui: Served) -> None:
    page.goto(demo_ui.url + "/analytics")
    expect(page.locator("#charts figure").first).to_be_visible()
    assert page.locator("#charts figure").count() >= 6
    expect(page.locator("#charts svg rect.bar").first).to_be_visible()
    screenshot(page, "analytics")
    page.goto(demo_ui.url + "/tail")
    expect(page.locator("#tail-rows tr").first).to_be_visible()
    assert page.errors == []


def test_the_live_tail_shows_new_events_without_a_reload(page: Any, open_run_store: Path) -> None:
    for ui in serve(open_run_store):
        page.goto(f"{ui.url}/tail")
        ready(page)
        rows = page.locator("#tail-rows tr")
        expect(rows).to_have_count(4)
        page.wait_for_timeout(300)  # let the event stream connect before the writer starts
        append_to_open_run(open_run_store)
        expect(rows).to_have_count(7, timeout=20_000)
        expect(rows.nth(0)).to_contain_text("run.ended")  # newest first
        expect(page.locator("#tail-rows tr.fresh")).to_have_count(3)


def test_a_non_loopback_bind_asks_the_browser_for_its_token(page: Any, small_store: Path) -> None:
    for ui in serve(small_store, "--host", "0.0.0.0"):
        token = (
            next(line for line in ui.lines if line.startswith("token (shown once): "))
            .split(": ", 1)[1]
            .strip()
        )
        base = ui.url.replace("0.0.0.0", "127.0.0.1")
        response = page.goto(base + "/")
        assert response is not None and response.status == 401
        expect(page.locator(".error-message")).to_contain_text("needs its token")
        expect(page.locator("table.branches")).to_have_count(0)
        page.goto(f"{base}/?token={token}")
        expect(page).to_have_url(base + "/")  # the token left the address bar
        expect(page.locator("table.branches tbody tr")).to_have_count(1)
        page.get_by_role("link", name="one", exact=True).click()  # the cookie carries it on
        expect(page.locator("#conversation article.msg:not(.role-system)")).to_have_count(3)


def test_every_page_fits_a_390_px_screen(page: Any, demo_ui: Served, demo_ids: dict[str, Any]) -> None:
    """At phone width no page scrolls sideways: wide tables and charts scroll inside themselves."""
    demo_id, version = demo_ids["branches"]["demo"]
    paths = [
        "/",
        f"/branches/{demo_id}",
        f"/branches/{demo_id}?at=6",
        f"/branches/{demo_id}/diff?a=3&b={version}",
        f"/branches/{demo_id}/replay",
        "/forks",
        f"/runs/{demo_ids['runs'][0]}",
        "/search?q=umbrella",
        "/verify",
        "/analytics",
        "/analytics?by=tool",
        "/analytics?by=day",
        "/tail",
    ]
    page.set_viewport_size({"width": 390, "height": 844})
    wide: dict[str, int] = {}
    for path in paths:
        response = page.goto(demo_ui.url + path)
        assert response is not None and response.status == 200, path
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > 390:
            wide[path] = width
        screenshot(page, "390" + re.sub(r"[/?=&]", "-", path))
    assert wide == {}
    assert page.errors == []
