"""The PostgreSQL store's subscriptions: a LISTEN connection, and the catch-up-then-wait loop.

Subscribers are woken by LISTEN/NOTIFY and re-query on a timer as well, so a lost
notification delays an event by at most ``poll_interval`` seconds and never loses it. Events
committed but held back by an older transaction (see ``_postgres``) are looked for again
within 1 ms doubling to 100 ms, since that transaction's end may notify nobody.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import anyio

from ._errors import StoreUnavailable
from ._postgres_pool import PgPool

__all__ = ["Listener", "SUBSCRIBE_PAGE", "follow", "retrying"]

SUBSCRIBE_PAGE = 500
"""How many events one catch-up query of a subscriber reads at most."""
HELD_BACK_FIRST = 0.001
"""Seconds before a subscriber looks again for committed events an older transaction holds back."""
HELD_BACK_LAST = 0.1
"""The longest such pause: it doubles from ``HELD_BACK_FIRST`` up to this while they are held."""
_SUBSCRIBE_RETRIES = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)
"""The pauses of a subscriber between attempts when its query fails; then it raises."""

Rows = list[tuple[Any, ...]]


class Listener:
    """A dedicated LISTEN connection that reconnects when the server drops it."""

    def __init__(self, db: PgPool) -> None:
        self._db = db
        self._conn: Any = None

    async def start(self) -> None:
        """Connect and LISTEN; on a connection failure, carry on without (the timer still runs)."""
        db = self._db
        try:
            with db.errors("subscribe (LISTEN)"):
                conn = await db.direct()
                try:
                    await conn.execute(db.sql.listen)
                except BaseException:
                    await conn.close()
                    raise
        except StoreUnavailable:
            self._conn = None  # polling carries on; the next wait tries again
            return
        self._conn = conn

    async def wait(self, seconds: float) -> None:
        """Return on a notification, or after ``seconds``, or when the connection broke."""
        if self._conn is None:
            await anyio.sleep(seconds)
            await self.start()
            return
        pg = self._db.pg
        try:
            # stop_after=1 ends the generator by itself: breaking out would leave it holding
            # the connection's lock.
            async for _ in self._conn.notifies(timeout=seconds, stop_after=1):
                pass
            # Take the notifications that arrived meanwhile too: one query covers them all, so
            # a subscriber behind many writers queries once per catch-up, not once per append.
            async for _ in self._conn.notifies(timeout=0.0):
                pass
        except (pg.OperationalError, pg.InterfaceError):
            # The listener was dropped: notifications sent meanwhile are lost, which the caller's
            # re-query after this return makes up for.
            await self.close()
            await self.start()

    async def close(self) -> None:
        """Close the LISTEN connection, if any."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except self._db.pg.Error:
                pass  # closing a connection the server already dropped


async def retrying(fetch: Callable[[], Awaitable[Rows]]) -> Rows:
    """``fetch()``, tried again a few times (about 3 s in all) while the server is unreachable."""
    pauses = iter(_SUBSCRIBE_RETRIES)
    while True:
        try:
            return await fetch()
        except StoreUnavailable:
            # The in-flight query broke; the pool replaces the connection. Give the server
            # a few chances before telling the subscriber.
            pause = next(pauses, None)
            if pause is None:
                raise
            await anyio.sleep(pause)


async def follow(
    db: PgPool,
    low: int,
    fetch_live: Callable[[int], Awaitable[tuple[Rows, int, int]]],
    poll_interval: float,
) -> AsyncGenerator[tuple[Any, ...], None]:
    """The rows of the log from position ``low`` on, forever: catch up, then wait for more.

    ``fetch_live(low)`` returns the matching rows from ``low`` up to the head (at most
    ``SUBSCRIBE_PAGE``), that head, and the top (the last committed position, settled or not).
    """
    listener = Listener(db)
    held_back = HELD_BACK_FIRST
    try:
        # LISTEN before catching up, so nothing committed after the catch-up query is missed.
        await listener.start()
        while True:
            # Rows become visible to global reads in position order (see _postgres), so
            # "everything after the last one seen" never skips an event, whichever
            # notification woke us (or none).
            rows, head, top = await fetch_live(low)
            for row in rows:
                low = row[0] + 1
                yield row
            if len(rows) == SUBSCRIBE_PAGE:
                continue
            # Every matching event up to the head was delivered: skip the others for good.
            low = max(low, head + 1)
            if top < low:
                held_back = HELD_BACK_FIRST
                await listener.wait(poll_interval)
                continue
            # Committed events wait for an older transaction to end. Its end sends no
            # notification when it is not an append of a turnlog store (any transaction of
            # the server with an id counts), so look again soon, less often the longer it lasts.
            await listener.wait(held_back)
            held_back = min(held_back * 2, HELD_BACK_LAST)
    finally:
        with anyio.CancelScope(shield=True):
            await listener.close()
