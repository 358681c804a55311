"""What an append returns (``AppendResult`` with its recorded events), and how a re-sent append finds its original result."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import Any, cast

from ._decoding import decode_event
from ._errors import IdempotencyError
from ._raw import RawEvent
from ._records import AppendResult, EncodedEvent
from ._upcasting import Upcasters
from ._validation import PreparedAppend

__all__ = ["append_result", "chained_rows", "match_resent"]


def append_result(rows: Sequence[Iterable[Any]], version: int, upcasters: Upcasters) -> AppendResult:
    """The result of an append that stored ``rows`` (``RawEvent`` field order), leaving the stream at ``version``.

    Its ``events`` are decoded from the rows on first access, with the store's ``upcasters``,
    exactly as ``read_stream`` decodes them.
    """
    return AppendResult(_positions(rows), version, rows=rows, decode=partial(decode_event, upcasters))


def _positions(rows: Sequence[Iterable[Any]]) -> tuple[int, ...]:
    """The positions of stored rows: ``RawEvent`` s (the in-memory store) or tuples in their order."""
    if len(rows) == 1 and rows[0].__class__ is tuple:
        return (cast(tuple[int, ...], rows[0])[0],)
    if rows and isinstance(rows[0], RawEvent):
        return tuple([cast(RawEvent, row).position for row in rows])
    return tuple([cast(Sequence[int], row)[0] for row in rows])


def match_resent(
    entries: list[PreparedAppend], stored: Mapping[str, Sequence[Any]], upcasters: Upcasters | None = None
) -> list[AppendResult]:
    """Compare a re-sent append with what is already stored; return the original results.

    ``stored`` maps each event id found in the store to ``(position, stream, version, type,
    schema, data, meta)``, optionally followed by ``(recorded_at, prev_hash, hash)``: with
    those and ``upcasters``, the results carry their recorded events. Call it when at least
    one id of the append is stored.

    Raises:
        IdempotencyError: an id is stored with other content or in another stream, or the
            append mixes stored and new events.
    """
    results: list[AppendResult] = []
    for entry in entries:
        positions: list[int] = []
        rows: list[tuple[Any, ...]] = []
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
            position, stream, version, type_, schema, data, meta = row[:7]
            if stream != entry.stream:
                raise IdempotencyError(ev.id, entry.stream, f"the id is already stored in stream {stream!r}")
            if (type_, schema, bytes(data), bytes(meta)) != (ev.type, ev.schema, ev.data, ev.meta):
                raise IdempotencyError(ev.id, entry.stream, "the id is already stored with different content")
            if positions and version != last_version + 1:
                raise IdempotencyError(ev.id, entry.stream, "the events were stored in another order")
            positions.append(position)
            if len(row) == 10:
                rows.append((position, ev.id, stream, version, type_, schema, ev.data, ev.meta, *row[7:]))
            last_version = version
        if upcasters is not None and len(rows) == len(positions):
            results.append(append_result(rows, last_version, upcasters))
        else:
            results.append(AppendResult(tuple(positions), last_version))
    return results


def chained_rows(
    first_position: int,
    stream: str,
    version: int,
    prev_hash: str,
    events: Sequence[EncodedEvent],
    hashes: Sequence[str],
    recorded_at_us: int,
) -> list[tuple[Any, ...]]:
    """The rows (``RawEvent`` field order) of ``events`` stored at ``first_position`` on, after ``version``.

    ``hashes`` are the events' chain hashes (``chain_hashes``), the first following ``prev_hash``.
    """
    if len(events) == 1:  # the common single-event append, without the loop
        ev = events[0]
        return [(first_position, ev[0], stream, version + 1, ev[1], ev[2], ev[3], ev[4], recorded_at_us, prev_hash,
                 hashes[0])]  # fmt: skip
    prevs = [prev_hash, *hashes[:-1]]
    return [
        (
            first_position + n,
            ev[0],
            stream,
            version + n + 1,
            ev[1],
            ev[2],
            ev[3],
            ev[4],
            recorded_at_us,
            prev,
            digest,
        )
        for n, (ev, prev, digest) in enumerate(zip(events, prevs, hashes, strict=True))
    ]
