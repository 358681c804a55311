"""`turnlog demo` runs the whole main job offline, in budget, and the store holds what it says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from turnlog.eventstore import NewEvent, open_store
from turnlog.projections import catalogue_upcasters, decode_event


def _demo(
    *args: str, tmp: Path, scratch: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(scratch or tmp), "NO_COLOR": "1"}
    env.pop("TURNLOG_STORE", None)
    return subprocess.run(
        [sys.executable, "-m", "turnlog.tools", "demo", *args],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


async def _facts(url: str) -> dict[str, Any]:
    async with open_store(url, upcasters=catalogue_upcasters()) as store:
        report = await store.verify()
        events = [e async for e in store.read_all()]
    branch_events = [e for e in events if e.stream.startswith("branch-")]
    return {
        "verify_ok": report.ok,
        "types": [e.type for e in branch_events],
        "data": [(e.type, decode_event(e)) for e in branch_events],
        "streams": {e.stream for e in events},
    }


@pytest.mark.slow
def test_the_main_job_end_to_end(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    started = time.perf_counter()
    done = _demo("--store", str(db), tmp=tmp_path)
    took = time.perf_counter() - started
    print(f"turnlog demo took {took:.1f} s")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert f"store: {db}" in out
    assert "skipped" not in out and "FAILED" not in out
    assert "answer parsed into CityFact(city='Paris'" in out
    assert "model called get_weather(city='Paris')" in out
    assert "tools called: get_weather(city='Lyon')" in out
    assert re.search(r"SIGKILL sent, the child died \(exit -9\)", out)
    assert "run.failed reason=crashed" in out
    session = re.search(r"provider session bound by the killed run: (\S+)", out).group(1)  # type: ignore[union-attr]
    assert f"the fake CLI got --resume {session}" in out
    assert "replay matches" in out
    assert re.search(r"verify \(turnlog verify\): ok", out)
    assert "done: 5 of 5 steps succeeded" in out
    assert "Try next:" in out and f"turnlog verify --store {db}" in out
    assert took < 60  # the budget is 30 s; CI machines are noisy

    facts = anyio.run(_facts, f"sqlite:///{db}")
    assert facts["verify_ok"]
    started_verbs = [d.verb for t, d in facts["data"] if t == "run.started"]
    assert started_verbs == ["communicate", "operate", "ReAct", "run", "run"]
    ended = [d.verb for t, d in facts["data"] if t == "run.ended"]
    assert ended == ["communicate", "operate", "ReAct", "run"]
    failed = [d for t, d in facts["data"] if t == "run.failed"]
    assert [(f.verb, f.reason) for f in failed] == [("run", "crashed")]
    messages = [d.message for t, d in facts["data"] if t == "message.added"]
    kinds = {type(m).__name__ for m in messages}
    assert {"Instruction", "AssistantResponse", "ActionRequest", "ActionResponse"} <= kinds
    interrupted = [m for m in messages if m.metadata.get("interrupted")]
    assert len(interrupted) == 1 and interrupted[0].metadata["run_id"] == failed[0].run_id
    assert "provider.session_bound" in facts["types"]
    assert "branch.forked" in facts["types"]
    assert any(s.startswith("run-") for s in facts["streams"])


@pytest.mark.slow
def test_demo_default_store_is_in_the_current_directory_and_no_scratch_is_left(tmp_path: Path) -> None:
    work, scratch = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    scratch.mkdir()
    done = _demo(tmp=work, scratch=scratch)
    assert done.returncode == 0, done.stdout + done.stderr
    path = Path(re.search(r"^store: (.+)$", done.stdout, re.MULTILINE).group(1))  # type: ignore[union-attr]
    assert path == work / "turnlog-demo.db" and path.is_file()
    assert "turnlog log " in done.stdout and "--store turnlog-demo.db" in done.stdout
    assert list(scratch.iterdir()) == []  # no turnlog-demo-* folder behind
    # a second run adds a branch of its own next to the first one's, under a free name
    again = _demo(tmp=work, scratch=scratch)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "(name 'demo-2')" in again.stdout
    assert list(scratch.iterdir()) == []


@pytest.mark.slow
async def test_demo_on_an_existing_store_leaves_other_runs_alone(tmp_path: Path) -> None:
    from turnlog.kernel import Branch
    from turnlog.testing import ScriptedModel

    db = tmp_path / "shared.db"
    async with open_store(f"sqlite:///{db}") as store:
        other = Branch(store=store, name="someone-else", chat_model=ScriptedModel("Hi."))
        await other.chat_and_record("hello")
        # a run another process is streaming right now: started, not ended
        await store.append(
            f"branch-{other.id}",
            [NewEvent("run.started", {"run_id": "01a23ad3-c558-7a11-8f2b-0123456789ab", "verb": "run"})],
        )
        before = await store.stream_version(f"branch-{other.id}")
    done = await anyio.to_thread.run_sync(lambda: _demo("--store", str(db), tmp=tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    async with open_store(f"sqlite:///{db}") as store:
        assert await store.stream_version(f"branch-{other.id}") == before  # not closed as crashed


def test_demo_reports_an_unusable_store_clearly(tmp_path: Path) -> None:
    not_a_store = tmp_path / "notes.db"
    not_a_store.write_text("these are not the events you are looking for\n" * 100)
    done = _demo("--store", str(not_a_store), tmp=tmp_path)
    assert done.returncode == 2
    assert "turnlog demo:" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_the_readme_example_runs_and_the_commands_it_names_work(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert "make demo" in readme and "make test" in readme
    example = re.search(r"^```python\n(.*?)^```$", readme, re.MULTILINE | re.DOTALL).group(1)  # type: ignore[union-attr]
    assert len(example.splitlines()) <= 22
    (tmp_path / "example.py").write_text(example)
    env = {k: v for k, v in os.environ.items() if k != "TURNLOG_STORE"}
    done = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "True"
    for command in ("log geo", "show geo --at 6", "diff geo 6 11"):
        assert f"`turnlog {command}`" in readme
    # The versions it names exist (diff checks both ends).
    shown = subprocess.run(
        [sys.executable, "-m", "turnlog.tools", "diff", "geo", "6", "11"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
