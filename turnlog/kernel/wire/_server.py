"""The HTTP/1.1 server of the recorder: h11 over anyio, serving one ASGI app.

Both ways the recorder is served use it: ``turnlog proxy`` (``serve`` on the socket it
listens on, ``tools/_cmd_proxy.py``) and ``run()`` (``serve_loopback``: 127.0.0.1, port 0, a
task of the run's own task group, so the server lives and dies with the run and needs no
thread, no signal handlers and no optional dependency).

uvicorn spent more of each proxied call than the forwarding and the recording together (its
protocol classes, flow control and per-request machinery around the same h11 parser), so the
recorder serves itself: one task per connection, one request at a time on it (keep-alive; a
pipelined request waits in h11's buffer), the answer written as the app sends it (with its
``content-length``, else chunked: nothing is buffered but the head, which goes out with the
first piece of the body), exactly the status and headers the app
gives (no ``server`` or ``date`` of its own). Only what ``ProxyApp`` needs of ASGI is here:
``http`` scopes, ``http.request`` / ``http.disconnect`` / ``http.response.*`` messages.

- The request head is bounded (``MAX_HEAD``, else ``431``); the body is the app's to bound
  (``ProxyApp`` answers ``413``), after which the connection is half-closed and what the client
  still sends is read and dropped (at most ``_DRAIN_BYTES`` for ``_DRAIN_SECONDS``) before it
  closes: closing with unread bytes would reset it, and the client could lose the answer.
- A client that goes away is seen as ``http.disconnect`` by a ``receive()`` waiting after the
  body (``ProxyApp`` then cancels the upstream request), and every later ``send`` is a no-op.
- ``Expect: 100-continue`` gets its ``100`` when the app first asks for the body.
- A call that fails, or a connection that breaks in an unforeseen way, is reported (``report``)
  and ends that connection only: one bad connection never ends the proxy or the run.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import anyio
import h11
from anyio.abc import SocketAttribute, SocketStream, TaskGroup, TaskStatus

from turnlog._errors import TurnlogError

__all__ = ["MAX_HEAD", "LoopbackServer", "serve", "serve_loopback"]

_log = logging.getLogger("turnlog.kernel.wire")

Message = MutableMapping[str, Any]
App = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
    Awaitable[None],
]

#: The largest request line and headers accepted, in bytes (a head is refused once more than
#: this is buffered without its end; a head is read in smaller pieces, so it never exceeds
#: the bound by a whole read).
MAX_HEAD = 64 * 1024
_HEAD_READ = 8 * 1024
_READ = 64 * 1024
_BROKEN = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)
_DRAIN_BYTES = 4 * 1024 * 1024
_DRAIN_SECONDS = 2.0


def _log_report(line: str) -> None:
    _log.warning("wire recorder: %s", line)


async def serve(app: App, sock: socket.socket, *, report: Callable[[str], None] = _log_report) -> None:
    """Serve ``app`` on the listening socket ``sock`` until cancelled (connections included).

    ``report`` receives one line per failed call (``turnlog proxy`` prints it on standard
    error; by default it is a warning of the ``turnlog.kernel.wire`` logger).
    """
    listener = await anyio.abc.SocketListener.from_socket(sock)
    async with listener:
        await listener.serve(lambda stream: _Connection(app, stream, report).run())


@dataclass(frozen=True, slots=True)
class LoopbackServer:
    """Where ``serve_loopback`` listens: point clients at ``base_url``."""

    port: int

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"


async def serve_loopback(app: App, tg: TaskGroup) -> LoopbackServer:
    """Listen on 127.0.0.1, port 0, and serve ``app`` in ``tg`` until its scope is cancelled.

    The socket listens before this returns, so a client started right after it connects (it
    waits in the backlog until the serving task accepts it).
    """
    sock = socket.create_server(("127.0.0.1", 0), backlog=128)
    # Accepted connections inherit this: without it Nagle holds the small write that follows
    # the response head until the client's delayed ACK, some 40 ms on every call.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    port = int(sock.getsockname()[1])

    async def run(*, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            task_status.started()
            await serve(app, sock)
        finally:
            sock.close()  # a no-op once the listener closed it

    try:
        await tg.start(run)
    except BaseException:
        sock.close()  # cancelled before the task took it over
        raise
    return LoopbackServer(port)


class _Disconnected(Exception):
    pass


class _Connection:
    """One client connection: its h11 state and the request in flight."""

    def __init__(self, app: App, stream: SocketStream, report: Callable[[str], None]) -> None:
        self.app = app
        self.stream = stream
        self.report = report
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self.gone = False
        self.body_done = False
        self.started = False
        self.head = b""
        self.waits_100 = False
        self.addresses: tuple[Any, Any] | None = None

    async def run(self) -> None:
        try:
            async with self.stream:
                while await self._one():
                    self.h11.start_next_cycle()
        except _BROKEN:
            pass  # the client went away between two requests: nothing was in flight
        except Exception as exc:  # an h11 state error, ...: this connection ends, not the server
            self.report(f"a connection failed: {type(exc).__name__}")

    async def _next(self) -> h11.Event | type[h11.PAUSED] | type[h11.NEED_DATA]:
        """The next h11 event of the request, reading the socket as needed."""
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await self._read(_READ if self.h11.their_state is h11.SEND_BODY else _HEAD_READ)
            if not data:
                raise _Disconnected
            self.h11.receive_data(data)

    async def _one(self) -> bool:
        """Serve one request; whether the connection can carry another."""
        try:
            event = await self._next()
        except _Disconnected:
            return False
        except h11.RemoteProtocolError as exc:
            await self._refuse(exc.error_status_hint)  # 431 for a head over MAX_HEAD, else 400
            return False
        if not isinstance(event, h11.Request):
            return False  # a ConnectionClosed between two requests
        self.body_done = False
        self.started = False
        self.head = b""
        self.waits_100 = self.h11.they_are_waiting_for_100_continue
        target = event.target.decode("latin-1")
        path, _, query = target.partition("?")
        if self.addresses is None:  # the same for every request of the connection
            sockname = self.stream.extra(SocketAttribute.local_address, None)
            peer = self.stream.extra(SocketAttribute.remote_address, None)
            self.addresses = (
                peer[:2] if isinstance(peer, tuple) else None,
                sockname[:2] if isinstance(sockname, tuple) else None,
            )
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": event.http_version.decode("latin-1"),
            "method": event.method.decode("latin-1"),
            "scheme": "http",
            "path": unquote(path),
            "raw_path": path.encode("latin-1"),
            "query_string": query.encode("latin-1"),
            "root_path": "",
            "headers": list(event.headers),
            "client": self.addresses[0],
            "server": self.addresses[1],
        }
        try:
            await self.app(scope, self._receive, self._send)
        except Exception as exc:
            # The call is lost (the store could not be written, ...): say so and abort the
            # connection rather than let the client take a half answer as whole. Only turnlog's
            # own errors are quoted: another's message (a validation error) may hold the body.
            said = f": {exc}" if isinstance(exc, TurnlogError) else ""
            self.report(f"a call failed: {type(exc).__name__}{said}")
            if not self.started and not self.gone:
                await self._refuse(500)
            return False
        if self.gone or self.h11.our_state not in (h11.DONE, h11.MUST_CLOSE):
            return False
        if self.h11.their_state is not h11.DONE:
            await self._drain()  # answered before the whole body came (413): end cleanly
            return False
        return self.h11.our_state is h11.DONE

    async def _drain(self) -> None:
        """Half-close, then read and drop what the client still sends, bounded in bytes and time."""
        left = _DRAIN_BYTES
        with anyio.move_on_after(_DRAIN_SECONDS):
            try:
                await self.stream.send_eof()
                while left > 0:
                    left -= len(await self.stream.receive(_READ))
            except _BROKEN:
                return

    async def _receive(self) -> Message:
        if self.gone:
            return {"type": "http.disconnect"}
        if not self.body_done:
            if self.waits_100:
                self.waits_100 = False
                await self._write(h11.InformationalResponse(status_code=100, headers=[]))
            try:
                event = await self._next()
            except (_Disconnected, h11.RemoteProtocolError):
                self.gone = True
                return {"type": "http.disconnect"}
            if isinstance(event, h11.Data):
                return {"type": "http.request", "body": bytes(event.data), "more_body": True}
            self.body_done = True  # EndOfMessage
            return {"type": "http.request", "body": b"", "more_body": False}
        # The body is in: wait for the client to go away. A byte it sends meanwhile (a
        # pipelined request) stays in h11's buffer for the next cycle.
        while data := await self._read(_READ):
            self.h11.receive_data(data)
        return {"type": "http.disconnect"}

    async def _read(self, size: int) -> bytes:
        """Up to ``size`` bytes from the client; empty (and ``gone`` set) once it closed or broke."""
        try:
            data = await self.stream.receive(size)
        except _BROKEN:
            data = b""
        if not data:
            self.gone = True
        return data

    async def _send(self, message: Message) -> None:
        if self.gone:
            return
        kind = message["type"]
        if kind == "http.response.start":
            self.started = True
            headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
            if not self.body_done:
                # Answered before the app read the whole body (a 413, a 401): the connection
                # ends after this answer, whether or not the rest has come yet, and the client
                # must be told so, or a pooling client sends its next request on a connection
                # the server is closing and gets no answer at all.
                headers.append((b"connection", b"close"))
            status = message["status"]
            # held until the first piece of the body: one write, and one wake-up of the client
            # instead of two (a client reads the head, then sleeps again until the body comes)
            self.head = self._bytes(h11.Response(status_code=status, headers=headers, reason=_reason(status)))
        elif kind == "http.response.body":
            body = message.get("body", b"")
            more = message.get("more_body", False)
            head, self.head = self.head, b""
            if body and more:
                await self._write_bytes(head + self._bytes(h11.Data(data=body)))
            elif body:
                # the last piece and the end of the message go out in one write
                await self._write_bytes(
                    head + self._bytes(h11.Data(data=body)) + self._bytes(h11.EndOfMessage())
                )
            elif not more:
                await self._write_bytes(head + self._bytes(h11.EndOfMessage()))
            else:
                await self._write_bytes(head)  # an empty piece sends what is held: the head

    def _bytes(self, event: h11.Event) -> bytes:
        return self.h11.send(event) or b""

    async def _write(self, event: h11.Event) -> None:
        await self._write_bytes(self._bytes(event))

    async def _write_bytes(self, data: bytes) -> None:
        if not data:
            return
        try:
            await self.stream.send(data)
        except _BROKEN:
            self.gone = True

    async def _refuse(self, status: int) -> None:
        """Answer a request the app did not answer (a malformed or oversized head, a failure).

        Written by hand: h11 sends no response to a request it could not read.
        """
        body = f"turnlog: {status} {HTTPStatus(status).phrase}\n".encode()
        head = f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: text/plain\r\ncontent-length: {len(body)}"
        await self._write_bytes(head.encode() + b"\r\nconnection: close\r\n\r\n" + body)


def _reason(status: int) -> bytes:
    """The standard reason phrase of ``status`` (ASGI carries none), as uvicorn sends it."""
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""
