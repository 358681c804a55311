"""iModel: provider resolution, default parameters, configs without secrets, fingerprints."""

from __future__ import annotations

import sys
import types
from collections.abc import AsyncIterator, Mapping
from types import MappingProxyType
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnlog.kernel.models import (
    ChatModel,
    MissingAPIKey,
    ModelRequest,
    OpenAIChatModel,
    ProviderError,
    RetryPolicy,
    StreamChunk,
    iModel,
    request_fingerprint,
)
from turnlog.kernel.models import _imodel as imodel_module
from turnlog.testing import FakeOpenAIServer

KEY = "sk-imodel-test-SECRET-42"
HELLO = ModelRequest(messages=[{"role": "user", "content": "hello"}])


@pytest.mark.parametrize(
    ("args", "kwargs", "provider", "model"),
    [
        (("openai/gpt-4.1-mini",), {}, "openai", "gpt-4.1-mini"),
        ((), {"model": "openai/gpt-4.1-mini"}, "openai", "gpt-4.1-mini"),
        ((), {"provider": "openai", "model": "gpt-4.1-mini"}, "openai", "gpt-4.1-mini"),
        ((), {"provider": "OpenAI", "model": "gpt-4o"}, "openai", "gpt-4o"),
        ((), {"model": "gpt-4o"}, "openai", "gpt-4o"),
        ((), {"provider": "ollama", "model": "llama3.2"}, "ollama", "llama3.2"),
        # With an explicit provider the model name may itself contain a slash.
        (
            (),
            {"provider": "router", "model": "meta/llama-3", "base_url": "http://127.0.0.1:1/v1"},
            "router",
            "meta/llama-3",
        ),
    ],
)
def test_provider_and_model_are_resolved(
    args: tuple[str, ...], kwargs: dict[str, Any], provider: str, model: str
) -> None:
    handle = iModel(*args, **kwargs)
    assert (handle.provider, handle.model, handle.is_cli) == (provider, model, False)
    assert handle.endpoint == "chat/completions"


def test_known_providers_have_default_urls() -> None:
    assert iModel("openai/gpt-4.1-mini").base_url == "https://api.openai.com/v1"
    assert iModel("ollama/llama3.2").base_url == "http://127.0.0.1:11434/v1"


def test_bad_provider_specs_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"unknown provider 'nowhere'.*base_url"):
        iModel("nowhere/some-model")
    with pytest.raises(ValueError, match="needs a model name"):
        iModel(provider="openai")
    with pytest.raises(ValueError, match="already names a model"):
        iModel("openai/gpt-4o", model="gpt-4.1")


def test_imodel_is_a_chat_model_and_hides_its_key() -> None:
    handle = iModel("openai/gpt-4.1-mini", api_key=KEY, temperature=0)
    assert isinstance(handle, ChatModel)
    assert KEY not in repr(handle) and KEY not in repr(handle.backend)
    assert KEY not in orjson.dumps(handle.to_config()).decode()


async def test_invoke_merges_default_params_under_request_params() -> None:
    async with FakeOpenAIServer([{"text": "a"}, {"text": "b"}]) as server:
        handle = iModel("fake/gpt-fake", base_url=server.base_url, temperature=0, max_tokens=50)
        first = await handle.invoke(HELLO)
        await handle.invoke(ModelRequest(messages=HELLO.messages, params={"temperature": 0.7}))
    assert (first.text, first.provider, first.model) == ("a", "fake", "gpt-fake")
    bodies = [r["body"] for r in server.requests]
    assert (bodies[0]["temperature"], bodies[0]["max_tokens"]) == (0, 50)
    assert (bodies[1]["temperature"], bodies[1]["max_tokens"]) == (0.7, 50)
    assert server.requests[0]["credentials"] == {}  # no key given, none required for a custom server


async def test_custom_provider_key_comes_from_its_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_API_KEY", KEY)
    async with FakeOpenAIServer([{"text": "ok"}], api_key=KEY) as server:
        reply = await iModel("fake/gpt-fake", base_url=server.base_url).invoke(HELLO)
    assert reply.text == "ok"


async def test_openai_requires_a_key_before_sending_anything() -> None:
    async with FakeOpenAIServer([{"text": "ok"}]) as server:
        handle = iModel("openai/gpt-4.1-mini", base_url=server.base_url)
        with pytest.raises(MissingAPIKey, match="OPENAI_API_KEY"):
            await handle.invoke(HELLO)
    assert server.requests == []


async def test_async_with_keeps_one_connection_pool() -> None:
    async with FakeOpenAIServer([{"text": "ok", "times": 3}]) as server:
        async with iModel("fake/m", base_url=server.base_url) as handle:
            for _ in range(3):
                await handle.invoke(HELLO)
    assert len({r["client_port"] for r in server.requests}) == 1


def test_config_round_trip_without_secrets() -> None:
    handle = iModel(
        "fake/gpt-fake",
        base_url="http://127.0.0.1:8000/v1",
        api_key=KEY,
        timeout=httpx.Timeout(30.0, connect=2.0),
        retry=RetryPolicy(max_attempts=5),
        headers={"X-Org": "secret-org"},
        temperature=0.2,
        client_secret="hidden",
    )
    config = handle.to_config()
    assert config == {
        "provider": "fake",
        "model": "gpt-fake",
        "base_url": "http://127.0.0.1:8000/v1",
        "params": {"temperature": 0.2},
        "timeout": {"connect": 2.0, "read": 30.0, "write": 30.0, "pool": 30.0},
        "retry": RetryPolicy(max_attempts=5).to_dict(),
    }
    text = orjson.dumps(config).decode()
    assert KEY not in text and "secret-org" not in text and "hidden" not in text
    again = iModel.from_config(orjson.loads(text))
    assert again.to_config() == config
    assert again.backend.timeout == httpx.Timeout(30.0, connect=2.0)
    assert again.backend.retry == RetryPolicy(max_attempts=5)


def test_minimal_config_round_trip() -> None:
    config = iModel("openai/gpt-4.1-mini").to_config()
    assert config == {"provider": "openai", "model": "gpt-4.1-mini", "base_url": None, "params": {}}
    assert iModel.from_config(config).to_config() == config


def test_from_config_rejects_unknown_keys() -> None:
    with pytest.raises(ValueError, match="unknown keys api_key"):
        iModel.from_config({"provider": "openai", "model": "gpt-4o", "api_key": KEY})
    with pytest.raises(ValueError, match="no 'provider'"):
        iModel.from_config({"model": "gpt-4o"})


def test_http_provider_has_no_stream_method_for_cli_prompts() -> None:
    with pytest.raises(ProviderError, match="use invoke"):
        iModel("openai/gpt-4o").stream("hi")


# -- CLI providers through the lazy provider table --------------------------------------------


class StandInAgent:
    """A CLI-agent stand-in living in a module the table points to."""

    def __init__(self, model: str = "default-agent-model", **options: Any) -> None:
        self.provider = "standin"
        self.model = model
        self.options = options

    async def stream(
        self, prompt: str, *, resume: str | None = None, options: Mapping[str, Any] | None = None
    ) -> AsyncIterator[StreamChunk]:
        yield StreamChunk(type="system", metadata={"session_id": resume or "new"})
        yield StreamChunk(type="result", content=f"did: {prompt}")


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("turnlog_standin_agent")
    module.StandInAgent = StandInAgent  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "turnlog_standin_agent", module)
    table = {
        **imodel_module.CLI_PROVIDERS,
        "standin": ("turnlog_standin_agent", "StandInAgent"),
        "ghost": ("turnlog_no_such_module_here", "GhostModel"),
    }
    monkeypatch.setattr(imodel_module, "CLI_PROVIDERS", MappingProxyType(table))


@pytest.mark.usefixtures("standin")
async def test_cli_provider_streams_through_the_table() -> None:
    handle = iModel("standin/opus", permission_mode="plan")
    assert (handle.provider, handle.model, handle.is_cli, handle.endpoint) == ("standin", "opus", True, "cli")
    assert handle.backend.options == {"permission_mode": "plan"}
    chunks = [chunk async for chunk in handle.stream("fix it", resume="sess-1")]
    assert [c.type for c in chunks] == ["system", "result"]
    assert chunks[0].metadata == {"session_id": "sess-1"}
    with pytest.raises(ProviderError, match="use stream"):
        await handle.invoke(HELLO)
    assert iModel.from_config(handle.to_config()).to_config() == handle.to_config()


@pytest.mark.usefixtures("standin")
def test_cli_provider_without_model_uses_the_agent_default() -> None:
    assert iModel(provider="standin").model == "default-agent-model"


@pytest.mark.usefixtures("standin")
def test_missing_cli_module_is_a_clear_error() -> None:
    with pytest.raises(
        ProviderError, match=r"provider 'ghost' needs turnlog_no_such_module_here\.GhostModel"
    ):
        iModel("ghost/x")


def test_cli_provider_names_are_in_the_table() -> None:
    assert set(imodel_module.CLI_PROVIDERS) == {"claude_code", "codex", "gemini"}


# -- fingerprints -----------------------------------------------------------------------------


def test_fingerprint_covers_merged_defaults_and_not_the_key() -> None:
    with_key = iModel("fake/m", base_url="http://127.0.0.1:1/v1", api_key=KEY, temperature=0)
    other_key = iModel("fake/m", base_url="http://127.0.0.1:1/v1", api_key="sk-other", temperature=0)
    warmer = iModel("fake/m", base_url="http://127.0.0.1:1/v1", temperature=1)
    assert with_key.fingerprint(HELLO) == other_key.fingerprint(HELLO)
    assert with_key.fingerprint(HELLO) != warmer.fingerprint(HELLO)
    merged = ModelRequest(messages=HELLO.messages, params={"temperature": 0})
    assert with_key.fingerprint(HELLO) == request_fingerprint(merged, model="m")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@given(params=st.dictionaries(st.sampled_from(["temperature", "top_p", "seed", "user", "n"]), json_values))
def test_fingerprint_ignores_key_order_and_secret_params(params: dict[str, Any]) -> None:
    reordered = dict(reversed(list(params.items())))
    plain = ModelRequest(messages=HELLO.messages, params=params)
    shuffled = ModelRequest(
        messages=HELLO.messages, params={**reordered, "api_key": KEY, "headers": {"a": "b"}}
    )
    assert request_fingerprint(plain, model="m") == request_fingerprint(shuffled, model="m")
    assert request_fingerprint(plain, model="m") != request_fingerprint(plain, model="other")


def test_fingerprint_separates_streaming_tools_and_formats() -> None:
    variants = [
        HELLO,
        ModelRequest(messages=HELLO.messages, stream=True),
        ModelRequest(messages=HELLO.messages, tools=[{"type": "function", "function": {"name": "f"}}]),
        ModelRequest(messages=HELLO.messages, response_format={"type": "json_object"}),
        ModelRequest(messages=[{"role": "user", "content": "hello!"}]),
    ]
    assert len({request_fingerprint(v, model="m") for v in variants}) == len(variants)
    # Message ids are bookkeeping, not part of what is sent.
    assert request_fingerprint(ModelRequest(messages=HELLO.messages, message_ids=["x"]), model="m") == (
        request_fingerprint(HELLO, model="m")
    )


def test_openai_body_carries_what_the_fingerprint_covers() -> None:
    request = ModelRequest(messages=HELLO.messages, params={"temperature": 0}, stream=True)
    body = OpenAIChatModel("m", api_key=KEY).build_body(request)
    assert body == {
        "model": "m",
        "messages": HELLO.messages,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
