"""Several processes append to shared streams at once; readers follow the log meanwhile.

Writers use ``expected_version`` = the version they just read and retry on
``ConcurrencyError``. One reader follows with ``subscribe`` and one polls ``read_all``; both
check that position k+1 never shows up before k.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from turnlog.eventstore import RecordedEvent, open_store

WORKER = Path(__file__).with_name("_workers.py")
WRITERS = 4
APPENDS = 500
STREAMS = 3
TIMEOUT = 120.0


def _start(*args: object) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if orjson.loads(line or b"null") != {"ready": True}:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"worker {args} did not start: {line!r}\n{err.decode()}")
    return proc


def _finish(proc: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, f"worker failed ({proc.returncode}):\n{err.decode()}"
    return [orjson.loads(line) for line in out.splitlines()]


async def _create_store(db: Path) -> None:
    async with open_store(f"sqlite:///{db}"):
        pass


async def _read_back(db: Path) -> tuple[list[RecordedEvent], bool, list[str]]:
    async with open_store(f"sqlite:///{db}") as store:
        events = [e async for e in store.read_all()]
        report = await store.verify()
    return events, report.ok, [str(p) for p in report.problems]


@pytest.mark.slow
def test_concurrent_writers_and_readers(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    anyio.run(_create_store, db)
    total = WRITERS * APPENDS
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs += [_start("reader", db, total, mode, TIMEOUT) for mode in ("subscribe", "poll")]
        procs += [_start("writer", db, wid, APPENDS, STREAMS) for wid in range(WRITERS)]
        readers, writers = procs[:2], procs[2:]
        for proc in writers:  # every writer is open and waiting: start them together
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
        with ThreadPoolExecutor(len(procs)) as pool:
            outputs = list(pool.map(_finish, writers + readers))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    writer_out, reader_out = outputs[:WRITERS], outputs[WRITERS:]

    acked = [ack for lines in writer_out for line in lines for ack in line.get("ack", [])]
    retries = sum(line["done"]["retries"] for lines in writer_out for line in lines if "done" in line)
    assert len(acked) == total
    events, ok, problems = anyio.run(_read_back, db)
    assert ok, problems

    # Nothing lost, nothing duplicated: every acknowledged id is stored once, where it was acknowledged.
    ids = Counter(str(e.id) for e in events)
    assert len(events) == total and set(ids.values()) == {1}
    stored = {str(e.id): (e.stream, e.version, e.position) for e in events}
    for eid, stream, version, position in acked:
        assert stored[eid] == (stream, version, position)
    # Per-stream versions are gapless; global positions are contiguous and in commit order.
    versions: dict[str, list[int]] = defaultdict(list)
    for e in events:
        versions[e.stream].append(e.version)
    for stream, seen in versions.items():
        assert seen == list(range(1, len(seen) + 1)), f"{stream} has a version gap"
    assert [e.position for e in events] == list(range(1, total + 1))
    times = [e.recorded_at for e in events]
    assert times == sorted(times), "recorded_at goes back while positions go up"
    # The writers really raced each other.
    assert retries > 0, "no writer ever met a conflict: the test did not exercise concurrency"

    for lines in reader_out:
        (summary,) = [line["done"] for line in lines if "done" in line]
        assert summary["problems"] == [], summary
        assert summary["count"] == total and summary["last"] == total, summary
