"""``run_inline``: a SQLite store's reads run to their end without an event loop."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Generator
from pathlib import Path

import anyio
import pytest

from turnlog.eventstore import NewEvent, SQLiteEventStore, UsageError, open_store, run_inline
from turnlog.eventstore._inline import checkpoint, running_inline


def _filled(path: Path, events: int) -> str:
    url = f"sqlite:///{path}"

    async def fill() -> None:
        async with open_store(url) as store:
            await store.append("s-1", [NewEvent("noted", {"i": i}) for i in range(events)])

    anyio.run(fill)
    return url


def test_a_read_of_many_pages_runs_without_a_loop(tmp_path: Path) -> None:
    """Pages past the first (500 events each) are read too: the checkpoint between them gives no turn."""
    url = _filled(tmp_path / "s.db", 1_234)

    async def read() -> tuple[bool, list[int]]:
        async with open_store(url) as store:
            return running_inline(), [e.data["i"] async for e in store.read_stream("s-1")]

    inline, seen = run_inline(read)
    assert inline and seen == list(range(1_234))
    assert not running_inline()


def test_worker_jobs_run_on_the_calling_thread_s_wait(tmp_path: Path) -> None:
    """verify (a worker job) and a close that checkpoints a WAL another connection wrote."""
    url = _filled(tmp_path / "s.db", 3)

    async def verify_then_close() -> bool:
        store = SQLiteEventStore(tmp_path / "s.db", create=False)
        other = sqlite3.connect(tmp_path / "s.db")  # leaves frames in the WAL for the close
        other.execute("PRAGMA wal_autocheckpoint = 0")
        other.execute("CREATE TABLE IF NOT EXISTS scratch (x)")
        other.commit()
        try:
            report = await store.verify()
        finally:
            await store.close()
            other.close()
        return report.ok

    assert url and run_inline(verify_then_close)


def test_a_bare_yield_is_resumed_and_errors_propagate() -> None:
    async def fails() -> None:
        await asyncio.sleep(0)  # a bare yield to the loop
        await checkpoint()
        raise KeyError("k")

    with pytest.raises(KeyError):
        run_inline(fails)
    assert not running_inline()


class _Pending:
    def __await__(self) -> Generator[str, None, None]:
        yield "a future only a loop resolves"


def test_an_await_that_needs_a_loop_is_refused_and_the_coroutine_closed() -> None:
    cleaned: list[bool] = []

    async def waits() -> None:
        try:
            await _Pending()
        finally:
            cleaned.append(True)

    with pytest.raises(UsageError, match="needs an event loop"):
        run_inline(waits)
    assert cleaned == [True]
    assert not running_inline()


def test_under_a_loop_checkpoint_still_gives_a_turn() -> None:
    order: list[str] = []

    async def main() -> None:
        async def other() -> None:
            order.append("other")

        async with anyio.create_task_group() as tg:
            tg.start_soon(other)
            await checkpoint()
            order.append("main")

    anyio.run(main)
    assert order == ["other", "main"]
