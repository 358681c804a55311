"""run and run_and_collect against the fake CLIs over real pipes (D3)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from pydantic import BaseModel

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, iModel
from turnlog.kernel.models import CLIError, StreamChunk
from turnlog.projections import ActionRequest, ActionResponse, AssistantResponse, Instruction
from turnlog.testing import ScriptedModel

from .conftest import assert_rebuilds
from .streamkit import ChunkModel, Fake, make_fake, text

TOOL_SCRIPT = {
    "usage": {"input_tokens": 21, "output_tokens": 13},
    "cost_usd": 0.0042,
    "steps": [
        {"thinking": "think"},
        {"text": "before"},
        {"tool_use": {"name": "fn", "input": {"x": 1}}},
        {"tool_result": {"output": "42"}},
        {"text": "after"},
    ],
}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Fake:
    return make_fake(monkeypatch, tmp_path)


def claude_branch(store: EventStore) -> Branch:
    return Branch(store=store, chat_model=iModel("claude_code/sonnet"))


async def test_non_cli_model_is_refused_with_a_hint(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("hi"))
    with pytest.raises(ValueError, match="run operation only supports CLI endpoints") as info:
        async for _ in branch.run("hi"):
            pass
    assert "claude_code" in str(info.value)
    assert branch.version == 0  # nothing recorded


async def test_messages_follow_the_chunk_rules(store: EventStore, fake: Fake) -> None:
    fake.script(TOOL_SCRIPT)
    branch = claude_branch(store)
    got = [m async for m in branch.run("go")]
    assert [type(m) for m in got] == [
        Instruction,
        AssistantResponse,
        ActionRequest,
        ActionResponse,
        AssistantResponse,
    ]
    before, request, response, after = got[1:]
    assert isinstance(before, AssistantResponse) and before.response == "before"
    assert before.metadata["thinking"] == "think"
    assert isinstance(request, ActionRequest) and request.function == "fn" and request.arguments == {"x": 1}
    assert isinstance(response, ActionResponse) and response.output == "42" and response.error is None
    assert branch.state.response_for(request.id) == branch.state.message(response.id)
    assert isinstance(after, AssistantResponse) and after.response == "after"
    assert after.metadata["model_response"]["usage"]["input_tokens"] == 21
    assert list(branch.messages) == [branch.state.message(m.id) for m in got]
    await assert_rebuilds(branch)


async def test_every_chunk_is_an_event_and_responses_name_their_range(store: EventStore, fake: Fake) -> None:
    fake.script(TOOL_SCRIPT)
    branch = claude_branch(store)
    got = [m async for m in branch.run("go")]
    run_id = got[1].metadata["run_id"]
    chunks = [e async for e in store.read_stream(f"run-{run_id}")]
    assert [e.data["seq"] for e in chunks] == list(range(1, len(chunks) + 1))
    assert [e.version for e in chunks] == [e.data["seq"] for e in chunks]
    types = [e.data["type"] for e in chunks]
    assert types == ["system", "thinking", "text", "tool_use", "tool_result", "text", "result"]
    for message in got[1:]:
        first, last = message.metadata["chunk_range"]
        assert message.metadata["run_id"] == run_id
        assert chunks[last - 1].data["type"] in ("text", "tool_use", "tool_result")
        assert first <= last
    run = branch.state.runs[run_id]
    assert (run.status, run.chunks, run.usage.input_tokens, run.usage.cost_usd) == ("ended", 7, 21, 0.0042)


async def test_the_next_run_resumes_the_bound_provider_session(store: EventStore, fake: Fake) -> None:
    fake.script({"steps": [{"text": "one"}]})
    branch = claude_branch(store)
    [m async for m in branch.run("first")]
    session = branch.provider_session("claude_code", "sonnet")
    assert session is not None
    [m async for m in branch.run("second")]
    argv = fake.starts()[-1]["argv"]
    assert argv[argv.index("--resume") + 1] == session
    # a branch loaded in another process resumes the same session
    again = await Branch.load(store, branch.id, chat_model=iModel("claude_code/sonnet"))
    [m async for m in again.run("third")]
    argv = fake.starts()[-1]["argv"]
    assert argv[argv.index("--resume") + 1] == session
    await assert_rebuilds(again)


async def test_unmatched_tool_result_is_kept_as_a_chunk_only(store: EventStore) -> None:
    model = ChunkModel(
        [
            StreamChunk("tool_result", tool_id="nobody", tool_output="x"),
            StreamChunk("tool_use", tool_name="read", tool_id="t1", tool_input={"p": 1}),
            StreamChunk("tool_result", tool_id="t1", tool_output="no such file", is_error=True),
        ]
    )
    branch = Branch(store=store)
    got = [m async for m in branch.run("go", chat_model=model)]
    assert [type(m) for m in got] == [Instruction, ActionRequest, ActionResponse]
    response = got[2]
    assert isinstance(response, ActionResponse)
    assert response.function == "read" and response.error == "no such file"
    assert response.metadata["is_error"] is True
    run_id = got[1].metadata["run_id"]
    assert len([e async for e in store.read_stream(f"run-{run_id}")]) == 3


async def test_error_chunk_flushes_text_then_raises(store: EventStore, fake: Fake) -> None:
    fake.script({"steps": [{"text": "partial"}, {"fail": {"kind": "auth"}}]})
    branch = claude_branch(store)
    got = []
    with pytest.raises(CLIError) as info:
        async for message in branch.run("go"):
            got.append(message)
    assert info.value.kind == "auth"
    assert isinstance(got[-1], AssistantResponse) and got[-1].response == "partial"
    run = next(iter(branch.state.runs.values()))
    assert (run.status, run.reason, run.error_type) == ("failed", "error", "CLIError")
    await assert_rebuilds(branch)


async def test_stream_persist_writes_snapshots_and_removes_the_buffer(
    store: EventStore, fake: Fake, tmp_path: Path
) -> None:
    fake.script({"steps": [{"text": "ok"}]})
    branch = claude_branch(store)
    persist = tmp_path / "persist"
    [m async for m in branch.run("go", stream_persist=True, persist_dir=persist)]
    assert [p.name for p in persist.iterdir()] == [f"{branch.id}.json"]
    loaded = await Branch.from_snapshot(persist / f"{branch.id}.json", store=store)
    assert loaded.state == branch.state
    snaps = tmp_path / "snaps"
    [m async for m in branch.run("again", stream_persist=True, persist_dir=persist, snapshot_dir=snaps)]
    assert [p.name for p in snaps.iterdir()] == [f"{branch.id}.json"]
    assert not list(persist.glob("*.jsonl"))
    assert (await Branch.from_snapshot(snaps / f"{branch.id}.json", store=store)).state == branch.state


async def test_persist_dir_defaults_to_a_directory_of_the_store_file(
    store: EventStore, tmp_path: Path
) -> None:
    branch = Branch(store=store)
    [m async for m in branch.run("go", chat_model=ChunkModel([text("ok")]), stream_persist=True)]
    assert (tmp_path / "turnlog.db.runs" / f"{branch.id}.json").is_file()


async def test_from_snapshot_folds_what_the_store_has_since(store: EventStore, tmp_path: Path) -> None:
    branch = Branch(store=store)
    [m async for m in branch.run("go", chat_model=ChunkModel([text("ok")]), stream_persist=True)]
    snapshot = tmp_path / "turnlog.db.runs" / f"{branch.id}.json"
    [m async for m in branch.run("later", chat_model=ChunkModel([text("more")]))]
    loaded = await Branch.from_snapshot(snapshot, store=store)
    assert loaded.state == branch.state
    assert loaded.messages[-1].response == "more"  # type: ignore[union-attr]


async def test_run_and_collect_clears_joins_and_returns_none_for_nothing(store: EventStore) -> None:
    branch = Branch(store=store)
    model = ChunkModel([text("one"), StreamChunk("tool_use", tool_name="t", tool_id="a"), text("two")])
    await branch.add_message(Instruction.create("old"))
    assert await branch.run_and_collect("go", chat_model=model, clear_messages=True) == "one\n\ntwo"
    assert isinstance(branch.messages[0], Instruction) and branch.messages[0].content.instruction == "go"
    empty = ChunkModel([StreamChunk("thinking", content="hmm")])
    assert await branch.run_and_collect("quiet", chat_model=empty) is None


class Answer(BaseModel):
    value: int


async def test_run_and_collect_parses_once_after_collection(store: EventStore) -> None:
    branch = Branch(store=store)
    model = ChunkModel([text('{"val'), text('ue": 7}')])
    assert await branch.run_and_collect("go", chat_model=model, response_format=Answer) == Answer(value=7)
    raw = await branch.run_and_collect(
        "go", chat_model=ChunkModel([text('{"value": 8}')]), response_format=Answer, skip_validation=True
    )
    assert raw == '{"value": 8}'


async def test_timeout_is_one_deadline_and_not_a_stream_option(store: EventStore, fake: Fake) -> None:
    fake.script({"delay": 3, "steps": [{"text": "late"}]})
    branch = claude_branch(store)
    got = []
    with pytest.raises(TimeoutError):
        async for message in branch.run("go", timeout=0.3):
            got.append(message)
    assert [type(m) for m in got] == [Instruction]
    run = next(iter(branch.state.runs.values()))
    assert (run.status, run.reason) == ("failed", "timeout")
    model = ChunkModel([text("x"), text("x"), text("x")])
    got = [m async for m in branch.run("go", chat_model=model, timeout=None)]
    assert got[-1].response == "xxx"  # type: ignore[union-attr]
    [m async for m in branch.run("go", chat_model=model, timeout=5)]
    assert all("timeout" not in call["options"] for call in model.calls)


async def test_timeout_flushes_the_text_received(store: EventStore) -> None:
    branch = Branch(store=store)
    stalled = _Stalling([text("kept")])
    with pytest.raises(TimeoutError):
        async for _ in branch.run("go", chat_model=stalled, timeout=0.2):
            pass
    last = branch.messages[-1]
    assert isinstance(last, AssistantResponse) and last.response == "kept"
    assert last.metadata["interrupted"] is True
    assert stalled.closed == 1
    await assert_rebuilds(branch)


class _Stalling(ChunkModel):
    """Yields its chunks, then waits forever (until cancelled)."""

    async def _gen(self) -> AsyncIterator[StreamChunk]:
        try:
            for chunk in self.chunks:
                yield chunk
            await anyio.sleep_forever()
        finally:
            self.closed += 1


async def test_run_replaces_the_branch_model_when_given(store: EventStore) -> None:
    branch = Branch(store=store)
    model = ChunkModel([text("ok")])
    async with contextlib.aclosing(branch.run("go", chat_model=model)) as stream:
        async for _ in stream:
            pass
    assert branch.chat_model is model


@pytest.mark.parametrize(
    ("provider", "flag"), [("claude_code", "--resume"), ("codex", "resume"), ("gemini", "--resume")]
)
async def test_every_cli_resumes_its_session(store: EventStore, fake: Fake, provider: str, flag: str) -> None:
    fake.script({"steps": [{"text": "hello"}]})
    branch = Branch(store=store, chat_model=iModel(f"{provider}/m1"))
    assert await branch.run_and_collect("first") == "hello"
    session = branch.provider_session(provider, "m1")
    assert session is not None
    assert await branch.run_and_collect("second") == "hello"
    argv = fake.starts()[-1]["argv"]
    assert argv[argv.index(flag) + 1] == session
    run = list(branch.state.runs.values())[-1]
    assert run.status == "ended" and run.provider == provider


async def test_run_and_collect_is_the_cli_middle(store: EventStore) -> None:
    from turnlog.kernel import ChatParam, ParseParam
    from turnlog.kernel.operations.run import run_and_collect

    branch = Branch(store=store)
    param = ChatParam(imodel=ChunkModel([text('{"value": 3}')]))  # type: ignore[arg-type]
    assert await run_and_collect(branch, "go", param, ParseParam(response_format=Answer)) == Answer(value=3)
    assert await run_and_collect(branch, "go", ChatParam(imodel=ChunkModel([text("x")]))) == "x"  # type: ignore[arg-type]
    assert [r.verb for r in branch.state.runs.values()] == ["run", "run"]


async def test_a_recorded_instruction_is_not_run_again(store: EventStore) -> None:
    from turnlog.kernel import UsageError

    branch = Branch(store=store)
    got = [m async for m in branch.run("go", chat_model=ChunkModel([text("a")]))]
    version = branch.version
    with pytest.raises(UsageError, match="recorded"):
        async for _ in branch.run(got[0], chat_model=ChunkModel([text("b")])):
            pass
    assert branch.version == version
