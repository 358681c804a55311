"""Behaviours a lionagi user relies on, through the public API (parity with the seed's facade)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from turnlog.eventstore import EventStore
from turnlog.kernel import (
    Branch,
    LoopBreak,
    LoopDirective,
    MessageRecorded,
    RemovedArgument,
    Session,
    UsageError,
)
from turnlog.kernel.models import (
    CLIError,
    CLINotFound,
    ProviderError,
    ProviderTimeout,
    RateLimitError,
    StreamChunk,
)
from turnlog.projections import ActionRequest, AssistantResponse, Instruction
from turnlog.testing import ScriptedModel

from .conftest import assert_rebuilds
from .streamkit import ChunkModel, text

# ------------------------------------------------------------------ 1. provider errors are RuntimeErrors


@pytest.mark.parametrize(
    "error",
    [
        ProviderError("down", provider="openai"),
        RateLimitError("quota", status_code=429, provider="openai"),
        CLIError("usage limit reached", kind="rate_limit", provider="claude_code"),
        CLINotFound("no claude", kind="crash", provider="claude_code"),
        ProviderTimeout("too slow", provider="openai"),
    ],
)
def test_provider_errors_are_runtime_errors(error: ProviderError) -> None:
    """``except RuntimeError`` catches every provider failure, as it did in the seed."""
    with pytest.raises(RuntimeError):
        raise error


def test_cli_error_keeps_its_kind_and_a_timeout_stays_a_timeout() -> None:
    """The classification survives, and a timeout is still caught as a TimeoutError."""
    assert CLIError("x", kind="rate_limit").kind == "rate_limit"
    with pytest.raises(TimeoutError):
        raise ProviderTimeout("late")


async def test_a_failed_communicate_is_caught_as_runtime_error(store: EventStore) -> None:
    """A quota error raised by the model reaches ``except RuntimeError`` through the verb."""
    branch = Branch(store=store, chat_model=ScriptedModel(RateLimitError("quota", status_code=429)))
    with pytest.raises(RuntimeError, match="quota"):
        await branch.communicate("hi")
    assert branch.state.runs and next(iter(branch.state.runs.values())).status == "failed"


# ------------------------------------------------------------ 3. context providers fail open


class _Explosive:
    def __bool__(self) -> bool:
        raise RuntimeError("no truth for you")


async def test_a_misbehaving_provider_fails_alone(store: EventStore) -> None:
    """A provider returning a non-string or an object whose truth test raises is marked
    failed; the good provider still reaches the prompt and the turn succeeds."""
    model = ScriptedModel("ok")
    branch = Branch(store=store, system="sys", chat_model=model)

    async def good(branch: Branch, instruction: Any) -> str:
        return "GOOD-CONTEXT"

    async def number(branch: Branch, instruction: Any) -> Any:
        return 42

    async def explosive(branch: Branch, instruction: Any) -> Any:
        return _Explosive()

    branch.providers.register(number)
    branch.providers.register(good)
    branch.providers.register(explosive)
    report = await branch.providers.gather(branch, "x")
    assert report.failed == ("number", "explosive")
    assert report.blocks == ("GOOD-CONTEXT",)

    assert await branch.communicate("hi") == "ok"
    assert "GOOD-CONTEXT" in model.calls[0].request.messages[0]["content"]
    called = next(d for e, d in await branch.events() if e.type == "model.called")
    assert called.context_providers == ["good"]


# ---------------------------------------------------------------- 4. a falsy model is still used


class _FalsyModel(ScriptedModel):
    """A model object that is falsy (empty by ``__len__``), as a collection-like wrapper may be."""

    def __len__(self) -> int:
        return 0


async def test_a_falsy_chat_model_override_is_used(store: EventStore) -> None:
    """``chat(imodel=...)`` and ``operate(chat_model=...)`` call the given model even when falsy."""
    default = ScriptedModel()
    override = _FalsyModel("from override", "again")
    branch = Branch(store=store, chat_model=default)
    assert await branch.chat("hi", imodel=override) == "from override"
    assert await branch.operate(instruction="hi", chat_model=override) == "again"
    assert not default.calls and len(override.calls) == 2


async def test_a_falsy_parse_model_is_used(store: EventStore) -> None:
    """The reformat request goes to the given parse model even when it is falsy."""

    class Answer(BaseModel):
        value: int

    parser = _FalsyModel('{"value": 7}')
    branch = Branch(store=store, chat_model=ScriptedModel("seven"), parse_model=ScriptedModel())
    assert await branch.parse("seven", response_format=Answer, parse_model=parser) == Answer(value=7)
    assert await branch.communicate("n?", response_format=Answer, parse_model=_FalsyModel('{"value": 7}'))
    assert len(parser.calls) == 1


# -------------------------------------------------------------- 5. request_fields as name -> type


async def test_request_fields_mapping_names_to_types_is_accepted(store: EventStore) -> None:
    """``request_fields={"data": str}`` renders a schema and returns a dict of those fields."""
    model = ScriptedModel('{"Data": "forty-two", "noise": 1}')
    branch = Branch(store=store, chat_model=model)
    assert await branch.communicate("give data", request_fields={"data": str}) == {"data": "forty-two"}
    assert "data:" in model.calls[0].request.messages[-1]["content"]
    assert [r.status for r in branch.state.runs.values()] == ["ended"]
    await assert_rebuilds(branch)


async def test_request_fields_that_are_neither_types_nor_json_are_refused_before_recording(
    store: EventStore,
) -> None:
    """A mapping mixing types and other values is a UsageError, and nothing is recorded."""
    branch = Branch(store=store, chat_model=ScriptedModel("{}"))
    with pytest.raises(UsageError, match="not types"):
        await branch.communicate("x", request_fields={"data": str, "other": "text"})
    with pytest.raises(UsageError, match="must be JSON"):
        await branch.communicate("x", request_fields={"data": object()})
    assert branch.version == 0


# ---------------------------------------------------------------- 6. parse with a field-spec dict


async def test_parse_into_a_field_spec_matches_keys_fuzzily(store: EventStore) -> None:
    """``response_format={"name": str, "age": int}`` returns a dict; keys match approximately."""
    branch = Branch(store=store, chat_model=ScriptedModel())
    got = await branch.parse('{"Name": "Ann", "AGE": "41"}', response_format={"name": str, "age": int})
    assert got == {"name": "Ann", "age": 41}


async def test_parse_into_a_field_spec_reformats_when_needed(store: EventStore) -> None:
    """Text that does not parse goes to the parse model; the result is a dict of the spec."""
    parser = ScriptedModel('```json\n{"name": "Bo", "age": 7}\n```')
    branch = Branch(store=store, chat_model=ScriptedModel(), parse_model=parser)
    got = await branch.parse("Bo is seven", response_format={"name": str, "age": int})
    assert got == {"name": "Bo", "age": 7}
    assert "age:" in parser.calls[0].request.messages[-1]["content"]


async def test_communicate_with_a_field_spec_format(store: EventStore) -> None:
    """communicate(response_format=spec) parses the answer into a dict."""
    branch = Branch(store=store, chat_model=ScriptedModel('{"name": "Cy", "age": 3}'))
    assert await branch.communicate("who?", response_format={"name": str, "age": int}) == {
        "name": "Cy",
        "age": 3,
    }


# ----------------------------------------------------- 7. the reformat response says it repaired


class _Answer(BaseModel):
    value: int


async def test_reformat_response_records_is_parsed_and_original_text(store: EventStore) -> None:
    """After a repair the reformat response carries model_call_id, is_parsed, original_text."""
    branch = Branch(store=store, chat_model=ScriptedModel(), parse_model=ScriptedModel('{"value": 3}'))
    value, response = await branch.parse("three", response_format=_Answer, return_res_message=True)
    assert value == _Answer(value=3)
    assert response.metadata["is_parsed"] is True
    assert response.metadata["original_text"] == "three"
    call_ids = [d.call_id for e, d in await branch.events() if e.type == "model.called"]
    assert response.metadata["model_call_id"] == call_ids[-1]


async def test_direct_parse_returns_no_reformat_response(store: EventStore) -> None:
    """Without a repair there is no reformat response."""
    branch = Branch(store=store, chat_model=ScriptedModel())
    assert await branch.parse('{"value": 1}', response_format=_Answer, return_res_message=True) == (
        _Answer(value=1),
        None,
    )


async def test_communicate_marks_the_recorded_response_as_parsed(store: EventStore) -> None:
    """The recorded response of a repaired communicate is annotated ``is_parsed``."""
    branch = Branch(store=store, chat_model=ScriptedModel("three"), parse_model=ScriptedModel('{"value": 3}'))
    assert await branch.communicate("n?", response_format=_Answer) == _Answer(value=3)
    recorded = branch.messages[-1]
    assert recorded.metadata["is_parsed"] is True and recorded.response == "three"
    await assert_rebuilds(branch)


# ------------------------------------------------------------- removed keywords name the guide


@pytest.mark.parametrize(
    ("verb", "keyword"),
    [
        ("operate", "field_models"),
        ("operate", "exclude_fields"),
        ("operate", "call_params"),
        ("operate", "verbose_action"),
        ("ReAct", "verbose_action"),
        ("operate", "request_model"),
        ("communicate", "operative_model"),
        ("parse", "similarity_algo"),
        ("parse", "handle_unmatched"),
        ("parse", "fill_value"),
        ("parse", "fill_mapping"),
        ("parse", "strict"),
        ("parse", "operative"),
        ("ReAct", "intermediate_response_options"),
        ("ReAct", "intermediate_listable"),
        ("ReActStream", "intermediate_response_options"),
        ("ReActStream", "intermediate_listable"),
    ],
)
async def test_a_removed_keyword_names_the_migration_guide(
    store: EventStore, verb: str, keyword: str
) -> None:
    """A keyword the seed took and turnlog does not: a UsageError naming the guide, nothing recorded."""
    branch = Branch(store=store, chat_model=ScriptedModel())
    with pytest.raises(RemovedArgument) as info:
        if verb == "parse":
            await branch.parse("{}", response_format=dict, **{keyword: None})
        elif verb == "ReActStream":
            async for _ in branch.ReActStream(instruction="x", **{keyword: None}):
                pass
        elif verb == "communicate":
            await branch.communicate("x", **{keyword: None})
        else:
            await getattr(branch, verb)(instruction="x", **{keyword: None})
    error = info.value
    assert isinstance(error, UsageError) and isinstance(error, TypeError)
    assert error.argument == keyword and error.where == verb
    assert "docs/from-lionagi.md" in str(error) and keyword in str(error)
    assert branch.version == 0


async def test_an_unknown_parse_keyword_is_still_a_plain_type_error(store: EventStore) -> None:
    """A misspelt keyword is not mistaken for a removed one."""
    branch = Branch(store=store, chat_model=ScriptedModel())
    with pytest.raises(TypeError, match="unexpected keyword argument 'respons_format'") as info:
        await branch.parse("{}", respons_format=dict)
    assert not isinstance(info.value, RemovedArgument)


# ------------------------------------------------------------ 2. run() gathers context providers


async def _today(branch: Branch, instruction: Any) -> str:
    return "TODAY-IS-TUESDAY"


async def test_run_puts_provider_text_in_the_cli_prompt(store: EventStore) -> None:
    """Provider text reaches the CLI prompt, is never recorded, and model.called names it."""
    model = ChunkModel([text("ok")])
    branch = Branch(store=store, system="Be brief.")
    branch.providers.register(_today)
    got = [m async for m in branch.run("what day?", chat_model=model)]
    assert "TODAY-IS-TUESDAY" in model.calls[0]["prompt"]
    assert "what day?" in model.calls[0]["prompt"]
    assert all("TODAY-IS-TUESDAY" not in str(m.model_dump()) for m in branch.messages)
    assert got[-1].response == "ok"
    called = next(d for e, d in await branch.events() if e.type == "model.called")
    assert called.context_providers == ["_today"]
    await assert_rebuilds(branch)


async def test_run_puts_provider_text_in_a_resumed_prompt(store: EventStore) -> None:
    """A resumed provider session still gets this turn's provider text."""
    model = ChunkModel([text("ok")])
    branch = Branch(store=store, system="Be brief.")
    branch.providers.register(_today)
    await branch.bind_provider_session("claude_code", "fake", "sess-1")
    [m async for m in branch.run("again", chat_model=model)]
    assert model.calls[0]["resume"] == "sess-1"
    assert "TODAY-IS-TUESDAY" in model.calls[0]["prompt"] and "again" in model.calls[0]["prompt"]


async def test_run_without_a_system_message_skips_providers(store: EventStore) -> None:
    """As for the API verbs: without a system message, providers are not run."""
    model = ChunkModel([text("ok")])
    branch = Branch(store=store)
    branch.providers.register(_today)
    [m async for m in branch.run("x", chat_model=model)]
    assert "TODAY-IS-TUESDAY" not in model.calls[0]["prompt"]


# ----------------------------------------------------------------- 10. the stop control of run()


def _three_turns() -> list[StreamChunk]:
    return [
        text("one"),
        StreamChunk("tool_use", tool_name="fn", tool_input={}, tool_id="t1"),
        StreamChunk("tool_result", tool_id="t1", tool_output="r"),
        text("two"),
        StreamChunk("tool_use", tool_name="fn", tool_input={}, tool_id="t2"),
        text("three"),
    ]


async def _lifecycle(branch: Branch) -> list[str]:
    return [e.type for e, _ in await branch.events() if e.type.startswith("run.")]


async def test_cancel_stops_the_run_cleanly(store: EventStore) -> None:
    """control("cancel") from an observer: the loop stops, the stream is closed, one run.ended."""
    model = ChunkModel(_three_turns())
    branch = Branch(store=store)

    def stop_on_first_answer(signal: MessageRecorded) -> None:
        if isinstance(signal.message, AssistantResponse):
            branch.control(LoopDirective.CANCEL, reason="enough")

    branch.observe(MessageRecorded, handler=stop_on_first_answer)
    got = [m async for m in branch.run("go", chat_model=model)]
    assert [type(m) for m in got] == [Instruction]  # "one" was recorded, then the loop stopped
    assert model.closed == 1, "the provider stream was closed (the finally cleanup ran)"
    assert await _lifecycle(branch) == ["run.started", "run.ended"]
    assert [r.status for r in branch.state.runs.values()] == ["ended"]
    assert branch.poll_control() is None, "a directive is used once"
    await assert_rebuilds(branch)


async def test_cancel_from_the_consumer_records_pending_text_as_interrupted(store: EventStore) -> None:
    """The consumer cancels mid-run; what was said so far stays in the log."""
    model = ChunkModel(_three_turns())
    branch = Branch(store=store)
    got = []
    async for message in branch.run("go", chat_model=model):
        got.append(message)
        if isinstance(message, ActionRequest):
            branch.control("cancel")
    assert [type(m) for m in got] == [Instruction, AssistantResponse, ActionRequest]
    assert model.closed == 1
    assert await _lifecycle(branch) == ["run.started", "run.ended"]
    assert [m.response for m in branch.messages if isinstance(m, AssistantResponse)] == ["one"]


async def test_break_fails_the_run_with_loop_break(store: EventStore) -> None:
    """control("break"): LoopBreak is raised after cleanup; one run.failed."""
    model = ChunkModel(_three_turns())
    branch = Branch(store=store)
    with pytest.raises(LoopBreak, match="stop now") as info:
        async for message in branch.run("go", chat_model=model):
            if isinstance(message, AssistantResponse):
                branch.control("break", reason="stop now")
    assert isinstance(info.value, RuntimeError)
    assert model.closed == 1
    assert await _lifecycle(branch) == ["run.started", "run.failed"]
    run = next(iter(branch.state.runs.values()))
    assert run.status == "failed" and run.error_type == "LoopBreak"


async def test_continue_changes_nothing_and_a_bad_directive_is_refused(store: EventStore) -> None:
    """continue is a no-op; an unknown directive is a UsageError."""
    model = ChunkModel([text("a")])
    branch = Branch(store=store)
    branch.control("continue")
    got = [m async for m in branch.run("go", chat_model=model)]
    assert [type(m) for m in got] == [Instruction, AssistantResponse]
    with pytest.raises(UsageError, match="cancel"):
        branch.control("halt")


# ------------------------------------------------- 8. an included branch talks for its session


async def test_include_branches_sets_the_user_to_the_session_id(store: EventStore) -> None:
    """A branch included before or after its first write talks for the session; a reload agrees."""
    session = Session(store=store)
    fresh = Branch(store=store, chat_model=ScriptedModel("a"))
    used = Branch(store=store, chat_model=ScriptedModel("b", "c"))
    await used.communicate("before")
    assert used.user is None
    await session.include_branches([fresh, used])
    assert fresh.user == session.id and used.user == session.id
    await used.communicate("after")
    assert used.messages[-2].sender == session.id, "instructions are sent by the session"
    assert used.messages[-1].recipient == session.id
    user_set = [d for e, d in await used.events() if e.type == "branch.user_set"]
    assert [(d.user, d.session_id) for d in user_set] == [(session.id, session.id)]
    for branch in (fresh, used):
        again = await Branch.load(store, branch.id)
        assert again.user == session.id
        await assert_rebuilds(branch)
    reloaded = await Session.load(store, session.id)
    assert {b.user for b in reloaded.branches} == {session.id}


async def test_including_twice_records_the_user_once(store: EventStore) -> None:
    """Including again changes nothing."""
    session = Session(store=store)
    branch = Branch(store=store)
    await branch.save()
    await session.include_branches(branch)
    version = branch.version
    await session.include_branches(branch)
    assert branch.version == version


# ---------------------------------------------------- 9. Session() has a default branch on demand


async def test_a_new_session_has_a_default_branch_without_io(store: EventStore) -> None:
    """Session() writes nothing; its default branch exists on first use and is recorded on first write."""
    session = Session(store=store)
    model = ScriptedModel("hello")

    async def greet(name: str) -> str:
        return await session.default_branch.communicate(f"greet {name}")

    session.register_operation("greet", greet)
    branch = session.default_branch
    assert session.branches == [branch] and branch.user == session.id
    assert await store.stream_version(session.stream) == 0
    assert branch.version == 0, "asking for the default branch writes nothing"
    branch.chat_model = model
    assert await session.run_operation("greet", name="Ann") == "hello"
    assert await session.run_operation("chat", instruction="again?", imodel=ScriptedModel("yes")) == "yes"
    kinds = [e.type async for e in store.read_stream(session.stream)]
    assert kinds == ["session.created", "branch.included", "session.default_branch_set"]
    again = await Session.load(store, session.id)
    assert again.default_branch.id == branch.id
    assert again.default_branch.user == session.id
    assert len(again.default_branch.messages) == 2


async def test_including_a_branch_after_using_the_default_keeps_the_log_in_agreement(
    store: EventStore,
) -> None:
    """An on-demand default that nothing wrote yet is recorded before the next inclusion."""
    session = Session(store=store)
    default = session.default_branch
    other = Branch(store=store, name="other")
    await session.include_branches(other)
    assert session.default_branch is default
    again = await Session.load(store, session.id)
    assert again.default_branch.id == default.id
    assert [b.id for b in again.branches] == [default.id, other.id]


async def test_removing_an_unwritten_default_writes_nothing(store: EventStore) -> None:
    """A default made on demand and removed before any write leaves no trace."""
    session = Session(store=store)
    await session.remove_branch(session.default_branch)
    assert await store.stream_version(session.stream) == 0
    assert session.branches == []
