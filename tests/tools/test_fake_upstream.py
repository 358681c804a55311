"""The loopback fake upstream: the Anthropic, OpenAI Responses and Gemini wire formats, the script, the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from turnlog.testing import FakeUpstreamServer, ScriptError, UpstreamThread

KEY = "sk-test-key"
ANTHROPIC = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
OPENAI = {"authorization": f"Bearer {KEY}"}
GOOGLE = {"x-goog-api-key": KEY}


def messages_body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
        **extra,
    }


def responses_body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "gpt-5-codex",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        **extra,
    }


def gemini_body(**extra: Any) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], **extra}


def sse(raw: str) -> list[tuple[str | None, dict[str, Any]]]:
    """(event name, data) of each SSE frame; the framing must be exact."""
    frames = [f for f in raw.replace("\r\n", "\n").split("\n\n") if f]
    out = []
    for frame in frames:
        lines = frame.split("\n")
        name = lines[0].removeprefix("event: ") if lines[0].startswith("event: ") else None
        data = lines[-1]
        assert data.startswith("data: ") and len(lines) == (2 if name else 1), frame
        out.append((name, json.loads(data.removeprefix("data: "))))
    return out


@pytest.fixture
def upstream() -> Any:
    with UpstreamThread(FakeUpstreamServer(api_key=KEY)) as server:
        yield server


def post(url: str, body: Any, headers: dict[str, str]) -> httpx.Response:
    with httpx.Client(trust_env=False, timeout=30) as client:
        return client.post(url, json=body, headers=headers)


# -- Anthropic Messages ------------------------------------------------------------------------


def test_anthropic_stream_has_the_real_event_sequence(upstream: FakeUpstreamServer) -> None:
    upstream.set_script(
        [
            {
                "thinking": "Let me look.",
                "text": "I'll check.",
                "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
            }
        ]
    )
    response = post(f"{upstream.base_url}/v1/messages?beta=true", messages_body(stream=True), ANTHROPIC)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse(response.text)
    assert all(name == data["type"] for name, data in events)
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert names[2] == "ping"
    starts = [d["content_block"] for n, d in events if n == "content_block_start"]
    assert [b["type"] for b in starts] == ["thinking", "text", "tool_use"]
    assert starts[2]["name"] == "get_weather" and starts[2]["input"] == {}
    deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
    assert "".join(d["text"] for d in deltas if d["type"] == "text_delta") == "I'll check."
    assert "".join(d["thinking"] for d in deltas if d["type"] == "thinking_delta") == "Let me look."
    assert any(d["type"] == "signature_delta" for d in deltas)
    arguments = "".join(d["partial_json"] for d in deltas if d["type"] == "input_json_delta")
    assert json.loads(arguments) == {"city": "Paris"}
    final = events[-2][1]
    assert final["delta"]["stop_reason"] == "tool_use" and final["usage"]["output_tokens"] > 0
    start = events[0][1]["message"]
    assert start["model"] == "claude-sonnet-4-5" and start["usage"]["input_tokens"] >= 1


def test_anthropic_json_answer_and_count_tokens(upstream: FakeUpstreamServer) -> None:
    upstream.set_script([{"text": "Hello.", "usage": {"input_tokens": 12, "output_tokens": 3}}])
    data = post(f"{upstream.base_url}/v1/messages", messages_body(), ANTHROPIC).json()
    assert data["type"] == "message" and data["role"] == "assistant" and data["id"].startswith("msg_")
    assert data["content"] == [{"type": "text", "text": "Hello."}]
    assert (data["stop_reason"], data["usage"]["input_tokens"], data["usage"]["output_tokens"]) == (
        "end_turn",
        12,
        3,
    )
    counted = post(f"{upstream.base_url}/v1/messages/count_tokens", messages_body(), ANTHROPIC).json()
    assert counted["input_tokens"] >= 1
    with httpx.Client(trust_env=False) as client:
        assert client.head(upstream.base_url + "/").status_code == 200


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (429, "rate_limit_error"),
        (529, "overloaded_error"),
    ],
)
def test_anthropic_errors_have_the_real_body_and_headers(
    upstream: FakeUpstreamServer, status: int, kind: str
) -> None:
    upstream.set_script([{"status": status, "retry_after": 2}])
    response = post(f"{upstream.base_url}/v1/messages", messages_body(stream=True), ANTHROPIC)
    assert response.status_code == status
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == kind and body["request_id"].startswith("req_")
    assert response.headers["retry-after"] == "2" and response.headers["request-id"] == body["request_id"]


def test_anthropic_bad_key_is_401_authentication_error(upstream: FakeUpstreamServer) -> None:
    upstream.set_script([{"text": "never"}])
    response = post(f"{upstream.base_url}/v1/messages", messages_body(), {"x-api-key": "wrong"})
    assert response.status_code == 401 and response.json()["error"]["type"] == "authentication_error"
    assert upstream.unused()  # the entry was not spent on a refused request


def test_anthropic_stream_error_and_cut(upstream: FakeUpstreamServer) -> None:
    upstream.set_script(
        [
            {"text": "one two three", "stream_error": {"message": "Overloaded"}},
            {"text": "a b c", "cut_after": 3},
        ]
    )
    events = sse(post(f"{upstream.base_url}/v1/messages", messages_body(stream=True), ANTHROPIC).text)
    assert events[-1] == (
        "error",
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )
    assert "message_stop" not in [n for n, _ in events]
    with pytest.raises(httpx.RemoteProtocolError):
        post(f"{upstream.base_url}/v1/messages", messages_body(stream=True), ANTHROPIC)


def test_slow_stream_paces_each_fragment(upstream: FakeUpstreamServer) -> None:
    upstream.set_script([{"text": "a b c d e", "chunk_delay_ms": 60}])
    arrivals = []
    started = time.monotonic()
    with httpx.Client(trust_env=False) as client:
        with client.stream(
            "POST", f"{upstream.base_url}/v1/messages", json=messages_body(stream=True), headers=ANTHROPIC
        ) as response:
            for line in response.iter_lines():
                if '"text_delta"' in line:
                    arrivals.append(time.monotonic() - started)
    assert len(arrivals) == 5
    assert arrivals[-1] - arrivals[0] >= 4 * 0.06 * 0.9  # delivered over time, not at once


# -- OpenAI Responses --------------------------------------------------------------------------


def test_responses_stream_has_the_real_event_sequence(upstream: FakeUpstreamServer) -> None:
    upstream.set_script(
        [{"text": "Running it.", "tool_calls": [{"name": "exec_command", "arguments": {"cmd": "ls"}}]}]
    )
    response = post(f"{upstream.openai_base_url}/responses", responses_body(stream=True), OPENAI)
    events = sse(response.text)
    assert all(name == data["type"] for name, data in events)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    names = [name for name, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"] and names[-1] == "response.completed"
    added = [d["item"]["type"] for n, d in events if n == "response.output_item.added"]
    assert added == ["message", "function_call"]
    text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    assert text == "Running it."
    arguments = "".join(d["delta"] for n, d in events if n == "response.function_call_arguments.delta")
    assert json.loads(arguments) == {"cmd": "ls"}
    done = [d["item"] for n, d in events if n == "response.output_item.done"]
    assert done[1]["call_id"].startswith("call_") and done[1]["name"] == "exec_command"
    completed = events[-1][1]["response"]
    assert completed["status"] == "completed" and completed["output"] == done
    usage = completed["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert set(usage) == {
        "input_tokens",
        "input_tokens_details",
        "output_tokens",
        "output_tokens_details",
        "total_tokens",
    }


def test_responses_errors_and_bad_key(upstream: FakeUpstreamServer) -> None:
    upstream.set_script([{"status": 429, "retry_after": 1}])
    response = post(f"{upstream.openai_base_url}/responses", responses_body(stream=True), OPENAI)
    assert response.status_code == 429 and response.headers["retry-after"] == "1"
    assert response.json()["error"]["code"] == "rate_limit_exceeded"
    denied = post(f"{upstream.openai_base_url}/responses", responses_body(), {"authorization": "Bearer nope"})
    assert denied.status_code == 401 and denied.json()["error"]["code"] == "invalid_api_key"


def test_responses_stream_error_is_response_failed(upstream: FakeUpstreamServer) -> None:
    upstream.set_script([{"text": "partial", "stream_error": {"message": "boom", "code": "server_error"}}])
    events = sse(post(f"{upstream.openai_base_url}/responses", responses_body(stream=True), OPENAI).text)
    assert events[-1][0] == "response.failed"
    assert events[-1][1]["response"]["error"] == {"code": "server_error", "message": "boom"}


# -- Gemini ------------------------------------------------------------------------------------


def test_gemini_stream_has_text_chunks_function_call_and_usage(upstream: FakeUpstreamServer) -> None:
    upstream.set_script(
        [{"text": "Reading it.", "tool_calls": [{"name": "read_file", "arguments": {"file_path": "a.txt"}}]}]
    )
    url = f"{upstream.base_url}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    response = post(url, gemini_body(), GOOGLE)
    assert "\r\n\r\n" in response.text
    chunks = [data for _, data in sse(response.text)]
    parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
    assert "".join(p.get("text", "") for p in parts) == "Reading it."
    assert parts[-1] == {"functionCall": {"name": "read_file", "args": {"file_path": "a.txt"}}}
    assert all(c["candidates"][0]["content"]["role"] == "model" for c in chunks)
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert "finishReason" not in chunks[0]["candidates"][0]
    usage = chunks[-1]["usageMetadata"]
    assert usage["totalTokenCount"] == usage["promptTokenCount"] + usage["candidatesTokenCount"]
    assert chunks[-1]["modelVersion"] == "gemini-2.5-flash"


def test_gemini_generate_content_count_tokens_and_routing(upstream: FakeUpstreamServer) -> None:
    upstream.set_script([{"text": "Hi."}])
    routing = gemini_body(
        generationConfig={
            "responseMimeType": "application/json",
            "responseJsonSchema": {"type": "OBJECT", "properties": {"complexity_score": {"type": "INTEGER"}}},
        }
    )
    routed = post(
        f"{upstream.base_url}/v1beta/models/gemini-flash-lite:generateContent", routing, GOOGLE
    ).json()
    choice = json.loads(routed["candidates"][0]["content"]["parts"][0]["text"])
    assert choice["complexity_score"] <= 20  # simple: the flash model
    assert upstream.unused()  # the router's question did not use the script
    answer = post(
        f"{upstream.base_url}/v1beta/models/gemini-2.5-flash:generateContent", gemini_body(), GOOGLE
    ).json()
    assert answer["candidates"][0]["content"]["parts"] == [{"text": "Hi."}]
    counted = post(
        f"{upstream.base_url}/v1beta/models/gemini-2.5-flash:countTokens", gemini_body(), GOOGLE
    ).json()
    assert counted["totalTokens"] >= 1
    assert [r["builtin"] for r in upstream.requests] == ["routing", None, None]


def test_vertex_ai_publisher_model_paths_are_the_gemini_api(upstream: FakeUpstreamServer) -> None:
    upstream.set_script([{"text": "Regional."}, {"text": "Express."}])
    regional = "/v1beta1/projects/p/locations/europe-west4/publishers/google/models/gemini-2.5-pro"
    answer = post(f"{upstream.base_url}{regional}:generateContent", gemini_body(), GOOGLE).json()
    assert answer["candidates"][0]["content"]["parts"] == [{"text": "Regional."}]
    express = "/v1beta1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    streamed = post(f"{upstream.base_url}{express}", gemini_body(), GOOGLE).text
    assert "".join(p["text"] for _, d in sse(streamed) for p in d["candidates"][0]["content"]["parts"]) == (
        "Express."
    )
    assert [(r["api"], r["model"]) for r in upstream.requests] == [
        ("gemini", "gemini-2.5-pro"),
        ("gemini", "gemini-2.5-flash"),
    ]


def test_gemini_errors_have_google_shape(upstream: FakeUpstreamServer) -> None:
    url = f"{upstream.base_url}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    denied = post(url, gemini_body(), {"x-goog-api-key": "wrong"})
    assert denied.status_code == 400
    error = denied.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert error["details"][0]["reason"] == "API_KEY_INVALID" and "API key not valid" in error["message"]
    upstream.set_script([{"status": 429, "retry_after": 3}])
    answer = post(url, gemini_body(), GOOGLE)
    assert "retry-after" not in answer.headers  # the real API names the wait in the body only
    limited = answer.json()["error"]
    assert limited["status"] == "RESOURCE_EXHAUSTED"
    assert {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3s"} in limited["details"]


# -- the script --------------------------------------------------------------------------------


def test_matching_entries_win_and_templates_see_the_request(upstream: FakeUpstreamServer) -> None:
    upstream.set_script(
        [
            {"text": "default"},
            {
                "match": {"api": "anthropic", "after_tool_result": True},
                "text": "saw: {tool_result} after {user_turns}",
                "template": True,
            },
        ]
    )
    body = messages_body(
        messages=[
            {"role": "user", "content": "read it"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]},
        ]
    )
    data = post(f"{upstream.base_url}/v1/messages", body, ANTHROPIC).json()
    assert data["content"][0]["text"] == "saw: 42 after 1"
    assert (
        post(f"{upstream.base_url}/v1/messages", messages_body(), ANTHROPIC).json()["content"][0]["text"]
        == "default"
    )
    exhausted = post(f"{upstream.base_url}/v1/messages", messages_body(), ANTHROPIC)
    assert (
        exhausted.status_code == 400 and "no scripted response left" in exhausted.json()["error"]["message"]
    )
    upstream.assert_complete()


def test_script_file_errors_name_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps([{"text": "ok"}, {"status": 1000}]))
    with pytest.raises(ScriptError, match=r"s.json: entry 1: status"):
        FakeUpstreamServer(path)


def test_requests_are_recorded_without_credentials(upstream: FakeUpstreamServer) -> None:
    upstream.set_script([{"text": "x"}])
    post(f"{upstream.base_url}/v1/messages", messages_body(), ANTHROPIC)
    [record] = upstream.requests
    assert record["api"] == "anthropic" and record["entry"] == 0 and record["response_status"] == 200
    assert "x-api-key" not in record["headers"] and record["credentials"]["x-api-key"]["present"]
    assert KEY not in json.dumps(record)
    with httpx.Client(trust_env=False) as client:
        assert client.get(f"{upstream.base_url}/_fake/requests").json()[0]["seq"] == 1


def test_the_command_serves_and_takes_a_script_over_http(tmp_path: Path) -> None:
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps({"text": "from the file"}) + "\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "turnlog.tools", "fake-upstream", "--script", str(script), "--verbose"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline().strip()
        assert first.startswith("fake-upstream listening on http://127.0.0.1:")
        base = first.rsplit(" ", 1)[1]
        data = post(f"{base}/v1/messages", messages_body(), {"x-api-key": "any"}).json()
        assert data["content"][0]["text"] == "from the file"
        with httpx.Client(trust_env=False) as client:
            assert client.post(f"{base}/_fake/script", json=[{"text": "replaced"}]).json() == {"entries": 1}
        data = post(f"{base}/v1/responses", responses_body(), {}).json()
        assert data["output"][0]["content"][0]["text"] == "replaced"
    finally:
        process.terminate()
        _, err = process.communicate(timeout=10)
    assert "POST /v1/messages -> 200 (entry 0)" in err


def test_the_command_rejects_a_bad_script(tmp_path: Path) -> None:
    script = tmp_path / "bad.json"
    script.write_text('[{"bogus": 1}]')
    done = subprocess.run(
        [sys.executable, "-m", "turnlog.tools", "fake-upstream", "--script", str(script)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2 and "entry 0: bogus" in done.stderr and "Traceback" not in done.stderr
