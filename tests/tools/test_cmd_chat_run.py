"""`turnlog chat` and `turnlog run` as a user runs them: against the fake server and the fake CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from turnlog.eventstore import open_store
from turnlog.projections import catalogue_upcasters, rebuild

_KEY = "sk-test-never-stored-4242"
_SCRIPT = [
    {"match": {"last_user_contains": "boom"}, "status": 400, "times": None},
    {
        "text": "An append-only log of events.",
        "usage": {"prompt_tokens": 12, "completion_tokens": 7},
        "times": None,
    },
]


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "NO_COLOR": "1", **(env or {})}
    full.pop("TURNLOG_STORE", None)
    if env is None or "OPENAI_API_KEY" not in env:
        full.pop("OPENAI_API_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", "turnlog.tools", *args],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def fake_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A `turnlog fake-openai` process; yields its base URL."""
    script = tmp_path_factory.mktemp("fake-openai") / "script.json"
    script.write_text(json.dumps(_SCRIPT))
    process = subprocess.Popen(
        [sys.executable, "-m", "turnlog.tools", "fake-openai", "--script", str(script), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("fake-openai listening on "), line
        yield line.split()[-1]
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


async def _state(db: Path, ref: str) -> Any:
    from turnlog.kernel import find_branch

    async with open_store(f"sqlite:///{db}", upcasters=catalogue_upcasters()) as store:
        return await rebuild(store, await find_branch(store, ref))


def _error_line(done: subprocess.CompletedProcess[str], command: str) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"turnlog {command}: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


# ------------------------------------------------------------------------------------------ chat


def test_chat_records_an_exchange_and_continues_a_branch(tmp_path: Path, fake_server: str) -> None:
    db = tmp_path / "t.db"
    env = {"OPENAI_API_KEY": _KEY}
    first = _cli(
        "chat", "What is an event store?", "--new", "notes", "--system", "Be brief.",
        "--base-url", fake_server, "--store", str(db), cwd=tmp_path, env=env,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert first.stdout == "An append-only log of events.\n"
    assert "(notes)" in first.stderr and "(communicate) ended" in first.stderr

    again = _cli(
        "chat", "And a projection?", "--branch", "notes", "--store", str(db), "--json", cwd=tmp_path, env=env
    )
    assert again.returncode == 0, again.stderr
    reply = json.loads(again.stdout)
    assert reply["name"] == "notes" and reply["status"] == "ended"
    assert reply["answer"] == "An append-only log of events."
    assert reply["usage"]["input_tokens"] == 12

    state = anyio.run(_state, db, "notes")
    assert [type(m).__name__ for m in state.messages] == ["Instruction", "AssistantResponse"] * 2
    assert [r.status for r in state.runs.values()] == ["ended", "ended"]
    assert state.system is not None and "Be brief." in str(state.system.rendered)
    # The key was used on the wire but is nowhere in the store.
    assert _KEY.encode() not in b"".join(p.read_bytes() for p in tmp_path.glob("t.db*"))


def test_chat_without_an_api_key_is_one_line_and_writes_nothing(tmp_path: Path, fake_server: str) -> None:
    db = tmp_path / "t.db"
    done = _cli("chat", "hi", "--base-url", fake_server, "--store", str(db), cwd=tmp_path)
    assert done.returncode == 2
    assert "OPENAI_API_KEY" in _error_line(done, "chat")
    assert not db.exists()


def test_chat_on_an_unknown_branch_is_one_line(tmp_path: Path, fake_server: str) -> None:
    db = tmp_path / "t.db"
    env = {"OPENAI_API_KEY": _KEY}
    assert (
        _cli(
            "chat",
            "hi",
            "--new",
            "notes",
            "--base-url",
            fake_server,
            "--store",
            str(db),
            cwd=tmp_path,
            env=env,
        ).returncode
        == 0
    )
    done = _cli("chat", "hi", "--branch", "nots", "--store", str(db), cwd=tmp_path, env=env)
    assert done.returncode == 2
    assert "did you mean: notes" in _error_line(done, "chat")


def test_chat_records_a_failed_call_as_a_failed_run(tmp_path: Path, fake_server: str) -> None:
    db = tmp_path / "t.db"
    env = {"OPENAI_API_KEY": _KEY}
    done = _cli(
        "chat", "boom", "--new", "bad", "--base-url", fake_server, "--store", str(db), cwd=tmp_path, env=env
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "recorded as a failed run" in done.stderr
    state = anyio.run(_state, db, "bad")
    [run] = state.runs.values()
    assert (run.verb, run.status, run.reason) == ("communicate", "failed", "error")
    assert state.model_calls == 1


# ------------------------------------------------------------------------------------------- run


def _claude_env(tmp_path: Path, script: dict[str, Any]) -> dict[str, str]:
    path = tmp_path / "claude.json"
    path.write_text(json.dumps(script))
    command = [sys.executable, "-m", "turnlog.testing._fake_cli", "claude", "--script", str(path)]
    command += ["--state-dir", str(tmp_path / "state"), "--record", str(tmp_path / "record.jsonl")]
    return {"TURNLOG_CLAUDE_BIN": " ".join(command)}


_AGENT = {
    "steps": [
        {"thinking": "Look first."},
        {"tool_use": {"name": "Bash", "input": {"command": "ls"}}},
        {"tool_result": {"output": "a.txt"}},
        {"text": ["One ", "file: ", "a.txt."]},
    ],
    "usage": {"input_tokens": 30, "output_tokens": 9},
}


def _argvs(tmp_path: Path) -> list[list[str]]:
    lines = (tmp_path / "record.jsonl").read_text().splitlines()
    return [e["argv"] for e in map(json.loads, lines) if e.get("event") == "start"]


def test_run_shows_the_turn_records_it_and_resumes_the_session(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    env = _claude_env(tmp_path, _AGENT)
    done = _cli(
        "run", "List the files", "--cli", "claude", "--new", "work", "--store", str(db), cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("[session ")
    assert lines[1:] == [
        "[thinking] Look first.",
        '[tool] Bash {"command":"ls"}',
        "[result] a.txt",
        "One file: a.txt.",
    ]
    session = lines[0].removeprefix("[session ").rstrip("]")
    assert f"claude session {session}" in done.stderr

    again = _cli(
        "run",
        "And now?",
        "--cli",
        "claude",
        "--branch",
        "work",
        "--store",
        str(db),
        "--json",
        cwd=tmp_path,
        env=env,
    )
    assert again.returncode == 0, again.stderr
    reply = json.loads(again.stdout)
    assert reply["status"] == "ended" and reply["session_id"] == session
    assert reply["messages"][0]["role"] == "user"
    first, second = _argvs(tmp_path)
    assert "--resume" not in first
    assert second[second.index("--resume") + 1] == session

    state = anyio.run(_state, db, "work")
    assert [(r.verb, r.status) for r in state.runs.values()] == [("run", "ended"), ("run", "ended")]
    assert state.provider_sessions[("claude_code", "")] == session


def test_run_output_arrives_while_the_agent_still_runs(tmp_path: Path) -> None:
    env = {
        **os.environ,
        **_claude_env(tmp_path, {"delay": 0.3, "steps": [{"text": ["a ", "b ", "c ", "d"]}]}),
    }
    env.pop("TURNLOG_STORE", None)
    argv = [
        sys.executable,
        "-m",
        "turnlog.tools",
        "run",
        "go",
        "--cli",
        "claude",
        "--store",
        str(tmp_path / "t.db"),
    ]
    with subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("[session ")
        assert process.poll() is None  # the first chunk is on the terminal before the turn ends
        rest = process.stdout.read()
    assert process.returncode == 0
    assert rest == "a b c d\n"


def test_run_with_stream_persist_leaves_no_buffer(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    env = _claude_env(tmp_path, _AGENT)
    done = _cli(
        "run", "List", "--cli", "claude", "--stream-persist", "--store", str(db), cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    assert not list(tmp_path.rglob("*.jsonl.corrupt"))
    assert not [p for p in tmp_path.rglob("*.jsonl") if p.name != "record.jsonl"]


def test_run_errors_are_one_line(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    missing = _cli(
        "run",
        "hi",
        "--cli",
        "claude",
        "--store",
        str(db),
        cwd=tmp_path,
        env={"TURNLOG_CLAUDE_BIN": str(tmp_path / "no-such-claude")},
    )
    assert missing.returncode == 2
    assert "TURNLOG_CLAUDE_BIN" in _error_line(missing, "run")
    assert not db.exists()  # the executable is looked for before anything is written

    env = _claude_env(tmp_path, _AGENT)
    assert (
        _cli(
            "run", "hi", "--cli", "claude", "--new", "work", "--store", str(db), cwd=tmp_path, env=env
        ).returncode
        == 0
    )
    unknown = _cli(
        "run", "hi", "--cli", "claude", "--branch", "nope", "--store", str(db), cwd=tmp_path, env=env
    )
    assert unknown.returncode == 2
    assert "nope" in _error_line(unknown, "run")

    failing = _claude_env(tmp_path, {"steps": [{"fail": {"kind": "auth"}}]})
    failed = _cli(
        "run", "hi", "--cli", "claude", "--branch", "work", "--store", str(db), cwd=tmp_path, env=failing
    )
    assert failed.returncode == 1
    assert "Traceback" not in failed.stderr and "(auth)" in failed.stderr
    state = anyio.run(_state, db, "work")
    assert [r.status for r in state.runs.values()] == ["ended", "failed"]


async def _wire_calls(db: Path) -> list[Any]:
    """``params.wire_calls`` of each run's ``model.called`` (None: the run was not recorded at the wire)."""
    async with open_store(f"sqlite:///{db}", upcasters=catalogue_upcasters()) as store:
        return [
            e.data["params"].get("wire_calls")
            async for e in store.read_all(types=["model.called"])
            if e.data["verb"] == "run"
        ]


def test_run_records_the_wire_unless_no_wire(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    env = _claude_env(tmp_path, _AGENT)
    on = _cli("run", "List", "--cli", "claude", "--new", "a", "--store", str(db), cwd=tmp_path, env=env)
    assert on.returncode == 0, on.stderr
    off = _cli(
        "run", "List", "--cli", "claude", "--new", "b", "--no-wire", "--store", str(db), cwd=tmp_path, env=env
    )
    assert off.returncode == 0, off.stderr
    # the fake CLI calls no API: the recorder served the first run and saw no call; the second had none
    assert anyio.run(_wire_calls, db) == [[], None]
