"""Paged reads: one loop for every read by version or position range, on every paging backend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from operator import attrgetter
from typing import Any, TypeVar

from ._inline import checkpoint
from ._records import RecordedEvent

__all__ = ["BY_POSITION", "BY_VERSION", "PageFetch", "read_pages"]

BY_VERSION: Callable[[RecordedEvent], int] = attrgetter("version")
"""The key of ``read_stream`` pages."""
BY_POSITION: Callable[[RecordedEvent], int] = attrgetter("position")
"""The key of ``read_all`` pages."""

_Item = TypeVar("_Item")

PageFetch = Callable[[int, int | None, int], Awaitable[tuple[list[Any], bool]]]
"""``fetch(low, high, count)``: at most ``count`` events with keys in ``[low, high]`` in reading
order (``high`` None: no upper bound), and whether the range ran out of events. A page may hold
fewer than ``count`` events without being the last (a backend may cut pages by size). A page's
items may be decoded events or stored rows still to be decoded; ``key`` reads either."""


async def read_pages(
    fetch: PageFetch,
    low: int,
    high: int | None,
    *,
    key: Callable[[_Item], int],
    limit: int | None,
    backwards: bool,
    page_size: int = 500,
) -> AsyncIterator[list[_Item]]:
    """Yield the events of an inclusive key range page by page, up to ``limit`` events in all.

    ``key`` gives the sort key of an event (its version or its position); each next page starts
    after the key of the last event seen, so no event is repeated or skipped, and other tasks
    get a turn between pages. Pages rather than single events are yielded so that a caller's
    own ``async for`` costs one hand-over per page, not one per event.
    """
    remaining = limit
    while remaining is None or remaining > 0:
        count = page_size if remaining is None else min(page_size, remaining)
        events, exhausted = await fetch(low, high, count)
        if events:
            yield events
        if exhausted or not events:
            return
        if remaining is not None:
            remaining -= len(events)
        if backwards:
            high = key(events[-1]) - 1
        else:
            low = key(events[-1]) + 1
        await checkpoint()
