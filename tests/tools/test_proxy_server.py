"""The HTTP/1.1 server of ``turnlog proxy`` (h11 over anyio) over raw sockets.

What a client relies on beyond what the SDK tests see: keep-alive, a streamed answer framed
chunk by chunk and never buffered whole, a bounded request head, a connection that is closed
rather than desynchronised after a refused body, and ``--server uvicorn`` still serving.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import h11
import httpx
import orjson

from turnlog.testing import FakeUpstreamServer

from .proxykit import recorded, running_proxy

HEADERS = [
    ("host", "127.0.0.1"),
    ("x-api-key", "sk-server-test-0123456789"),
    ("anthropic-version", "2023-06-01"),
]
SCRIPT = [
    {"text": "Plain answer.", "times": None, "match": {"stream": False}},
    {"text": "A streamed answer in pieces.", "times": None},
]


def _request(content: str, *, stream: bool) -> tuple[h11.Request, bytes]:
    body = orjson.dumps(
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 50,
            "stream": stream,
            "messages": [{"role": "user", "content": content}],
        }
    )
    headers = [*HEADERS, ("content-type", "application/json"), ("content-length", str(len(body)))]
    return h11.Request(method="POST", target="/v1/messages", headers=headers), body


async def _exchange(
    stream: anyio.abc.SocketStream, conn: h11.Connection, request: h11.Request, body: bytes
) -> tuple[h11.Response, list[bytes]]:
    """Send one request on an open connection; the response and its body pieces as they came."""
    await stream.send(conn.send(request) + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
    response = None
    pieces: list[bytes] = []
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive())
        elif isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.Data):
            pieces.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            assert response is not None
            return response, pieces


async def test_keep_alive_carries_plain_and_streamed_calls_framed_as_they_come(tmp_path: Path) -> None:
    # the stream's events come apart (as a model streams them), so each is forwarded on its
    # own; events that arrive together are recorded and forwarded together
    paced = [SCRIPT[0], {**SCRIPT[1], "chunk_delay_ms": 20}]
    async with (
        FakeUpstreamServer(paced) as upstream,
        running_proxy(tmp_path / "s.db", upstream.base_url) as proxy,
    ):
        host, port = proxy.url.removeprefix("http://").split(":")
        async with httpx.AsyncClient() as client:
            direct = await client.post(
                f"{upstream.base_url}/v1/messages",
                content=_request("direct", stream=True)[1],
                headers=dict(HEADERS[1:]),
            )
        async with await anyio.connect_tcp(host, int(port)) as stream:
            conn = h11.Connection(h11.CLIENT)
            plain, plain_body = await _exchange(stream, conn, *_request("one", stream=False))
            conn.start_next_cycle()
            streamed, pieces = await _exchange(stream, conn, *_request("two", stream=True))
    assert (
        plain.status_code == 200
        and orjson.loads(b"".join(plain_body))["content"][0]["text"] == "Plain answer."
    )
    assert dict(plain.headers)[b"content-length"] == str(len(b"".join(plain_body))).encode()
    assert b"connection" not in dict(plain.headers) and b"connection" not in dict(streamed.headers)
    assert streamed.status_code == 200
    assert dict(streamed.headers)[b"transfer-encoding"] == b"chunked"
    # the events came in several pieces (forwarded as they were recorded, not buffered whole),
    # and they are the events the upstream sends for the same answer
    assert len(pieces) > 3
    events = [e for e in b"".join(pieces).split(b"\n\n") if e]
    assert [e.split(b"\n")[0] for e in events] == [
        e.split(b"\n")[0] for e in direct.content.split(b"\n\n") if e
    ]
    assert [len(b.calls()) for b in await recorded(tmp_path / "s.db")] == [1, 1]


async def test_an_oversized_head_is_431_and_a_refused_body_closes_the_connection(tmp_path: Path) -> None:
    async with FakeUpstreamServer(SCRIPT) as upstream:
        async with running_proxy(tmp_path / "s.db", upstream.base_url, extra=("--max-body", "1000")) as proxy:
            host, port = proxy.url.removeprefix("http://").split(":")
            async with await anyio.connect_tcp(host, int(port)) as stream:
                await stream.send(
                    b"GET /v1/models HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 100_000 + b"\r\n\r\n"
                )
                answer = b""
                while True:
                    try:
                        answer += await stream.receive()
                    except anyio.EndOfStream:
                        break
            assert answer.startswith(b"HTTP/1.1 431 ")
            async with await anyio.connect_tcp(host, int(port)) as stream:
                conn = h11.Connection(h11.CLIENT)
                request, body = _request("x" * 2000, stream=False)
                await stream.send(conn.send(request) + conn.send(h11.Data(data=body)))
                response, _ = await _exchange_rest(stream, conn)
                assert response.status_code == 413
                # and says so, or a pooling client would send its next request on this connection
                assert dict(response.headers).get(b"connection") == b"close"
                # the unread rest of the body is not taken for a next request: the server hangs up
                with anyio.fail_after(10):
                    while True:
                        try:
                            await stream.receive()
                        except (anyio.EndOfStream, anyio.BrokenResourceError):
                            break
            async with httpx.AsyncClient() as client:  # the proxy itself serves on
                assert (await client.get(f"{proxy.url}/v1/models")).status_code == 200


async def _exchange_rest(stream: anyio.abc.SocketStream, conn: h11.Connection) -> tuple[h11.Response, bytes]:
    response = None
    body = b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive())
        elif isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.Data):
            body += bytes(event.data)
        elif isinstance(event, h11.EndOfMessage):
            assert response is not None
            return response, body


async def test_uvicorn_still_serves_when_asked(tmp_path: Path) -> None:
    async with FakeUpstreamServer(SCRIPT) as upstream:
        extra = ("--server", "uvicorn")
        async with running_proxy(tmp_path / "s.db", upstream.base_url, extra=extra) as proxy:
            async with httpx.AsyncClient() as client:
                body = _request("via uvicorn", stream=False)[1]
                answer = await client.post(
                    f"{proxy.url}/v1/messages", content=body, headers=dict(HEADERS[1:])
                )
    assert answer.json()["content"][0]["text"] == "Plain answer."
    assert [len(b.calls()) for b in await recorded(tmp_path / "s.db")] == [1]
