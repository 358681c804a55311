"""PostgreSQL behind a TCP proxy that goes down and comes back: quick failures, a quick recovery.

The proxy runs in a child process next to the store, so the test also sees everything the
driver would print on that process's stderr (nothing, by design).
"""

from __future__ import annotations

import sys

import anyio
import pytest

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")
pytestmark = [
    pytest.mark.postgres,
]

OUTAGE = """
import sys
import time
from urllib.parse import urlsplit, urlunsplit

import anyio
from turnlog.eventstore import NewEvent, StoreUnavailable
from turnlog.eventstore import PostgresEventStore


class Proxy:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.up = True
        self.scopes: set[anyio.CancelScope] = set()

    async def handle(self, client: anyio.abc.SocketStream) -> None:
        async with client:
            if not self.up:
                return
            try:
                server = await anyio.connect_tcp(*self.target)
            except OSError:
                return
            async with server, anyio.create_task_group() as tg:
                self.scopes.add(tg.cancel_scope)

                async def pump(source, sink) -> None:
                    try:
                        async for chunk in source:
                            await sink.send(chunk)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(pump, client, server)
                tg.start_soon(pump, server, client)
            self.scopes.discard(tg.cancel_scope)

    def down(self) -> None:
        self.up = False
        for scope in list(self.scopes):
            scope.cancel()


async def main(url: str) -> None:
    parts = urlsplit(url)
    proxy = Proxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    netloc = parts.netloc.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{port}")
    proxied = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, proxy.handle)
        async with PostgresEventStore(proxied) as store:
            await store.append("s", [NewEvent("a.b", {})])
            proxy.down()
            for _ in range(3):
                started = time.monotonic()
                try:
                    await store.append("s", [NewEvent("a.b", {})])
                except StoreUnavailable:
                    pass
                print("down", round(time.monotonic() - started, 2))
            await anyio.sleep(1.0)  # the pool's reconnection attempts fail meanwhile
            proxy.up = True
            started = time.monotonic()
            await store.append("s", [NewEvent("a.b", {})])
            print("up", round(time.monotonic() - started, 2))
        tg.cancel_scope.cancel()


anyio.run(main, sys.argv[1])
"""


async def test_an_outage_fails_calls_quickly_and_the_store_recovers_at_once(pg_url: str, pg_dsn: str) -> None:
    """Server unreachable: the first call fails within the pool timeout, later ones at once; back: fine."""
    if "@" not in pg_dsn or ":" not in pg_dsn.split("@", 1)[1].split("/", 1)[0]:
        pytest.skip("the proxy needs host:port in TURNLOG_TEST_PG_DSN")
    with anyio.fail_after(60):
        proc = await anyio.run_process([sys.executable, "-c", OUTAGE, pg_url], check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    lines = [line.split() for line in proc.stdout.decode().splitlines()]
    down = [float(seconds) for word, seconds in lines if word == "down"]
    (up,) = [float(seconds) for word, seconds in lines if word == "up"]
    assert len(down) == 3
    assert down[0] < 6.0  # the pool's timeout (5 s), not 15 s
    assert max(down[1:]) < 1.0  # then a direct attempt fails at once with libpq's reason
    assert up < 2.0
    assert proc.stderr.decode() == ""
