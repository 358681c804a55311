"""Audit replay and execute replay (divergence detection) on real SQLite stores."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pytest
from pydantic import BaseModel

from turnlog.eventstore import open_store
from turnlog.kernel import Branch, RecordedModel, audit_replay, execute_replay
from turnlog.testing import ScriptedModel


class Capital(BaseModel):
    city: str


async def _conversation(path: Path) -> str:
    async with open_store(f"sqlite:///{path}") as store:
        branch = Branch(
            store=store,
            name="quiz",
            system="Answer briefly.",
            chat_model=ScriptedModel("Hello!", '{"city": "Paris"}', "Forty-two.", "Bye."),
        )
        await branch.chat_and_record("hi")
        assert await branch.communicate("capital of France?", response_format=Capital) == Capital(
            city="Paris"
        )
        await branch.communicate("meaning of life?", temperature=0.3)
        await branch.chat_and_record("bye")
        report = await audit_replay(store, branch.id, live=branch.state)
        assert report.ok, report.problems
        return branch.id


def _alter_response(path: Path, call_number: int, text: str) -> None:
    """Rewrite the raw response of the n-th model.called event, as an attacker or a bug would."""
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT position, data FROM events WHERE type = 'model.called' ORDER BY position"
        ).fetchall()
        position, blob = rows[call_number - 1]
        data = orjson.loads(blob)
        data["response"]["choices"][0]["message"]["content"] = text
        db.execute(
            "UPDATE events SET data = ? WHERE position = ?",
            (orjson.dumps(data, option=orjson.OPT_SORT_KEYS), position),
        )


async def test_audit_replay_matches_live_and_snapshots(tmp_path: Path) -> None:
    branch_id = await _conversation(tmp_path / "a.db")
    async with open_store(f"sqlite:///{tmp_path / 'a.db'}") as store:
        report = await audit_replay(store, branch_id)
    assert report.ok
    assert report.model_calls == 4
    assert report.version > 10


async def test_execute_replay_reproduces_every_request(tmp_path: Path) -> None:
    branch_id = await _conversation(tmp_path / "b.db")
    async with open_store(f"sqlite:///{tmp_path / 'b.db'}") as store:
        report = await execute_replay(store, branch_id)
    assert report.ok, (report.divergence, report.final_mismatch)
    assert report.calls_replayed == 4


async def test_altered_response_is_named_at_the_next_call(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    branch_id = await _conversation(path)
    _alter_response(path, 1, "Goodbye!")
    async with open_store(f"sqlite:///{path}") as store:
        report = await execute_replay(store, branch_id)
        audit = await audit_replay(store, branch_id)
    assert report.divergence is not None
    assert report.divergence.call_index == 2
    assert "Goodbye!" in report.divergence.difference
    assert "Hello!" in report.divergence.difference
    assert not audit.ok  # the hash chain names the altered event too


async def test_altered_last_response_shows_in_the_final_state(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    branch_id = await _conversation(path)
    _alter_response(path, 4, "Later.")
    async with open_store(f"sqlite:///{path}") as store:
        report = await execute_replay(store, branch_id)
    assert report.divergence is None
    assert report.final_mismatch and "Later." in report.final_mismatch[0]


async def test_fork_replays_through_its_parent(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    branch_id = await _conversation(path)
    async with open_store(f"sqlite:///{path}") as store:
        parent = await Branch.load(store, branch_id)
        child = await parent.fork(4)
        child.chat_model = ScriptedModel("Only the fork says this.")
        await child.chat_and_record("and now?")
        report = await execute_replay(store, child.id)
    assert report.ok
    assert report.calls_replayed == 2


@pytest.mark.parametrize("execute", [False, True])
def test_replay_command_exit_status(tmp_path: Path, execute: bool) -> None:
    import subprocess
    import sys

    import anyio

    path = tmp_path / "f.db"
    anyio.run(_conversation, path)
    args = [sys.executable, "-m", "turnlog.tools._cli", "replay", "quiz", "--store", str(path)]
    args += ["--execute"] if execute else []
    ok = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "matches" in ok.stdout
    _alter_response(path, 1, "Goodbye!")
    bad = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1
    assert ("DIVERGENCE" in bad.stdout) == execute


def get_weather(city: str) -> str:
    """The weather of a city."""
    return f"sunny in {city}"


async def test_operate_with_tools_and_unordered_context_replays(tmp_path: Path) -> None:
    """Rendering is canonical: what the log stores renders exactly as what was sent."""
    async with open_store(f"sqlite:///{tmp_path / 'g.db'}") as store:
        model = ScriptedModel(
            {"text": "", "tool_calls": [{"id": "c1", "name": "get_weather", "arguments": {"city": "Paris"}}]},
            '{"city": "Paris"}',
        )
        branch = Branch(store=store, system="Be brief.", chat_model=model, tools=[get_weather])
        result = await branch.operate(
            instruction="weather?",
            context={"zeta": 1, "alpha": {"y": 2, "x": 1}},
            response_format=Capital,
            actions=True,
        )
        assert result.city == "Paris"
        report = await execute_replay(store, branch.id)
    assert report.ok, report.divergence
    assert report.calls_replayed == 1


async def test_a_recorded_answer_is_stored_once_and_served_whole(tmp_path: Path) -> None:
    """model.called keeps no copy of the answer's text; a RecordedModel still serves the raw response."""
    path = tmp_path / "once.db"
    branch_id = await _conversation(path)
    with sqlite3.connect(path) as db:
        blobs = [row[0] for row in db.execute("SELECT data FROM events WHERE type = 'model.called'")]
    assert len(blobs) == 4 and all(b"Forty-two." not in b and b"Hello!" not in b for b in blobs)
    async with open_store(f"sqlite:///{path}") as store:
        model = await RecordedModel.from_store(store, branch_id=branch_id)
        branch = await Branch.load(store, branch_id)
        fresh = Branch(store=store, system="Answer briefly.", chat_model=model)
        assert await fresh.chat_and_record("hi") == "Hello!"
    served = model.calls[-1].response
    assert served is not None and served.raw["choices"][0]["message"]["content"] == "Hello!"
    assert branch.messages[1].content.text == "Hello!"
