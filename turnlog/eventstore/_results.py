"""What an append returns (``AppendResult`` with its recorded events), and how a re-sent append finds its original result."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, cast, overload

from ._decoding import decode_event
from ._errors import IdempotencyError
from ._raw import RawEvent
from ._records import AppendResult, EncodedEvent, RecordedEvent
from ._upcasting import Upcasters
from ._validation import PreparedAppend

__all__ = ["append_result", "chained_result", "chained_rows", "match_resent"]


def append_result(rows: Sequence[Iterable[Any]], version: int, upcasters: Upcasters) -> AppendResult:
    """The result of an append that stored ``rows`` (``RawEvent`` field order), leaving the stream at ``version``.

    Its ``events`` are decoded from the rows on first access, with the store's ``upcasters``,
    exactly as ``read_stream`` decodes them.
    """
    return AppendResult(_positions(rows), version, rows=rows, decode=_decoder(upcasters))


def chained_result(
    first_position: int,
    stream: str,
    version: int,
    prev_hash: str,
    events: Sequence[EncodedEvent],
    hashes: Sequence[str],
    recorded_at_us: int,
    upcasters: Upcasters,
) -> AppendResult:
    """The result of appending ``events`` to ``stream`` after ``version``, stored from ``first_position`` on.

    The arguments are those of ``chained_rows``; the rows are made when the caller first asks
    for them (``AppendResult.rows`` or ``events``): a writer that only needs the positions and
    the version, as most do, pays nothing for 11-field tuples it never reads.
    """
    count = len(events)
    positions = (first_position,) if count == 1 else tuple(range(first_position, first_position + count))
    rows = _ChainedRows((first_position, stream, version, prev_hash, events, hashes, recorded_at_us))
    return AppendResult(positions, version + count, rows=rows, decode=_decoder(upcasters))


class _ChainedRows(Sequence[tuple[Any, ...]]):
    """The rows of ``chained_rows``, made on first access (see ``chained_result``)."""

    __slots__ = ("_args", "_rows")

    def __init__(self, args: tuple[int, str, int, str, Sequence[EncodedEvent], Sequence[str], int]) -> None:
        self._args: tuple[int, str, int, str, Sequence[EncodedEvent], Sequence[str], int] | None = args
        self._rows: list[tuple[Any, ...]] | None = None

    def _made(self) -> list[tuple[Any, ...]]:
        rows = self._rows
        if rows is None:
            assert self._args is not None
            rows = self._rows = chained_rows(*self._args)
            self._args = None
        return rows

    def __len__(self) -> int:
        return len(self._made())

    @overload
    def __getitem__(self, index: int) -> tuple[Any, ...]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[Any, ...]]: ...

    def __getitem__(self, index: int | slice) -> tuple[Any, ...] | list[tuple[Any, ...]]:
        return self._made()[index]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._made())

    def __eq__(self, other: object) -> bool:
        return self._made() == (list(other) if isinstance(other, _ChainedRows) else other)

    __hash__ = None  # type: ignore[assignment]  # a sequence of rows, compared like a list

    def __repr__(self) -> str:
        return repr(self._made())

    def __reduce__(self) -> tuple[Any, ...]:
        return list, (self._made(),)


_last_decoder: tuple[Upcasters | None, Callable[[Iterable[Any]], RecordedEvent] | None] = (None, None)


def _decoder(upcasters: Upcasters) -> Callable[[Iterable[Any]], RecordedEvent]:
    """``decode_event`` bound to ``upcasters``; the last one is kept (a process has few stores)."""
    global _last_decoder
    known, decode = _last_decoder
    if known is not upcasters or decode is None:
        decode = partial(decode_event, upcasters)
        _last_decoder = (upcasters, decode)
    return decode


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
