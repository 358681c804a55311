"""The app's guard: security headers on every response, the token rule and the Host check.

- Every response carries a Content-Security-Policy that allows scripts, styles and fetches
  from the app itself only (no inline script, no inline style, no other origin).
- With a token, every request must present it: ``Authorization: Bearer T``, the cookie set
  after a first visit with ``?token=T``, or ``?token=T`` itself.
- Bound to a loopback address, the app answers only to loopback ``Host`` names, so that a
  web page elsewhere cannot reach it through a DNS name that resolves to 127.0.0.1.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CSP", "COOKIE", "Guard"]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
COOKIE = "turnlog_ui_token"
_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


def _host_name(host: str) -> str:
    if host.startswith("["):
        return host.split("]")[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class Guard:
    """ASGI middleware around the app: headers, token, Host.

    Args:
        app: The wrapped ASGI app.
        token: The token every request must present (None: no token).
        loopback: Whether the app is bound to a loopback address (then Host is checked).
        refuse: Renders a refusal: ``refuse(status, message) -> bytes`` (an HTML page).
    """

    def __init__(
        self, app: ASGIApp, *, token: str | None, loopback: bool, refuse: Callable[[int, str], bytes]
    ) -> None:
        self.app = app
        self.token = token
        self.loopback = loopback
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *_HEADERS]}
            await send(message)

        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.loopback and _host_name(headers.get("host", "")) not in _LOOPBACK_HOSTS:
            await self._answer(send_with_headers, 421, "this app answers on 127.0.0.1 and localhost only")
            return
        if self.token is not None:
            given = self._presented(scope, headers)
            if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
                await self._answer(
                    send_with_headers,
                    401,
                    "this app needs its token: open the URL it printed when it started",
                )
                return
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
            if "token" in query:
                # move the token from the URL into a cookie, so that it leaves the address bar and history
                query.pop("token")
                location = scope["path"] + (f"?{urlencode(query)}" if query else "")
                cookie = f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
                await send_with_headers(
                    {
                        "type": "http.response.start",
                        "status": 303,
                        "headers": [(b"location", location.encode()), (b"set-cookie", cookie.encode())],
                    }
                )
                await send_with_headers({"type": "http.response.body", "body": b""})
                return
        await self.app(scope, receive, send_with_headers)

    def _presented(self, scope: Scope, headers: dict[str, str]) -> str | None:
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except CookieError:  # a malformed cookie header presents no token
            cookie = SimpleCookie()
        if COOKIE in cookie:
            value: str = cookie[COOKIE].value  # typeshed leaves Morsel.value partly Any
            return value
        for key, value in parse_qsl(scope.get("query_string", b"").decode("latin-1")):
            if key == "token":
                return value
        return None

    async def _answer(self, send: Send, status: int, message: str) -> None:
        body = self.refuse(status, message)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"text/html; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
