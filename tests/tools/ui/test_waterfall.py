"""The run page's waterfall in a real Chromium: the demo's ReAct run as a tree of spans on a time axis."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from playwright.sync_api import expect

from turnlog.eventstore import open_store

from ._support import Served, run_async


async def _react_run(path: Path) -> str:
    async with open_store(f"sqlite:///{path}") as store:
        async for event in store.read_all(types=["run.started"]):
            if event.data["verb"] == "ReAct":
                return str(event.data["run_id"])
    raise AssertionError("the demo has no ReAct run")


def _shot(page: Any, tmp_path: Path, name: str) -> None:
    folder = Path(os.environ.get("TURNLOG_UI_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def test_the_react_run_shows_its_model_and_tool_spans_nested_in_order(
    page: Any, demo_ui: Served, demo_store: Path, demo_ids: dict[str, Any], tmp_path: Path
) -> None:
    run_id = run_async(_react_run, demo_store)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"{demo_ui.url}/runs/{run_id}")
    rows = page.locator("section.waterfall li.span")
    expect(rows).to_have_count(8)
    got = [(r.get_attribute("data-depth"), r.get_attribute("data-name")) for r in rows.all()]
    assert got == [
        ("0", "invoke_agent ReAct"),
        ("1", "step 1"),
        ("2", "chat gpt-4.1-mini"),
        ("2", "execute_tool get_weather"),
        ("1", "step 2"),
        ("2", "chat gpt-4.1-mini"),
        ("1", "step 3"),
        ("2", "chat gpt-4.1-mini"),
    ]
    # the bars run left to right in the order the spans ran
    xs = [float(r.locator("svg.bar rect").get_attribute("x") or "0") for r in rows.all()]
    chats_and_tools = [x for (d, _), x in zip(got, xs, strict=True) if d == "2"]
    assert chats_and_tools == sorted(chats_and_tools) and chats_and_tools[0] > 0
    chat = rows.nth(2)
    chat.locator("summary").click()
    detail = chat.locator(".span-detail")
    expect(detail).to_be_visible()
    expect(detail).to_contain_text("gen_ai.usage.input_tokens")
    expect(detail).to_contain_text("gen_ai.input.messages")
    expect(detail).to_contain_text("umbrella")
    tool = rows.nth(3)
    tool.locator("summary").click()
    expect(tool.locator(".span-detail")).to_contain_text("gen_ai.tool.call.result")
    expect(tool.locator(".span-detail")).to_contain_text("light rain")
    _shot(page, tmp_path, "waterfall-1440")
    page.set_viewport_size({"width": 390, "height": 844})
    name = rows.nth(3).locator(".name")
    assert name.evaluate("e => e.getBoundingClientRect().height") < 24  # one line, never wrapped
    call_id = tool.locator("code.value").nth(3)
    assert call_id.evaluate("e => e.getClientRects().length") == 1  # a long id stays on one line
    wide = page.evaluate(
        "[...document.querySelectorAll('section.waterfall *')]"
        ".filter(e => !e.parentElement.closest('.attr-scroll') && e.getBoundingClientRect().right > 392)"
        ".map(e => e.tagName + '.' + e.className.baseVal + e.className + ' ' + e.getBoundingClientRect().right)"
    )
    assert wide == []  # the waterfall holds together at phone width
    _shot(page, tmp_path, "waterfall-390")
    demo_id, _ = demo_ids["branches"]["demo"]
    link = chat.locator(".recorded a")
    expect(link).to_have_attribute("href", f"/branches/{demo_id}?at=16")
    link.click()
    expect(page).to_have_url(f"{demo_ui.url}/branches/{demo_id}?at=16")
    assert page.errors == []
