"""What an append returns, and how a re-sent append finds its original result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._errors import IdempotencyError
from ._records import AppendResult
from ._validation import PreparedAppend

__all__ = ["match_resent"]


def match_resent(entries: list[PreparedAppend], stored: Mapping[str, Sequence[Any]]) -> list[AppendResult]:
    """Compare a re-sent append with what is already stored; return the original results.

    ``stored`` maps each event id found in the store to ``(position, stream, version, type,
    schema, data, meta)``. Call it when at least one id of the append is stored.

    Raises:
        IdempotencyError: an id is stored with other content or in another stream, or the
            append mixes stored and new events.
    """
    results: list[AppendResult] = []
    for entry in entries:
        positions: list[int] = []
        last_version = 0
        for index, ev in enumerate(entry.events):
            row = stored.get(ev.id)
            if row is None:
                raise IdempotencyError(
                    ev.id,
                    entry.stream,
                    "this batch mixes events already stored with new ones; "
                    f"event #{index} is new while others are stored",
                )
            position, stream, version, type_, schema, data, meta = row
            if stream != entry.stream:
                raise IdempotencyError(ev.id, entry.stream, f"the id is already stored in stream {stream!r}")
            if (type_, schema, bytes(data), bytes(meta)) != (ev.type, ev.schema, ev.data, ev.meta):
                raise IdempotencyError(ev.id, entry.stream, "the id is already stored with different content")
            if positions and version != last_version + 1:
                raise IdempotencyError(ev.id, entry.stream, "the events were stored in another order")
            positions.append(position)
            last_version = version
        results.append(AppendResult(tuple(positions), last_version))
    return results
