"""The recorder's HTTP/1.1 server as ``run()`` serves it: in the run's task group, on loopback.

What a run relies on: the base URL it hands the CLI answers, keep-alive included; one call
that fails is reported and ends its own connection, not the server (nor the run); leaving the
task group's scope stops the server and frees the port.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
import httpx
import pytest

from turnlog.kernel.wire import serve_loopback

Message = MutableMapping[str, Any]


async def _app(
    scope: MutableMapping[str, Any],
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
) -> None:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    if scope["path"] == "/fail":
        raise RuntimeError("a secret request body that must not be logged")
    answer = scope["method"].encode() + b" " + scope["path"].encode() + b" " + body
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": answer, "more_body": True})
    await send({"type": "http.response.body", "body": b" done"})


async def test_served_in_a_task_group_until_its_scope_ends(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="turnlog.kernel.wire")
    async with anyio.create_task_group() as tg:
        server = await serve_loopback(_app, tg)
        assert server.base_url == f"http://127.0.0.1:{server.port}"
        async with httpx.AsyncClient(base_url=server.base_url) as client:
            first = await client.post("/v1/messages", content=b"hello")
            second = await client.post("/v1/messages", content=b"again")  # the same connection
            assert (first.status_code, first.text) == (200, "POST /v1/messages hello done")
            assert second.text == "POST /v1/messages again done"
            assert first.headers.get("transfer-encoding") == "chunked"  # streamed, not buffered
            failed = await client.post("/fail", content=b"x")
            assert failed.status_code == 500
            after = await client.get("/still")  # a new connection: the server goes on
            assert after.text == "GET /still  done"
        tg.cancel_scope.cancel()
    reported = [r.getMessage() for r in caplog.records if r.name == "turnlog.kernel.wire"]
    assert reported == ["wire recorder: a call failed: RuntimeError"]  # never the body
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as client:
            await client.get(server.base_url)
