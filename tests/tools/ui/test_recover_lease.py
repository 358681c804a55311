"""The ui's recover action uses the run lease as ``turnlog recover`` does: a live run stays open."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from turnlog.eventstore import Lease, acquire_lease, open_store
from turnlog.kernel import run_lease_key

from ._support import Served, run_async, serve


def get(ui: Served, path: str) -> httpx.Response:
    response = httpx.get(ui.url + path, timeout=30)
    assert response.status_code == 200, response.text
    return response


async def hold(path: Path) -> Lease:
    """The lease of the open run ``r-live``, taken as its writing process would hold it."""
    async with open_store(f"sqlite:///{path}") as store:
        return await acquire_lease(store, run_lease_key("r-live"))


def test_the_recover_action_leaves_a_live_run_open_and_says_so(open_run_store: Path) -> None:
    lease: Lease = run_async(hold, open_run_store)
    try:
        for ui in serve(open_run_store, "--allow-writes"):
            page = get(ui, "/runs/r-live")
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
            assert csrf is not None
            done = httpx.post(ui.url + "/recover", data={"csrf": csrf.group(1)}, timeout=60)
            assert done.status_code == 200
            assert "0 crashed run(s) closed" in done.text
            assert "Live runs left open (1)" in done.text and "r-live" in done.text
            assert "lease" in done.text
            assert "failed (crashed" not in get(ui, "/runs/r-live").text
    finally:
        run_async(lease.release)
    for ui in serve(open_run_store, "--allow-writes"):
        page = get(ui, "/runs/r-live")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        done = httpx.post(ui.url + "/recover", data={"csrf": csrf.group(1)}, timeout=60)
        assert "1 crashed run(s) closed" in done.text and "Live runs" not in done.text
