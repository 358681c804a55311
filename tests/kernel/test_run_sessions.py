"""run and the provider session: the prompt the CLI gets, the directory binding, the resume fallback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from turnlog.eventstore import EventStore, NewEvent
from turnlog.kernel import Branch, iModel, recover
from turnlog.kernel.models import StreamChunk
from turnlog.projections import AssistantResponse, Instruction, System

from .conftest import assert_rebuilds
from .streamkit import ChunkModel, Fake, make_fake, text


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Fake:
    return make_fake(monkeypatch, tmp_path)


def argv_value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


async def run_started(store: EventStore, branch: Branch) -> list[dict[str, Any]]:
    return [e.data async for e in store.read_stream(f"branch-{branch.id}") if e.type == "run.started"]


async def test_the_cli_gets_the_instruction_as_typed_and_guidance_through_its_system_prompt(
    store: EventStore, fake: Fake
) -> None:
    fake.script({"steps": [{"text": "ok"}]})
    branch = Branch(store=store, chat_model=iModel("claude_code/m1"), system=System.create("Be terse."))
    await branch.run_and_collect('say "hi"', guidance="Use one word.", context=["the user is Ada"])
    argv = fake.starts()[-1]["argv"]
    assert argv_value(argv, "-p") == 'say "hi"'
    system = argv_value(argv, "--append-system-prompt") or ""
    assert "Be terse." in system and "Use one word." in system and "the user is Ada" in system


async def test_gemini_has_no_system_prompt_option_so_guidance_is_a_delimited_preamble(
    store: EventStore, fake: Fake
) -> None:
    fake.script({"steps": [{"text": "ok"}]})
    branch = Branch(store=store, chat_model=iModel("gemini/m1"))
    await branch.run_and_collect("the question", guidance="Answer in French.")
    prompt = argv_value(fake.starts()[-1]["argv"], "-p") or ""
    assert prompt == "<guidance>\nAnswer in French.\n</guidance>\n\nthe question"


async def test_history_is_flattened_only_when_there_is_no_session_to_resume(
    store: EventStore, fake: Fake
) -> None:
    branch = Branch(store=store)
    await branch.run_and_collect("earlier question", chat_model=ChunkModel([text("earlier answer")]))
    fake.script({"steps": [{"text": "ok"}]})
    model = iModel("codex/m1")
    await branch.run_and_collect("now this", chat_model=model)
    first = fake.starts()[-1]["argv"][-1]
    assert first == (
        "<conversation-history>\n[user] earlier question\n[assistant] earlier answer\n"
        "</conversation-history>\n\nnow this"
    )
    await branch.run_and_collect("and then", chat_model=model)
    argv = fake.starts()[-1]["argv"]
    assert "resume" in argv and argv[-1] == "and then"


async def test_the_directory_is_bound_with_the_session_and_recorded_in_run_started(
    store: EventStore, fake: Fake, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    fake.script({"steps": [{"text": "ok"}]})
    branch = Branch(store=store, chat_model=iModel("claude_code/m1"))
    await branch.run_and_collect("first", cwd=str(work))
    assert branch.state.provider_cwd("claude_code", "m1") == str(work)
    assert [d["cwd"] for d in await run_started(store, branch)] == [str(work)]
    session = branch.provider_session("claude_code", "m1")
    # A later run from anywhere resumes from the bound directory.
    await branch.run_and_collect("second")
    start = fake.starts()[-1]
    assert argv_value(start["argv"], "--resume") == session and start["cwd"] == str(work)
    assert (await run_started(store, branch))[-1]["cwd"] == str(work)
    await assert_rebuilds(branch)


async def test_another_directory_starts_a_new_session_primed_with_the_history(
    store: EventStore, fake: Fake, tmp_path: Path
) -> None:
    first, other = tmp_path / "first", tmp_path / "other"
    first.mkdir()
    other.mkdir()
    fake.script({"steps": [{"text": "ok"}]})
    branch = Branch(store=store, chat_model=iModel("claude_code/m1"))
    await branch.run_and_collect("one", cwd=str(first))
    old = branch.provider_session("claude_code", "m1")
    await branch.run_and_collect("two", cwd=str(other))
    argv = fake.starts()[-1]["argv"]
    assert "--resume" not in argv and "[user] one" in (argv_value(argv, "-p") or "")
    assert branch.provider_session("claude_code", "m1") not in (None, old)
    assert branch.state.provider_cwd("claude_code", "m1") == str(other)


async def test_a_resume_the_cli_cannot_find_falls_back_to_a_new_session(
    store: EventStore, fake: Fake
) -> None:
    branch = Branch(store=store, chat_model=iModel("claude_code/m1"))
    await branch.run_and_collect("earlier", chat_model=ChunkModel([text("before")], model="m1"))
    await branch.bind_provider_session("claude_code", "m1", "00000000-0000-0000-0000-000000000000")
    fake.script({"steps": [{"text": "fresh"}]})
    assert await branch.run_and_collect("go on", chat_model=iModel("claude_code/m1")) == "fresh"
    starts = fake.starts()
    assert argv_value(starts[-2]["argv"], "--resume") == "00000000-0000-0000-0000-000000000000"
    assert "--resume" not in starts[-1]["argv"]
    assert "[assistant] before" in (argv_value(starts[-1]["argv"], "-p") or "")
    new = branch.provider_session("claude_code", "m1")
    assert new not in (None, "00000000-0000-0000-0000-000000000000")
    run = list(branch.state.runs.values())[-1]
    assert run.status == "ended"
    chunks = [e.data async for e in store.read_stream(f"run-{run.run_id}")]
    marker = [c for c in chunks if c.get("metadata", {}).get("resume_fallback")]
    assert marker and marker[0]["metadata"]["previous_session"] == "00000000-0000-0000-0000-000000000000"
    called = [e.data async for e in store.read_stream(f"branch-{branch.id}") if e.type == "model.called"]
    assert called[-1]["params"]["resume_fallback"] == "session_not_found"
    # The next run resumes the new session instead of failing the same way.
    fake.script({"steps": [{"text": "again"}]})
    assert await branch.run_and_collect("more") == "again"
    assert argv_value(fake.starts()[-1]["argv"], "--resume") == new
    await assert_rebuilds(branch)


# ---------------------------------------------------------------------------- reconciliation


async def crashed_claude_run(store: EventStore, home: Path, cwd: str, partial: str) -> tuple[Branch, str]:
    """A branch whose run died after ``partial`` streamed (run.started, chunks, no end)."""
    from turnlog.eventstore import uuid7
    from turnlog.kernel import StartRun

    branch = await Branch(store=store).save()
    run_id = str(uuid7())
    await branch.execute(StartRun(run_id, "run", None, "claude_code", "m1", cwd), run_id=run_id)
    await branch.add_message(Instruction.create("go"), run_id=run_id)
    chunks = [
        StreamChunk("system", metadata={"session_id": "s-1", "cli_home": str(home), "cwd": cwd}),
        StreamChunk("text", content=partial, is_delta=True, metadata={"partial": True}),
    ]
    events = [
        NewEvent("stream.chunk", {**c.to_dict(), "seq": i}, {"branch_id": branch.id, "run_id": run_id})
        for i, c in enumerate(chunks, 1)
    ]
    await store.append(f"run-{run_id}", events, 0)
    return branch, run_id


def claude_record(home: Path, cwd: str, lines: list[dict[str, Any]]) -> Path:
    directory = home / "projects" / "".join(c if c.isalnum() else "-" for c in cwd)
    directory.mkdir(parents=True)
    path = directory / "s-1.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def assistant_line(block: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "assistant",
        "timestamp": "2999-01-01T00:00:00.000Z",
        "message": {"id": "msg_1", "role": "assistant", "content": [block]},
    }


async def test_recover_takes_what_only_the_cli_record_holds_and_marks_its_source(
    store: EventStore, tmp_path: Path
) -> None:
    home, cwd = tmp_path / "claude-home", "/work/project"
    branch, run_id = await crashed_claude_run(store, home, cwd, "The answer is")
    path = claude_record(
        home,
        cwd,
        [
            {
                "type": "user",
                "timestamp": "2000-01-01T00:00:00Z",
                "message": {"role": "user", "content": "old"},
            },
            assistant_line({"type": "text", "text": "The answer is 42."}),
            assistant_line({"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}),
        ],
    )
    report = await recover(store, tmp_path / "no-buffers")
    [done] = report.runs
    loaded = await Branch.load(store, branch.id)
    run = loaded.state.runs[run_id]
    assert run.recovered is not None
    assert run.recovered["cli_session"] == "reconciled" and run.recovered["cli_session_added"] == 2
    assert run.recovered["cli_session_file"] == str(path.relative_to(home))  # no home-directory path
    [answer] = [m for m in loaded.messages if isinstance(m, AssistantResponse)]
    assert answer.response == "The answer is 42." and answer.metadata["source"] == "cli_session"
    request = next(m for m in loaded.messages if m.kind == "ActionRequest")
    assert request.metadata["source"] == "cli_session"
    assert not (await recover(store, tmp_path / "no-buffers")).changed
    await assert_rebuilds(loaded)
    assert done.closed


async def test_without_the_cli_record_the_next_resume_says_the_session_may_hold_more(
    store: EventStore, tmp_path: Path
) -> None:
    branch, run_id = await crashed_claude_run(store, tmp_path / "empty-home", "/work/project", "partial")
    await recover(store, tmp_path / "no-buffers")
    loaded = await Branch.load(store, branch.id)
    assert loaded.state.runs[run_id].recovered["cli_session"] == "unreconciled"  # type: ignore[index]
    model = ChunkModel([text("ok")], model="m1")
    await loaded.run_and_collect("next", chat_model=model)
    assert model.calls[-1]["resume"] == "s-1"
    called = [e.data async for e in store.read_stream(f"branch-{branch.id}") if e.type == "model.called"]
    assert "may hold more than this log" in called[-1]["params"]["session_note"]


async def test_an_unreconciled_crash_is_said_in_the_report_with_no_home_path_and_no_warning(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The recover report carries the note; run.failed names ~, not the home directory; a resume warns nothing."""
    monkeypatch.setenv("HOME", str(tmp_path))
    branch, _ = await crashed_claude_run(store, tmp_path / ".claude", "/work/project", "partial")
    report = await recover(store, tmp_path / "no-buffers")
    [done] = report.runs
    assert done.cli_session == "unreconciled"
    assert (
        done.note is not None and "record was not read" in done.note and "resuming session s-1" in done.note
    )
    assert report.to_dict()["runs"][0]["note"] == done.note
    failed = [e async for e in store.read_stream(f"branch-{branch.id}") if e.type == "run.failed"]
    [payload] = [e.data for e in failed]
    assert payload["recovered"]["cli_session_reason"] == "no record of session s-1 found under ~/.claude"
    assert str(tmp_path) not in json.dumps(payload)
    loaded = await Branch.load(store, branch.id)
    with caplog.at_level("INFO"):
        await loaded.run_and_collect("next", chat_model=ChunkModel([text("ok")], model="m1"))
    assert [r for r in caplog.records if r.levelno >= 30] == []  # no warning in the user's output
    assert any("may hold more than this log" in r.getMessage() for r in caplog.records)


async def test_the_call_records_the_cli_result_even_when_a_response_took_its_metadata(
    store: EventStore, fake: Fake
) -> None:
    fake.script({"steps": [{"text": "ok"}], "usage": {"input_tokens": 7, "output_tokens": 3}})
    branch = Branch(store=store, chat_model=iModel("codex/m1"))
    await branch.run_and_collect("go")
    [called] = [e.data async for e in store.read_stream(f"branch-{branch.id}") if e.type == "model.called"]
    assert called["response"]["session_id"] == branch.provider_session("codex", "m1")
    assert called["response"]["raw_usage"]["input_tokens"] == 7


async def test_reconciliation_takes_chunks_already_read_and_returns_what_it_appended(
    store: EventStore, tmp_path: Path
) -> None:
    from turnlog.kernel._cli_reconcile import reconcile_with_cli
    from turnlog.projections import ChunkReceived

    home, cwd = tmp_path / "claude-home", "/work/project"
    branch, run_id = await crashed_claude_run(store, home, cwd, "The answer is")
    claude_record(home, cwd, [assistant_line({"type": "text", "text": "The answer is 42."})])
    read = [ChunkReceived.model_validate(e.data) async for e in store.read_stream(f"run-{run_id}")]
    done = await reconcile_with_cli(store, run_id, "claude_code", None, read)
    assert done is not None and done.status == "reconciled"
    assert [(c.seq, c.content, c.metadata["source"]) for c in done.appended] == [(3, " 42.", "cli_session")]
    stored = [e async for e in store.read_stream(f"run-{run_id}")]
    assert len(stored) == 3 and stored[-1].meta["branch_id"] == branch.id
    assert await reconcile_with_cli(store, run_id, "openai", None) is None
