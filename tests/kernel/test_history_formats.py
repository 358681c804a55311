"""Every verb that sends history sends a tool turn as each API defines it, for all three HTTP providers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from pydantic import BaseModel

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, iModel
from turnlog.kernel.models import RetryPolicy
from turnlog.testing import FakeOpenAIServer, FakeUpstreamServer

KEY = "sk-history-formats-0123456789"
MODELS = {"openai": "gpt-4o-mini", "anthropic": "claude-sonnet-4-5", "gemini_api": "gemini-2.5-flash"}
CALL = {"name": "add", "arguments": {"a": 1, "b": 2}, "id": "call_hist1"}
ANSWER = '{"value": 3}'


class Value(BaseModel):
    value: int


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


VERBS: dict[str, Callable[[Branch], Awaitable[Any]]] = {
    "chat": lambda b: b.chat("And now?"),
    "communicate": lambda b: b.communicate("And now?"),
    "operate": lambda b: b.operate(instruction="And now?", response_format=Value),
    "interpret": lambda b: b.interpret("and now?"),
    "parse": lambda b: b.parse("no JSON here", response_format=Value),
}


@asynccontextmanager
async def serving(provider: str) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    if provider == "openai":
        script = [{"match": {"has_tools": True}, "tool_calls": [CALL]}, {"text": ANSWER, "times": None}]
        async with FakeOpenAIServer(script, api_key=KEY) as server:
            yield server.base_url, server.requests
    else:
        first = {"match": {"has_tools": True, "after_tool_result": False}, "tool_calls": [CALL]}
        async with FakeUpstreamServer([first, {"text": ANSWER, "times": None}], api_key=KEY) as server:
            yield server.base_url, server.requests


def check_chat_completions(body: dict[str, Any]) -> None:
    open_ids: set[str] = set()
    for i, message in enumerate(body["messages"]):
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_ids, f"messages[{i}] answers no open call"
            open_ids.discard(message["tool_call_id"])
            continue
        assert not open_ids, f"calls {open_ids} unanswered before messages[{i}]"
        if message["role"] == "assistant":
            assert message.get("content") or message.get("tool_calls"), f"messages[{i}] is empty"
            open_ids = {c["id"] for c in message.get("tool_calls") or ()}
    assert not open_ids
    assert any(m.get("tool_calls") for m in body["messages"])


def check_messages(body: dict[str, Any]) -> None:
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2) + ["user"]
    for i, message in enumerate(messages):
        for block in message["content"]:
            assert block["type"] != "text" or block["text"], f"messages[{i}] has an empty text block"
        uses = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        if uses:
            answer = messages[i + 1]["content"]
            results = [b["tool_use_id"] for b in answer if b["type"] == "tool_result"]
            assert results == uses and all(b["type"] == "tool_result" for b in answer[: len(uses)])
    assert any(b["type"] == "tool_use" for m in messages for b in m["content"])


def check_gemini(body: dict[str, Any]) -> None:
    contents = body["contents"]
    assert [c["role"] for c in contents] == ["user", "model"] * (len(contents) // 2) + ["user"]
    for i, content in enumerate(contents):
        for part in content["parts"]:
            assert "text" not in part or part["text"], f"contents[{i}] has an empty text part"
        calls = [
            (p["functionCall"]["id"], p["functionCall"]["name"])
            for p in content["parts"]
            if "functionCall" in p
        ]
        if calls:
            answers = contents[i + 1]["parts"]
            given = [
                (p["functionResponse"]["id"], p["functionResponse"]["name"])
                for p in answers
                if "functionResponse" in p
            ]
            assert given == calls
    assert any("functionCall" in p for c in contents for p in c["parts"])


CHECKS = {"openai": check_chat_completions, "anthropic": check_messages, "gemini_api": check_gemini}


@pytest.mark.parametrize("verb", list(VERBS))
@pytest.mark.parametrize("provider", list(MODELS))
async def test_every_verb_sends_the_tool_turn_in_the_api_s_form(
    provider: str, verb: str, store: EventStore
) -> None:
    async with serving(provider) as (base_url, requests):
        model = iModel(
            provider=provider,
            model=MODELS[provider],
            base_url=base_url,
            api_key=KEY,
            retry=RetryPolicy(max_attempts=1),
        )
        branch = Branch(store=store, system="Be exact.", chat_model=model, tools=[add])
        await branch.operate(instruction="What is 1 + 2?", actions=True)
        await VERBS[verb](branch)
        sent = [r for r in requests if r.get("response_status") == 200]
        assert len(sent) == len(requests) >= 2  # the real API's checks passed (fake-openai applies them)
    CHECKS[provider](sent[-1]["body"])
