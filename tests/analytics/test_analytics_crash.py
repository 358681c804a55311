"""A process killed (SIGKILL) while it updates the projection neither double counts nor skips.

A child process appends turns and updates (and now and then rebuilds) the projection in
small batches, in a loop; the test kills it at a random moment, many times. After every
kill the facts must be exactly those of the events up to the checkpoint, the rollups must
agree with the facts (or, killed inside a rebuild, wait empty for its end), and the final
tables must equal a rebuild from scratch.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from turnlog.analytics import AnalyticsProjection
from turnlog.analytics._database import CONSUMER
from turnlog.eventstore import SQLiteEventStore

CHILD = r"""
import os
import signal
import sys
from datetime import UTC, datetime

import anyio

from turnlog.eventstore import uuid7
from turnlog.eventstore import SQLiteEventStore
from turnlog.analytics import AnalyticsProjection

sys.path.insert(0, sys.argv[4])  # this test's folder: the synthetic-log generator
from synthlog import SyntheticLog


def die_before_checkpoint(analytics: AnalyticsProjection, at_batch: int) -> None:
    # SIGKILL just before the checkpoint statement of a batch runs, when its facts are written.
    seen = [0]

    def trace(statement: str) -> None:
        if statement.startswith("INSERT INTO tracking"):
            seen[0] += 1
            if seen[0] == at_batch:
                os.kill(os.getpid(), signal.SIGKILL)

    analytics._db.conn().set_trace_callback(trace)


async def main(path: str, seed: int, die_at: int) -> None:
    synth = SyntheticLog(seed, datetime(2026, 11, 1, tzinfo=UTC))
    branches = [str(uuid7()) for _ in range(3)]
    async with SQLiteEventStore(path) as store, AnalyticsProjection(store, batch_size=13) as analytics:
        if die_at:
            await analytics.open()
            die_before_checkpoint(analytics, die_at)
        print("ready", flush=True)
        round_ = 0
        while True:
            entries = []
            for _ in range(8):
                entries.extend(synth.turn(synth.rng.choice(branches)))
            await store.append_batch(entries)
            if round_ % 5 == 4:
                await analytics.rebuild()
            else:
                await analytics.update()
            round_ += 1


anyio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
"""


def _positions(conn: sqlite3.Connection, sql: str, *params: object) -> list[int]:
    return [row[0] for row in conn.execute(sql, params)]


def _check_consistent(store_path: Path) -> int:
    """Facts are exactly those of the events up to the checkpoint; rollups match the facts."""
    # The facts live in the analytics database beside the store; its events are attached.
    conn = sqlite3.connect(f"{store_path}.analytics")
    try:
        conn.execute("ATTACH DATABASE ? AS store", (str(store_path),))
        row = conn.execute("SELECT position FROM tracking WHERE consumer = ?", (CONSUMER,)).fetchone()
        checkpoint = 0 if row is None else row[0]
        expected_calls = _positions(
            conn,
            "SELECT position FROM store.events WHERE type = 'model.called' AND position <= ? ORDER BY 1",
            checkpoint,
        )
        assert _positions(conn, "SELECT position FROM analytics_model_calls ORDER BY 1") == expected_calls
        expected_tools = _positions(
            conn,
            "SELECT position FROM store.events WHERE type = 'message.added' AND position <= ? "
            "AND json_extract(data, '$.message.kind') = 'ActionResponse' ORDER BY 1",
            checkpoint,
        )
        assert _positions(conn, "SELECT position FROM analytics_tool_calls ORDER BY 1") == expected_tools
        runs = conn.execute(
            "SELECT COUNT(*) FROM store.events WHERE type = 'run.started' AND position <= ?", (checkpoint,)
        ).fetchone()[0]
        assert conn.execute("SELECT COUNT(*) FROM analytics_runs").fetchone()[0] == runs
        rolled = conn.execute(
            "SELECT COALESCE(SUM(calls), 0), COALESCE(SUM(errors), 0), COALESCE(SUM(input_tokens), 0) "
            "FROM analytics_model_rollup"
        ).fetchone()
        facts = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(\"turnlog.status\" = 'error'), 0), "
            'COALESCE(SUM("gen_ai.usage.input_tokens"), 0) FROM analytics_model_calls'
        ).fetchone()
        if _rebuilding(conn):
            # Killed inside a rebuild: its rollups are summed at its end, never half-way;
            # the next update finishes it (the final comparison with a rebuild checks that).
            assert rolled == (0, 0, 0)
        else:
            assert rolled == facts
        return checkpoint
    finally:
        conn.close()


def _rebuilding(conn: sqlite3.Connection) -> bool:
    # A rebuild drops the rank indexes first and creates them with the rollups last.
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name LIKE 'analytics_model_calls_rank_%'"
    ).fetchone()
    return found is None


def _tables(path: Path) -> dict[str, list[tuple[object, ...]]]:
    conn = sqlite3.connect(path)
    try:
        names = ["analytics_model_calls", "analytics_tool_calls", "analytics_runs", "analytics_model_rollup",
                 "analytics_tool_rollup"]  # fmt: skip
        return {name: conn.execute(f"SELECT * FROM {name} ORDER BY 1").fetchall() for name in names}
    finally:
        conn.close()


@pytest.mark.slow
def test_sigkill_while_updating_never_double_counts_or_skips(tmp_path: Path) -> None:
    store_path = tmp_path / "store.db"
    rng = random.Random(8)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    checkpoints = []
    for kill in range(10):
        # Even rounds: killed from outside at a random moment. Odd rounds: the child kills
        # itself after writing the facts of a random batch, just before its checkpoint.
        die_at = 0 if kill % 2 == 0 else rng.randint(1, 30)
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                str(store_path),
                str(kill),
                str(die_at),
                str(Path(__file__).parent),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == b"ready\n", child.stderr.read() if child.stderr else b""
            if not die_at:
                time.sleep(rng.uniform(0.05, 0.8))  # the kill must land at a random point of the work
                assert child.poll() is None, child.stderr.read() if child.stderr else b""
                child.send_signal(signal.SIGKILL)
            child.wait(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            if child.stdout is not None:
                child.stdout.close()
            if child.stderr is not None:
                child.stderr.close()
        assert child.returncode == -signal.SIGKILL
        checkpoints.append(_check_consistent(store_path))
    assert any(checkpoints), "the child never committed a batch before being killed"

    async def finish() -> None:
        async with SQLiteEventStore(store_path) as store:
            async with AnalyticsProjection(store) as analytics:
                await analytics.update()
                assert await analytics.checkpoint() == await store.head()
            async with AnalyticsProjection(store, database=tmp_path / "fresh.db") as fresh:
                await fresh.rebuild()

    anyio.run(finish)
    _check_consistent(store_path)
    assert _tables(Path(f"{store_path}.analytics")) == _tables(tmp_path / "fresh.db")
