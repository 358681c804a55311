"""The proxy's client side: forwarded requests go to their upstream.

An upstream reached directly (no proxy named by the environment) is served by the proxy's own
small HTTP/1.1 client (``_client``: httpcore's pool took about half of the proxy's profiled CPU
on the way to a streamed call's first byte). One reached through an environment proxy goes
through httpcore's pools: httpx builds each pool (TLS context, limits, the proxy the environment
names) as its client would; the proxy then talks to the pool directly, with httpcore's request
and response. httpx's client layer (cookie jar, auth and redirect steps, default headers, event
hooks) cost about a fifth of a forwarded call's CPU and does nothing a proxy wants (its cookie
jar would even carry a cookie one caller's upstream set into every other caller's requests), and
its request and response models, rebuilt around httpcore's for every call (the URL parsed again,
the headers normalised twice), cost 0.1 to 0.2 ms more of CPU per call (an ``httpx.Request``
alone is 57 µs, httpcore's 8). httpcore's errors are translated to httpx's, once, here: the rest
of the wire package (and the messages a client reads) knows httpx's.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.request import getproxies, proxy_bypass

import httpcore
import httpx

from ._client import Client, Exchange, Origin, Sent

__all__ = ["Started", "Upstream", "UpstreamAnswer", "UpstreamRequest"]

_PORTS = {"http": 80, "https": 443}
#: Small writes (a request head, then its body) go out at once, not after the peer's delayed ACK.
_NO_DELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]

# Most specific first: the first match names the error (a ReadTimeout, not a TimeoutException).
_ERRORS: tuple[tuple[type[Exception], type[httpx.RequestError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextmanager
def _translated() -> Iterator[None]:
    """Translate httpcore's errors to the httpx errors its client would raise (same names, messages)."""
    try:
        yield
    except Exception as exc:
        for theirs, ours in _ERRORS:
            if isinstance(exc, theirs):
                raise ours(str(exc)) from exc
        raise


@dataclass(frozen=True, slots=True)
class _Base:
    """An upstream's base URL, parsed once: where its requests go and the ``host`` they name."""

    url: httpx.URL
    prefix: bytes
    host: bytes
    #: Scheme, host and port to connect to (None: a scheme the own client does not speak).
    origin: Origin | None

    @property
    def where(self) -> str:
        """``scheme://host:port``, for error messages."""
        return f"{self.url.scheme}://{self.url.host}:{self.url.port or ''}"


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    """A request to forward, and the upstream it goes to."""

    method: bytes
    #: The path and query on the upstream (its base's path included).
    target: bytes
    #: As sent, ``host`` and (for a body) ``content-length`` included.
    headers: list[tuple[bytes, bytes]]
    body: bytes
    base: _Base

    @property
    def where(self) -> str:
        """The upstream's ``scheme://host:port``, for error messages."""
        return self.base.where


@dataclass(frozen=True, slots=True)
class UpstreamAnswer:
    """An upstream's answer: its status and head now, its body as it comes (``aiter_raw``)."""

    status_code: int
    #: The head as it came (names as sent), for the client.
    raw_headers: list[tuple[bytes, bytes]]
    #: Lower-case names; a repeated header's values joined with ``, `` (as ``httpx.Headers.get``).
    headers: dict[str, str]
    body: Exchange | httpcore.Response

    def take(self) -> bytes:
        """The body bytes that came with the head, handed over now (``aiter_raw`` goes on after them)."""
        return self.body.take() if isinstance(self.body, Exchange) else b""

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive.

        Raises:
            httpx.RequestError: the answer broke off.
        """
        body = self.body
        if isinstance(body, Exchange):
            async for piece in body.pieces():
                yield piece
            return
        stream = body.stream
        if not isinstance(stream, AsyncIterable):
            raise TypeError("an async pool gave a synchronous body")  # cannot happen with httpcore
        with _translated():
            async for piece in stream:
                yield piece

    async def aclose(self) -> None:
        """Give the connection back to the pool (or close it, when the body was not read)."""
        if isinstance(self.body, Exchange):
            await self.body.aclose()
            return
        with _translated():
            await self.body.aclose()


class Upstream:
    """Sends forwarded requests through connection pools kept alive across calls.

    A proxy from the environment (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY``)
    is used as httpx's client would, decided once per upstream host.
    """

    def __init__(self, timeout: httpx.Timeout, *, direct: bool = True) -> None:
        """Pools kept for ``timeout``.

        ``direct=False`` sends every request through httpcore's pools, as through a proxy (the
        tests hold the two paths equal).
        """
        self._direct = direct
        self._timeout = timeout.as_dict()
        self._bases: dict[str, _Base] = {}
        self._proxies: dict[tuple[str, str, int | None], str | None] = {}
        self._transports: dict[str | None, httpx.AsyncHTTPTransport] = {}
        self._client = Client(timeout)

    def request(
        self, method: str, base: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> UpstreamRequest:
        """The request to forward to ``base`` (its path joined with ``target``).

        ``headers`` go as they are, with ``host`` and (for a body) ``content-length`` added.
        """
        parsed = self._bases.get(base)
        if parsed is None:
            parsed = self._bases[base] = _parse(base)
        head = [*headers, (b"host", parsed.host)]
        if body:
            head.append((b"content-length", b"%d" % len(body)))
        return UpstreamRequest(
            method.encode("latin-1"), parsed.prefix + target.encode("latin-1"), head, body, parsed
        )

    def direct(self, request: UpstreamRequest) -> bool:
        """Whether ``request`` goes by the own client (written by ``start``, its answer read later)."""
        return self._direct and request.base.origin is not None and self._proxy(request.base.url) is None

    async def start(self, request: UpstreamRequest) -> Started:
        """Write ``request`` to its upstream when it goes direct (else ``Started.answer`` sends it).

        Raises:
            httpx.RequestError: the upstream could not be reached, or the request not written.
        """
        base = request.base
        if self.direct(request):
            assert base.origin is not None
            sent = await self._client.send(
                request.method, base.origin, request.target, request.headers, request.body
            )
            return Started(self, request, sent)
        return Started(self, request, None)

    async def send(self, request: UpstreamRequest) -> UpstreamAnswer:
        """Send ``request``; its answer's head (the body is read as it comes, ``aiter_raw``).

        Raises:
            httpx.RequestError: the upstream could not be reached, timed out, or broke the exchange.
        """
        return await (await self.start(request)).answer()

    async def _through_pool(self, request: UpstreamRequest) -> UpstreamAnswer:
        pool = self._pool(self._proxy(request.base.url))
        url = request.base.url
        core = httpcore.Request(
            request.method,
            httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=request.target),
            headers=request.headers,
            content=request.body,
            extensions={"timeout": self._timeout},
        )
        with _translated():
            answer = await pool.handle_async_request(core)
        return _answer(answer.status, list(answer.headers), answer)

    def _proxy(self, url: httpx.URL) -> str | None:
        """The proxy the environment names for ``url``'s host (decided once per host), or None."""
        where = (url.scheme, url.host, url.port)
        if where not in self._proxies:
            self._proxies[where] = _environment_proxy(url)
        return self._proxies[where]

    def _pool(self, proxy: str | None) -> httpcore.AsyncConnectionPool:
        transport = self._transports.get(proxy)
        if transport is None:
            # made at the first request: its TLS context costs some 20 ms of CPU, which a run
            # whose CLI never calls its API need not pay
            transport = httpx.AsyncHTTPTransport(proxy=proxy, socket_options=_NO_DELAY)
            self._transports[proxy] = transport
        # the pool httpx built for this proxy (or none): TLS, limits and proxy as its client's
        pool: httpcore.AsyncConnectionPool = transport._pool
        return pool

    async def aclose(self) -> None:
        """Close the upstream connections."""
        await self._client.aclose()
        for transport in self._transports.values():
            await transport.aclose()


@dataclass(slots=True)
class Started:
    """A request on its way: written already when it goes direct, else sent by ``answer``."""

    upstream: Upstream
    request: UpstreamRequest
    sent: Sent | None

    async def answer(self) -> UpstreamAnswer:
        """The answer's head (the body is read as it comes, ``UpstreamAnswer.aiter_raw``).

        Raises:
            httpx.RequestError: the upstream could not be reached, timed out, or broke the exchange.
        """
        if self.sent is None:
            return await self.upstream._through_pool(self.request)
        exchange = await self.sent.answer()
        return _answer(exchange.status_code, exchange.raw_headers, exchange)

    async def aclose(self) -> None:
        """Abandon the request before its answer was read."""
        if self.sent is not None:
            await self.sent.aclose()


def _answer(
    status: int, raw: list[tuple[bytes, bytes]], body: Exchange | httpcore.Response
) -> UpstreamAnswer:
    headers: dict[str, str] = {}
    for key, value in raw:
        name, text = key.decode("latin-1").lower(), value.decode("latin-1")
        headers[name] = f"{headers[name]}, {text}" if name in headers else text
    return UpstreamAnswer(status, raw, headers, body)


def _parse(base: str) -> _Base:
    url = httpx.URL(base.rstrip("/"))
    host = httpx.Request("GET", url).headers["host"].encode("latin-1")  # as httpx names it
    origin: Origin | None = None
    if url.scheme in _PORTS:
        origin = (url.scheme, url.raw_host.decode("ascii"), url.port or _PORTS[url.scheme])
    return _Base(url, url.raw_path.rstrip(b"/").split(b"?", 1)[0], host, origin)


def _environment_proxy(url: httpx.URL) -> str | None:
    """The proxy the environment names for ``url`` (None: connect directly)."""
    proxies = getproxies()
    proxy = proxies.get(url.scheme) or proxies.get("all")
    if not proxy or proxy_bypass(f"{url.host}:{url.port}" if url.port else url.host):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"
