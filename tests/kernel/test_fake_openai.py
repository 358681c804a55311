"""The verbs against the loopback OpenAI-compatible server, over a real socket."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from pydantic import BaseModel

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, iModel
from turnlog.kernel.models import AuthenticationError, ModelRequest, RetryPolicy, ServerError
from turnlog.testing import FakeOpenAIServer

from .conftest import assert_rebuilds

API_KEY = "sk-test-very-secret-key-0123456789"


class Weather(BaseModel):
    city: str
    celsius: int


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    script = [
        {"match": {"last_user_contains": "weather"}, "text": '{"city": "Oslo", "celsius": -3}'},
        {"status": 429, "retry_after_ms": 1, "match": {"last_user_contains": "flaky"}},
        {"status": 503, "times": None, "match": {"last_user_contains": "down"}},
        {"text": "recovered", "match": {"last_user_contains": "flaky"}},
        {
            "text": "Hello from the fake server.",
            "usage": {"prompt_tokens": 17, "completion_tokens": 6},
            "times": None,
        },
    ]
    async with FakeOpenAIServer(script, api_key=API_KEY) as s:
        yield s


def model_for(server: FakeOpenAIServer, **kwargs: object) -> iModel:
    return iModel(
        provider="openai", model="gpt-4.1-mini", base_url=server.base_url, api_key=API_KEY, **kwargs
    )


async def test_communicate_over_http_records_usage_and_no_secret(
    store: EventStore, server: FakeOpenAIServer, tmp_path: Path
) -> None:
    model = model_for(server, temperature=0)
    branch = Branch(store=store, system="Be helpful.", chat_model=model)
    assert await branch.communicate("hi") == "Hello from the fake server."
    body = server.requests[0]["body"]
    assert body["model"] == "gpt-4.1-mini" and body["temperature"] == 0
    assert "Be helpful." in body["messages"][0]["content"]
    (called,) = [d for e, d in await branch.events() if e.type == "model.called"]
    assert (called.provider, called.endpoint, called.status) == ("openai", "chat/completions", "ok")
    assert called.usage.input_tokens == 17 and called.usage.output_tokens == 6
    assert called.params == {"temperature": 0}
    assert called.fingerprint == model.fingerprint(ModelRequest(messages=body["messages"]))
    (run,) = branch.state.runs.values()
    assert run.usage.input_tokens == 17
    await store.close()
    database = Path(store.url.removeprefix("sqlite:///"))
    for path in database.parent.glob(database.name + "*"):
        assert API_KEY.encode() not in path.read_bytes()


async def test_structured_answer_over_http(store: EventStore, server: FakeOpenAIServer) -> None:
    branch = Branch(store=store, chat_model=model_for(server))
    assert await branch.communicate("weather in Oslo?", response_format=Weather) == Weather(
        city="Oslo", celsius=-3
    )
    await assert_rebuilds(branch)


async def test_retries_are_counted_in_attempts(store: EventStore, server: FakeOpenAIServer) -> None:
    model = model_for(server, retry=RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.01))
    branch = Branch(store=store, chat_model=model)
    assert await branch.chat_and_record("flaky?") == "recovered"
    (called,) = [d for e, d in await branch.events() if e.type == "model.called"]
    assert called.attempts == 2


async def test_exhausted_retries_are_recorded_with_their_attempts(
    store: EventStore, server: FakeOpenAIServer
) -> None:
    model = model_for(server, retry=RetryPolicy(max_attempts=3, initial_delay=0.001, max_delay=0.01))
    branch = Branch(store=store, chat_model=model)
    with pytest.raises(ServerError):
        await branch.chat_and_record("is it down?")
    (called,) = [d for e, d in await branch.events() if e.type == "model.called"]
    assert (called.status, called.error_type, called.attempts) == ("error", "ServerError", 3)
    assert branch.messages == ()


async def test_a_wrong_key_is_recorded_as_a_failed_call(store: EventStore, server: FakeOpenAIServer) -> None:
    wrong = iModel(provider="openai", model="gpt-4.1-mini", base_url=server.base_url, api_key="sk-wrong")
    branch = Branch(store=store, chat_model=wrong)
    with pytest.raises(AuthenticationError):
        await branch.communicate("hi")
    (called,) = [d for e, d in await branch.events() if e.type == "model.called"]
    assert called.status == "error" and called.error_type == "AuthenticationError"
    assert branch.messages == ()
    (run,) = branch.state.runs.values()
    assert run.status == "failed" and run.error_type == "AuthenticationError"


RESUME = textwrap.dedent(
    """
    import sys, anyio
    from turnlog.eventstore import open_store
    from turnlog.kernel import Branch
    from turnlog.projections import catalogue_upcasters

    async def main():
        store = open_store(sys.argv[1], upcasters=catalogue_upcasters())
        branch = await Branch.load(store, "http-chat")
        print(await branch.communicate("and again"))
        await store.close()

    anyio.run(main)
    """
)


async def test_a_new_process_rebuilds_the_model_from_its_config(
    store: EventStore, store_url: str, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    branch = Branch(store=store, name="http-chat", system="Remember me.", chat_model=model_for(server))
    await branch.communicate("first")
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, "-c", RESUME, store_url], check=False, env=dict(os.environ)
        )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().strip() == "Hello from the fake server."
    resent = server.requests[-1]["body"]["messages"]
    assert "Remember me." in resent[0]["content"] and len(resent) == 3
