"""``turnlog proxy``: the threading rule, pass-through, failures, cancellation and safety."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anthropic
import anyio
import httpx
import orjson
import pytest

from turnlog.testing import FakeUpstreamServer

from .proxykit import await_event, events_of, recorded, running_proxy, transcript

KEY = "sk-proxy-secret-0123456789abcdef"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
MODEL = "claude-sonnet-4-5"


def turns(*texts: str) -> list[dict[str, Any]]:
    """Alternating user / assistant messages."""
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]


async def ask(
    client: httpx.AsyncClient, messages: list[dict[str, Any]], path: str = "/v1/messages", **kw: Any
) -> Any:
    body = {"model": MODEL, "max_tokens": 20, "messages": messages, **kw}
    answer = await client.post(path, json=body, headers=HEADERS)
    return answer


async def test_calls_thread_into_branches_extend_fork_and_new(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    async with FakeUpstreamServer([{"text": "ok", "times": None}], api_key=KEY) as upstream:
        async with running_proxy(store, upstream.base_url) as proxy:
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                assert (await ask(client, turns("hi"))).status_code == 200
                await ask(client, turns("hi", "ok", "more"))  # extends the first conversation
                await ask(client, turns("hi", "ok", "other"))  # diverges after "ok": a fork
                await ask(client, turns("unrelated"))  # a new conversation
                await ask(client, turns("hi", "ok", "more", "ok", "deeper"))  # extends the first again
                await ask(client, turns("hi"), system="be brief")  # same words, another system: new
    first, fork, new, other_system = await recorded(store)
    assert transcript(first) == [
        ("Instruction", "hi"),
        ("AssistantResponse", "ok"),
        ("Instruction", "more"),
        ("AssistantResponse", "ok"),
        ("Instruction", "deeper"),
        ("AssistantResponse", "ok"),
    ]
    assert transcript(fork) == [
        ("Instruction", "hi"),
        ("AssistantResponse", "ok"),
        ("Instruction", "other"),
        ("AssistantResponse", "ok"),
    ]
    assert fork.state.forked_from is not None and fork.state.forked_from.parent_branch_id == first.branch.id
    assert transcript(new) == [("Instruction", "unrelated"), ("AssistantResponse", "ok")]
    assert other_system.branch.system is not None
    assert other_system.branch.system.content.system_message == "be brief"
    assert transcript(other_system) == [("Instruction", "hi"), ("AssistantResponse", "ok")]
    assert [len(b.calls()) for b in (first, fork, new, other_system)] == [3, 1, 1, 1]


async def test_a_path_prefix_or_a_header_names_the_branch(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    async with FakeUpstreamServer([{"text": "ok", "times": None}], api_key=KEY) as upstream:
        async with running_proxy(store, upstream.base_url) as proxy:
            sdk = anthropic.AsyncAnthropic(api_key=KEY, base_url=f"{proxy.url}/b/review", max_retries=0)
            async with sdk:
                await sdk.messages.create(model=MODEL, max_tokens=9, messages=turns("hi"))
                await sdk.messages.create(model=MODEL, max_tokens=9, messages=turns("hi", "ok", "next"))
                await sdk.messages.create(model=MODEL, max_tokens=9, messages=turns("hi", "ok", "other"))
                await sdk.messages.create(
                    model=MODEL, max_tokens=9, messages=turns("hi", "ok", "other", "ok", "more")
                )  # extends the fork, which belongs to the name too
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                answer = await client.post(
                    "/v1/messages",
                    json={"model": MODEL, "max_tokens": 9, "messages": turns("hi")},
                    headers={**HEADERS, "x-turnlog-branch": "by-header"},
                )
                assert answer.status_code == 200
    review, fork, by_header = await recorded(store)
    assert (review.branch.name, by_header.branch.name) == ("review", "by-header")
    # a request diverging from the named branch is a fork of it without a name of its own
    assert fork.events[0].event_type == "branch.forked" and fork.events[0].name is None
    assert fork.state.forked_from is not None and fork.state.forked_from.parent_branch_id == review.branch.id
    assert [text for _, text in transcript(fork)] == ["hi", "ok", "other", "ok", "more", "ok"]
    assert [k for k, _ in transcript(review)] == ["Instruction", "AssistantResponse"] * 2
    assert transcript(by_header) == [("Instruction", "hi"), ("AssistantResponse", "ok")]
    # the name is the proxy's: the upstream never sees the prefix or the header
    assert all(r["path"].startswith("/v1/messages") for r in upstream.requests)
    assert all("x-turnlog-branch" not in r["headers"] for r in upstream.requests)


async def test_other_paths_pass_through_unrecorded(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    async with FakeUpstreamServer([], api_key=KEY) as upstream:
        # /v1/models is OpenAI's path too: the anthropic-version header sends it to Anthropic's upstream
        upstreams = (f"anthropic={upstream.base_url}", "openai=http://127.0.0.1:9")
        async with running_proxy(store, *upstreams) as proxy:
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                models = await client.get("/v1/models", headers=HEADERS)
                missing = await client.post("/v1/messages/nothing", json={"a": 1}, headers=HEADERS)
    direct_models = {"object": "list", "data": [], "models": []}
    assert (models.status_code, models.json()) == (200, direct_models)
    assert missing.status_code == 404 and "no such endpoint" in missing.json()["error"]["message"]
    assert await recorded(store) == []


async def test_an_unreachable_upstream_is_an_error_in_the_api_shape_and_a_failed_call(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    async with running_proxy(store, "http://127.0.0.1:9") as proxy:
        sdk = anthropic.AsyncAnthropic(api_key=KEY, base_url=proxy.url, max_retries=0)
        async with sdk:
            with pytest.raises(anthropic.APIStatusError) as caught:
                await sdk.messages.create(model=MODEL, max_tokens=9, messages=turns("hi"))
        async with httpx.AsyncClient(base_url=proxy.url) as client:
            gemini = await client.post(
                "/v1beta/models/gemini-2.5-flash:generateContent",
                json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
            )
    assert caught.value.status_code == 502
    assert caught.value.body["error"]["type"] == "api_error" and "unreachable" in caught.value.message
    assert gemini.status_code == 502 and gemini.json()["error"]["status"] == "UNAVAILABLE"
    branches = await recorded(store)
    calls = [c for b in branches for c in b.calls()]
    assert [(c.status, c.error_type) for c in calls] == [("error", "ConnectError")] * 2
    assert [r.status for b in branches for r in b.state.runs.values()] == ["failed", "failed"]


async def test_a_client_leaving_mid_stream_cancels_the_call_with_what_arrived(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    script = [{"text": "one two three four five six seven eight", "chunk_delay_ms": 300}]
    async with FakeUpstreamServer(script, api_key=KEY) as upstream:
        async with running_proxy(store, upstream.base_url) as proxy:
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                body = {"model": MODEL, "max_tokens": 20, "messages": turns("hi"), "stream": True}
                async with client.stream("POST", "/v1/messages", json=body, headers=HEADERS) as answer:
                    async for line in answer.aiter_lines():
                        if "text_delta" in line:
                            break  # the first words arrived: leave
            failed = await await_event(store, "run.failed")
    assert failed.data["reason"] == "cancelled" and failed.data["error_type"] == "ClientDisconnected"
    chunks = await events_of(store, f"run-{failed.data['run_id']}")
    text = "".join(c.data["content"] for c in chunks if c.data["type"] == "text")
    assert text.startswith("one") and len(text) < len("one two three four five six seven eight")
    (branch,) = await recorded(store)
    (call,) = branch.calls()
    assert call.status == "error" and call.stream


async def test_no_credential_reaches_the_log(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    script = [{"text": f"your key is {KEY}"}, {"text": f"echo {KEY}"}]
    async with FakeUpstreamServer(script, api_key=KEY) as upstream:
        async with running_proxy(store, upstream.base_url) as proxy:
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                plain = await ask(client, turns(f"my key is {KEY}"))
                streamed = await client.post(
                    f"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&key={KEY}",
                    json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
                )
    assert KEY in plain.text and KEY in streamed.text  # the client gets the answer as it was
    # the store's files and the run buffers beside it (``s.db.runs/``, emptied by the closes)
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("s.db*") if p.is_file())
    stored += b"".join(p.read_bytes() for p in tmp_path.glob("s.db.runs/*"))
    assert stored.count(b"your key is <redacted>") and stored.count(b"echo <redacted>")
    assert KEY.encode() not in stored
    assert len(await recorded(store)) == 2


async def test_a_token_guards_the_proxy_and_a_large_body_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    token = "t" * 20
    async with FakeUpstreamServer([{"text": "ok"}], api_key=KEY) as upstream:
        extra = ("--token", token, "--max-body", "2000")
        async with running_proxy(store, upstream.base_url, extra=extra) as proxy:
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                refused = await ask(client, turns("hi"))
                big = await client.post(
                    "/v1/messages",
                    json={"model": MODEL, "max_tokens": 9, "messages": turns("x" * 5000)},
                    headers={**HEADERS, "x-turnlog-token": token},
                )
                fine = await client.post(
                    "/v1/messages",
                    json={"model": MODEL, "max_tokens": 9, "messages": turns("hi")},
                    headers={**HEADERS, "x-turnlog-token": token},
                )
    assert refused.status_code == 401 and refused.json()["type"] == "error"
    assert big.status_code == 413 and "larger than 2000 bytes" in big.json()["error"]["message"]
    assert fine.status_code == 200
    # the two refusals left their bodies unread: each says the connection ends, so the client
    # sends the next request on a new one instead of on a connection the proxy is closing
    assert refused.headers["connection"] == big.headers["connection"] == "close"
    assert "connection" not in fine.headers
    assert [transcript(b) for b in await recorded(store)] == [
        [("Instruction", "hi"), ("AssistantResponse", "ok")]
    ]


async def test_sigkill_mid_stream_keeps_what_the_client_got_and_recover_closes_the_call(
    tmp_path: Path,
) -> None:
    store = tmp_path / "s.db"
    full = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    received = ""
    async with FakeUpstreamServer([{"text": full, "chunk_delay_ms": 200}], api_key=KEY) as upstream:
        async with running_proxy(store, upstream.base_url) as proxy:
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                body = {"model": MODEL, "max_tokens": 20, "messages": turns("hi"), "stream": True}
                with pytest.raises(httpx.RemoteProtocolError):
                    async with client.stream("POST", "/v1/messages", json=body, headers=HEADERS) as answer:
                        async for line in answer.aiter_lines():
                            if line.startswith("data:") and '"text_delta"' in line:
                                received += orjson.loads(line[5:])["delta"]["text"]
                                if received.count(" ") >= 2:
                                    proxy.kill()  # SIGKILL: no handler runs
    assert received and len(received) < len(full)
    with anyio.fail_after(120):
        done = await anyio.run_process(
            [sys.executable, "-m", "turnlog", "recover", "--store", str(store)], check=False
        )
    assert done.returncode == 0, done.stderr
    (branch,) = await recorded(store)
    (run,) = branch.state.runs.values()
    assert run.status == "failed"
    failed = [e for e in branch.events if e.event_type == "run.failed"]
    assert failed[0].reason == "crashed"
    interrupted = branch.messages[-1]
    assert interrupted.kind == "AssistantResponse" and interrupted.metadata.get("interrupted") is True
    # every chunk the client held was journaled before it was forwarded: in the log after recover,
    # which imported the call's run buffer (what the store lacked of it) and removed it
    assert interrupted.content.text.startswith(received) and full.startswith(interrupted.content.text)
    assert list((tmp_path / "s.db.runs").iterdir()) == []


async def test_a_restarted_proxy_threads_into_the_conversations_it_recorded_before(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    async with FakeUpstreamServer([{"text": "ok", "times": None}], api_key=KEY) as upstream:
        async with running_proxy(store, upstream.base_url) as proxy:
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                await ask(client, turns("hi"))
                await ask(client, turns("hi", "ok", "one"))
                await ask(client, turns("hi", "ok", "two"))  # a fork
        async with running_proxy(store, upstream.base_url) as proxy:
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                await ask(client, turns("hi", "ok", "one", "ok", "three"))  # the first, again
                await ask(client, turns("hi", "ok", "two", "ok", "four"))  # the fork, again
                await ask(client, turns("hi", "ok", "five"))  # a second fork of the first
    first, fork, second_fork = await recorded(store)
    assert [text for _, text in transcript(first)] == ["hi", "ok", "one", "ok", "three", "ok"]
    assert [text for _, text in transcript(fork)] == ["hi", "ok", "two", "ok", "four", "ok"]
    assert [text for _, text in transcript(second_fork)] == ["hi", "ok", "five", "ok"]
    assert second_fork.state.forked_from is not None
    assert second_fork.state.forked_from.parent_branch_id == first.branch.id


async def test_many_streams_at_once_each_on_its_branch(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    script = [{"text": "word " * 12, "chunk_delay_ms": 5, "times": None}]
    async with FakeUpstreamServer(script, api_key=KEY) as upstream:
        async with running_proxy(store, upstream.base_url) as proxy:
            async with httpx.AsyncClient(base_url=proxy.url) as client:

                async def one(i: int) -> None:
                    answer = await ask(client, turns(f"conversation {i}"), stream=True)
                    assert answer.status_code == 200 and answer.text.count("text_delta") == 12

                async with anyio.create_task_group() as tg:
                    for i in range(8):
                        tg.start_soon(one, i)
    branches = await recorded(store)
    assert sorted(transcript(b)[0][1] for b in branches) == sorted(f"conversation {i}" for i in range(8))
    for b in branches:
        ((run),) = b.state.runs.values()
        assert run.status == "ended"
        chunks = await events_of(store, f"run-{run.run_id}")
        assert "".join(c.data["content"] for c in chunks if c.data["type"] == "text") == "word " * 12


async def test_a_timed_out_upstream_is_a_504_in_the_api_shape_and_a_failed_call(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    async with FakeUpstreamServer([{"text": "late", "delay_ms": 5000}], api_key=KEY) as upstream:
        async with running_proxy(store, upstream.base_url, extra=("--timeout", "0.5")) as proxy:
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                answer = await ask(client, turns("hi"))
    assert answer.status_code == 504 and answer.json()["error"]["type"] == "api_error"
    assert "timed out" in answer.json()["error"]["message"]
    ((call,),) = [b.calls() for b in await recorded(store)]
    assert (call.status, call.error_type) == ("error", "ReadTimeout")


async def test_another_bind_than_loopback_gets_a_token(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "turnlog", "proxy", "--store", str(tmp_path / "s.db"), "--port", "0"]
    async with FakeUpstreamServer([{"text": "ok"}], api_key=KEY) as upstream:
        argv += ["--host", "0.0.0.0", "--upstream", upstream.base_url]
        async with await anyio.open_process(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
            assert process.stdout is not None and process.stderr is not None
            with anyio.fail_after(30):
                line = b""
                while not line.endswith(b"\n"):
                    line += await process.stdout.receive(1)
                told = b""
                while b"\n" not in told:
                    told += await process.stderr.receive()
            port = line.decode().strip().rsplit(":", 1)[1]
            assert line.decode().startswith("turnlog proxy listening on http://0.0.0.0:")
            token = told.decode().strip().rsplit(" ", 1)[1]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                refused = await ask(client, turns("hi"))
                body = {"model": MODEL, "max_tokens": 9, "messages": turns("hi")}
                fine = await client.post(
                    "/v1/messages", json=body, headers={**HEADERS, "x-turnlog-token": token}
                )
            process.terminate()
    assert "token (shown once" in told.decode() and len(token) >= 16
    assert (refused.status_code, fine.status_code) == (401, 200)


async def test_the_proxy_records_the_cache_reads_and_writes_of_a_call(tmp_path: Path) -> None:
    """A cached call through the proxy, plain and streamed: its usage keeps the cache counts."""
    store = tmp_path / "s.db"
    usage = {
        "input_tokens": 30,
        "output_tokens": 5,
        "cached_tokens": 1000,
        "cache_creation_input_tokens": 200,
    }
    async with FakeUpstreamServer([{"text": "ok", "usage": usage, "times": None}], api_key=KEY) as upstream:
        async with running_proxy(store, upstream.base_url) as proxy:
            async with httpx.AsyncClient(base_url=proxy.url) as client:
                assert (await ask(client, turns("hi"))).status_code == 200
                assert (await ask(client, turns("hi", "ok", "more"), stream=True)).status_code == 200
    [branch] = await recorded(store)
    expected = {
        "input_tokens": 1230,
        "output_tokens": 5,
        "cache_read_tokens": 1000,
        "cache_write_tokens": 200,
    }
    assert [c.usage.model_dump() for c in branch.calls()] == [{**expected, "cost_usd": None}] * 2
    runs = [e for e in branch.events if e.event_type == "run.ended"]
    assert [r.usage.cache_read_tokens for r in runs] == [1000, 1000]
