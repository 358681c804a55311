"""``turnlog import``: idempotent, resumable, and refusing altered files before writing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from turnlog.eventstore import open_store
from turnlog.kernel import Branch
from turnlog.kernel.testing import ScriptedModel


def turnlog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnlog.tools._cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture
async def export(tmp_path: Path) -> Path:
    source = tmp_path / "source.db"
    async with open_store(f"sqlite:///{source}") as store:
        for name in ("one", "two"):
            branch = Branch(store=store, name=name, chat_model=ScriptedModel("A.", "B."))
            await branch.chat_and_record("first")
            await branch.communicate("second")
    out = tmp_path / "export.jsonl"
    done = turnlog("export", "--store", str(source), "--format", "jsonl", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def _count(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def test_import_twice_adds_nothing_and_verifies(export: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.db"
    first = turnlog("import", str(export), "--store", str(target), "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["added"] == _count(export)
    second = turnlog("import", str(export), "--store", str(target), "--json")
    assert json.loads(second.stdout) == {"added": 0, "present": _count(export), "streams": 2}
    assert turnlog("verify", "--store", str(target)).returncode == 0
    assert turnlog("replay", "one", "--execute", "--store", str(target)).returncode == 0


def test_interrupted_import_completes_on_the_next_run(export: Path, tmp_path: Path) -> None:
    lines = export.read_text().splitlines()
    half = tmp_path / "half.jsonl"
    half.write_text("\n".join(lines[: len(lines) // 2]) + "\n")
    target = tmp_path / "target.db"
    assert turnlog("import", str(half), "--store", str(target)).returncode == 0
    rest = json.loads(turnlog("import", str(export), "--store", str(target), "--json").stdout)
    assert rest["added"] + rest["present"] == len(lines)
    assert rest["present"] == len(lines) // 2


def test_altered_file_is_refused_before_writing(export: Path, tmp_path: Path) -> None:
    text = export.read_text().replace('"A."', '"Z."', 1)
    altered = tmp_path / "altered.jsonl"
    altered.write_text(text)
    target = tmp_path / "target.db"
    proc = turnlog("import", str(altered), "--store", str(target))
    assert proc.returncode == 2
    assert "does not match its hash" in proc.stderr
    assert not target.exists()


def test_malformed_line_names_its_number(export: Path, tmp_path: Path) -> None:
    lines = export.read_text().splitlines()
    lines[2] = "{not json"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines))
    proc = turnlog("import", str(bad), "--store", str(tmp_path / "t.db"))
    assert proc.returncode == 2
    assert "line 3" in proc.stderr


async def test_diverged_target_is_refused(export: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.db"
    assert turnlog("import", str(export), "--store", str(target)).returncode == 0
    first = json.loads(export.read_text().splitlines()[0])
    other = tmp_path / "other.db"
    async with open_store(f"sqlite:///{other}") as store:
        from turnlog.eventstore import NewEvent

        await store.append(first["stream"], [NewEvent("branch.created", {"something": "else"})])
    proc = turnlog("import", str(export), "--store", str(other))
    assert proc.returncode == 2
    assert "different event at version 1" in proc.stderr
