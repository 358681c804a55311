"""The loopback fake OpenAI server: wire format, script format, recording, the command."""

from __future__ import annotations

import email.utils
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from turnlog.testing import FakeOpenAIServer, ScriptError

USER = {"role": "user", "content": "what's the weather in NYC?"}


def body(**extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o-2024-08-06", "messages": [USER], **extra}


async def post(server: FakeOpenAIServer, payload: dict[str, Any], **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(trust_env=False) as client:
        return await client.post(f"{server.base_url}/chat/completions", json=payload, headers=headers)


def sse_events(raw: bytes) -> list[str]:
    assert raw.endswith(b"\n\n")
    frames = raw.decode().split("\n\n")[:-1]
    assert all(frame.startswith("data: ") and "\n" not in frame for frame in frames)
    return [frame.removeprefix("data: ") for frame in frames]


# -- the wire format --------------------------------------------------------------------------


async def test_plain_answer_is_a_chat_completion_object() -> None:
    async with FakeOpenAIServer([{"text": "Sunny.", "usage": {"prompt_tokens": 14}}]) as server:
        response = await post(server, body())
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-request-id"].startswith("req_")
    data = response.json()
    assert list(data) == [
        "id", "object", "created", "model", "choices", "usage", "service_tier", "system_fingerprint"
    ]  # fmt: skip
    assert data["object"] == "chat.completion" and data["id"].startswith("chatcmpl-")
    assert data["model"] == "gpt-4o-2024-08-06"
    assert data["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Sunny.", "refusal": None, "annotations": []},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ]
    assert data["usage"]["prompt_tokens"] == 14
    assert data["usage"]["total_tokens"] == 14 + data["usage"]["completion_tokens"]


async def test_tool_call_stream_follows_the_recorded_chunk_sequence() -> None:
    script = [
        {"tool_calls": [{"id": "call_1", "name": "get_weather", "arguments": {"city": "New York City"}}]}
    ]
    async with FakeOpenAIServer(script) as server:
        response = await post(server, body(stream=True, stream_options={"include_usage": True}))
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["transfer-encoding"] == "chunked"
    events = sse_events(response.content)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1
    first = chunks[0]["choices"][0]["delta"]
    assert first["role"] == "assistant" and first["content"] is None
    assert first["tool_calls"] == [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    ]
    pieces = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks[1:-2]]
    assert all(set(p) == {"index", "function"} for p in pieces)
    assert "".join(p["function"]["arguments"] for p in pieces) == '{"city":"New York City"}'
    finish, usage = chunks[-2], chunks[-1]
    assert finish["choices"] == [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}]
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] > 0
    assert all(c["usage"] is None for c in chunks[:-1])


async def test_text_stream_without_include_usage_has_no_usage_chunk() -> None:
    async with FakeOpenAIServer([{"text": "Hello big world", "chunk_chars": 5}]) as server:
        response = await post(server, body(stream=True))
    chunks = [json.loads(e) for e in sse_events(response.content)[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert [c["choices"][0]["delta"].get("content") for c in chunks[1:-1]] == ["Hello", " big ", "world"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in c for c in chunks)


async def test_error_answers_carry_the_envelope_and_retry_headers() -> None:
    script = [{"status": 429, "retry_after": 46, "retry_after_ms": 45175}, {"status": 503}]
    async with FakeOpenAIServer(script) as server:
        limited = await post(server, body())
        overloaded = await post(server, body(stream=True))
    assert limited.status_code == 429
    assert (limited.headers["retry-after"], limited.headers["retry-after-ms"]) == ("46", "45175")
    assert limited.json()["error"]["code"] == "rate_limit_exceeded"
    assert set(limited.json()["error"]) == {"message", "type", "param", "code"}
    assert overloaded.status_code == 503
    assert overloaded.headers["content-type"] == "application/json"  # errors are JSON even for streams
    assert overloaded.json()["error"]["type"] == "server_error"


async def test_stream_cut_mid_way_closes_without_done() -> None:
    async with FakeOpenAIServer([{"text": "one two three four five", "cut_after": 2}]) as server:
        async with httpx.AsyncClient(trust_env=False) as client:
            async with client.stream(
                "POST", f"{server.base_url}/chat/completions", json=body(stream=True)
            ) as r:
                received = b""
                with pytest.raises(httpx.RemoteProtocolError):
                    async for piece in r.aiter_raw():
                        received += piece
    assert len(sse_events(received)) == 2
    assert b"[DONE]" not in received


async def test_slow_first_byte_delays_the_status_line() -> None:
    async with FakeOpenAIServer([{"text": "late", "delay_ms": 250}]) as server:
        started = anyio.current_time()
        response = await post(server, body())
        waited = anyio.current_time() - started
    assert response.json()["choices"][0]["message"]["content"] == "late"
    assert waited >= 0.25


# -- scripts: order, matching, exhaustion -----------------------------------------------------


async def test_matching_entries_win_and_positional_ones_go_in_order() -> None:
    script = [
        {"text": "first"},
        {"text": "second"},
        {"match": {"last_user_contains": "weather"}, "text": "sunny", "times": None},
        {"match": {"model": "special"}, "text": "special answer"},
    ]
    async with FakeOpenAIServer(script) as server:
        replies = []
        for payload in [
            body(),
            {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            body(),
            {"model": "special", "messages": [{"role": "user", "content": "x"}]},
            {"model": "m", "messages": [{"role": "user", "content": "hello"}]},
        ]:
            replies.append(await post(server, payload))
        server.assert_complete()
    texts = [r.json()["choices"][0]["message"]["content"] for r in replies]
    assert texts == ["sunny", "first", "sunny", "special answer", "second"]
    assert [r["entry"] for r in server.requests] == [2, 0, 2, 3, 1]


async def test_an_exhausted_script_answers_400_and_assert_complete_reports_leftovers() -> None:
    async with FakeOpenAIServer(
        [{"text": "only one"}, {"match": {"stream": True}, "text": "never"}]
    ) as server:
        await post(server, body())
        extra = await post(server, body())
        with pytest.raises(AssertionError, match=r"entries \[1\] were never served"):
            server.assert_complete()
    assert extra.status_code == 400
    assert extra.json()["error"]["code"] == "script_exhausted"


# -- recording --------------------------------------------------------------------------------


async def test_requests_are_recorded_with_credentials_reduced_to_a_digest(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    async with FakeOpenAIServer([{"text": "ok"}], record_path=log) as server:
        await post(server, body(temperature=0), Authorization="Bearer sk-very-secret")
        async with httpx.AsyncClient(trust_env=False) as client:
            listed = (await client.get(server.base_url.removesuffix("/v1") + "/_fake/requests")).json()
    [record] = server.requests
    assert record["body"] == body(temperature=0)
    assert "authorization" not in record["headers"]
    assert record["credentials"]["authorization"] == {
        "present": True,
        "scheme": "Bearer",
        "sha256": hashlib.sha256(b"sk-very-secret").hexdigest(),
    }
    assert (record["entry"], record["response_status"]) == (0, 200)
    assert listed == server.requests
    text = log.read_text()
    assert "sk-very-secret" not in text
    assert [json.loads(line) for line in text.splitlines()] == server.requests


async def test_other_paths_are_404_with_the_error_envelope() -> None:
    async with FakeOpenAIServer([{"text": "ok"}]) as server:
        async with httpx.AsyncClient(trust_env=False) as client:
            response = await client.post(f"{server.base_url}/embeddings", json={})
    assert response.status_code == 404
    assert "Invalid URL" in response.json()["error"]["message"]


def test_only_loopback_addresses_can_be_bound() -> None:
    with pytest.raises(ValueError, match="loopback"):
        FakeOpenAIServer([], host="0.0.0.0")


# -- script files -----------------------------------------------------------------------------


def test_script_files_json_list_object_and_jsonl(tmp_path: Path) -> None:
    as_list = tmp_path / "a.json"
    as_list.write_text(json.dumps([{"text": "a"}, {"status": 500}]))
    as_object = tmp_path / "b.json"
    as_object.write_text(json.dumps({"responses": [{"text": "b"}]}))
    as_lines = tmp_path / "c.jsonl"
    as_lines.write_text('{"text": "c1"}\n\n{"tool_calls": [{"name": "f", "arguments": "{}"}]}\n')
    assert [e.text for e in FakeOpenAIServer(as_list).unused()] == ["a", None]
    assert [e.text for e in FakeOpenAIServer(as_object).unused()] == ["b"]
    entries = FakeOpenAIServer(as_lines).unused()
    assert entries[0].text == "c1" and entries[1].tool_calls[0].name == "f"


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad.jsonl", '{"text": "ok"}\n{"txet": "typo"}\n', r"bad\.jsonl:2: .*txet"),
        ("bad.jsonl", '{"text": "ok"}\nnot json\n', r"bad\.jsonl:2: not JSON"),
        ("bad.json", "[{", r"bad\.json: not JSON"),
        ("bad.json", '{"text": "x"}', r"a list of entries"),
        ("bad.json", '[{"status": 99}]', r"entry 0: .*status"),
    ],
)
def test_bad_scripts_name_the_file_and_entry(tmp_path: Path, name: str, content: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ScriptError, match=message):
        FakeOpenAIServer(path)


def test_missing_script_file_is_a_script_error(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="cannot read"):
        FakeOpenAIServer(tmp_path / "absent.json")


# -- the command ------------------------------------------------------------------------------


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "turnlog.tools", "fake-openai", *args]


async def test_command_prints_its_url_and_serves_requests(tmp_path: Path) -> None:
    script = tmp_path / "script.jsonl"
    script.write_text('{"text": "from the command"}\n')
    process = await anyio.open_process(command("--script", str(script), "--port", "0"))
    try:
        assert process.stdout is not None
        line = b""
        with anyio.fail_after(20):
            async for piece in process.stdout:
                line += piece
                if b"\n" in line:
                    break
        first = line.decode().splitlines()[0]
        assert first.startswith("fake-openai listening on http://127.0.0.1:")
        url = first.rsplit(" ", 1)[1]
        async with httpx.AsyncClient(trust_env=False) as client:
            reply = await client.post(f"{url}/chat/completions", json=body())
            listed = (await client.get(url.removesuffix("/v1") + "/_fake/requests")).json()
        assert reply.json()["choices"][0]["message"]["content"] == "from the command"
        assert listed[0]["body"] == body()
    finally:
        process.terminate()
        with anyio.fail_after(10):
            await process.wait()
        await process.aclose()


def test_command_rejects_a_bad_script_with_exit_status_2(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text('[{"bogus": 1}]')
    env = {k: v for k, v in os.environ.items() if k != "TURNLOG_STORE"}
    done = subprocess.run(
        command("--script", str(script)), capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 2
    assert "script.json: entry 0" in done.stderr and "bogus" in done.stderr


async def test_chunked_request_bodies_are_read() -> None:
    async def pieces():  # an async iterable body makes httpx send it chunked
        payload = json.dumps(body()).encode()
        yield payload[:10]
        yield payload[10:]

    async with FakeOpenAIServer([{"text": "ok"}]) as server:
        async with httpx.AsyncClient(trust_env=False) as client:
            response = await client.post(f"{server.base_url}/chat/completions", content=pieces())
    assert server.requests[0]["headers"]["transfer-encoding"] == "chunked"
    assert server.requests[0]["body"] == body()
    assert response.json()["choices"][0]["message"]["content"] == "ok"


# -- what the real API refuses, and what it returns -------------------------------------------


STRICT = {
    "type": "json_schema",
    "json_schema": {
        "name": "city",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
            "required": ["name", "population"],
            "additionalProperties": False,
        },
    },
}


def with_schema(**changes: Any) -> dict[str, Any]:
    schema = {**STRICT["json_schema"]["schema"], **changes}
    return {**STRICT, "json_schema": {**STRICT["json_schema"], "schema": schema}}


@pytest.mark.parametrize(
    ("change", "param", "says"),
    [
        ({"model": None}, None, "you must provide a model parameter"),
        ({"messages": []}, "messages", "empty array"),
        (
            {"response_format": with_schema(additionalProperties=True)},
            "response_format",
            "'additionalProperties'",
        ),
        ({"response_format": with_schema(required=["name"])}, "response_format", "Missing 'population'"),
        (
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "tool", "tool_call_id": "x", "content": "1"},
                ]
            },
            "messages.[1].role",
            "preceeding message with 'tool_calls'",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                        ],
                    },
                    {"role": "user", "content": "and?"},
                ]
            },
            "messages.[1].role",
            "did not have response messages: call_1",
        ),
        ({"messages": [{"role": "assistant", "content": None}]}, "messages.[0].content", "got null"),
    ],
    ids=["no-model", "no-messages", "open-schema", "optional-property", "orphan-tool", "unanswered", "empty"],
)
async def test_requests_the_real_api_refuses_get_its_400(
    change: dict[str, Any], param: str | None, says: str
) -> None:
    request = {**body(response_format=STRICT), **change}
    request = {k: v for k, v in request.items() if v is not None}
    async with FakeOpenAIServer([{"text": "never sent"}]) as server:
        response = await post(server, request)
        assert server.unused  # the script entry was not used up
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert says in error["message"]


async def test_a_strict_schema_that_follows_the_rules_is_accepted() -> None:
    async with FakeOpenAIServer([{"text": '{"name": "Oslo", "population": 1}'}]) as server:
        response = await post(server, body(response_format=STRICT))
    assert response.status_code == 200


async def test_ids_snapshot_headers_and_n_choices_look_like_the_real_api() -> None:
    script = [{"text": "a", "times": None, "tool_calls": [{"name": "f"}]}]
    async with FakeOpenAIServer(script) as one, FakeOpenAIServer(script) as two:
        first = (await post(one, body(model="gpt-4o-mini", n=2))).json()
        again = await post(two, body(model="gpt-4o-mini"))
    second = again.json()
    assert first["id"] != second["id"] and re.fullmatch(r"chatcmpl-[A-Za-z0-9]{29}", first["id"])
    call_ids = {c["message"]["tool_calls"][0]["id"] for c in (*first["choices"], *second["choices"])}
    assert all(re.fullmatch(r"call_[A-Za-z0-9]{24}", i) for i in call_ids) and len(call_ids) == 2
    assert first["model"] == "gpt-4o-mini-2024-07-18" and first["service_tier"] == "default"
    assert [c["index"] for c in first["choices"]] == [0, 1]
    assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0, "audio_tokens": 0}
    assert set(first["usage"]["completion_tokens_details"]) >= {
        "reasoning_tokens",
        "accepted_prediction_tokens",
    }
    assert again.headers["openai-version"] == "2020-10-01"
    assert email.utils.parsedate_to_datetime(again.headers["date"]).tzinfo is not None


async def test_a_missing_key_is_refused_with_code_null() -> None:
    async with FakeOpenAIServer([{"text": "a"}], api_key="sk-right") as server:
        response = await post(server, body())
    assert response.status_code == 401
    assert response.json()["error"]["code"] is None
