"""A small HTTP/1.1 client for the proxy's forward hop to an upstream it reaches directly.

httpcore's pool spent about half of the proxy's profiled CPU on the way to a streamed call's
first byte: its pool bookkeeping, h11's event machinery on both the request and the answer, and an
anyio cancel scope (through a generator context manager) around every socket operation. The
forward hop needs far less: one request written in one ``send``, an answer head parsed once,
a body framed by ``content-length``, chunked or the connection's end, and idle connections
kept for the next call. What it keeps of httpcore's behaviour:

- connections are reused while the upstream keeps them alive (HTTP/1.1 without
  ``connection: close``, the body read to its end), at most ``_IDLE_PER_ORIGIN`` idle per
  origin for ``_KEEPALIVE_SECONDS`` (httpx's defaults), and never one the upstream closed
  meanwhile (a readable idle socket is dropped, as httpcore drops it);
- TLS for ``https`` (the SSL context httpx makes, ALPN ``http/1.1``, the host name checked);
- the timeouts of ``httpx.Timeout``: connect, each write, and each read (the wait between two
  pieces of an answer);
- httpx's error types (``ConnectError``, ``ReadTimeout``, ``RemoteProtocolError``, ...), so an
  unreachable or broken upstream is reported to the client and recorded alike whichever client
  served it;
- the answer is checked as h11 checks it: the status line, header names and values, one
  ``content-length``, ``chunked`` as the only transfer coding, chunk sizes and their ends; the
  request head is refused if a header would break its lines.

Unlike httpcore's pool it puts no bound on the connections open at once (httpx's is 100,
further requests waiting for one): the proxy opens what its clients' concurrent calls need.

A proxy named by the environment still goes through httpcore (``_upstream.Upstream``).
"""

from __future__ import annotations

import re
import select
import socket
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
import httpx
from anyio.abc import ByteStream, SocketAttribute

__all__ = ["Client", "Exchange", "Sent"]

_READ = 64 * 1024
#: The largest answer head (status line and headers), httpcore's bound.
MAX_HEAD = 100 * 1024
#: The largest chunk-size line or trailer line.
_MAX_LINE = 4 * 1024
_IDLE_PER_ORIGIN = 20
_KEEPALIVE_SECONDS = 5.0
#: Larger bodies are written after the head instead of copied into one buffer with it.
_JOIN_BODY = 64 * 1024

_HEAD_END = re.compile(rb"\r?\n\r?\n")
_STATUS_LINE = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: ([^\r\n]*))?")
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
# h11's field-value: visible characters and obs-text, with inner spaces and tabs
_VALUE = re.compile(rb"(?:[\x21-\x7e\x80-\xff](?:[ \t]*[\x21-\x7e\x80-\xff])*)?")
# h11's chunk header: a size, an extension (ignored), optional whitespace
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;[^\r\n]*)?[ \t]*")
_BROKEN = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError, ssl.SSLError)

Origin = tuple[str, str, int]


@dataclass(eq=False, slots=True)
class _Connection:
    stream: ByteStream
    sock: socket.socket | None
    idle_since: float = 0.0

    def stale(self, now: float) -> bool:
        """Expired, or readable while idle: the upstream closed it (or sent what no request asked)."""
        if now - self.idle_since > _KEEPALIVE_SECONDS or self.sock is None:
            return True
        try:
            poller = select.poll()
            poller.register(self.sock, select.POLLIN)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True


@dataclass(slots=True)
class Exchange:
    """An answer from the upstream: its head parsed, its body read as it comes (``pieces``)."""

    status_code: int
    #: The head as it came (names as sent, values without surrounding whitespace).
    raw_headers: list[tuple[bytes, bytes]]
    _client: Client
    _origin: Origin
    _conn: _Connection | None
    _buffer: bytes
    _framing: str  # "none", "length", "chunked" or "close"
    _left: int  # bytes of the body (length) or of the current chunk (chunked) still to come
    _reuse: bool
    _read_timeout: float | None
    _state: str = field(default="size")  # chunked: "size", "data", "crlf", "trailer"
    _complete: bool = False  # the whole body was taken (``take``): the connection is released next

    def take(self) -> bytes:
        """The body bytes read so far (with the head) and not handed over yet; no I/O.

        Raises:
            httpx.RemoteProtocolError: the body is malformed.
        """
        if self._framing == "none" or self._complete or not self._buffer:
            return b""
        data, self._complete = self._decode()
        return data

    async def pieces(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive: what one read of the socket brought, decoded.

        Raises:
            httpx.ReadError, httpx.ReadTimeout, httpx.RemoteProtocolError: the answer broke off.
        """
        if self._framing == "none" or self._complete:
            await self._release()
            return
        while True:
            if self._buffer:
                data, done = self._decode()
                if done:  # back in the pool before the last piece is handed over
                    await self._release()
                if data:
                    yield data
                if done:
                    return
            read = await self._receive()
            if not read:
                if self._framing == "close":
                    await self.aclose()
                    return
                await self.aclose()
                if self._framing == "length":
                    raise httpx.RemoteProtocolError(
                        "peer closed connection without sending complete message body: "
                        f"{self._left} bytes missing"
                    )
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body: incomplete chunked read"
                )
            self._buffer += read

    def _decode(self) -> tuple[bytes, bool]:
        """The body bytes the buffer holds (framing removed), and whether the body is complete."""
        buffer, self._buffer = self._buffer, b""
        if self._framing == "close":
            return buffer, False
        if self._framing == "length":
            if len(buffer) < self._left:
                self._left -= len(buffer)
                return buffer, False
            data, extra = buffer[: self._left], buffer[self._left :]
            self._left = 0
            if extra:
                self._reuse = False  # bytes no request asked for: the connection is not reused
            return data, True
        return self._dechunk(buffer)

    def _dechunk(self, buffer: bytes) -> tuple[bytes, bool]:
        out: list[bytes] = []
        at, end = 0, len(buffer)
        while at < end:
            state = self._state
            if state == "data":
                take = min(self._left, end - at)
                out.append(buffer[at : at + take])
                at += take
                self._left -= take
                if self._left == 0:
                    self._state = "crlf"
            elif state == "crlf":
                if end - at < 2:
                    break
                if buffer[at : at + 2] != b"\r\n":
                    raise self._broken("a chunk does not end with CRLF")
                at += 2
                self._state = "size"
            else:  # a chunk-size line, or a trailer line after the last chunk
                eol = buffer.find(b"\r\n", at)
                if eol < 0:
                    if end - at > _MAX_LINE:
                        raise self._broken("a chunk-size or trailer line is too long")
                    break
                line = buffer[at:eol]
                at = eol + 2
                if state == "trailer":
                    if not line:
                        if at < end:
                            self._reuse = False
                        return b"".join(out), True
                    # checked as the head's fields are, and dropped (httpx does not forward them)
                    name, colon, value = line.partition(b":")
                    if (
                        not colon
                        or _TOKEN.fullmatch(name) is None
                        or _VALUE.fullmatch(value.strip(b" \t")) is None
                    ):
                        raise self._broken("a malformed trailer")
                    continue
                found = _CHUNK_SIZE.fullmatch(line)
                if found is None:
                    raise self._broken("an invalid chunk size")
                self._left = int(found.group(1), 16)
                self._state = "data" if self._left else "trailer"
        self._buffer = buffer[at:]
        return b"".join(out), False

    def _broken(self, what: str) -> httpx.RemoteProtocolError:
        self._reuse = False
        return httpx.RemoteProtocolError(f"the upstream's answer is malformed: {what}")

    async def _receive(self) -> bytes:
        conn = self._conn
        if conn is None:
            raise httpx.ReadError("the connection is closed")
        return await _receive(conn.stream, self._read_timeout)

    async def _release(self) -> None:
        """The body was read to its end: the connection goes back to the pool, or is closed."""
        conn, self._conn = self._conn, None
        if conn is not None:
            if self._reuse and not self._buffer:
                await self._client.keep(self._origin, conn)
            else:
                await _close(conn)

    async def aclose(self) -> None:
        """Close the connection unless the body was read to its end (then it is back in the pool)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await _close(conn)


@dataclass(slots=True)
class Sent:
    """A request written to its upstream, its answer not read yet."""

    _client: Client
    _conn: _Connection | None
    _origin: Origin
    _head_only: bool

    async def answer(self) -> Exchange:
        """Read the answer's head (once).

        Raises:
            httpx.RequestError: the upstream timed out or broke the exchange.
        """
        conn, self._conn = self._conn, None
        if conn is None:
            raise httpx.ReadError("the answer was read or the request abandoned")
        return await self._client.answer(conn, self._origin, self._head_only)

    async def aclose(self) -> None:
        """Abandon the request: its connection is closed (unless its answer is being read)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await _close(conn)


class Client:
    """Direct HTTP/1.1 connections to upstreams, kept alive across calls."""

    def __init__(self, timeout: httpx.Timeout) -> None:
        self._connect = timeout.connect
        self._read = timeout.read
        self._write = timeout.write
        self._idle: dict[Origin, list[_Connection]] = {}
        self._ssl: ssl.SSLContext | None = None

    async def send(
        self,
        method: bytes,
        origin: Origin,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> Sent:
        """Write a request; its answer's head is read by ``Sent.answer``.

        ``headers`` go as given: the caller names ``host`` and ``content-length``.

        Raises:
            httpx.RequestError: the upstream could not be reached, timed out or broke the exchange.
        """
        parts = [method, b" ", target, b" HTTP/1.1\r\n"]
        for name, value in headers:
            parts += (name, b": ", value, b"\r\n")
        parts.append(b"\r\n")
        head = b"".join(parts)
        # a CR or LF inside a method, target, name or value would start a line of its own
        lines = len(headers) + 2
        if head.count(b"\n") != lines or head.count(b"\r") != lines:
            raise httpx.LocalProtocolError("a request header holds a line break")
        if body and len(body) <= _JOIN_BODY:
            head, body = head + body, b""
        conn = await self._pooled(origin)
        if conn is None:
            conn = await self._open(origin)
        try:
            await _send(conn.stream, head, self._write)
            if body:
                await _send(conn.stream, body, self._write)
        except BaseException:
            await _close(conn)
            raise
        return Sent(self, conn, origin, method == b"HEAD")

    async def _pooled(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to have expired
            if not conn.stale(now):
                return conn
            await _close(conn)
        return None

    async def keep(self, origin: Origin, conn: _Connection) -> None:
        """Put a connection whose exchange is complete back in the pool."""
        idle = self._idle.setdefault(origin, [])
        conn.idle_since = time.monotonic()
        idle.append(conn)
        if len(idle) > _IDLE_PER_ORIGIN:
            await _close(idle.pop(0))  # the oldest goes

    async def _open(self, origin: Origin) -> _Connection:
        scheme, host, port = origin
        with anyio.CancelScope(deadline=_deadline(self._connect)) as scope:
            try:
                stream: ByteStream
                if scheme == "https":
                    stream = await anyio.connect_tcp(
                        host, port, ssl_context=self._context(), tls_standard_compatible=False
                    )
                else:
                    stream = await anyio.connect_tcp(host, port)
            except (OSError, ssl.SSLError, anyio.BrokenResourceError) as exc:
                raise httpx.ConnectError(str(exc)) from exc
        if scope.cancelled_caught:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out")
        sock = stream.extra(SocketAttribute.raw_socket, None)
        if sock is not None:
            # small writes (a request head) go out at once, not after the peer's delayed ACK
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(stream, sock)

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            # made at the first https request: it costs some 20 ms of CPU
            context = httpx.create_ssl_context()
            context.set_alpn_protocols(["http/1.1"])
            self._ssl = context
        return self._ssl

    async def answer(self, conn: _Connection, origin: Origin, head_only: bool) -> Exchange:
        """Read the answer's head from ``conn`` (the connection is closed should that fail)."""
        try:
            return await self._answer(conn, origin, head_only)
        except BaseException:
            await _close(conn)
            raise

    async def _answer(self, conn: _Connection, origin: Origin, head_only: bool) -> Exchange:
        buffer = b""
        while True:
            found = _HEAD_END.search(buffer)
            if found is None:
                if len(buffer) > MAX_HEAD:
                    raise httpx.RemoteProtocolError("the upstream's answer head is too large")
                read = await _receive(conn.stream, self._read)
                if not read:
                    if buffer:
                        raise httpx.RemoteProtocolError(
                            "peer closed connection without sending complete message body: incomplete head"
                        )
                    raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
                buffer += read
                continue
            head, buffer = buffer[: found.start()], buffer[found.end() :]
            status, minor, headers = _parse_head(head)
            if 100 <= status < 200:
                if status == 101:
                    raise httpx.RemoteProtocolError("the upstream switched protocols")
                continue  # an informational answer (100 Continue, 103): the real one follows
            break
        framing, left, close = _framing(status, headers, head_only)
        return Exchange(
            status_code=status,
            raw_headers=headers,
            _client=self,
            _origin=origin,
            _conn=conn,
            _buffer=buffer,
            _framing=framing,
            _left=left,
            _reuse=minor == 1 and not close and framing != "close",
            _read_timeout=self._read,
        )

    async def aclose(self) -> None:
        """Close the idle connections."""
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                await _close(conn)


def _parse_head(head: bytes) -> tuple[int, int, list[tuple[bytes, bytes]]]:
    """The status, HTTP minor version and headers of an answer head, checked as h11 checks them."""
    lines = head.split(b"\n")
    status_line = lines[0].removesuffix(b"\r")
    matched = _STATUS_LINE.fullmatch(status_line)
    if matched is None:
        raise httpx.RemoteProtocolError("the upstream's status line is malformed")
    headers: list[tuple[bytes, bytes]] = []
    for raw in lines[1:]:
        line = raw.removesuffix(b"\r")
        if line[:1] in (b" ", b"\t"):  # obs-fold: a continuation of the previous value
            if not headers:
                raise httpx.RemoteProtocolError("the upstream's answer head starts with a continuation line")
            name, value = headers[-1]
            line = name + b":" + value + b" " + line.strip(b" \t")
            headers.pop()
        name, colon, value = line.partition(b":")
        value = value.strip(b" \t")
        if not colon or _TOKEN.fullmatch(name) is None or _VALUE.fullmatch(value) is None:
            raise httpx.RemoteProtocolError("the upstream's answer has a malformed header")
        headers.append((name, value))
    return int(matched.group(2)), int(matched.group(1)), headers


def _framing(status: int, headers: list[tuple[bytes, bytes]], head_only: bool) -> tuple[str, int, bool]:
    """How the body is delimited (RFC 9112 section 6.3), its length, and whether the connection ends.

    ``content-length`` and ``transfer-encoding`` are checked whatever the status, as h11 checks
    them: one length (repeated values must agree), digits only; one ``chunked`` coding.
    """
    length: bytes | None = None
    chunked = False
    close = False
    for name, value in headers:
        lower = name.lower()
        if lower == b"content-length":
            lengths = {v.strip() for v in value.split(b",")}
            given = lengths.pop()
            if lengths or not given.isdigit() or not given.isascii() or length not in (None, given):
                raise httpx.RemoteProtocolError("the upstream's answer has an invalid content-length")
            length = given
        elif lower == b"transfer-encoding":
            if chunked or value.lower() != b"chunked":
                raise httpx.RemoteProtocolError("only Transfer-Encoding: chunked is supported")
            chunked = True
        elif lower == b"connection":
            close = close or any(v.strip().lower() == b"close" for v in value.split(b","))
    if head_only or status in (204, 304):
        return "none", 0, close
    if chunked:
        return "chunked", 0, close
    if length is not None:
        size = int(length)
        return ("length", size, close) if size else ("none", 0, close)
    return "close", 0, True


def _deadline(seconds: float | None) -> float:
    return anyio.current_time() + seconds if seconds is not None else float("inf")


async def _receive(stream: ByteStream, seconds: float | None) -> bytes:
    """One read of the socket (empty at its end), within the read timeout."""
    with anyio.CancelScope(deadline=_deadline(seconds)) as scope:
        try:
            return await stream.receive(_READ)
        except anyio.EndOfStream:
            return b""
        except _BROKEN as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc
    if scope.cancelled_caught:
        raise httpx.ReadTimeout("timed out")
    raise AssertionError("unreachable")  # the scope catches only its own deadline


async def _send(stream: ByteStream, data: bytes, seconds: float | None) -> None:
    with anyio.CancelScope(deadline=_deadline(seconds)) as scope:
        try:
            await stream.send(data)
            return
        except _BROKEN as exc:
            raise httpx.WriteError(str(exc) or type(exc).__name__) from exc
    if scope.cancelled_caught:
        raise httpx.WriteTimeout("timed out")


async def _close(conn: _Connection) -> None:
    """Close a connection (no TLS close_notify: the peer sees the connection end), even when cancelled."""
    with anyio.CancelScope(shield=True):
        try:
            await conn.stream.aclose()
        except _BROKEN:
            pass
