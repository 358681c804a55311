"""``turnlog import`` and ``turnlog migrate`` killed during the copy (SIGKILL), then run again.

A kill can land after the import has moved PostgreSQL's position sequence and before its
transaction commits: the rows roll back, the sequence does not. The re-run must still finish
the job, even on a target that holds nothing, and the result must be the source, byte for
byte (ids, versions, types, data, meta, times, hashes), and verify. The same kills hit a
100k-event migrate in both directions (SQLite -> PostgreSQL, PostgreSQL -> SQLite).
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import astuple
from pathlib import Path

import anyio
import pytest

from turnlog.eventstore import ANY, EventStore, NewEvent, open_store

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    # A 100k-event import is one long write transaction: on a shared server it holds back every
    # global reader (docs/postgres.md), so these run on their own, before the parallel tests.
    pytest.mark.serial,
]

IMPORT_EVENTS = 100_000
STREAMS = 10
DEADLINE = 240.0


async def _fill(url: str, count: int) -> None:
    per_stream = 100
    async with open_store(url) as store:
        for start in range(0, count, per_stream * STREAMS):
            await store.append_batch(
                [
                    (
                        f"load-{k}",
                        [NewEvent("load.added", {"n": start + k * per_stream + i, "text": "héllo 🌍"}, {"k": k})
                         for i in range(per_stream)],
                        ANY,
                    )
                    for k in range(STREAMS)
                ]
            )  # fmt: skip


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 100k-event SQLite store and its JSON Lines export."""
    base = tmp_path_factory.mktemp("resume")
    big, export = base / "big.db", base / "big.jsonl"
    anyio.run(_fill, f"sqlite:///{big}", IMPORT_EVENTS)
    _finish("export", "--store", f"sqlite:///{big}", "--out", str(export))
    return big, export


def _cli(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "turnlog", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _pg_positions(url: str) -> tuple[int, int] | None:
    """(positions handed out, highest committed position) of the store at ``url``, or None before it exists."""
    dsn, _, schema = url.rpartition("schema=")
    with psycopg.connect(dsn[:-1], autocommit=True) as conn:  # the DSN without its "?" or "&"
        exists = conn.execute("SELECT to_regclass(%s)", [f"{schema}.events_position"]).fetchone()
        if exists is None or exists[0] is None:
            return None
        row = conn.execute(
            f'SELECT (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM "{schema}".events_position), '
            f'(SELECT coalesce(max(position), 0) FROM "{schema}".events)'
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])


def _kill_when(proc: subprocess.Popen[bytes], moment: Callable[[], bool]) -> None:
    """SIGKILL ``proc`` as soon as ``moment()`` holds (polled: the moment is another process's state)."""
    started = time.monotonic()
    while not moment():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(
                f"the process ended before the moment to kill it:\n{out.decode()}{err.decode()}"
            )
        assert time.monotonic() - started < DEADLINE, "the moment to kill never came"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()  # reaps it and closes its pipes


def _copy_in_flight(url: str, at_least: int) -> Callable[[], bool]:
    """The target holds ``at_least`` events and a copy transaction has moved the sequence past them."""

    def moment() -> bool:
        positions = _pg_positions(url)
        return positions is not None and positions[1] >= at_least and positions[0] > positions[1]

    return moment


def _finish(*args: str) -> str:
    proc = _cli(*args)
    out, err = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 0, f"turnlog {args[0]} failed:\n{out.decode()}{err.decode()}"
    return out.decode()


async def _raw(store: EventStore) -> list[tuple[object, ...]]:
    """Every event as stored, without the position (an import numbers them in its target)."""
    raw, after, events = store, 0, []
    assert "raw_copy" in store.capabilities
    while batch := await raw.raw_events(after, 5000):  # type: ignore[attr-defined]
        events.extend(astuple(event)[1:] for event in batch)
        after = batch[-1].position
    return events


async def _same(source: str, target: str, *, positions: bool, verify: bool = True) -> None:
    async with open_store(source, create=False) as src, open_store(target, create=False) as dst:
        if verify:  # a migrate verifies its copy itself ("ok: the copy verifies")
            report = await dst.verify()
            assert report.ok, report.problems[:3]
        mine, theirs = await _raw(src), await _raw(dst)
        assert len(theirs) == len(mine)
        assert theirs == mine
        if positions:
            assert [e.position async for e in dst.read_all()] == [e.position async for e in src.read_all()]


def test_import_killed_after_moving_the_sequence_is_finished_by_a_rerun(
    sources: tuple[Path, Path], pg_url: str
) -> None:
    """Killed while the store is being created, then while its one transaction is in flight: a re-run imports all."""
    big, export = sources
    proc = _cli("import", str(export), "--store", pg_url)
    _kill_when(proc, lambda: _pg_positions(pg_url) is not None)
    proc = _cli("import", str(export), "--store", pg_url)
    _kill_when(proc, _copy_in_flight(pg_url, 0))
    assert _pg_positions(pg_url) == (IMPORT_EVENTS, 0)  # nothing stored, the sequence ahead
    assert "imported 100000 new events" in _finish("import", str(export), "--store", pg_url)
    anyio.run(lambda: _same(f"sqlite:///{big}", pg_url, positions=False))


def test_migrate_both_ways_killed_at_several_moments_is_finished_by_a_rerun(
    sources: tuple[Path, Path], pg_url: str, tmp_path: Path
) -> None:
    """100k events, SQLite -> PostgreSQL and back, each killed three times: every re-run resumes, the copies are the source.

    SQLite -> PostgreSQL is killed with its first chunk in flight (nothing stored, the sequence
    ahead), then at a third and at two thirds; PostgreSQL -> SQLite at its first chunk, a third
    and two thirds. Each re-run copies only what is missing; the end is the source byte for
    byte (ids, versions, types, data, meta, times, hashes, positions) and verifies.
    """
    big, _ = sources
    source = f"sqlite:///{big}"
    moments = (IMPORT_EVENTS // 3, 2 * IMPORT_EVENTS // 3)
    for at_least in (0, *moments):
        proc = _cli("migrate", "--from", source, "--to", pg_url)
        _kill_when(proc, _copy_in_flight(pg_url, at_least))
    handed_out, stored = _pg_positions(pg_url) or (0, 0)
    assert moments[1] <= stored < handed_out < IMPORT_EVENTS
    out = _finish("migrate", "--from", source, "--to", pg_url)
    assert f"({stored} were already there)" in out and "ok: the copy verifies" in out
    anyio.run(lambda: _same(source, pg_url, positions=True, verify=False))

    back = tmp_path / "back.db"
    target = f"sqlite:///{back}"
    for at_least in (1, *moments):
        proc = _cli("migrate", "--from", pg_url, "--to", target)
        _kill_when(proc, lambda at_least=at_least: _sqlite_count(back) >= at_least)
    stored = _sqlite_count(back)
    assert moments[1] <= stored < IMPORT_EVENTS
    out = _finish("migrate", "--from", pg_url, "--to", target)
    assert f"({stored} were already there)" in out and "ok: the copy verifies" in out
    anyio.run(lambda: _same(pg_url, target, positions=True, verify=False))


def _sqlite_count(path: Path) -> int:
    if not path.exists():
        return 0
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
    except sqlite3.Error:  # its tables are not created yet
        return 0
    finally:
        conn.close()
