"""The proxy's client side: forwarded requests go to their upstream through httpcore's pools.

httpx builds each pool (TLS context, limits, the proxy the environment names) as its client
would; the proxy then talks to the pool directly, with httpcore's request and response. httpx's
client layer (cookie jar, auth and redirect steps, default headers, event hooks) cost about a
fifth of a forwarded call's CPU and does nothing a proxy wants (its cookie jar would even carry
a cookie one caller's upstream set into every other caller's requests), and its request and
response models, rebuilt around httpcore's for every call (the URL parsed again, the headers
normalised twice), cost 0.1 to 0.2 ms more of CPU per call (an ``httpx.Request`` alone is
57 µs, httpcore's 8). httpcore's errors are translated to httpx's, once,
here: the rest of the wire package (and the messages a client reads) knows httpx's.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.request import getproxies, proxy_bypass

import httpcore
import httpx

__all__ = ["Upstream", "UpstreamAnswer", "UpstreamRequest"]

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

    @property
    def where(self) -> str:
        """``scheme://host:port``, for error messages."""
        return f"{self.url.scheme}://{self.url.host}:{self.url.port or ''}"


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    """A request to forward: httpcore's, and the upstream it goes to."""

    core: httpcore.Request
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
    core: httpcore.Response

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive.

        Raises:
            httpx.RequestError: the answer broke off.
        """
        stream = self.core.stream
        if not isinstance(stream, AsyncIterable):
            raise TypeError("an async pool gave a synchronous body")  # cannot happen with httpcore
        with _translated():
            async for piece in stream:
                yield piece

    async def aclose(self) -> None:
        """Give the connection back to the pool (or close it, when the body was not read)."""
        with _translated():
            await self.core.aclose()


class Upstream:
    """Sends forwarded requests through connection pools kept alive across calls.

    A proxy from the environment (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY``)
    is used as httpx's client would, decided once per upstream host.
    """

    def __init__(self, timeout: httpx.Timeout) -> None:
        self._timeout = timeout.as_dict()
        self._bases: dict[str, _Base] = {}
        self._proxies: dict[tuple[str, str, int | None], str | None] = {}
        self._transports: dict[str | None, httpx.AsyncHTTPTransport] = {}

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
        url = parsed.url
        core = httpcore.Request(
            method.encode("latin-1"),
            httpcore.URL(
                scheme=url.raw_scheme,
                host=url.raw_host,
                port=url.port,
                target=parsed.prefix + target.encode("latin-1"),
            ),
            headers=head,
            content=body,
            extensions={"timeout": self._timeout},
        )
        return UpstreamRequest(core, parsed)

    async def send(self, request: UpstreamRequest) -> UpstreamAnswer:
        """Send ``request``; its answer's head (the body is read as it comes, ``aiter_raw``).

        Raises:
            httpx.RequestError: the upstream could not be reached, timed out, or broke the exchange.
        """
        pool = self._pool(request.base.url)
        with _translated():
            core = await pool.handle_async_request(request.core)
        headers: dict[str, str] = {}
        for key, value in core.headers:
            name, text = key.decode("latin-1").lower(), value.decode("latin-1")
            headers[name] = f"{headers[name]}, {text}" if name in headers else text
        return UpstreamAnswer(core.status, list(core.headers), headers, core)

    def _pool(self, url: httpx.URL) -> httpcore.AsyncConnectionPool:
        where = (url.scheme, url.host, url.port)
        if where not in self._proxies:
            self._proxies[where] = _environment_proxy(url)
        proxy = self._proxies[where]
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
        for transport in self._transports.values():
            await transport.aclose()


def _parse(base: str) -> _Base:
    url = httpx.URL(base.rstrip("/"))
    host = httpx.Request("GET", url).headers["host"].encode("latin-1")  # as httpx names it
    return _Base(url, url.raw_path.rstrip(b"/").split(b"?", 1)[0], host)


def _environment_proxy(url: httpx.URL) -> str | None:
    """The proxy the environment names for ``url`` (None: connect directly)."""
    proxies = getproxies()
    proxy = proxies.get(url.scheme) or proxies.get("all")
    if not proxy or proxy_bypass(f"{url.host}:{url.port}" if url.port else url.host):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"
