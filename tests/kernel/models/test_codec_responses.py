"""The Responses codec: bodies the ``openai`` SDK's types accept, answers and streams folded.

The streams are the fake upstream's (``turnlog fake-upstream``), which follow the real API's
event sequence; the answers are parsed as ``OpenAIChatModel`` would parse Chat Completions.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from turnlog.kernel.models import ModelRequest
from turnlog.kernel.models._codec import StreamFault, WireError
from turnlog.kernel.models._codec_responses import ResponsesCodec
from turnlog.testing import FakeUpstreamServer

responses_types = pytest.importorskip("openai.types.responses.response_create_params")

CODEC = ResponsesCodec()
KEY = "sk-codec-responses-0123456789"
TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}


def test_body_moves_the_system_prompt_to_instructions_and_history_to_items() -> None:
    request = ModelRequest(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "add 2"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":2}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "4"},
        ],
        params={"max_output_tokens": 50},
        tools=[TOOL],
        stream=True,
    )  # fmt: skip
    body = CODEC.body("gpt-5", request)
    assert body["instructions"] == "Be brief." and body["stream"] is True
    assert [item["type"] for item in body["input"]] == ["message", "function_call", "function_call_output"]
    assert body["input"][1] == {
        "type": "function_call",
        "call_id": "c1",
        "name": "add",
        "arguments": '{"a":2}',
    }
    assert body["tools"] == [
        {"type": "function", "name": "add", "parameters": {"type": "object", "properties": {}}}
    ]
    # the SDK's own request type takes the body
    typed: Any = responses_types.ResponseCreateParamsStreaming
    assert set(body) <= set(typed.__annotations__) | set(getattr(typed, "__optional_keys__", set()))


async def _answer(script: list[dict[str, Any]], *, stream: bool) -> Any:
    async with FakeUpstreamServer(script, api_key=KEY) as server, httpx.AsyncClient() as client:
        reply = await client.post(
            f"{server.openai_base_url}/responses",
            json={"model": "gpt-5", "input": "hi", "stream": stream},
            headers={"authorization": f"Bearer {KEY}"},
        )
    if not stream:
        return reply.json()
    assembly = CODEC.assembly("gpt-5")
    pieces = []
    for line in reply.text.splitlines():
        if line.startswith("data: "):
            assembly.add(json.loads(line[6:]))
            pieces += assembly.take_pieces()
    assert assembly.missing() is None and assembly.stopped
    return assembly.result(), pieces


async def test_a_plain_answer_parses_into_text_usage_and_finish() -> None:
    raw = await _answer(
        [{"text": "Hello there.", "usage": {"input_tokens": 7, "output_tokens": 3, "cached_tokens": 2}}],
        stream=False,
    )
    answer = CODEC.parse(raw, model="gpt-5", provider="openai")
    assert (answer.text, answer.finish_reason, answer.cache_read_tokens) == ("Hello there.", "stop", 2)
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (7, 3)


async def test_a_stream_folds_into_the_same_answer_with_deltas_and_tool_calls() -> None:
    script = [
        {"thinking": "hm", "text": "Adding now.", "tool_calls": [{"name": "add", "arguments": {"a": 2}}]}
    ]
    raw, pieces = await _answer(script, stream=True)
    answer = CODEC.parse(raw, model="gpt-5", provider="openai")
    assert answer.text == "Adding now." and answer.finish_reason == "tool_calls"
    ((call),) = answer.tool_calls
    assert (call.name, call.arguments) == ("add", {"a": 2}) and call.id.startswith("call_")
    assert "".join(p.content for p in pieces if p.type == "text") == "Adding now."
    assert "".join(p.content for p in pieces if p.type == "thinking") == "hm"
    assert [p.tool_name for p in pieces if p.type == "tool_use"] == ["add"]


def test_response_failed_is_a_stream_fault_and_junk_a_wire_error() -> None:
    assembly = CODEC.assembly("gpt-5")
    with pytest.raises(StreamFault) as fault:
        assembly.add(
            {"type": "response.failed", "response": {"error": {"code": "server_error", "message": "boom"}}}
        )
    assert "boom" in fault.value.summary and not fault.value.rate_limited
    with pytest.raises(WireError):
        assembly.add(["not", "an", "event"])
    with pytest.raises(WireError):
        CODEC.parse({"no": "output"}, model="gpt-5", provider="openai")
