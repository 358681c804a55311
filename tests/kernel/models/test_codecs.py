"""Every body each API codec builds, judged by the official SDKs' own request types.

The ``anthropic`` and ``openai`` request types are TypedDicts, which pydantic validates while
ignoring unknown keys; ``strict`` walks them instead and refuses an unknown key anywhere, as
the services do. The ``google-genai`` types are pydantic models that forbid unknown fields.
"""

from __future__ import annotations

import collections.abc
import itertools
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

import pytest
import typing_extensions

from turnlog._errors import UsageError
from turnlog.kernel.models import AnthropicModel, GeminiAPIModel, ModelRequest
from turnlog.kernel.models._codec import Codec
from turnlog.kernel.models._codec_anthropic import RESPONSE_TOOL, AnthropicCodec
from turnlog.kernel.models._codec_gemini import GeminiCodec
from turnlog.kernel.models._codec_openai import ChatCompletionsCodec
from turnlog.testing import FakeUpstreamServer

anthropic_types = pytest.importorskip("anthropic.types.message_create_params")
openai_types = pytest.importorskip("openai.types.chat.completion_create_params")
genai = pytest.importorskip("google.genai.types")

ANTHROPIC = AnthropicCodec()
GEMINI = GeminiCodec()
OPENAI = ChatCompletionsCodec()

# -- a strict reading of the SDKs' TypedDicts --------------------------------------------------


_WRAPPERS = (
    typing.Annotated,
    typing_extensions.Annotated,
    typing_extensions.Required,
    typing_extensions.NotRequired,
    typing_extensions.ReadOnly,
)


def problems(value: Any, tp: Any, path: str = "body") -> list[str]:
    """What in ``value`` the type ``tp`` does not allow (empty: the value is accepted)."""
    origin = typing_extensions.get_origin(tp)
    args = typing_extensions.get_args(tp)
    if origin in _WRAPPERS:
        return problems(value, args[0], path)
    if tp is Any or tp is object:
        return []
    if origin in (typing.Union, types.UnionType):
        found = [problems(value, member, path) for member in args]
        return [] if any(not p for p in found) else min(found, key=len)
    if origin in (Literal, typing_extensions.Literal):
        return [] if value in args else [f"{path}: {value!r} is not one of {args}"]
    if tp is type(None):
        return [] if value is None else [f"{path}: not null"]
    if typing_extensions.is_typeddict(tp):
        if not isinstance(value, Mapping):
            return [f"{path}: not an object"]
        hints = typing_extensions.get_type_hints(tp, include_extras=True)
        out = [f"{path}.{key}: unknown field" for key in value if key not in hints]
        # The SDKs mark every required key with Required[...] (their TypedDicts are total=False).
        required = [
            k for k, h in hints.items() if typing_extensions.get_origin(h) is typing_extensions.Required
        ]
        out += [f"{path}.{key}: missing" for key in required if key not in value]
        for key, item in value.items():
            if key in hints:
                out += problems(item, hints[key], f"{path}.{key}")
        return out
    if origin in (list, collections.abc.Iterable, collections.abc.Sequence):
        if not isinstance(value, list):
            return [f"{path}: not a list"]
        return [p for i, item in enumerate(value) for p in problems(item, args[0], f"{path}[{i}]")]
    if origin in (dict, collections.abc.Mapping) or tp in (dict, Mapping):
        return [] if isinstance(value, Mapping) else [f"{path}: not an object"]
    if tp is float:
        return (
            []
            if isinstance(value, int | float) and not isinstance(value, bool)
            else [f"{path}: not a number"]
        )
    if isinstance(tp, type):
        return [] if isinstance(value, tp) else [f"{path}: not a {tp.__name__}"]
    return []  # a type the walk does not know (a TypeAliasType): accepted


def anthropic_problems(body: dict[str, Any]) -> list[str]:
    """Problems of a Messages API body, judged by the ``anthropic`` SDK's request type.

    The 2.x SDK sends a newer ``anthropic-version`` whose request type has no sampling
    parameters; turnlog pins 2023-06-01, which takes them, so they are judged apart.
    """
    sampling = {k: body[k] for k in ("temperature", "top_p", "top_k") if k in body}
    wrong = [f"body.{k}: not a number" for k, v in sampling.items() if problems(v, float)]
    streaming = body.get("stream") is True
    tp = (
        anthropic_types.MessageCreateParamsStreaming
        if streaming
        else anthropic_types.MessageCreateParamsNonStreaming
    )
    return wrong + problems({k: v for k, v in body.items() if k not in sampling}, tp)


def openai_problems(body: dict[str, Any]) -> list[str]:
    """Problems of a Chat Completions body, judged by the ``openai`` SDK's request type."""
    streaming = body.get("stream") is True
    tp = (
        openai_types.CompletionCreateParamsStreaming
        if streaming
        else openai_types.CompletionCreateParamsNonStreaming
    )
    return problems(body, tp)


GEMINI_FIELDS = {
    "contents": lambda v: [genai.Content.model_validate(c) for c in v],
    "systemInstruction": genai.Content.model_validate,
    "generationConfig": genai.GenerationConfig.model_validate,
    "tools": lambda v: [genai.Tool.model_validate(t) for t in v],
    "toolConfig": genai.ToolConfig.model_validate,
    "safetySettings": lambda v: [genai.SafetySetting.model_validate(s) for s in v],
    "cachedContent": str,
}


def gemini_check(body: dict[str, Any]) -> None:
    """Validate a ``generateContent`` body field by field with the ``google-genai`` types."""
    assert set(body) <= set(GEMINI_FIELDS), sorted(set(body) - set(GEMINI_FIELDS))
    assert body["contents"], "Gemini refuses an empty contents list"
    for key, value in body.items():
        GEMINI_FIELDS[key](value)


def test_the_strict_walk_refuses_what_the_service_refuses() -> None:
    """The checker itself can fail: an unknown field, a missing max_tokens, a wrong role."""
    good = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    assert anthropic_problems(good) == []
    assert anthropic_problems({**good, "user": "u"}) == ["body.user: unknown field"]
    assert anthropic_problems({k: v for k, v in good.items() if k != "max_tokens"}) == [
        "body.max_tokens: missing"
    ]
    assert anthropic_problems({**good, "messages": [{"role": "tool", "content": "x"}]})
    bad_block = [{"role": "user", "content": [{"type": "text", "text": "x", "bogus": 1}]}]
    assert anthropic_problems({**good, "messages": bad_block})
    assert openai_problems({"model": "m", "messages": [{"role": "user", "content": "x"}], "bogus": 1})
    with pytest.raises(ValueError):
        gemini_check({"contents": [{"role": "user", "parts": [{"text": "x", "bogus": 1}]}]})


# -- the conversations every codec must send right ---------------------------------------------

TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    },
}
SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "schema": {"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"]},
    },
}
THINKING = [
    {"type": "thinking", "thinking": "I should add.", "signature": "sig-abc"},
    {"type": "redacted_thinking", "data": "opaque"},
]
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
    "extra_content": {"google": {"thought_signature": "c2lnLWdlbWluaQ=="}},
}
TOOL_LOOP = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2 + 3?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL], "thinking_blocks": THINKING},
    {"role": "tool", "tool_call_id": "call_1", "content": "5"},
]
CACHED = [
    {
        "role": "system",
        "content": [{"type": "text", "text": "A long manual.", "cache_control": {"type": "ephemeral"}}],
    },
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Question?", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
        ],
    },
]
CONVERSATIONS: dict[str, ModelRequest] = {
    "plain": ModelRequest(messages=[{"role": "user", "content": "hi"}]),
    "system": ModelRequest(
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    ),
    "multi_turn": ModelRequest(
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "And now?"},
        ]
    ),
    "tools": ModelRequest(messages=TOOL_LOOP, tools=[TOOL]),
    "two_calls_one_turn": ModelRequest(
        messages=[
            {"role": "user", "content": "Add twice."},
            {"role": "assistant", "content": "", "tool_calls": [CALL, {**CALL, "id": "call_2"}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "5"},
            {"role": "tool", "tool_call_id": "call_2", "content": '{"error": "boom"}', "is_error": True},
        ],
        tools=[TOOL],
    ),
    "cached": ModelRequest(messages=CACHED),
    "structured": ModelRequest(messages=[{"role": "user", "content": "hi"}], response_format=SCHEMA),
    "streaming": ModelRequest(messages=[{"role": "user", "content": "hi"}], stream=True),
    "parameters": ModelRequest(
        messages=[{"role": "user", "content": "hi"}],
        tools=[TOOL],
        params={"temperature": 0.2, "max_tokens": 50, "stop": "END", "tool_choice": "required"},
    ),
}


@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_anthropic_bodies_are_valid_messages_requests(name: str) -> None:
    """Each body passes the anthropic SDK's MessageCreateParams, unknown fields refused."""
    body = ANTHROPIC.body("claude-sonnet-4-5", CONVERSATIONS[name])
    assert anthropic_problems(body) == []
    roles = [m["role"] for m in body["messages"]]
    assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles))


@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_gemini_bodies_are_valid_generate_content_requests(name: str) -> None:
    """Each body passes the google-genai types, field by field."""
    gemini_check(GEMINI.body("gemini-2.5-flash", CONVERSATIONS[name]))


@pytest.mark.parametrize("name", [n for n in CONVERSATIONS if n != "cached"])
def test_openai_bodies_are_valid_chat_completions_requests(name: str) -> None:
    """Each body passes the openai SDK's CompletionCreateParams (turnlog's extra keys left out)."""
    assert openai_problems(OPENAI.body("gpt-4.1-mini", CONVERSATIONS[name])) == []


def test_openai_leaves_out_the_fields_of_other_apis() -> None:
    """thinking_blocks, is_error and Gemini's signatures never reach a Chat Completions server."""
    body = OPENAI.body("gpt-4.1-mini", CONVERSATIONS["two_calls_one_turn"])
    assert all("is_error" not in m and "thinking_blocks" not in m for m in body["messages"])
    body = OPENAI.body("gpt-4.1-mini", CONVERSATIONS["tools"])
    assert "thinking_blocks" not in body["messages"][2]
    assert body["messages"][2]["tool_calls"] == [{k: v for k, v in CALL.items() if k != "extra_content"}]
    assert TOOL_LOOP[2]["tool_calls"][0]["extra_content"]  # the caller's message is left as it was


# -- what the real APIs need, shown in the bodies ---------------------------------------------


def test_anthropic_sends_thinking_back_first_and_unchanged() -> None:
    """The signed thinking blocks open the assistant turn, before its tool_use."""
    body = ANTHROPIC.body("claude-sonnet-4-5", CONVERSATIONS["tools"])
    assistant = body["messages"][1]
    assert assistant["content"][:2] == THINKING
    assert assistant["content"][2] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "add",
        "input": {"a": 2, "b": 3},
    }
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "5"}
    ]


def test_anthropic_marks_a_failed_tool_result_and_answers_two_calls_in_one_turn() -> None:
    body = ANTHROPIC.body("claude-sonnet-4-5", CONVERSATIONS["two_calls_one_turn"])
    results = body["messages"][-1]["content"]
    assert [r["tool_use_id"] for r in results] == ["call_1", "call_2"]
    assert "is_error" not in results[0] and results[1]["is_error"] is True


def test_anthropic_keeps_cache_markers_and_system_blocks() -> None:
    body = ANTHROPIC.body("claude-sonnet-4-5", CONVERSATIONS["cached"])
    assert body["system"] == [
        {"type": "text", "text": "A long manual.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    plain = ANTHROPIC.body("claude-sonnet-4-5", CONVERSATIONS["system"])
    assert plain["system"] == "Be brief."  # plain text stays a string


@pytest.mark.parametrize(
    ("tools", "params", "choice"),
    [
        (None, {}, {"type": "tool", "name": RESPONSE_TOOL}),
        ([TOOL], {}, {"type": "any"}),
        ([TOOL], {"thinking": {"type": "enabled", "budget_tokens": 1024}}, {"type": "auto"}),
        (None, {"thinking": {"type": "enabled", "budget_tokens": 1024}}, {"type": "auto"}),
        ([TOOL], {"tool_choice": "auto"}, {"type": "auto"}),
    ],
)
def test_anthropic_structured_output_never_drops_the_schema_nor_the_caller_s_tools(
    tools: list[dict[str, Any]] | None, params: dict[str, Any], choice: dict[str, Any]
) -> None:
    """The schema always travels as the response tool; the caller's tools stay callable."""
    request = ModelRequest(
        messages=[{"role": "user", "content": "hi"}], tools=tools, params=params, response_format=SCHEMA
    )
    body = ANTHROPIC.body("claude-sonnet-4-5", request)
    assert body["tool_choice"] == choice
    assert [t["name"] for t in body["tools"]] == [*(["add"] if tools else []), RESPONSE_TOOL]
    assert anthropic_problems(body) == []


def test_anthropic_structured_output_is_a_forced_tool_read_back_as_text() -> None:
    body = ANTHROPIC.body("claude-sonnet-4-5", CONVERSATIONS["structured"])
    assert body["tool_choice"] == {"type": "tool", "name": RESPONSE_TOOL}
    [tool] = body["tools"]
    assert tool["name"] == RESPONSE_TOOL and tool["input_schema"] == SCHEMA["json_schema"]["schema"]
    raw = {
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "tool_use", "id": "t1", "name": RESPONSE_TOOL, "input": {"value": 5}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }
    answer = ANTHROPIC.parse(raw, model="m", provider="anthropic")
    assert answer.text == '{"value":5}' and answer.tool_calls == ()


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"tool_choice": "auto"}, {"tool_choice": {"type": "auto"}}),
        ({"tool_choice": "required"}, {"tool_choice": {"type": "any"}}),
        ({"tool_choice": "none"}, {"tool_choice": {"type": "none"}}),
        (
            {"tool_choice": {"type": "function", "function": {"name": "add"}}},
            {"tool_choice": {"type": "tool", "name": "add"}},
        ),
        (
            {"parallel_tool_calls": False},
            {"tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
        ),
        (
            {"tool_choice": "required", "parallel_tool_calls": True},
            {"tool_choice": {"type": "any", "disable_parallel_tool_use": False}},
        ),
        ({"user": "u-1"}, {"metadata": {"user_id": "u-1"}}),
        ({"stop": "END"}, {"stop_sequences": ["END"]}),
        ({"max_completion_tokens": 77}, {"max_tokens": 77}),
        (
            {"thinking": {"type": "enabled", "budget_tokens": 1024}},
            {"thinking": {"type": "enabled", "budget_tokens": 1024}},
        ),
    ],
)
def test_anthropic_translates_chat_completions_parameters(
    params: dict[str, Any], expected: dict[str, Any]
) -> None:
    request = ModelRequest(messages=[{"role": "user", "content": "hi"}], tools=[TOOL], params=params)
    body = ANTHROPIC.body("claude-sonnet-4-5", request)
    assert {k: body[k] for k in expected} == expected
    assert anthropic_problems(body) == []


@pytest.mark.parametrize(
    ("model", "params", "words"),
    [
        ("claude-sonnet-4-5", {"seed": 1}, "does not take seed"),
        ("claude-sonnet-4-5", {"presence_penalty": 0.5}, "does not take presence_penalty"),
        ("claude-sonnet-4-5", {"temperature": 0.1, "top_p": 0.9}, "temperature or top_p, not both"),
        ("claude-opus-4-1-20250805", {"temperature": 0.1, "top_p": 0.9}, "not both"),
        ("claude-sonnet-4-5", {"tool_choice": "sometimes"}, "no Messages API form"),
        (
            "claude-sonnet-4-5",
            {"thinking": {"type": "enabled", "budget_tokens": 1024}, "temperature": 0.1},
            "temperature",
        ),
        (
            "claude-sonnet-4-5",
            {"thinking": {"type": "enabled", "budget_tokens": 1024}, "tool_choice": "required"},
            "force a tool",
        ),
    ],
)
def test_anthropic_refuses_what_the_api_would_refuse_before_sending(
    model: str, params: dict[str, Any], words: str
) -> None:
    request = ModelRequest(messages=[{"role": "user", "content": "hi"}], tools=[TOOL], params=params)
    with pytest.raises(UsageError, match=words):
        ANTHROPIC.body(model, request)


@pytest.mark.parametrize("model", ["claude-sonnet-4-20250514", "claude-3-7-sonnet-latest", "claude-opus-4-0"])
def test_anthropic_older_models_take_temperature_with_top_p(model: str) -> None:
    request = ModelRequest(
        messages=[{"role": "user", "content": "hi"}], params={"temperature": 0.1, "top_p": 0.9}
    )
    body = ANTHROPIC.body(model, request)
    assert (body["temperature"], body["top_p"]) == (0.1, 0.9)


def test_gemini_sends_the_thought_signature_back_on_its_call() -> None:
    body = GEMINI.body("gemini-3-pro-preview", CONVERSATIONS["tools"])
    model_turn = body["contents"][1]
    assert model_turn["role"] == "model"
    assert model_turn["parts"] == [
        {
            "functionCall": {"id": "call_1", "name": "add", "args": {"a": 2, "b": 3}},
            "thoughtSignature": "c2lnLWdlbWluaQ==",
        }
    ]
    assert [p["functionResponse"]["name"] for p in body["contents"][2]["parts"]] == ["add"]


def test_gemini_answers_two_calls_in_one_user_turn() -> None:
    body = GEMINI.body("gemini-2.5-flash", CONVERSATIONS["two_calls_one_turn"])
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    assert len(body["contents"][2]["parts"]) == 2


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"tool_choice": "auto"}, {"toolConfig": {"functionCallingConfig": {"mode": "AUTO"}}}),
        ({"tool_choice": "required"}, {"toolConfig": {"functionCallingConfig": {"mode": "ANY"}}}),
        ({"tool_choice": "none"}, {"toolConfig": {"functionCallingConfig": {"mode": "NONE"}}}),
        (
            {"tool_choice": {"type": "function", "function": {"name": "add"}}},
            {"toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["add"]}}},
        ),
        (
            {"temperature": 0.3, "max_tokens": 9, "stop": "END", "seed": 4},
            {
                "generationConfig": {
                    "temperature": 0.3,
                    "maxOutputTokens": 9,
                    "stopSequences": ["END"],
                    "seed": 4,
                }
            },
        ),
        ({"parallel_tool_calls": True}, {}),
    ],
)
def test_gemini_translates_chat_completions_parameters(
    params: dict[str, Any], expected: dict[str, Any]
) -> None:
    request = ModelRequest(messages=[{"role": "user", "content": "hi"}], tools=[TOOL], params=params)
    body = GEMINI.body("gemini-2.5-flash", request)
    assert {k: body[k] for k in expected} == expected
    gemini_check(body)


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"user": "u"}, "does not take user"),
        ({"parallel_tool_calls": False}, "parallel_tool_calls=False"),
        ({"logprobs": True}, "does not take logprobs"),
        ({"tool_choice": "sometimes"}, "no Gemini form"),
    ],
)
def test_gemini_refuses_what_it_has_no_form_for(params: dict[str, Any], words: str) -> None:
    request = ModelRequest(messages=[{"role": "user", "content": "hi"}], tools=[TOOL], params=params)
    with pytest.raises(UsageError, match=words):
        GEMINI.body("gemini-2.5-flash", request)


def test_gemini_reads_the_signature_and_the_retry_delay() -> None:
    raw = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"functionCall": {"name": "add", "args": {"a": 1}}, "thoughtSignature": "c2ln"}
                    ],
                },
                "finishReason": "STOP",
            }
        ]
    }
    [call] = GEMINI.parse(raw, model="gemini-3-pro-preview", provider="gemini_api").tool_calls
    assert call.signature == "c2ln"
    error = {
        "error": {
            "code": 429,
            "status": "RESOURCE_EXHAUSTED",
            "message": "quota",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}],
        }
    }
    assert GEMINI.retry_after(error) == 37.0
    assert GEMINI.retry_after({"error": {"message": "x"}}) is None


@pytest.mark.parametrize("codec", [ANTHROPIC, GEMINI, OPENAI], ids=lambda c: c.api)
def test_each_codec_declares_the_parameters_it_takes(codec: Codec) -> None:
    """ACCEPTED_PARAMETERS covers what the codec translates; reserved names are never in it."""
    assert {"temperature", "max_tokens", "stop", "tool_choice"} <= codec.ACCEPTED_PARAMETERS
    assert not codec.ACCEPTED_PARAMETERS & codec.RESERVED_PARAMETERS


# -- the bodies, sent: the strict fakes take every one -----------------------------------------

KEY = "sk-codec-test-0123456789"


@pytest.mark.parametrize("name", list(CONVERSATIONS))
async def test_the_strict_fakes_take_every_body(name: str) -> None:
    """The fake Anthropic and Gemini servers, which refuse what the real APIs refuse, answer 200."""
    request = CONVERSATIONS[name]
    async with FakeUpstreamServer([{"text": '{"value": 5}', "times": None}], api_key=KEY) as server:
        for model in (
            AnthropicModel("claude-sonnet-4-5", base_url=server.base_url, api_key=KEY),
            GeminiAPIModel("gemini-2.5-flash", base_url=server.base_url, api_key=KEY),
        ):
            reply = await model.invoke(request)
            assert reply.text == '{"value": 5}'
    assert [r.get("refused") for r in server.requests] == [None, None]
