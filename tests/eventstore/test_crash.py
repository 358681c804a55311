"""Crash proof: a writer killed with SIGKILL at random moments loses nothing it acknowledged.

A real child process appends in a loop (single events, small batches and atomic batches over
two streams, always with ``expected_version``) and prints every acknowledged append after the
call returned. The parent kills it at a random moment, reopens the store and checks it, over
and over on the same database file.
"""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from turnlog.eventstore import RecordedEvent, open_store

WORKER = Path(__file__).with_name("_workers.py")
KILLS = 24


def _spawn(db: Path, seed: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), "crash", str(db), str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _kill_and_collect(proc: subprocess.Popen[bytes], rng: random.Random, wait_ready: bool) -> list[list[Any]]:
    """Let the worker run for a random moment, SIGKILL it, return its acknowledged appends.

    Without ``wait_ready`` the kill may land while the worker is still opening the store.
    """
    assert proc.stdout is not None
    if wait_ready:
        line = proc.stdout.readline()
        assert orjson.loads(line) == {"ready": True}, line
        time.sleep(rng.uniform(0.0, 0.2))  # the random moment of the crash
    else:
        time.sleep(rng.uniform(0.05, 0.4))
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, f"worker ended by itself ({proc.returncode}):\n{err.decode()}"
    acks: list[list[Any]] = []
    for raw in out.splitlines():
        try:
            msg = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue  # the last line was cut by the kill: that append was never acknowledged
        acks.extend(msg.get("ack", []))
    return acks


def _integrity_ok(db: Path) -> None:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()


async def _check_store(db: Path, acknowledged: dict[str, tuple[str, int, int]]) -> int:
    async with open_store(f"sqlite:///{db}") as store:
        events: list[RecordedEvent] = [e async for e in store.read_all()]
        head = await store.head()
        report = await store.verify()
    assert report.ok, [str(p) for p in report.problems]
    positions = [e.position for e in events]
    assert positions == list(range(1, head + 1)), "global positions are not gapless"
    stored = {str(e.id): (e.stream, e.version, e.position) for e in events}
    missing = {eid: where for eid, where in acknowledged.items() if stored.get(eid) != where}
    assert not missing, f"acknowledged events lost or moved: {list(missing.items())[:5]}"
    batches: dict[str, list[RecordedEvent]] = defaultdict(list)
    for e in events:
        batches[e.meta["batch"]].append(e)
    for batch_id, members in batches.items():
        size = members[0].meta["n"]
        assert sorted(m.meta["i"] for m in members) == list(range(size)), f"batch {batch_id} is half-written"
        assert [m.position for m in members] == list(range(members[0].position, members[0].position + size))
    by_stream: dict[str, list[int]] = defaultdict(list)
    for e in events:
        by_stream[e.stream].append(e.version)
    for stream, versions in by_stream.items():
        assert versions == list(range(1, len(versions) + 1)), f"{stream} versions are not contiguous"
    return len(events)


@pytest.mark.slow
def test_acknowledged_appends_survive_sigkill(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    rng = random.Random(20261202)
    acknowledged: dict[str, tuple[str, int, int]] = {}
    kills_while_appending = 0
    for round_ in range(KILLS):
        proc = _spawn(db, seed=round_)
        # The first worker creates the store undisturbed; later ones are sometimes killed early.
        acks = _kill_and_collect(proc, rng, wait_ready=round_ == 0 or rng.random() < 0.8)
        if acks:
            kills_while_appending += 1
        for eid, stream, version, position in acks:
            acknowledged[eid] = (stream, version, position)
        _integrity_ok(db)
        stored = anyio.run(_check_store, db, acknowledged)
        assert stored >= len(acknowledged)
    assert kills_while_appending >= KILLS // 2, "too few kills landed while the worker was appending"
    assert len(acknowledged) >= 200, f"only {len(acknowledged)} acknowledged events: the proof is too weak"
