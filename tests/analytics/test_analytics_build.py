"""The shortcuts of a build from scratch give what the plain paths give.

A build sums its rollups in memory (not with ``GROUP BY`` at its end), leaves messages that
are no tool call unparsed, and binds NULLs through registered ``sqlite3`` adapters: the
tables must be those of the plain paths, and a tool call's bad payload is still an error.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from turnlog.analytics import AnalyticsProjection
from turnlog.analytics._database import bind_plainly
from turnlog.analytics._rollup import ROLLUPS, rebuild_rollups, register_functions
from turnlog.eventstore import CorruptEventError, open_store, uuid7

from .synthlog import SyntheticLog


def _rollups(conn: sqlite3.Connection) -> list[list[tuple[Any, ...]]]:
    return [conn.execute(f"SELECT * FROM {r.name} ORDER BY key").fetchall() for r in ROLLUPS]


async def test_a_build_sums_the_rollups_that_sql_sums(tmp_path: Path) -> None:
    """The rollups a build summed batch by batch equal those summed in SQL from its facts."""
    path = tmp_path / "store.db"
    synth = SyntheticLog(3, datetime(2026, 11, 1, tzinfo=UTC))
    branches = [str(uuid7()) for _ in range(4)]
    async with open_store(f"sqlite:///{path}") as store:
        for turn in range(150):
            await store.append_batch(synth.turn(branches[turn % 4]))
        async with AnalyticsProjection(store, batch_size=97) as analytics:
            await analytics.rebuild()
    conn = sqlite3.connect(f"{path}.analytics", isolation_level=None)
    try:
        register_functions(conn)
        built = _rollups(conn)
        assert built[0] and built[1]
        conn.execute("BEGIN")
        rebuild_rollups(conn)
        assert _rollups(conn) == built
        conn.execute("ROLLBACK")
    finally:
        conn.close()


async def test_a_tool_call_with_a_bad_payload_is_still_an_error(tmp_path: Path, log: SimpleNamespace) -> None:
    """Only messages that cannot be tool calls go unparsed: a broken ActionResponse is refused."""
    path = tmp_path / "store.db"
    async with open_store(f"sqlite:///{path}") as store:
        await store.append("branch-x", [log.tool("search"), log.tool("search")])
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("UPDATE events SET data = ? WHERE position = 2", (b'{"kind": "ActionResponse", ',))
        finally:
            conn.close()
        async with AnalyticsProjection(store, batch_size=1) as analytics:
            with pytest.raises(CorruptEventError, match="not valid JSON"):
                await analytics.update()
            assert [row.calls for row in await analytics.tool_usage("tool")] == [1]


async def test_messages_that_are_no_tool_call_count_as_read(tmp_path: Path) -> None:
    """Skipped messages still count as events read, and make no fact."""
    path = tmp_path / "store.db"
    synth = SyntheticLog(5, datetime(2026, 11, 1, tzinfo=UTC))
    async with open_store(f"sqlite:///{path}") as store:
        for _ in range(20):
            await store.append_batch(synth.turn(str(uuid7())))
        read = [e async for e in store.read_all(types=["message.added"])]
        tools = [e for e in read if e.data["message"]["kind"] == "ActionResponse"]
        async with AnalyticsProjection(store) as analytics:
            report = await analytics.rebuild()
            facts = await analytics.sql("SELECT COUNT(*) FROM analytics_tool_calls")
    assert len(read) > len(tools)
    assert facts == [(len(tools),)]
    relevant = ("model.called", "message.added", "run.started", "run.ended", "run.failed")
    async with open_store(f"sqlite:///{path}") as store:
        assert report.events == len([e async for e in store.read_all(types=relevant)])


def test_nulls_and_bools_bind_as_before_and_an_application_adapter_stays() -> None:
    """None binds as NULL and a bool as its integer; an adapter registered before is kept."""
    keys = [(bool, sqlite3.PrepareProtocol), (type(None), sqlite3.PrepareProtocol)]
    before = {key: sqlite3.adapters.get(key) for key in keys}
    try:
        mine = str
        sqlite3.register_adapter(bool, mine)
        bind_plainly()
        assert sqlite3.adapters[keys[0]] is mine
        for key in keys:
            sqlite3.adapters.pop(key, None)
        bind_plainly()
        assert all(key in sqlite3.adapters for key in keys)
        conn = sqlite3.connect(":memory:")
        try:
            row = conn.execute("SELECT ?, typeof(?), ?, typeof(?)", (None, None, True, True)).fetchone()
        finally:
            conn.close()
        assert row == (None, "null", 1, "integer")
    finally:
        for key, adapter in before.items():
            if adapter is None:
                sqlite3.adapters.pop(key, None)
            else:
                sqlite3.adapters[key] = adapter
