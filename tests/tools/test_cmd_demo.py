"""`turnlog demo` runs offline on a fresh store, and what it says it wrote is really there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
from turnlog.eventstore import open_store


def _demo(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(tmp)}
    env.pop("TURNLOG_STORE", None)
    return subprocess.run(
        [sys.executable, "-m", "turnlog.tools._cli", "demo", *args],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def _contents(url: str) -> tuple[bool, list[tuple[str, int, str]]]:
    async with open_store(url) as store:
        report = await store.verify()
        events = [(e.stream, e.version, e.type) async for e in store.read_all()]
    return report.ok, events


def test_demo_on_a_fresh_temporary_store(tmp_path: Path) -> None:
    done = _demo(tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    path = Path(re.search(r"^store: (.+)$", out, re.MULTILINE).group(1))  # type: ignore[union-attr]
    assert path.is_file() and tmp_path in path.parents
    for step in ("1. append", "2. read back", "3. time travel", "4. verify"):
        assert step in out
    assert "every hash chain verifies" in out
    assert "What is an event store?" in out
    assert "Try next:" in out and "turnlog bench append" in out
    # Time travel shows the first three versions only.
    travel = out.split("3. time travel", 1)[1].split("4. verify", 1)[0]
    assert "What is an event store?" in travel and "So can I see" not in travel

    ok, events = anyio.run(_contents, f"sqlite:///{path}")
    assert ok
    assert [(version, type_) for _, version, type_ in events] == [
        (1, "branch.created"),
        *((v, "message.added") for v in range(2, 6)),
    ]
    assert len({stream for stream, _, _ in events}) == 1


def test_demo_with_a_chosen_store_adds_a_new_branch(tmp_path: Path) -> None:
    db = tmp_path / "mine.db"
    for _ in range(2):
        done = _demo("--store", str(db), tmp=tmp_path)
        assert done.returncode == 0, done.stderr
        assert f"store: {db}" in done.stdout
    ok, events = anyio.run(_contents, f"sqlite:///{db}")
    assert ok
    assert len(events) == 10 and len({stream for stream, _, _ in events}) == 2


def test_demo_reports_an_unusable_store_clearly(tmp_path: Path) -> None:
    not_a_store = tmp_path / "notes.db"
    not_a_store.write_text("these are not the events you are looking for\n" * 100)
    done = _demo("--store", str(not_a_store), tmp=tmp_path)
    assert done.returncode == 2
    assert "turnlog demo:" in done.stderr and "Traceback" not in done.stderr
