"""The proxy's own HTTP/1.1 client for the forward hop, held equal to httpcore's path.

``Upstream`` sends a request to an upstream it reaches directly with ``_client.Client``, and
through httpcore's pools when the environment names a proxy (``direct=False`` forces that
path). Whatever an upstream sends back (its framing, how its bytes are split on the wire, a
head or body that breaks off or is malformed), both paths must give the proxy the same status,
head and body bytes, or the same error, and reuse connections alike.
"""

from __future__ import annotations

import os
import shutil
import ssl
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.abc import SocketStream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog.kernel.wire._upstream import Upstream

Outcome = tuple[Any, ...]

_STATUSES = [200, 201, 204, 304, 400, 404, 429, 500, 503]
_NAMES = ["content-type", "X-Request-Id", "Retry-After", "x-a", "Set-Cookie"]
_VALUE = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=12)


@st.composite
def _responses(draw: st.DrawFn) -> tuple[bytes, bool]:
    """One raw answer, and whether the upstream closes the connection after it."""
    minor = draw(st.sampled_from([1, 1, 1, 0]))
    status = draw(st.sampled_from(_STATUSES))
    reason = draw(st.sampled_from([b" OK", b" ", b"", b" Not Quite Right"]))
    headers = [
        (name.encode(), draw(st.sampled_from(["", " ", "  "])).encode() + value.encode())
        for name, value in draw(st.lists(st.tuples(st.sampled_from(_NAMES), _VALUE), max_size=4))
    ]
    body = draw(st.binary(max_size=300)) if status not in (204, 304) else b""
    framing = draw(st.sampled_from(["length", "chunked", "close"])) if status not in (204, 304) else "none"
    close = minor == 0 or framing == "close" or draw(st.booleans())
    if close and minor == 1 and framing != "close":
        headers.append((b"Connection", b"close"))
    if framing == "length":
        headers.append((b"Content-Length", b"%d" % len(body)))
        payload = body
    elif framing == "chunked":
        headers.append((b"Transfer-Encoding", b"chunked"))
        cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=4)))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if b > a]
        ext = draw(st.sampled_from([b"", b";x=1", b" "]))
        payload = b"".join(b"%x%s\r\n%s\r\n" % (len(p), ext, p) for p in pieces)
        trailer = draw(st.sampled_from([b"", b"X-Trailer: done\r\n"]))
        payload += b"0\r\n" + trailer + b"\r\n"
    else:
        payload = body
    head = b"HTTP/1.%d %d%s\r\n" % (minor, status, reason)
    head += b"".join(k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n"
    informational = b"HTTP/1.1 100 Continue\r\n\r\n" if draw(st.booleans()) and minor == 1 else b""
    whole = informational + head + payload
    fault = draw(
        st.sampled_from([None, None, None, "truncate", "bad-size", "bad-length", "gzip", "bad-header"])
    )
    if fault == "truncate":
        whole = whole[: draw(st.integers(0, max(0, len(whole) - 1)))]
        close = True
    elif fault == "bad-size" and framing == "chunked":
        whole = informational + head + b"zz\r\n" + payload
    elif fault == "bad-length":
        whole = informational + head.replace(b"\r\n\r\n", b"\r\nContent-Length: 1x\r\n\r\n", 1) + payload
    elif fault == "gzip":
        whole = informational + head.replace(b"\r\n\r\n", b"\r\nTransfer-Encoding: gzip\r\n\r\n", 1) + payload
    elif fault == "bad-header":
        whole = informational + head.replace(b"\r\n\r\n", b"\r\nbad name: x\r\n\r\n", 1) + payload
    if fault is not None:
        close = True
    return whole, close


class _Upstream:
    """A loopback upstream that answers each request with the next scripted raw bytes."""

    def __init__(self, script: list[tuple[bytes, bool]], splits: list[int]) -> None:
        self.script = list(script)
        self.splits = splits
        self.connections = 0

    async def serve(self, stream: SocketStream) -> None:
        self.connections += 1
        async with stream:
            buffer = b""
            while self.script:
                while b"\r\n\r\n" not in buffer:
                    try:
                        buffer += await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        return
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                while len(buffer) < length:
                    buffer += await stream.receive()
                buffer = buffer[length:]
                answer, close = self.script.pop(0)
                at = 0
                for cut in [*self.splits, len(answer)]:
                    if cut > at:
                        await stream.send(answer[at:cut])
                        await anyio.sleep(0.001)  # the client reads what came so far
                        at = cut
                if at < len(answer):
                    await stream.send(answer[at:])
                if close:
                    return


async def _outcomes(
    script: list[tuple[bytes, bool]], splits: list[int], *, direct: bool
) -> tuple[list[Outcome], int]:
    server = _Upstream(script, splits)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    upstream = Upstream(httpx.Timeout(5.0), direct=direct)
    out: list[Outcome] = []
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.serve)
        for i in range(len(script)):
            headers = [(b"content-type", b"application/json")]
            request = upstream.request(
                "POST", f"http://127.0.0.1:{port}/base", f"/v1/x?i={i}", headers, b'{"a":1}'
            )
            try:
                answer = await upstream.send(request)
                try:
                    body = b"".join([piece async for piece in answer.aiter_raw()])
                finally:
                    await answer.aclose()
                out.append(("ok", answer.status_code, answer.raw_headers, answer.headers, body))
            except httpx.RequestError as exc:
                out.append(("error", type(exc).__name__))
        await upstream.aclose()
        tg.cancel_scope.cancel()
    return out, server.connections


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=st.lists(_responses(), min_size=1, max_size=3), splits=st.lists(st.integers(1, 400), max_size=3)
)
def test_the_own_client_answers_as_httpcore_does(script: list[tuple[bytes, bool]], splits: list[int]) -> None:
    splits = sorted(set(splits))
    ours = anyio.run(lambda: _outcomes(script, splits, direct=True))
    theirs = anyio.run(lambda: _outcomes(script, splits, direct=False))
    assert ours == theirs


async def test_an_idle_connection_the_upstream_closed_is_not_reused() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    closed = anyio.Event()

    async def serve(stream: SocketStream) -> None:
        async with stream:
            await stream.receive()
            await stream.send(answer)
        closed.set()  # without saying so: the client learns it only from the socket

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    upstream = Upstream(httpx.Timeout(5.0))
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        for _ in range(2):
            got = await upstream.send(upstream.request("GET", f"http://127.0.0.1:{port}", "/", [], b""))
            assert b"".join([p async for p in got.aiter_raw()]) == b"ok"
            await got.aclose()
            await closed.wait()
            await anyio.sleep(0.05)
            closed = anyio.Event()
        await upstream.aclose()
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("direct", [True, False])
async def test_timeouts_and_refusals_are_httpx_errors(direct: bool) -> None:
    async def silent(stream: SocketStream) -> None:
        async with stream:
            await anyio.sleep(5)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    upstream = Upstream(httpx.Timeout(0.2), direct=direct)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, silent)
        with pytest.raises(httpx.ReadTimeout):
            await upstream.send(upstream.request("POST", f"http://127.0.0.1:{port}", "/", [], b"{}"))
        with pytest.raises(httpx.LocalProtocolError):  # a header that would smuggle another
            await upstream.send(
                upstream.request("POST", f"http://127.0.0.1:{port}", "/", [(b"x-a", b"1\r\nx-b: 2")], b"")
            )
        tg.cancel_scope.cancel()
    with pytest.raises(httpx.ConnectError):
        await upstream.send(upstream.request("POST", f"http://127.0.0.1:{port}", "/", [], b"{}"))
    await upstream.aclose()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
async def test_https_upstreams_are_reached_over_tls_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    await anyio.run_process(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
    )  # fmt: skip
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)

    async def serve(stream: Any) -> None:
        async with stream:
            await stream.receive()
            await stream.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
            await stream.receive()
            await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nagain")

    from anyio.streams.tls import TLSListener

    tcp = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = tcp.extra(anyio.abc.SocketAttribute.local_port)
    async with (
        TLSListener(tcp, server_context, standard_compatible=False) as listener,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(listener.serve, serve)
        untrusted = Upstream(httpx.Timeout(5.0))
        with pytest.raises(httpx.ConnectError):  # a certificate no CA vouches for
            await untrusted.send(untrusted.request("GET", f"https://127.0.0.1:{port}", "/", [], b""))
        await untrusted.aclose()
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        upstream = Upstream(httpx.Timeout(5.0))
        bodies = []
        for _ in range(2):  # the second on the same connection
            got = await upstream.send(upstream.request("GET", f"https://localhost:{port}", "/", [], b""))
            bodies.append(b"".join([p async for p in got.aiter_raw()]))
            await got.aclose()
        assert bodies == [b"hello", b"again"]
        await upstream.aclose()
        tg.cancel_scope.cancel()
    assert os.environ["SSL_CERT_FILE"] == str(cert)
