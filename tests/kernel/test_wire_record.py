"""The recorder's forwarding: a non-streamed call recorded whole before it is answered; no cookie jar.

The client of a non-streamed call holds the whole answer at its last byte, so that byte must
not leave before the call is in the log; and since the client receives nothing before, the call
is one append (a crash before it leaves no trace of the call, and the client got nothing).
The proxy serves many clients over shared upstream connections: nothing one upstream answer
sets (a cookie) may reach the upstream with another client's request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson

from turnlog.eventstore import open_store
from turnlog.kernel.wire import ProxyApp, ProxyConfig, WireRecorder, serve_loopback
from turnlog.testing import FakeUpstreamServer

KEY = "sk-wire-record-0123456789"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
BODY = {"model": "claude-sonnet-4-5", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}


#: The events of a non-streamed call that starts a conversation, in the order they are stored.
A_WHOLE_NEW_CALL = [
    "branch.created",
    "message.added",
    "run.started",
    "message.added",
    "model.called",
    "run.ended",
]


async def test_a_non_streamed_answer_leaves_only_once_the_whole_call_is_journaled(tmp_path: Path) -> None:
    """The answer's last byte leaves once the call is journaled whole; it is committed right after."""
    closing = anyio.Event()
    release = anyio.Event()
    answered = anyio.Event()
    settled = anyio.Event()
    async with (
        FakeUpstreamServer([{"text": "A plain answer."}], api_key=KEY) as upstream,
        open_store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        recorder = await WireRecorder.load(store)
        opened = recorder.open_call

        async def open_call(*args: Any) -> Any:
            call = await opened(*args)
            finish = call.finish

            async def held(*args: Any) -> None:
                closing.set()
                await release.wait()
                await finish(*args)

            settle = call.settle

            async def settling() -> None:
                await settle()
                settled.set()

            call.finish = held  # type: ignore[method-assign]
            call.settle = settling  # type: ignore[method-assign]
            return call

        recorder.open_call = open_call  # type: ignore[method-assign]
        app = ProxyApp(ProxyConfig(upstreams={"anthropic": upstream.base_url}), recorder)
        got: list[httpx.Response] = []
        async with anyio.create_task_group() as tg, httpx.AsyncClient() as client:
            server = await serve_loopback(app, tg)

            async def ask() -> None:
                got.append(await client.post(f"{server.base_url}/v1/messages", json=BODY, headers=HEADERS))
                answered.set()

            tg.start_soon(ask)
            await closing.wait()
            # the upstream has answered and the call is being closed: nothing of it is in the
            # log yet (its turns and run.started go in the closing append) ...
            assert [e.type async for e in store.read_all()] == []
            # ... and the client does not have the answer (a content-length answer is whole at
            # its last byte): this can only be checked by waiting a while for what must not come
            with anyio.move_on_after(0.3):
                await answered.wait()
            assert not answered.is_set()
            release.set()
            await answered.wait()
            # once it has it, the call is journaled whole (recover would record it), and then
            # committed: the buffer goes once the call is in the log
            await settled.wait()
            types = [e.type async for e in store.read_all(stream_prefix="branch-")]
            assert list((tmp_path / "s.db.runs").iterdir()) == []
            tg.cancel_scope.cancel()
        await app.aclose()
    assert got[0].status_code == 200 and got[0].json()["content"][0]["text"] == "A plain answer."
    assert types == A_WHOLE_NEW_CALL


async def test_a_crash_after_a_non_streamed_answer_left_and_before_its_commit_loses_nothing(
    tmp_path: Path,
) -> None:
    """The answer was journaled and forwarded, then the proxy died: ``recover`` records the call whole."""
    from turnlog.kernel import recover
    from turnlog.kernel.models import ModelResponse
    from turnlog.kernel.models._secrets import Scrubber
    from turnlog.kernel.wire._apis import route

    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        call_route = route("POST", "/v1/messages", "", BODY)
        assert call_route is not None
        call = await (await WireRecorder.load(store)).open_call(call_route, BODY, None, Scrubber([]))
        await call.finish(ModelResponse(text="A plain answer.", model=BODY["model"]), {"status": 200})
        assert [e async for e in store.read_all()] == []  # forwarded now, not committed
        assert call._buffer is not None
        call._buffer.close()  # the crash: settle never runs, the lock is gone
        report = await recover(store)
        types = [e.type async for e in store.read_all(stream_prefix="branch-")]
        texts = [
            e.data["message"]["content"]
            async for e in store.read_all(stream_prefix="branch-")
            if e.type == "message.added"
        ]
    assert types == A_WHOLE_NEW_CALL
    assert texts[-1]["text"] == "A plain answer." and report.runs == ()
    assert list((tmp_path / "s.db.runs").iterdir()) == []  # every event stored: the buffer removed


async def test_the_proxy_adds_no_header_of_its_own_and_keeps_no_cookie(tmp_path: Path) -> None:
    """A cookie an upstream sets for one client never reaches the upstream with another's request."""
    seen: list[dict[bytes, bytes]] = []

    async def upstream_app(scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        seen.append(dict(scope["headers"]))
        headers = [(b"content-type", b"application/json"), (b"set-cookie", b"session=first; Path=/")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b'{"data": []}'})

    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store, anyio.create_task_group() as tg:
        upstream = await serve_loopback(upstream_app, tg)
        app = ProxyApp(ProxyConfig(upstreams={"openai": upstream.base_url}), await WireRecorder.load(store))
        proxy = await serve_loopback(app, tg)
        for _ in range(2):  # two clients, one after the other
            async with httpx.AsyncClient() as client:
                answer = await client.get(f"{proxy.base_url}/v1/models", headers={"user-agent": "a-client"})
                assert answer.headers["set-cookie"] == "session=first; Path=/"  # forwarded as it came
        tg.cancel_scope.cancel()
        await app.aclose()
    assert [h.get(b"cookie") for h in seen] == [None, None]
    assert [h[b"user-agent"] for h in seen] == [b"a-client", b"a-client"]


async def test_the_events_of_one_upstream_read_are_committed_in_one_append(tmp_path: Path) -> None:
    """A burst of stream events that one read brings costs one append, not one per event.

    Each event is journaled in the call's run buffer before it is forwarded (the first alone,
    so the client's first byte waits for one line's write, the rest of the read together),
    the read's events are committed after, in one append, and the buffer is removed at the
    close; the client gets the events as the upstream sent them.
    """
    async with FakeUpstreamServer([{"text": "one two three four five six", "chunk_chars": 4}]) as fake:
        async with httpx.AsyncClient() as client:
            sse = (await client.post(f"{fake.base_url}/v1/messages", json={**BODY, "stream": True})).content
    events = [e + b"\n\n" for e in sse.split(b"\n\n") if e]
    assert len(events) > 6
    # every event a chunk of its own, all in one write: the proxy's first read holds them all
    burst = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"

    async def upstream(stream: Any) -> None:
        async with stream:
            request = b""
            while b'"stream":true}' not in request:
                request += await stream.receive()
            await stream.send(head + b"connection: close\r\n\r\n" + burst)

    appends: list[int] = []
    async with (
        open_store(f"sqlite:///{tmp_path / 's.db'}") as store,
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
        anyio.create_task_group() as tg,
    ):
        append = store.append_encoded

        async def counted(stream: str, events: Any, *args: Any, **kwargs: Any) -> Any:
            if stream.startswith("run-"):
                appends.append(len(events))
            return await append(stream, events, *args, **kwargs)

        store.append_encoded = counted  # type: ignore[method-assign]
        tg.start_soon(listener.serve, upstream)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        app = ProxyApp(
            ProxyConfig(upstreams={"anthropic": f"http://127.0.0.1:{port}"}), await WireRecorder.load(store)
        )
        proxy = await serve_loopback(app, tg)
        async with httpx.AsyncClient() as client:
            answer = await client.post(
                f"{proxy.base_url}/v1/messages", json={**BODY, "stream": True}, headers=HEADERS
            )
        chunks = [e async for e in store.read_all() if e.type == "stream.chunk"]
        types = [e.type async for e in store.read_all(stream_prefix="branch-")]
        tg.cancel_scope.cancel()
        await app.aclose()
    assert answer.content == b"".join(events)
    assert appends == [len(chunks)]
    assert list((tmp_path / "s.db.runs").iterdir()) == []  # the run buffer, removed at the close
    assert [c.data["metadata"]["sse"] for c in chunks if "sse" in c.data["metadata"]] == [
        e.decode() for e in events
    ]
    assert types[-2:] == ["model.called", "run.ended"]


_BROKEN_STREAM = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
    'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","type":"message",'
    '"role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,'
    '"usage":{"input_tokens":1,"output_tokens":1}}}\n\n'
    'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    '"content_block":{"type":"text","text":""}}\n\n'
    'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    '"delta":{"type":"text_delta","text":"part of it"}}\n\n'
    'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n',
)


async def test_a_client_leaving_after_the_streams_error_event_leaves_a_failed_call(tmp_path: Path) -> None:
    # An upstream (LiteLLM) may keep the stream open after its error event, and the client, which
    # raises on that event, leaves: the call failed upstream (StreamFault), it was not abandoned.
    head, events = _BROKEN_STREAM
    upstream_done = anyio.Event()

    async def serve(stream: Any) -> None:
        async with stream:
            await stream.receive()  # the request (small: one read)
            data = events.encode()
            await stream.send(head + f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await upstream_done.wait()  # and never ends the stream

    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
        open_store(f"sqlite:///{tmp_path / 's.db'}") as store,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(listener.serve, serve)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        recorder = await WireRecorder.load(store)
        app = ProxyApp(ProxyConfig(upstreams={"anthropic": f"http://127.0.0.1:{port}"}), recorder)
        server = await serve_loopback(app, tg)
        async with httpx.AsyncClient() as client:
            ask = {**BODY, "stream": True}
            async with client.stream(
                "POST", f"{server.base_url}/v1/messages", json=ask, headers=HEADERS
            ) as got:
                seen = b""
                async for piece in got.aiter_raw():
                    seen += piece
                    if b"event: error" in seen:
                        break
        with anyio.fail_after(10):
            async for event in store.subscribe(types=["model.called"]):
                called = event
                break
        upstream_done.set()
        tg.cancel_scope.cancel()
    await app.aclose()
    assert (called.data["status"], called.data["error_type"]) == ("error", "StreamFault")
    assert "Overloaded" in called.data["error_message"]


async def test_chunks_forwarded_but_not_committed_are_journaled_and_recover_imports_them(
    tmp_path: Path,
) -> None:
    """A crash between an event's forward and its commit: ``recover`` puts it in the log.

    The call journals its events (``chunks``) and, as the proxy would have forwarded them, dies
    before ``flush``: its buffer's lock is dropped with the process (here: the buffer closed).
    """
    from turnlog.kernel import recover
    from turnlog.kernel.models._secrets import Scrubber
    from turnlog.kernel.wire._apis import route

    events = _BROKEN_STREAM[1]
    texts = [e + "\n\n" for e in events.split("\n\n") if e][:3]  # up to the text delta, no error
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        body = {**BODY, "stream": True}
        call_route = route("POST", "/v1/messages", "", body)
        assert call_route is not None
        call = await (await WireRecorder.load(store)).open_call(call_route, body, None, Scrubber([]))
        assembly = call.route.wire.assembly(call.route.model)
        batch = []
        for text in texts:
            assembly.add(orjson.loads(text.split("data: ", 1)[1]))
            batch.append((text, assembly.take_pieces(), None))
        await call.chunks(batch)
        # neither the chunks nor the call's opening are committed: the buffer holds both
        assert [e async for e in store.read_all()] == []
        assert call.log is not None and call.log.buffer is not None
        call.log.buffer.close()  # the crash: nothing more is written, the lock is gone
        report = await recover(store)
        assert (await recover(store)).changed is False  # idempotent: the opening is not added twice
        chunks = [e async for e in store.read_all() if e.type == "stream.chunk"]
        types = [e.type async for e in store.read_all(stream_prefix="branch-")]
        texts_added = [
            e.data["message"]["content"].get("text")
            async for e in store.read_all(stream_prefix="branch-")
            if e.type == "message.added"
        ]
    assert report.imported == len(chunks) == call.seq > 0
    assert [c.data["metadata"].get("sse") for c in chunks if "sse" in c.data["metadata"]] == texts
    assert types[-1] == "run.failed" and texts_added[-1] == "part of it"
    assert types[:3] == ["branch.created", "message.added", "run.started"]
    assert list((tmp_path / "s.db.runs").iterdir()) == []


async def test_a_crash_before_a_streamed_calls_opening_is_committed_on_a_recorded_branch(
    tmp_path: Path,
) -> None:
    """A call that extends a recorded conversation, journaled, forwarded, then the crash.

    Its new turn and ``run.started`` are in the buffer's header only: ``recover`` appends them
    after the branch's recorded events, imports the chunk and closes the run.
    """
    from turnlog.kernel import recover
    from turnlog.kernel.models import ModelResponse
    from turnlog.kernel.models._secrets import Scrubber
    from turnlog.kernel.wire._apis import route

    first = {**BODY, "messages": [{"role": "user", "content": "hello"}]}
    second = {
        **BODY,
        "stream": True,
        "messages": [
            *first["messages"],
            {"role": "assistant", "content": "hi"},
            {"role": "user", "content": "more"},
        ],
    }
    async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        recorder = await WireRecorder.load(store)
        one_route = route("POST", "/v1/messages", "", first)
        two_route = route("POST", "/v1/messages", "", second)
        assert one_route is not None and two_route is not None
        one = await recorder.open_call(one_route, first, None, Scrubber([]))
        await one.finish(ModelResponse(text="hi", model=BODY["model"]), {"status": 200})
        await one.settle()  # as the app does once the answer is forwarded
        before = [e.type async for e in store.read_all(stream_prefix="branch-")]
        two = await recorder.open_call(two_route, second, None, Scrubber([]))
        assert two.branch.id == one.branch.id
        text = _BROKEN_STREAM[1].split("\n\n")[0] + "\n\n"
        assembly = two.route.wire.assembly(two.route.model)
        assembly.add(orjson.loads(text.split("data: ", 1)[1]))
        await two.chunks([(text, assembly.take_pieces(), None)])
        assert [e.type async for e in store.read_all(stream_prefix="branch-")] == before
        assert two.log is not None and two.log.buffer is not None
        two.log.buffer.close()  # the crash
        report = await recover(store)
        after = [e async for e in store.read_all(stream_prefix="branch-")]
        chunks = [e async for e in store.read_all() if e.type == "stream.chunk"]
    assert [e.type for e in after[: len(before)]] == before
    added = after[len(before) :]
    assert [e.type for e in added[:2]] == ["message.added", "run.started"]  # the new turn: "more"
    assert added[0].data["message"]["content"]["instruction"] == "more"
    assert added[-1].type == "run.failed" and added[-1].data["reason"] == "crashed"
    assert {e.stream for e in added} == {f"branch-{one.branch.id}"} and report.imported == len(chunks) == 1


def test_a_branch_not_in_the_store_yet_has_no_message_to_name() -> None:
    """``WireCall._message_ids`` names no message of a pending new branch without previewing it."""
    from turnlog.eventstore import MemoryEventStore
    from turnlog.kernel import Branch

    for system in (None, "You are terse."):
        branch = Branch(
            store=MemoryEventStore(), name=None, system=system, metadata={"recorded_by": "turnlog proxy"}
        )
        assert branch.pending_creation is not None
        assert list(branch.progression) == []  # the system prompt is outside the list
