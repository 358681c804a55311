"""The wire recorder of ``run()`` without a CLI: where each CLI is pointed, what a call leaves.

A real client (httpx) talks to the recorder served on loopback by ``recording_wire``, which
forwards to the fake upstream APIs; the real CLIs are in ``tests/realcli/test_run_wire.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from turnlog.eventstore import EventStore, open_store
from turnlog.kernel.wire import (
    Route,
    WireTarget,
    conversation,
    read_wire_calls,
    recording_wire,
    request_params,
    route,
    tool_names,
    wire_remainder,
    wire_target,
)
from turnlog.projections import catalogue_upcasters
from turnlog.testing import FakeUpstreamServer, UpstreamThread

KEY = "sk-wire-test-key-123"
ANTHROPIC = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}


@pytest.fixture
def upstream() -> Iterator[FakeUpstreamServer]:
    with UpstreamThread(FakeUpstreamServer(api_key=KEY)) as server:
        yield server


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EventStore]:
    opened = open_store(f"sqlite:///{tmp_path / 'wire.db'}", upcasters=catalogue_upcasters())
    try:
        yield opened
    finally:
        await opened.close()


def test_each_cli_is_pointed_at_the_recorder_and_forwards_where_it_would_have_gone(tmp_path: Path) -> None:
    claude = wire_target("claude_code", {})
    assert claude is not None and claude.upstream == "https://api.anthropic.com"
    assert claude.options("http://127.0.0.1:9", {"env": {"A": "1"}})["env"] == {
        "A": "1",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
    }
    gemini = wire_target("gemini", {"GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:7/"})
    assert gemini is not None and gemini.upstream == "http://127.0.0.1:7"
    # Codex with a provider of its own config: that provider's base_url, overridden per run
    home = tmp_path / "codex"
    home.mkdir()
    (home / "config.toml").write_text(
        'model_provider = "fake"\n[model_providers.fake]\nbase_url = "http://127.0.0.1:5/v1"\n'
    )
    codex = wire_target("codex", {"CODEX_HOME": str(home)})
    assert codex is not None and codex.upstream == "http://127.0.0.1:5"
    options = codex.options("http://127.0.0.1:9", {"extra_args": ["--x"]})
    assert options["extra_args"] == ["--x", "-c", 'model_providers.fake.base_url="http://127.0.0.1:9/v1"']
    # the built-in provider: OPENAI_BASE_URL; signed in with ChatGPT: not recorded
    (home / "config.toml").write_text("")
    builtin = wire_target("codex", {"CODEX_HOME": str(home), "OPENAI_API_KEY": "sk-x"})
    assert builtin is not None and builtin.options("http://h", {})["env"] == {
        "OPENAI_BASE_URL": "http://h/v1"
    }
    assert builtin.options("http://h", {})["extra_args"] == ["-c", 'openai_base_url="http://h/v1"']
    assert wire_target("openai", {}) is None


def test_the_subscription_logins_are_pointed_at_the_recorder(tmp_path: Path) -> None:
    # Codex signed in with ChatGPT: openai_base_url, the ChatGPT backend's Responses API
    home = tmp_path / "codex"
    home.mkdir()
    (home / "auth.json").write_text(json.dumps({"tokens": {"access_token": "t"}}))
    chatgpt = wire_target("codex", {"CODEX_HOME": str(home)})
    assert chatgpt is not None and (chatgpt.api, chatgpt.upstream) == ("chatgpt", "https://chatgpt.com")
    assert chatgpt.options("http://127.0.0.1:9", {})["extra_args"] == [
        "-c",
        'openai_base_url="http://127.0.0.1:9/backend-api/codex"',
    ]
    (home / "config.toml").write_text('openai_base_url = "http://127.0.0.1:5/backend-api/codex/"\n')
    configured = wire_target("codex", {"CODEX_HOME": str(home)})
    assert configured is not None and configured.upstream == "http://127.0.0.1:5"
    (home / "config.toml").write_text('openai_base_url = "http://127.0.0.1:5/elsewhere"\n')
    assert wire_target("codex", {"CODEX_HOME": str(home)}) is None  # no API the recorder knows
    # Gemini CLI signed in with Google: Code Assist; on Vertex AI: the location's host
    settings = tmp_path / "g" / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"security": {"auth": {"selectedType": "oauth-personal"}}}))
    google = wire_target("gemini", {"HOME": str(tmp_path / "g")})
    assert google is not None and (google.api, google.upstream) == (
        "code_assist",
        "https://cloudcode-pa.googleapis.com",
    )
    assert google.options("http://h", {})["env"] == {"CODE_ASSIST_ENDPOINT": "http://h"}
    by_env = {"HOME": str(tmp_path), "GOOGLE_GENAI_USE_GCA": "true", "CODE_ASSIST_ENDPOINT": "http://x:1/"}
    assert (wire_target("gemini", by_env) or google).upstream == "http://x:1"
    vertex_env = {
        "HOME": str(tmp_path),
        "GOOGLE_GENAI_USE_VERTEXAI": "true",
        "GOOGLE_CLOUD_PROJECT": "p",
        "GOOGLE_CLOUD_LOCATION": "europe-west4",
    }
    vertex = wire_target("gemini", vertex_env)
    assert vertex is not None and vertex.upstream == "https://europe-west4-aiplatform.googleapis.com"
    assert vertex.options("http://h", {})["env"] == {"GOOGLE_VERTEX_BASE_URL": "http://h"}


def test_the_subscription_backends_are_routed_as_their_apis() -> None:
    body = {"model": "gpt-5.5", "stream": True, "input": []}
    assert route("POST", "/backend-api/codex/responses", "", body) == Route(
        "chatgpt", "responses", "gpt-5.5", True
    )
    assert route("POST", "/backend-api/codex/models", "", body) is None
    wrapped = {"model": "gemini-2.5-pro", "project": "p", "request": {"contents": []}}
    assert route("POST", "/v1internal:streamGenerateContent", "alt=sse", wrapped) == Route(
        "code_assist", "code_assist", "gemini-2.5-pro", True
    )
    assert route("POST", "/v1internal:loadCodeAssist", "", wrapped) is None
    vertex = (
        "/v1beta1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent"
    )
    assert route("POST", vertex, "", {"contents": []}) == Route("gemini", "gemini", "gemini-2.5-pro", False)
    express = "/v1beta1/publishers/google/models/gemini-2.5-flash:streamGenerateContent"
    assert route("POST", express, "alt=sse", {"contents": []}) == Route(
        "gemini", "gemini", "gemini-2.5-flash", True
    )
    # Code Assist's envelope is taken off: the turns, the tools and the parameters of the request
    inner = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "tools": [{"functionDeclarations": [{"name": "read_file"}]}],
        "generationConfig": {"temperature": 0},
    }
    wrapped = {"model": "m", "project": "p", "user_prompt_id": "u1", "request": inner}
    assert [(t.role, t.text) for t in conversation("code_assist", wrapped)] == [("user", "hi")]
    assert tool_names("code_assist", wrapped) == ["read_file"]
    assert request_params(wrapped) == {
        "project": "p",
        "user_prompt_id": "u1",
        "generationConfig": {"temperature": 0},
    }


def _chatgpt_codex(tmp_path: Path, backend: str) -> WireTarget:
    """The wire target of Codex signed in with ChatGPT, its backend at ``backend``."""
    home = tmp_path / "codex"
    home.mkdir()
    (home / "auth.json").write_text(json.dumps({"tokens": {"access_token": "t"}}))
    (home / "config.toml").write_text(f'openai_base_url = "{backend}/backend-api/codex"\n')
    target = wire_target("codex", {"CODEX_HOME": str(home)})
    assert target is not None
    return target


async def test_codex_chatgpt_calls_are_read_from_their_zstd_body_and_forwarded_as_sent(
    store: EventStore, tmp_path: Path
) -> None:
    import zstandard

    with UpstreamThread(FakeUpstreamServer([{"text": "Hello, subscriber."}])) as server:
        target = _chatgpt_codex(tmp_path, server.base_url)
        body = {"model": "gpt-5.5", "stream": True, "input": [{"role": "user", "content": "hi"}]}
        packed = zstandard.ZstdCompressor().compress(json.dumps(body).encode())
        headers = {
            "authorization": "Bearer chatgpt-access-token-123",
            "chatgpt-account-id": "account-id-4567",
            "content-encoding": "zstd",
            "content-type": "application/json",
        }
        async with recording_wire(store, "b1", "r9", target) as (_wire, url):
            async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
                answer = await client.post(
                    f"{url}/backend-api/codex/responses", content=packed, headers=headers
                )
        assert answer.status_code == 200 and "Hello, subscriber." in answer.text
        [sent] = [r for r in server.requests if r["entry"] is not None]
        assert sent["body"] == body and sent["headers"]["content-encoding"] == "zstd"
    [call] = await read_wire_calls(store, "r9")
    assert (call.status, call.text) == ("ok", "Hello, subscriber.")
    events = [e async for e in store.read_stream(call.stream)]
    assert events[-1].data["provider"] == "chatgpt" and events[-1].data["model"] == "gpt-5.5"
    logged = json.dumps([e.data for e in events])
    assert "chatgpt-access-token-123" not in logged and "account-id-4567" not in logged


async def test_a_zstd_body_that_does_not_decompress_is_forwarded_as_sent_and_said_so(
    store: EventStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with UpstreamThread(FakeUpstreamServer([{"text": "Hello, subscriber."}])) as server:
        target = _chatgpt_codex(tmp_path, server.base_url)
        garbled = b"\x28\xb5\x2f\xfd" + b"not a zstd frame, secret-prompt-text"
        headers = {"content-encoding": "zstd", "content-type": "application/json"}
        with caplog.at_level("WARNING", logger="turnlog.kernel.wire"):
            async with recording_wire(store, "b1", "r8", target) as (_wire, url):
                async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
                    await client.post(f"{url}/backend-api/codex/responses", content=garbled, headers=headers)
        [sent] = [r for r in server.requests if "/responses" in r["path"]]
        # the upstream judges it, as it came
        assert sent["headers"]["content-encoding"] == "zstd"
        assert sent["body_text"] == garbled.decode("utf-8", errors="replace")
    assert await read_wire_calls(store, "r8") == []  # nothing recorded: it is not JSON
    [said] = [r.getMessage() for r in caplog.records if "does not decompress" in r.getMessage()]
    assert "forwarded as sent, not recorded" in said and "secret-prompt-text" not in said


def test_the_unprinted_rest_of_the_wire_text() -> None:
    assert wire_remainder("", "Hello there") == "Hello there"  # Codex printed nothing
    assert wire_remainder("I read it. Hello th", "Hello there") == "ere"  # printed the start
    assert wire_remainder("Hello there", "Hello there") == ""
    assert wire_remainder("something else", "") == ""


async def test_a_streamed_call_is_recorded_event_by_event_then_closed(
    store: EventStore, upstream: FakeUpstreamServer
) -> None:
    upstream.set_script([{"text": "one two three"}])
    target = wire_target("claude_code", {"ANTHROPIC_BASE_URL": upstream.base_url})
    assert target is not None
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 50,
        "stream": True,
        "messages": [{"role": "user", "content": "count"}],
    }
    async with recording_wire(store, "b1", "r1", target) as (wire, url):
        async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
            direct = await client.post(f"{upstream.base_url}/v1/messages", json=body, headers=ANTHROPIC)
            upstream.set_script([{"text": "one two three"}])
            proxied = await client.post(f"{url}/v1/messages", json=body, headers=ANTHROPIC)
    assert proxied.status_code == 200 and proxied.headers["content-type"].startswith("text/event-stream")
    # the same SSE events reach the client (message ids aside)
    assert _events(proxied.text) == _events(direct.text)
    [call] = await read_wire_calls(store, "r1")
    assert (call.stream, call.status, call.text) == ("run-r1-wire-1", "ok", "one two three")
    assert wire.streams == ["run-r1-wire-1"]
    events = [e async for e in store.read_stream("run-r1-wire-1")]
    assert [e.type for e in events[:-1]] == ["stream.chunk"] * (len(events) - 1)
    assert "".join(e.data["metadata"].get("sse", "") for e in events[:-1]) == proxied.text
    called = events[-1].data
    assert (called["verb"], called["status"], called["run_id"]) == ("wire", "ok", "r1")
    assert called["usage"]["output_tokens"] > 0 and called["ttft_ms"] is not None
    assert KEY not in json.dumps([e.data for e in events])  # no credential reaches the log


async def test_a_call_the_run_leaves_open_is_closed_as_cancelled_with_its_text(
    store: EventStore, upstream: FakeUpstreamServer
) -> None:
    upstream.set_script([{"text": " ".join(f"w{i}" for i in range(30)), "chunk_delay_ms": 500}])
    target = wire_target("claude_code", {"ANTHROPIC_BASE_URL": upstream.base_url})
    assert target is not None
    body = {"model": "m", "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "go"}]}
    got: list[str] = []
    async with recording_wire(store, "b1", "r2", target) as (wire, url):
        async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
            async with client.stream("POST", f"{url}/v1/messages", json=body, headers=ANTHROPIC) as response:
                async for line in response.aiter_lines():
                    got.append(line)
                    if sum('"text_delta"' in line for line in got) >= 2:
                        break  # the run ends here, the upstream still holding the rest
    [call] = await read_wire_calls(store, "r2")
    assert call.status == "cancelled" and call.text.startswith("w0 w1")
    assert wire.last_partial() == ("run-r2-wire-1", call.text)


def _events(raw: str) -> list[Any]:
    out = []
    for frame in raw.split("\n\n"):
        data = [line[6:] for line in frame.splitlines() if line.startswith("data: ")]
        if data:
            value = json.loads(data[0])
            message = value.get("message")
            if isinstance(message, dict):
                message.pop("id", None)
            out.append(value)
    return out
