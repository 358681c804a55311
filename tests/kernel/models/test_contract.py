"""The model contract: models declare what they can do, and one rule says "is a CLI agent".

A verb reads ``profile``, calls ``prepare``, ``invoke(request, on_chunk=...)`` or ``stream``;
a user's object that has only the small protocol is adapted by ``as_chat_model``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, UsageError
from turnlog.kernel.models import (
    BaseChatModel,
    ChunkSink,
    ClaudeCodeModel,
    ModelProfile,
    ModelRequest,
    ModelResponse,
    OpenAIChatModel,
    ProviderError,
    StreamChunk,
    as_chat_model,
    iModel,
)
from turnlog.kernel.operations.operate import is_cli_model
from turnlog.kernel.operations.run import streaming_model
from turnlog.testing import ScriptedModel

HELLO = ModelRequest(messages=[{"role": "user", "content": "hello"}])


def test_shipped_models_declare_their_profile() -> None:
    """iModel, the HTTP clients and the CLI agents are BaseChatModels whose profile says what they do."""
    api = iModel("openai/gpt-4.1-mini", stream=True, temperature=0)
    assert isinstance(api, BaseChatModel)
    profile = api.profile
    assert (profile.is_cli, profile.streams_chunks, profile.endpoint) == (False, True, "chat/completions")
    assert (profile.stream, profile.stream_persist) == (True, False)
    assert profile.request_params is not None and "temperature" in profile.request_params
    assert dict(profile.default_params) == {"stream": True, "temperature": 0}
    assert profile.transport == "OpenAIChatModel"

    cli = iModel("claude_code/sonnet", cwd="/tmp")
    assert (cli.profile.is_cli, cli.profile.endpoint, cli.profile.streams_chunks) == (True, "cli", False)
    assert cli.profile.system_prompt_option == "append_system_prompt"
    assert cli.profile.cwd == "/tmp"

    assert isinstance(OpenAIChatModel("m", api_key="k"), BaseChatModel)
    assert ClaudeCodeModel().profile.is_cli is True


async def test_a_cli_agent_refuses_invoke_through_the_contract() -> None:
    """``invoke`` is declared on every model: a CLI agent answers it with ProviderError, pointing at stream."""
    with pytest.raises(ProviderError, match="use stream"):
        await ClaudeCodeModel().invoke(HELLO)
    with pytest.raises(ProviderError, match="use stream"):
        await iModel("claude_code/sonnet").invoke(HELLO)


class _Streamer:
    """A user's CLI agent: only ``stream`` (no ``invoke``, no flag)."""

    provider = "mine"
    model = "m1"

    async def stream(
        self, prompt: str, *, resume: str | None = None, options: Mapping[str, Any] | None = None
    ) -> AsyncIterator[StreamChunk]:
        yield StreamChunk("text", content=prompt)


class _Both(_Streamer):
    """Both ``invoke`` and ``stream``: the flag decides."""

    def __init__(self, is_cli: bool | None) -> None:
        if is_cli is not None:
            self.is_cli = is_cli

    async def invoke(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="x")


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (_Streamer(), True),
        (_Both(True), True),
        (_Both(False), False),
        (_Both(None), False),
        (ScriptedModel("a"), False),
        (iModel("codex/gpt-5"), True),
        (iModel("openai/gpt-4.1-mini"), False),
    ],
    ids=["stream-only", "flag-true", "flag-false", "no-flag", "scripted", "imodel-cli", "imodel-api"],
)
def test_one_rule_decides_is_a_cli_agent(model: object, expected: bool) -> None:
    """operate's Middle choice and run's refusal follow the same rule: ``profile.is_cli``."""
    assert as_chat_model(model).profile.is_cli is expected
    assert is_cli_model(model) is expected
    if expected:
        assert streaming_model(model).profile.is_cli
    else:
        with pytest.raises(UsageError, match="only supports CLI endpoints"):
            streaming_model(model)


def test_the_adapter_reads_a_user_object_once_and_keeps_the_contract_s_own() -> None:
    """A BaseChatModel is used as it is; another object is adapted, its optional attributes read."""
    model = iModel("openai/gpt-4.1-mini")
    assert as_chat_model(model) is model
    scripted = ScriptedModel("a")
    adapted = as_chat_model(scripted)
    assert adapted is not scripted
    assert (adapted.provider, adapted.model) == (scripted.provider, scripted.model)
    assert adapted.profile == ModelProfile(endpoint="test", transport="ScriptedModel")  # its own endpoint
    assert adapted.prepare(HELLO) is HELLO
    assert adapted.to_config() == {"provider": scripted.provider, "model": scripted.model}


class _Chunky(BaseChatModel):
    """A user's model written against the contract: it streams its deltas to ``on_chunk``."""

    provider = "chunky"
    model = "c1"
    default_profile = ModelProfile(streams_chunks=True, stream=True, endpoint="v1/chunky")

    def __init__(self) -> None:
        self.sinks: list[ChunkSink | None] = []

    async def invoke(self, request: ModelRequest, *, on_chunk: ChunkSink | None = None) -> ModelResponse:
        self.sinks.append(on_chunk)
        if on_chunk is not None:
            await on_chunk(StreamChunk("text", content="hel", is_delta=True))
            await on_chunk(StreamChunk("text", content="lo", is_delta=True))
        return ModelResponse(text="hello", model=self.model, provider=self.provider)


async def test_a_contract_model_streams_chunks_into_the_log(store: EventStore) -> None:
    """The verbs read the profile: its stream default and streams_chunks give on_chunk, and chunks are recorded."""
    model = _Chunky()
    branch = Branch(store=store, chat_model=model)
    assert await branch.chat_and_record("hi") == "hello"
    assert len(model.sinks) == 1 and model.sinks[0] is not None
    called = [e async for e in store.read_stream(f"branch-{branch.id}") if e.type == "model.called"]
    assert [(e.data["endpoint"], e.data["stream"]) for e in called] == [("v1/chunky", True)]
    run = f"run-{called[0].data['call_id']}"
    chunks = [e.data["content"] async for e in store.read_stream(run) if e.type == "stream.chunk"]
    assert chunks == ["hel", "lo"]


def test_no_verb_probes_a_model_s_attributes() -> None:
    """Outside ``kernel/models``, no ``getattr``/``hasattr`` reads a model object: the contract says it."""
    import ast
    from pathlib import Path

    import turnlog.kernel

    root = Path(turnlog.kernel.__file__).parent
    probes = []
    for path in sorted(root.rglob("*.py")):
        if path.parent.name == "models":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
                if node.func.id in ("getattr", "hasattr") and "model" in ast.unparse(node.args[0]).lower():
                    probes.append(f"{path.relative_to(root)}:{node.lineno}")
    assert probes == []


class _Named:
    def __init__(self, **attributes: Any) -> None:
        self.__dict__.update(attributes)


@pytest.mark.parametrize(
    "model",
    [
        ScriptedModel("hi"),
        iModel("openai/gpt-4.1-mini"),
        _Named(provider="acme", model="m-1", invoke=None),
        _Named(provider=None, model=7),
        _Named(model=""),
        _Named(),
    ],
)
def test_a_run_names_the_provider_and_model_the_contract_names(model: object) -> None:
    """``model_identity`` (what ``run.started`` records) reads what ``as_chat_model`` would."""
    from turnlog.kernel.models._contract import model_identity

    contract = as_chat_model(model)
    assert model_identity(model) == (contract.provider, contract.model)
