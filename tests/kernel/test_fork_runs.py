"""Forks and runs: forking works after any verb, and a fork never inherits an open run."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, EndRun, StartRun, recover
from turnlog.kernel.models import ClaudeCodeModel, CodexModel, GeminiModel
from turnlog.projections import Instruction

from .conftest import assert_rebuilds
from .streamkit import make_fake

CLI_MODELS: dict[str, Any] = {
    "claude": lambda: ClaudeCodeModel("sonnet"),
    "codex": lambda: CodexModel("gpt-5-codex"),
    "gemini": lambda: GeminiModel("gemini-2.5-pro"),
}


@pytest.mark.parametrize("cli", sorted(CLI_MODELS))
async def test_fork_works_after_run_with_each_cli_model(
    cli: str, store: EventStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """run(chat_model=<CLI model>) makes it the branch's chat model; fork() takes it along."""
    make_fake(monkeypatch, tmp_path)
    model = CLI_MODELS[cli]()
    branch = await Branch(store=store).save()
    got = [m async for m in branch.run("hello", chat_model=model)]
    assert len(got) >= 2 and branch.chat_model is model
    child = await branch.fork(name=f"after-{cli}")
    assert child.chat_model is model
    assert [m.id for m in child.messages] == [m.id for m in branch.messages]
    again = [m async for m in child.run("and again")]  # the fork can run with it as well
    assert len(again) >= 2
    await assert_rebuilds(child)


async def test_a_fork_inside_a_run_does_not_inherit_it(store: EventStore, tmp_path: Path) -> None:
    """Forked at a version where a run is open: the fork has no run; the parent's run ends in the parent."""
    branch = await Branch(store=store).save()
    run_id = str(uuid.uuid4())
    await branch.execute(StartRun(run_id, "run"), run_id=run_id)
    await branch.add_message(Instruction.create("half way"), run_id=run_id)
    inside = branch.version
    child = await branch.fork(inside)
    assert child.state.runs == {} and child.state.open_runs == ()
    assert [m.id for m in child.messages] == [m.id for m in branch.messages]  # the messages are kept
    await assert_rebuilds(child)

    await branch.execute(EndRun(run_id, "run", 1.0), run_id=run_id)
    assert (await Branch.load(store, child.id)).state.runs == {}
    later = await branch.fork(inside)  # forked after the run ended, at a version inside it
    assert later.state.runs == {}
    report = await recover(store, tmp_path / "runs")
    assert report.runs == () and report.live == ()
