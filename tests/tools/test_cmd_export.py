"""``turnlog export`` never writes the store, never replaces a file unasked, never leaves half a file."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from turnlog.eventstore import open_store
from turnlog.kernel import Branch
from turnlog.testing import ScriptedModel


def turnlog(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnlog", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin", **(env or {})},
    )


@pytest.fixture
async def store(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    async with open_store(f"sqlite:///{path}") as opened:
        for name in ("alpha", "beta"):
            branch = Branch(store=opened, name=name, chat_model=ScriptedModel("A.", "B."))
            await branch.chat_and_record("first")
            await branch.communicate("second")
    return path


def _events(store: Path) -> int:
    import sqlite3

    with sqlite3.connect(store) as db:
        return int(db.execute("SELECT count(*) FROM events").fetchone()[0])


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_the_store_itself_is_refused(store: Path, tmp_path: Path, suffix: str) -> None:
    count = _events(store)
    done = turnlog("export", "--store", str(store), "--out", f"{store}{suffix}", "--force", cwd=tmp_path)
    assert done.returncode == 2 and "is the store itself" in done.stderr, done.stderr
    assert _events(store) == count
    assert turnlog("verify", "--store", str(store), cwd=tmp_path).returncode == 0


def test_the_store_through_a_link_or_turnlog_store_is_refused(store: Path, tmp_path: Path) -> None:
    link = tmp_path / "export.jsonl"
    link.symlink_to(store)
    done = turnlog("export", "--store", str(store), "--out", str(link), "--force", cwd=tmp_path)
    assert done.returncode == 2 and "is the store itself" in done.stderr
    via_env = turnlog("export", "--out", "s.db", "--force", cwd=tmp_path, env={"TURNLOG_STORE": str(store)})
    assert via_env.returncode == 2 and "is the store itself" in via_env.stderr
    assert turnlog("verify", "--store", str(store), cwd=tmp_path).returncode == 0


def test_an_existing_file_is_replaced_only_with_force(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("an earlier export\n")
    done = turnlog("export", "--store", str(store), "--out", str(out), cwd=tmp_path)
    assert done.returncode == 2 and "--force" in done.stderr
    assert out.read_text() == "an earlier export\n"
    forced = turnlog("export", "--store", str(store), "--out", str(out), "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert len(out.read_text().splitlines()) == _events(store)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_link_at_the_destination_is_never_followed(store: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    link = tmp_path / "out.jsonl"
    link.symlink_to(victim)
    for extra in ([], ["--force"]):
        done = turnlog("export", "--store", str(store), "--out", str(link), *extra, cwd=tmp_path)
        assert done.returncode == 2 and "symbolic link" in done.stderr
    assert victim.read_text() == "keep me\n"


def test_a_failed_export_leaves_no_partial_file(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("an earlier export\n")
    missing_dir = turnlog(
        "export", "--store", str(store), "--out", str(tmp_path / "no" / "x.jsonl"), cwd=tmp_path
    )
    assert missing_dir.returncode == 2 and "does not exist" in missing_dir.stderr
    # the store fails half-way through the read: the earlier export stays as it was
    import sqlite3

    with sqlite3.connect(store) as db:
        db.execute("UPDATE events SET data = 'not json' WHERE position = 5")
    failed = turnlog("export", "--store", str(store), "--out", str(out), "--force", cwd=tmp_path)
    assert failed.returncode != 0 and "Traceback" not in failed.stderr
    assert out.read_text() == "an earlier export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl", "s.db"] + (
        ["s.db-shm", "s.db-wal"] if (tmp_path / "s.db-wal").exists() else []
    )


def test_branch_is_resolved_by_name_prefix_and_id(store: Path, tmp_path: Path) -> None:
    branches = json.loads(turnlog("branches", "--store", str(store), "--json", cwd=tmp_path).stdout)
    alpha = next(b["branch_id"] for b in branches if b["name"] == "alpha")
    outputs = []
    for i, ref in enumerate(("alpha", alpha, alpha[:30])):
        out = tmp_path / f"e{i}.jsonl"
        done = turnlog("export", "--store", str(store), "--branch", ref, "--out", str(out), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        outputs.append(out.read_text())
    assert outputs[0] == outputs[1] == outputs[2] and outputs[0]
    assert {json.loads(line)["stream"] for line in outputs[0].splitlines()} == {f"branch-{alpha}"}
    unknown = turnlog("export", "--store", str(store), "--branch", "gamma", "--out", "g.jsonl", cwd=tmp_path)
    assert unknown.returncode == 2 and "gamma" in unknown.stderr
    assert not (tmp_path / "g.jsonl").exists()


def test_parquet_is_refused_over_existing_tables_and_written_whole(store: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    out = tmp_path / "pq"
    first = turnlog("export", "--store", str(store), "--format", "parquet", "--out", str(out), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    names = sorted(p.name for p in out.iterdir())
    assert "events.parquet" in names and all(not n.startswith(".") for n in names)
    again = turnlog("export", "--store", str(store), "--format", "parquet", "--out", str(out), cwd=tmp_path)
    assert again.returncode == 2 and "--force" in again.stderr
    forced = turnlog(
        "export", "--store", str(store), "--format", "parquet", "--out", str(out), "--force", cwd=tmp_path
    )
    assert forced.returncode == 0, forced.stderr
    assert sorted(p.name for p in out.iterdir()) == names
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in out.iterdir())
    assert os.access(out, os.W_OK)
