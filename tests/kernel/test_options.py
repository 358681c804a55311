"""A misspelt option is caught before it is sent: verb keywords are checked against the model."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator

import pytest

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, UnknownOption, UsageError, iModel
from turnlog.kernel.models import AnthropicModel, GeminiAPIModel, OpenAIChatModel
from turnlog.testing import FakeOpenAIServer, FunctionModel, ScriptedModel

API_KEY = "sk-test-very-secret-key-0123456789"
VERBS = ("chat", "chat_and_record", "communicate", "parse", "run", "run_and_collect", "act", "operate")
VERBS += ("interpret", "ReAct", "ReActStream")


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer([{"text": "Hello.", "times": None}], api_key=API_KEY) as s:
        yield s


def http_model(server: FakeOpenAIServer) -> iModel:
    return iModel(provider="openai", model="gpt-4.1-mini", base_url=server.base_url, api_key=API_KEY)


async def test_a_misspelt_verb_option_fails_before_the_model_is_called(store: EventStore) -> None:
    """guidence= is refused with a "did you mean guidance", even by a model that takes anything."""
    model = ScriptedModel("never")
    branch = Branch(store=store, chat_model=model)
    with pytest.raises(UnknownOption, match=r"did you mean guidance=\?") as caught:
        await branch.communicate("hi", guidence="be brief")
    assert (caught.value.verb, caught.value.option, caught.value.suggestions) == (
        "communicate",
        "guidence",
        ("guidance",),
    )
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, UsageError)
    assert model.calls == [] and model.remaining == 1
    for verb, call in (("chat", branch.chat), ("operate", branch.operate)):
        with pytest.raises(UnknownOption, match=f"^{verb}\\(\\) got skip_validaton="):
            await call(instruction="hi", skip_validaton=True)
    assert model.calls == []
    assert not [e for e, _ in await branch.events() if e.type == "model.called"]


async def test_test_models_take_any_other_parameter(store: EventStore) -> None:
    """Scripted and function models declare nothing, so a parameter far from any option passes."""
    scripted = ScriptedModel("a")
    await Branch(store=store, chat_model=scripted).communicate("hi", my_server_knob=3, timeout=5)
    assert dict(scripted.calls[0].request.params) == {"my_server_knob": 3, "timeout": 5}
    function = FunctionModel(lambda request: str(dict(request.params)))
    assert await Branch(store=store, chat_model=function).chat("hi", top_k=2) == "{'top_k': 2}"


async def test_a_test_model_that_declares_its_parameters_is_checked(store: EventStore) -> None:
    """A model's request_params, when it has one, is what it takes."""
    model = ScriptedModel("a", "b")
    model.request_params = frozenset({"temperature"})  # type: ignore[attr-defined]
    branch = Branch(store=store, chat_model=model)
    assert await branch.communicate("hi", temperature=0) == "a"
    with pytest.raises(UnknownOption, match="did you mean temperature"):
        await branch.communicate("hi", temperatur=0)
    assert model.remaining == 1


async def test_an_http_model_refuses_what_the_api_does_not_take(
    store: EventStore, server: FakeOpenAIServer
) -> None:
    """Over a real socket: a typo of an API parameter never reaches the server; a real one does."""
    branch = Branch(store=store, chat_model=http_model(server))
    with pytest.raises(UnknownOption, match="did you mean temperature") as caught:
        await branch.communicate("hi", temprature=0.2)
    assert "OpenAIChatModel" in str(caught.value) and caught.value.suggestions == ("temperature",)
    with pytest.raises(UnknownOption, match="does not take as a request parameter"):
        await branch.chat("hi", colour="blue")
    assert server.requests == []  # nothing was sent
    assert await branch.communicate("hi", temperature=0.2, max_tokens=5) == "Hello."
    body = server.requests[0]["body"]
    assert (body["temperature"], body["max_tokens"]) == (0.2, 5)


async def test_a_wider_server_widens_the_declaration(store: EventStore, server: FakeOpenAIServer) -> None:
    """A compatible server that takes more: the instance's request_params says so."""
    model = http_model(server)
    model.backend.request_params = OpenAIChatModel.request_params | {"top_k"}  # type: ignore[operator]
    assert await Branch(store=store, chat_model=model).chat("hi", top_k=40) == "Hello."
    assert server.requests[0]["body"]["top_k"] == 40


def test_each_http_provider_declares_its_parameters() -> None:
    """One declaration per provider class; the translated OpenAI names are among them."""
    for cls in (OpenAIChatModel, AnthropicModel, GeminiAPIModel):
        assert isinstance(cls.request_params, frozenset) and "temperature" in cls.request_params
    assert AnthropicModel.request_params is not None and "stop" in AnthropicModel.request_params
    assert GeminiAPIModel.request_params is not None and "safetySettings" in GeminiAPIModel.request_params


def test_verb_options_name_every_option_of_every_verb() -> None:
    """VERB_OPTIONS is complete: each named keyword of each Branch verb is in it."""
    from turnlog.kernel._options import VERB_OPTIONS

    named = {
        p.name
        for verb in VERBS
        for p in inspect.signature(getattr(Branch, verb)).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in ("self", "branch")
    }
    assert named - VERB_OPTIONS == set()


@pytest.mark.parametrize(
    ("a", "b", "apart"),
    [
        ("guidence", "guidance", True),  # replaced
        ("guidnce", "guidance", True),  # deleted
        ("guidancee", "guidance", True),  # inserted
        ("giudance", "guidance", True),  # swapped
        ("guidance", "guidance", False),
        ("guidnace2", "guidance", False),
        ("temperature", "guidance", False),
    ],
)
def test_one_edit_apart(a: str, b: str, apart: bool) -> None:
    from turnlog.kernel._options import one_edit_apart

    assert one_edit_apart(a, b) is apart
    assert one_edit_apart(b, a) is apart


async def test_run_refuses_a_misspelt_option_before_the_cli_starts(store: EventStore) -> None:
    """run() checks its keywords too: no CLI process is started for guidence=."""
    branch = Branch(store=store, chat_model=iModel("claude_code/sonnet"))
    with pytest.raises(UnknownOption, match=r"^run\(\) got guidence=.*did you mean guidance=\?"):
        async for _ in branch.run("hi", guidence="short"):
            pass
    assert not [e for e, _ in await branch.events() if e.type in ("model.called", "message.added")]
