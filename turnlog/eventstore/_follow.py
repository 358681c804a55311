"""``follow_log``: the subscribe loop of the in-process stores (in memory and SQLite).

Catch up to the head with ``read_all``, then wait for the store's wake-up event (set by its
own appends) or, for a store other processes write to as well, for a poll interval.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING

from ._base import EventStore
from ._records import RecordedEvent

if TYPE_CHECKING:
    import anyio

__all__ = ["follow_log"]


async def follow_log(
    store: EventStore,
    from_position: int,
    *,
    types: list[str] | None,
    stream_prefix: str | None,
    next_wake: Callable[[], anyio.Event],
    poll_interval: float | None = None,
) -> AsyncGenerator[RecordedEvent, None]:
    """Every matching event of ``store`` from ``from_position`` on, forever.

    Args:
        store: The store read (its ``head`` and ``read_all``).
        from_position: The first position delivered.
        types: Only events of these types (None: all).
        stream_prefix: Only events of streams whose name starts with this (None: all).
        next_wake: The event the store's next append sets (made when there is none).
        poll_interval: Also look again after this many seconds (None: only when woken),
            for appends of other processes, which no event of this one announces.
    """
    import anyio  # here: the stores import this module, and a read that starts no loop needs no anyio

    position = from_position
    while True:
        # Take the wake-up before looking at the head, so an append in between is not missed.
        wake = next_wake()
        head = await store.head()
        if head >= position:
            async for event in store.read_all(position, head, types=types, stream_prefix=stream_prefix):
                yield event
            position = head + 1
            continue
        if poll_interval is None:
            await wake.wait()
        else:
            with anyio.move_on_after(poll_interval):
                await wake.wait()
