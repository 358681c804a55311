"""``turnlog run --cwd``: the agent runs there, the session is bound with it, later runs resume from it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio

from turnlog.eventstore import open_store
from turnlog.kernel import find_branch
from turnlog.projections import BranchState, catalogue_upcasters, rebuild


def run_cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "NO_COLOR": "1", **env}
    full.pop("TURNLOG_STORE", None)
    return subprocess.run(
        [sys.executable, "-m", "turnlog.tools", *args],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def state_of(db: Path) -> BranchState:
    async with open_store(f"sqlite:///{db}", upcasters=catalogue_upcasters()) as store:
        return await rebuild(store, await find_branch(store, "work"))


def test_run_cwd_binds_the_directory_and_the_next_run_resumes_from_it(tmp_path: Path) -> None:
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    script = tmp_path / "claude.json"
    script.write_text(json.dumps({"steps": [{"text": "ok"}]}))
    record = tmp_path / "record.jsonl"
    command = [sys.executable, "-m", "turnlog.testing._fake_cli", "claude", "--script", str(script)]
    command += ["--state-dir", str(tmp_path / "state"), "--record", str(record)]
    env = {"TURNLOG_CLAUDE_BIN": " ".join(command)}
    db = tmp_path / "t.db"
    first = run_cli("run", "hi", "--cli", "claude", "--new", "work", "--cwd", str(work), "--store", str(db),
                    cwd=elsewhere, env=env)  # fmt: skip
    assert first.returncode == 0, first.stderr
    second = run_cli("run", "again", "--cli", "claude", "--branch", "work", "--store", str(db),
                     cwd=elsewhere, env=env)  # fmt: skip
    assert second.returncode == 0, second.stderr
    starts = [e for e in map(json.loads, record.read_text().splitlines()) if e["event"] == "start"]
    assert [s["cwd"] for s in starts] == [str(work), str(work)]
    state = anyio.run(state_of, db)
    session = state.provider_sessions[("claude_code", "")]
    assert starts[1]["argv"][starts[1]["argv"].index("--resume") + 1] == session
    assert state.provider_cwd("claude_code", "") == str(work)
