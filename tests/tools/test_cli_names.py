"""Branch names on the command line: one name names one branch, and ids are never shadowed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


async def _store(path: Path, *names: str | None) -> list[str]:
    ids = []
    async with open_store(f"sqlite:///{path}") as store:
        for name in names:
            branch = Branch(store=store, name=name, chat_model=ScriptedModel("A."))
            await branch.chat_and_record("hi")
            ids.append(branch.id)
    return ids


def _versions(path: Path, cwd: Path) -> list[tuple[str, int]]:
    out = json.loads(turnlog("branches", "--store", str(path), "--json", cwd=cwd).stdout)
    return sorted((b["branch_id"], b["version"]) for b in out)


async def test_fork_refuses_a_name_in_use_and_a_bad_one(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    await _store(db, "main", "other")
    before = _versions(db, tmp_path)
    for name, says in (
        ("other", "exists already"),
        ("", "empty"),
        ("   ", "empty"),
        ("tab\there", "control characters"),
        ("x" * 10_000, "at most 200 characters"),
    ):
        done = turnlog("fork", "main", "--at", "1", "--name", name, "--store", str(db), cwd=tmp_path)
        assert done.returncode == 2 and says in done.stderr, (name[:20], done.stderr)
        assert done.stderr.count("\n") == 1
    assert _versions(db, tmp_path) == before  # nothing written
    ok = turnlog("fork", "main", "--at", "1", "--name", "what-if", "--store", str(db), cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr


async def test_chat_new_refuses_a_name_in_use_before_writing(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    await _store(db, "notes")
    before = _versions(db, tmp_path)
    done = turnlog(
        "chat", "hi", "--new", "notes", "--store", str(db), cwd=tmp_path, env={"OPENAI_API_KEY": "sk-test"}
    )
    assert done.returncode == 2 and "exists already" in done.stderr, done.stderr
    assert _versions(db, tmp_path) == before


async def test_a_name_that_is_also_an_id_prefix_is_ambiguous_and_an_id_wins(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    (first,) = await _store(db, None)
    prefix = first[:8]
    (named,) = await _store(db, prefix)  # a second branch named like the first one's id prefix
    done = turnlog("show", prefix, "--store", str(db), cwd=tmp_path)
    assert done.returncode == 2 and "ambiguous" in done.stderr
    assert first in done.stderr and named in done.stderr
    by_id = turnlog("show", first, "--store", str(db), "--json", cwd=tmp_path)
    assert json.loads(by_id.stdout)["branch_id"] == first
    empty = turnlog("show", "", "--store", str(db), cwd=tmp_path)
    assert empty.returncode == 2 and "empty" in empty.stderr
