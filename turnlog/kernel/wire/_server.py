"""A small HTTP/1.1 server for an ASGI app, on loopback, inside the caller's task group.

``run()`` serves the recording proxy to the CLI it starts from within its own task group, so
the server lives and dies with the run and needs no thread, no signal handlers and no
optional dependency (uvicorn is the ui extra's, and takes over SIGINT while it serves). It
speaks what the CLIs' HTTP clients send: one request at a time per connection (keep-alive),
a body with ``content-length`` or chunked, and answers with ``content-length`` or chunked.
A connection whose peer goes away is reported to the app as ``http.disconnect``.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskGroup

__all__ = ["LoopbackServer", "serve_loopback"]

_log = logging.getLogger("turnlog.kernel.wire")

Asgi = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[MutableMapping[str, Any]]],
        Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ],
    Awaitable[None],
]

_MAX_HEAD = 64 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 413: "Too Large"}


class _Gone(Exception):
    """The peer closed the connection."""


class _Conn:
    """One accepted connection: a read buffer over the socket."""

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()
        self.eof = False

    async def fill(self) -> None:
        try:
            piece = await self.stream.receive(65536)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            self.eof = True
            raise _Gone from exc
        self.buffer += piece

    async def until(self, marker: bytes, limit: int) -> bytes:
        while (at := self.buffer.find(marker)) < 0:
            if len(self.buffer) > limit:
                raise _Gone
            await self.fill()
        out = bytes(self.buffer[:at])
        del self.buffer[: at + len(marker)]
        return out

    async def exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            await self.fill()
        out = bytes(self.buffer[:size])
        del self.buffer[:size]
        return out


class LoopbackServer:
    """A listening loopback socket serving ``app``; ``base_url`` is where to point clients."""

    def __init__(self, app: Asgi, port: int) -> None:
        self.app = app
        self.port = port

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"


async def serve_loopback(app: Asgi, tg: TaskGroup) -> LoopbackServer:
    """Listen on 127.0.0.1, port 0, and serve ``app`` in ``tg`` until its scope is cancelled."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = int(listener.extra(SocketAttribute.local_port))
    server = LoopbackServer(app, port)

    async def handle(stream: SocketStream) -> None:
        async with stream:
            # the answer's small writes go out at once (Nagle would hold them for the ACK)
            sock = stream.extra(SocketAttribute.raw_socket)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                await _connection(app, _Conn(stream))
            except _Gone:
                pass
            except Exception as exc:  # one bad connection never ends the run
                _log.warning("wire recorder: connection failed: %r", exc)

    async def serve() -> None:
        async with listener:
            await listener.serve(handle)

    tg.start_soon(serve)
    return server


async def _connection(app: Asgi, conn: _Conn) -> None:
    while True:
        head = await conn.until(b"\r\n\r\n", _MAX_HEAD)
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        headers: list[tuple[bytes, bytes]] = []
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.append((name.strip().lower().encode("latin-1"), value.strip().encode("latin-1")))
        fields = dict(headers)
        if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
            body = await _chunked(conn)
        else:
            body = await conn.exactly(int(fields.get(b"content-length", b"0") or 0))
        path, _, query = target.partition("?")
        scope: dict[str, Any] = {
            "type": "http",
            "http_version": "1.1",
            "method": method,
            "path": path,
            "raw_path": path.encode("latin-1"),
            "query_string": query.encode("latin-1"),
            "headers": headers,
            "client": ("127.0.0.1", 0),
            "server": ("127.0.0.1", 0),
        }
        keep = await _exchange(app, conn, scope, body)
        if not keep or fields.get(b"connection", b"").lower() == b"close":
            return


async def _chunked(conn: _Conn) -> bytes:
    parts: list[bytes] = []
    while True:
        size = int((await conn.until(b"\r\n", 1024)).split(b";", 1)[0], 16)
        if size == 0:
            while await conn.until(b"\r\n", _MAX_HEAD):  # trailers, up to the blank line
                pass
            return b"".join(parts)
        parts.append(await conn.exactly(size))
        await conn.until(b"\r\n", 2)


async def _exchange(app: Asgi, conn: _Conn, scope: dict[str, Any], body: bytes) -> bool:
    """One request and its answer; False when the connection cannot be used again."""
    delivered = False
    chunked = False
    finished = False

    async def receive() -> MutableMapping[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        # The app waits here to learn of a client that goes away mid-answer. A client sends
        # nothing more before the answer ends, so any read that returns is its end.
        while not conn.eof and not finished:
            try:
                await conn.fill()
            except _Gone:
                break
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal chunked, finished
        try:
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = [(bytes(k).lower(), bytes(v)) for k, v in message.get("headers", [])]
                names = {k for k, _ in headers}
                lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}".encode()]
                bodiless = status in (204, 304) or status < 200 or scope["method"] == "HEAD"
                if b"content-length" not in names and not bodiless:
                    chunked = True
                    headers.append((b"transfer-encoding", b"chunked"))
                lines += [k + b": " + v for k, v in headers]
                await conn.stream.send(b"\r\n".join(lines) + b"\r\n\r\n")
            elif message["type"] == "http.response.body":
                piece = bytes(message.get("body", b""))
                more = bool(message.get("more_body", False))
                out = b""
                if piece:
                    out = b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece
                if not more:
                    finished = True
                    if chunked:
                        out += b"0\r\n\r\n"
                if out:
                    await conn.stream.send(out)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            conn.eof = True  # the app learns it from receive()

    await app(scope, receive, send)
    return finished and not conn.eof
