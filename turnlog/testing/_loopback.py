"""The HTTP/1.1 plumbing the loopback fake servers share: reading requests, writing answers.

``FakeOpenAIServer`` and ``FakeUpstreamServer`` are real servers on a loopback port; this module
holds what they have in common, so each fake keeps only its routes and wire formats:

- ``LoopbackServer``: binding (loopback addresses only), start/stop, one tracked task per
  connection, keep-alive; a subclass answers one request in ``serve_one``.
- ``read_request`` / ``HTTPRequest``: one request from the socket (``Content-Length`` or chunked
  bodies), or the bytes of a malformed one.
- ``send`` / ``response_head``: a whole answer; ``open_stream`` / ``write_frames`` /
  ``end_stream``: an SSE answer in chunked transfer encoding, paced and cut as a script says.
- ``Frame`` / ``sse`` / ``dumps`` / ``words``: what a wire module builds its answers from.
- ``request_fields`` / ``append_jsonl``: the fields every recorded request has.

The servers use asyncio streams rather than a task group spanning ``__aenter__`` and
``__aexit__`` so that they can live in a pytest fixture whose setup and teardown run in
different tasks; connection handlers are tracked and cancelled when a server stops.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

from turnlog._errors import UsageError

__all__ = [
    "Frame",
    "HTTPRequest",
    "LoopbackServer",
    "append_jsonl",
    "dumps",
    "end_stream",
    "open_stream",
    "read_request",
    "request_fields",
    "response_head",
    "send",
    "sse",
    "words",
    "write_frames",
]

_STATUS_TEXT = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    411: "Length Required",
    413: "Payload Too Large",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}
_MAX_BODY_BYTES = 32 * 1024 * 1024


class HTTPRequest:
    """One parsed HTTP request; ``json`` is None when the body is empty or not JSON."""

    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        """Header names in lower case."""
        self.raw_body = body
        if headers.get("content-encoding", "").strip().lower() == "zstd" and body:
            # Codex signed in with ChatGPT compresses its request bodies
            import zstandard

            try:
                body = zstandard.ZstdDecompressor().decompress(body, max_output_size=64 * 1024 * 1024)
            except zstandard.ZstdError:
                pass
        self.text = body.decode("utf-8", errors="replace")
        # JSON from the wire: any shape a client sends.
        self.json: Any
        try:
            self.json = json.loads(self.text) if body else None
        except json.JSONDecodeError:
            self.json = None

    @property
    def bare_path(self) -> str:
        """The path without its query and trailing slash."""
        return self.path.split("?", 1)[0].rstrip("/")

    @property
    def keep_alive(self) -> bool:
        """Whether the client lets the connection stay open after the answer."""
        return self.headers.get("connection", "").lower() != "close"


async def read_request(reader: asyncio.StreamReader) -> HTTPRequest | bytes | None:
    """The next request; None at a clean end of the connection; bytes when it is malformed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        return None if not exc.partial else exc.partial
    except asyncio.LimitOverrunError:
        return b"header too long"
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        return head
    method, path, _version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunked = await _read_chunked(reader)
        return head if chunked is None else HTTPRequest(method, path, headers, chunked)
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        return head
    if length < 0 or length > _MAX_BODY_BYTES:
        return head
    body = await reader.readexactly(length) if length else b""
    return HTTPRequest(method, path, headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes | None:
    """A chunked request body (trailers skipped); None when it is malformed or too large."""
    body = b""
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            return None
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":
                pass
            return body
        if len(body) + size > _MAX_BODY_BYTES:
            return None
        body += (await reader.readexactly(size + 2))[:-2]


def response_head(status: int, headers: Mapping[str, str]) -> bytes:
    """The status line and headers of an answer, up to and including the blank line."""
    lines = [f"HTTP/1.1 {status} {_STATUS_TEXT.get(status, 'Status')}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _headers(base: Mapping[str, str], extra: Mapping[str, str], *, close: bool) -> dict[str, str]:
    headers = dict(base)
    if close:
        headers["connection"] = "close"
    headers.update({k.lower(): v for k, v in extra.items()})
    return headers


async def send(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    *,
    close: bool,
    base: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Write a whole answer: ``base`` headers (JSON by default), ``connection: close``, then ``headers``."""
    if base is None:
        base = {"content-type": "application/json", "content-length": str(len(body))}
    writer.write(response_head(status, _headers(base, headers or {}, close=close)) + body)
    await writer.drain()


async def open_stream(writer: asyncio.StreamWriter, headers: Mapping[str, str], *, close: bool) -> None:
    """Write the head of a 200 SSE answer sent in chunked transfer encoding."""
    base = {
        "content-type": "text/event-stream; charset=utf-8",
        "transfer-encoding": "chunked",
        "cache-control": "no-cache",
    }
    writer.write(response_head(200, _headers(base, headers, close=close)))
    await writer.drain()


async def write_frames(
    writer: asyncio.StreamWriter, frames: Sequence[Frame], *, cut: int | None, delay: float
) -> bool:
    """Write frames as chunks; False when ``cut`` stopped the stream after that many frames.

    Each paced frame but the first waits ``delay`` seconds, as a slow model streams.
    """
    first_paced = True
    for number, frame in enumerate(frames):
        if cut is not None and number >= cut:
            return False
        if frame.paced:
            if delay and not first_paced:
                await asyncio.sleep(delay)
            first_paced = False
        writer.write(f"{len(frame.data):x}\r\n".encode() + frame.data + b"\r\n")
        await writer.drain()
    return True


async def end_stream(writer: asyncio.StreamWriter) -> None:
    """Write the last (empty) chunk of a chunked answer."""
    writer.write(b"0\r\n\r\n")
    await writer.drain()


@dataclass(frozen=True)
class Frame:
    """One SSE event, already framed; ``paced`` frames wait ``chunk_delay_ms`` before they go out."""

    data: bytes
    paced: bool = False


def dumps(value: Any) -> str:
    """Compact JSON, as the real APIs put on the wire."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def sse(data: Any, *, event: str | None = None, crlf: bool = False, paced: bool = False) -> Frame:
    """An SSE frame: an optional ``event:`` line and a ``data:`` line with compact JSON."""
    end = "\r\n\r\n" if crlf else "\n\n"
    head = f"event: {event}\n" if event else ""
    return Frame(f"{head}data: {dumps(data)}{end}".encode(), paced)


def words(text: str) -> int:
    """A stand-in token count: whitespace-separated words."""
    return len(text.split())


def request_fields(seq: int, request: HTTPRequest, peer: object) -> dict[str, Any]:
    """The first fields of a recorded request: sequence number, times, client port, method, path."""
    return {
        "seq": seq,
        "received_at": time.time(),
        "monotonic": time.monotonic(),
        "client_port": peer[1] if isinstance(peer, tuple) and len(peer) > 1 else None,
        "method": request.method,
        "path": request.path,
    }


def append_jsonl(path: Path | None, record: Mapping[str, Any]) -> None:
    """Append a record as one JSON line (nothing when ``path`` is None)."""
    if path is not None:
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")


class LoopbackServer(ABC):
    """A server bound to a loopback address that answers requests one at a time per connection.

    Args:
        host: A loopback address (or ``localhost``); anything else raises ``ValueError``.
        port: The port; 0 picks a free one (read ``server.port``).

    A subclass sets ``name`` and ``noun`` (how messages name it) and implements ``base_url``
    and ``serve_one``.
    """

    name: ClassVar[str] = "fake-server"
    """The server in messages for its user (``fake-openai: a connection handler failed``)."""
    noun: ClassVar[str] = "fake server"
    """The server in a sentence (``the fake server is not running``)."""

    def __init__(self, *, host: str, port: int) -> None:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = host == "localhost"
        if not loopback:
            raise UsageError(f"the {self.noun} only binds loopback addresses, not {host!r}")
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._failures: list[BaseException] = []

    @property
    def port(self) -> int:
        """The bound port (after start)."""
        if self._server is None:
            raise RuntimeError(f"the {self.noun} is not running")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def _root_url(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    @property
    @abstractmethod
    def base_url(self) -> str:
        """The URL a client of the fake is given (after start)."""

    async def start(self) -> None:
        """Bind and start serving (``async with`` calls it)."""
        self._server = await asyncio.start_server(self._on_connection, self._host, self._port)

    async def stop(self) -> None:
        """Stop accepting, cancel open connections and wait for them to finish."""
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.wait(list(self._handlers))
        await server.wait_closed()
        if self._failures:
            raise RuntimeError(f"{self.name}: a connection handler failed") from self._failures[0]

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def serve_forever(self) -> None:
        """Serve until cancelled (the command that runs the server)."""
        if self._server is None:
            await self.start()
        assert self._server is not None
        try:
            await self._server.serve_forever()
        finally:
            await self.stop()

    @abstractmethod
    async def serve_one(self, request: HTTPRequest, writer: asyncio.StreamWriter) -> bool:
        """Answer one well-formed request; False when the connection must close."""

    async def refuse_malformed(self, writer: asyncio.StreamWriter) -> None:
        """Answer a request that is not HTTP (the connection closes afterwards)."""
        await send(writer, 400, json.dumps({"error": "malformed HTTP request"}).encode(), close=True)

    def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A plain callback that starts our own task: the task is tracked so that stop() can
        # cancel it and collect its outcome (asyncio's own wrapper task cannot be cancelled
        # cleanly on Python 3.11).
        task = asyncio.get_running_loop().create_task(self._connection(reader, writer))
        self._handlers.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._handlers.discard(task)
        if not task.cancelled():
            failure = task.exception()
            if failure is not None:
                self._failures.append(failure)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await read_request(reader)
                if request is None:
                    break
                if isinstance(request, bytes):
                    await self.refuse_malformed(writer)
                    break
                if not await self.serve_one(request, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away (a killed CLI, a read timeout): nothing left to answer
        finally:
            writer.close()
