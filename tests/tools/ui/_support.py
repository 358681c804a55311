"""Helpers of the ``turnlog ui`` tests: serving the app, building small stores, screenshots."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from queue import Empty, Queue
from typing import Any

import anyio

from turnlog.eventstore import open_store
from turnlog.projections import (
    AssistantResponse,
    BranchCreated,
    ChunkReceived,
    Instruction,
    MessageAdded,
    RunStarted,
    new_event,
)

XSS_SCRIPT = "<script>window.__xss = 1</script>"
XSS_IMG = '<img src=x onerror="window.__xss = 2">'
SHOTS = os.environ.get("TURNLOG_UI_SCREENSHOTS")
"""A folder to save screenshots of the main pages into (docs/img when the docs are refreshed)."""


@dataclass(frozen=True)
class Served:
    """A running ``turnlog ui``: its base URL and the lines it printed."""

    url: str
    lines: list[str]


def _pump(pipe: Any, lines: Queue[str]) -> None:
    for line in pipe:
        lines.put(line)


def serve(store: Path | str, *extra: str) -> Iterator[Served]:
    """Run ``turnlog ui --port 0`` in a child process until the generator is closed."""
    args = [sys.executable, "-m", "turnlog.tools", "ui", "--store", str(store), "--port", "0", *extra]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: Queue[str] = Queue()
    pump = threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True)
    pump.start()
    seen: list[str] = []
    try:
        while True:
            try:
                line = lines.get(timeout=30)
            except Empty:
                raise AssertionError(f"turnlog ui did not start: {seen}") from None
            seen.append(line)
            found = re.search(r"serving (http://\S+/)", line)
            if found:
                yield Served(found.group(1).rstrip("/"), seen)
                return
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        pump.join(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def branch_events(branch_id: str, name: str, *messages: Any) -> list[Any]:
    """``branch.created`` and one ``message.added`` per message."""
    meta = {"branch_id": branch_id}
    return [
        new_event(BranchCreated(branch_id=branch_id, name=name), meta=meta),
        *(new_event(MessageAdded(message=m), meta=meta) for m in messages),
    ]


async def hostile(path: Path) -> None:
    """Fill a store with a branch whose name and messages are HTML that would run script."""
    async with open_store(f"sqlite:///{path}") as store:
        events = branch_events(
            "b-xss",
            XSS_IMG,
            Instruction.create(XSS_SCRIPT),
            AssistantResponse.create(XSS_IMG, metadata={"thinking": XSS_SCRIPT}),
        )
        await store.append("branch-b-xss", events)


async def open_run(path: Path) -> None:
    """Fill a store with a run that started, streamed one chunk and has not ended."""
    async with open_store(f"sqlite:///{path}") as store:
        meta = {"branch_id": "b-live", "run_id": "r-live"}
        events = branch_events("b-live", "live", Instruction.create("count to three"))
        events.append(new_event(RunStarted(run_id="r-live", verb="run", provider="claude_code"), meta=meta))
        await store.append("branch-b-live", events)
        await store.append(
            "run-r-live", [new_event(ChunkReceived(seq=1, type="text", content="one"), meta=meta)]
        )


_WRITER = """
import sys
import anyio
import anyio
from turnlog.eventstore import open_store
from turnlog.projections import ChunkReceived, RunEnded, new_event

async def go(url):
    async with open_store(url) as store:
        meta = {"branch_id": "b-live", "run_id": "r-live"}
        for seq, text in ((2, "two"), (3, "three <b>bold?</b>")):
            chunk = ChunkReceived(seq=seq, type="text", content=text)
            await store.append("run-r-live", [new_event(chunk, meta=meta)])
            await anyio.sleep(0.3)
        ended = RunEnded(run_id="r-live", verb="run", duration_ms=900.0)
        await store.append("branch-b-live", [new_event(ended, meta=meta)])

anyio.run(go, sys.argv[1])
"""


def append_to_open_run(path: Path) -> None:
    """Another process streams two more chunks into the open run and ends it."""
    subprocess.run([sys.executable, "-c", _WRITER, f"sqlite:///{path}"], check=True, timeout=60)


async def damaged(path: Path) -> None:
    """Fill a store with two branches (the caller then rewrites an event of ``b-bad``)."""
    async with open_store(f"sqlite:///{path}") as store:
        await store.append("branch-b-ok", branch_events("b-ok", "fine", Instruction.create("hello")))
        bad = branch_events("b-bad", "tampered", Instruction.create("pay 10"), Instruction.create("thanks"))
        await store.append("branch-b-bad", bad)


def screenshot(page: Any, name: str) -> None:
    """Save a screenshot of the page into ``$TURNLOG_UI_SCREENSHOTS`` when it is set."""
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=False)


def run_async(fn: Any, *args: Any) -> Any:
    """``anyio.run(fn, *args)`` in a thread of its own (Playwright's sync API owns this one's loop)."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            result.append(anyio.run(fn, *args))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


def ready(page: Any) -> None:
    """Wait until app.js has set the page up (its listeners are attached)."""
    page.wait_for_selector("body[data-ready='1']", state="attached")
