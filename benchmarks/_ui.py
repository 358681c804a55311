"""``turnlog bench ui``: how fast the pages of ``turnlog ui`` answer on big logs.

One SQLite store holds a branch of ``--big`` events (default 10,000), a branch of
``--scrub`` events (default 1,000) and ``--branches`` small branches (default 10,000). The
app runs in this process (no network in between: the figures are the app's own time) and
each figure is the wall time of one HTTP request through the whole app:

- **open**: the page of the big branch, first with a fresh app (nothing cached), then again;
- **scrub**: moving the scrubber on the 1,000-event branch (``/conversation?at=V``, random
  versions after the page was opened), p50 / p95 / max;
- **list**: the branch list with all branches, first (the index is built) and then warm,
  a search by name, and a far page.

Targets (issue 20): open < 1 s, scrub p95 < 100 ms, list responsive (< 1 s warm).
"""

from __future__ import annotations

import argparse
import functools
import random
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx

from turnlog.eventstore import EventStore, NewEvent, open_store
from turnlog.projections import AssistantResponse, BranchCreated, Instruction, MessageAdded, new_event
from turnlog.tools._command import emit_json

__all__ = ["add_arguments", "run"]

TARGETS = {"open_ms": 1000.0, "scrub_p95_ms": 100.0, "list_warm_ms": 1000.0}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--big", type=int, default=10_000, help="events of the big branch (default 10000)")
    parser.add_argument(
        "--scrub", type=int, default=1_000, help="events of the scrubbed branch (default 1000)"
    )
    parser.add_argument("--branches", type=int, default=10_000, help="small branches (default 10000)")
    parser.add_argument("--moves", type=int, default=100, help="scrubber moves measured (default 100)")
    parser.add_argument("--seed", type=int, default=1, help="random seed of the scrubbed versions")
    parser.add_argument(
        "--dir", default=None, help="where the SQLite file goes (default: a temporary directory)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _messages(branch_id: str, n: int) -> list[NewEvent]:
    meta = {"branch_id": branch_id}
    events = [new_event(BranchCreated(branch_id=branch_id, name=branch_id), meta=meta)]
    for i in range(1, n):
        text = f"message {i}: the model reads a file then calls a tool and answers with a plan " * 2
        message = Instruction.create(text) if i % 2 else AssistantResponse.create(text)
        events.append(new_event(MessageAdded(message=message), meta=meta))
    return events


async def _fill(store: EventStore, args: argparse.Namespace) -> None:
    for branch_id, n in (("big", args.big), ("scrub", args.scrub)):
        events = _messages(branch_id, n)
        for i in range(0, len(events), 5000):
            await store.append(f"branch-{branch_id}", events[i : i + 5000])
    entries: list[Any] = []
    for i in range(args.branches):
        branch_id = f"small-{i:05d}"
        entries.append((f"branch-{branch_id}", _messages(branch_id, 2), 0))
        if len(entries) == 500:
            await store.append_batch(entries)
            entries = []
    if entries:
        await store.append_batch(entries)


@asynccontextmanager
async def _client(url: str) -> AsyncIterator[httpx.AsyncClient]:
    from starlette.applications import Starlette

    from turnlog.tools.ui import UIConfig, create_app

    app = create_app(UIConfig(url))
    inner = app.app  # the Starlette app inside the security guard: run its lifespan here
    assert isinstance(inner, Starlette)
    async with inner.router.lifespan_context(inner):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield client


async def _timed(call: Callable[[], Awaitable[httpx.Response]]) -> float:
    started = time.perf_counter()
    response = await call()
    took = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"{response.request.url} answered {response.status_code}")
    return took


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        url = f"sqlite:///{Path(tmp) / 'ui.db'}"
        started = time.perf_counter()
        async with open_store(url) as store:
            await _fill(store, args)
        result: dict[str, Any] = {
            "big_events": args.big,
            "scrub_events": args.scrub,
            "branches": args.branches + 2,
            "write_s": round(time.perf_counter() - started, 2),
        }
        async with _client(url) as c:
            result["open_cold_ms"] = await _timed(lambda: c.get("/branches/big"))
            result["open_warm_ms"] = await _timed(lambda: c.get("/branches/big"))
            result["open_middle_ms"] = await _timed(lambda: c.get(f"/branches/big?at={args.big // 2}"))
        async with _client(url) as c:
            result["list_cold_ms"] = await _timed(lambda: c.get("/"))
            result["list_warm_ms"] = await _timed(lambda: c.get("/"))
            result["list_search_ms"] = await _timed(lambda: c.get("/?q=small-0999"))
            result["list_far_page_ms"] = await _timed(lambda: c.get(f"/?page={max(1, args.branches // 50)}"))
            result["scrub_open_ms"] = await _timed(lambda: c.get("/branches/scrub"))
            rng = random.Random(args.seed)
            moves = []
            for _ in range(args.moves):
                version = rng.randint(1, args.scrub)
                moves.append(
                    await _timed(functools.partial(c.get, f"/branches/scrub/conversation?at={version}"))
                )
        moves.sort()
        result["scrub_p50_ms"] = statistics.median(moves)
        result["scrub_p95_ms"] = moves[min(len(moves) - 1, int(0.95 * len(moves)))]
        result["scrub_max_ms"] = moves[-1]
        result["targets"] = TARGETS
        return {k: round(v, 1) if isinstance(v, float) else v for k, v in result.items()}


def run(args: argparse.Namespace) -> int:
    """Build the store, measure, print the figures (``--json`` for machine-readable output)."""
    result = anyio.run(_bench, args)
    if args.json:
        emit_json(result)
        return 0
    r = result
    print(
        f"store: a {r['big_events']:,}-event branch, a {r['scrub_events']:,}-event branch, {r['branches']:,} branches"
    )
    print(
        f"  open the {r['big_events']:,}-event branch: {r['open_cold_ms']} ms cold, {r['open_warm_ms']} ms warm, "
        f"{r['open_middle_ms']} ms at its middle version (target < {TARGETS['open_ms']:.0f} ms)"
    )
    print(
        f"  scrubber on the {r['scrub_events']:,}-event branch: p50 {r['scrub_p50_ms']} ms, p95 {r['scrub_p95_ms']} ms, "
        f"max {r['scrub_max_ms']} ms (target p95 < {TARGETS['scrub_p95_ms']:.0f} ms)"
    )
    print(
        f"  branch list of {r['branches']:,}: {r['list_cold_ms']} ms first (index built), {r['list_warm_ms']} ms warm, "
        f"search {r['list_search_ms']} ms, far page {r['list_far_page_ms']} ms"
    )
    ok = (
        r["open_cold_ms"] < TARGETS["open_ms"]
        and r["scrub_p95_ms"] < TARGETS["scrub_p95_ms"]
        and r["list_warm_ms"] < TARGETS["list_warm_ms"]
    )
    print("all targets met" if ok else "SOME TARGETS MISSED")
    return 0
