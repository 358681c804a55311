"""The inspection commands, driven as a user drives them: as subprocesses on a real store."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from turnlog.eventstore import open_store
from turnlog.kernel import Branch
from turnlog.testing import ScriptedModel


def turnlog(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "turnlog.tools", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture
async def store_path(tmp_path: Path) -> str:
    path = tmp_path / "t.db"
    async with open_store(f"sqlite:///{path}") as store:
        branch = Branch(
            store=store, name="demo", system="Be terse.", chat_model=ScriptedModel("Hello!", "Paris.")
        )
        await branch.chat_and_record("hi")
        await branch.communicate("capital of France?")
    return str(path)


def test_branches_lists_the_branch(store_path: str) -> None:
    out = json.loads(turnlog("branches", "--store", store_path, "--json").stdout)
    assert [b["name"] for b in out] == ["demo"]
    assert out[0]["version"] == 9


def test_log_shows_every_event_in_order(store_path: str) -> None:
    out = json.loads(turnlog("log", "demo", "--store", store_path, "--json").stdout)
    versions = [e["version"] for e in out["events"]]
    assert versions == list(range(1, 10))
    assert out["events"][0]["type"] == "branch.created"
    only = json.loads(turnlog("log", "demo", "--type", "run.ended", "--store", store_path, "--json").stdout)
    assert [e["type"] for e in only["events"]] == ["run.ended"]


def test_show_at_a_past_version(store_path: str) -> None:
    now = json.loads(turnlog("show", "demo", "--store", store_path, "--json").stdout)
    past = json.loads(turnlog("show", "demo", "--at", "4", "--store", store_path, "--json").stdout)
    assert len(now["messages"]) == 4
    assert len(past["messages"]) == 2
    assert past["version"] == 4
    assert past["system"]["content"]["system_message"] == "Be terse."


def test_store_urls_with_parameters_and_odd_file_names(store_path: str, tmp_path: Path) -> None:
    # a URL may ask for full durability; the check that the store exists ignores the parameter
    out = json.loads(
        turnlog("branches", "--store", f"sqlite:///{store_path}?durability=full", "--json").stdout
    )
    assert [b["name"] for b in out] == ["demo"]
    bad = turnlog("branches", "--store", f"sqlite:///{store_path}?mode=ro", check=False)
    assert bad.returncode != 0 and "unknown SQLite URL parameter 'mode'" in bad.stderr
    # a plain path is a file name as it is, "?" and "%" included
    odd = tmp_path / "odd?50%.db"
    Path(store_path).rename(odd)
    Path(store_path + "-wal").unlink(missing_ok=True)
    out = json.loads(turnlog("branches", "--store", str(odd), "--json").stdout)
    assert [b["name"] for b in out] == ["demo"]
    missing = turnlog("branches", "--store", str(tmp_path / "nope?.db"), check=False)
    assert missing.returncode != 0 and "no store at" in missing.stderr and "nope?.db" in missing.stderr


def test_diff_names_added_messages_and_runs(store_path: str) -> None:
    out = json.loads(turnlog("diff", "demo", "4", "9", "--store", store_path, "--json").stdout)
    assert [m["kind"] for m in out["added"]] == ["Instruction", "AssistantResponse"]
    assert out["removed"] == []
    assert len(out["runs"]) == 1
    # the other way round, the same messages are removed instead
    back = json.loads(turnlog("diff", "demo", "9", "4", "--store", store_path, "--json").stdout)
    assert back["removed"] == out["added"] and back["added"] == []
    same = json.loads(turnlog("diff", "demo", "9", "9", "--store", store_path, "--json").stdout)
    assert same["added"] == same["removed"] == [] and not same["runs"]


def test_fork_then_show_the_fork(store_path: str) -> None:
    forked = json.loads(
        turnlog("fork", "demo", "--at", "4", "--name", "alt", "--store", store_path, "--json").stdout
    )
    state = json.loads(turnlog("show", "alt", "--store", store_path, "--json").stdout)
    assert state["branch_id"] == forked["branch_id"]
    assert state["forked_from"]["version"] == 4
    assert len(state["messages"]) == 2


def test_unknown_branch_is_one_line_and_exit_2(store_path: str) -> None:
    proc = turnlog("show", "nope", "--store", store_path, check=False)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "nope" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_store_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    proc = turnlog("show", "x", "--store", str(path), check=False)
    assert proc.returncode == 2
    assert "no store at" in proc.stderr
    assert not path.exists()


def test_verify_clean_then_tampered(store_path: str) -> None:
    assert "ok" in turnlog("verify", "--store", store_path).stdout
    with sqlite3.connect(store_path) as db:
        db.execute("UPDATE events SET data = replace(data, 'Paris', 'Rome!') WHERE version = 8")
    proc = turnlog("verify", "--store", store_path, "--json", check=False)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert not report["ok"]
    assert any(p["version"] == 8 and p["stream"].startswith("branch-") for p in report["problems"])


def test_tail_prints_the_last_events(store_path: str) -> None:
    lines = turnlog("tail", "-n", "2", "--store", store_path, "--json").stdout.splitlines()
    assert [json.loads(line)["version"] for line in lines] == [8, 9]


async def test_show_prints_the_value_a_tool_returned(tmp_path: Path) -> None:
    path = tmp_path / "tools.db"
    async with open_store(f"sqlite:///{path}") as store:
        branch = Branch(store=store, name="tools", chat_model=ScriptedModel("x"))

        def lookup(city: str) -> dict[str, object]:
            """Look a city up."""
            return {"city": city, "population": 700000}

        branch.register_tools([lookup])
        await branch.act({"function": "lookup", "arguments": {"city": "Oslo"}})
    out = turnlog("show", "tools", "--store", str(path)).stdout
    assert 'tool result lookup: ok -> {"city":"Oslo","population":700000}' in out
