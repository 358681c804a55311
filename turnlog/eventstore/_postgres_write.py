"""The PostgreSQL store's writes: planning a group of appends, and importing raw events.

``plan_group`` checks each unit of a group against the stream heads (and the units before
it) and lays out the rows of the good ones for one insert statement; ``plan_from_heads`` and
``plan_from_lookup`` get those heads from the store object's memory or from the server.
The statements themselves are in ``_postgres_sql``; ``PostgresEventStore`` runs them.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import astuple
from typing import Any, NamedTuple

from ._encoding import chain_hashes
from ._errors import ConcurrencyError, IdempotencyError, InvalidEventError
from ._postgres_sql import Sql
from ._raw import RawEvent, RawSnapshot, check_continuation
from ._records import ANY, NO_STREAM
from ._results import match_resent
from ._validation import PreparedAppend, version_matches

__all__ = [
    "GROUP_FORMATS",
    "Plan",
    "RACE_ATTEMPTS",
    "check_uuid",
    "group_params",
    "import_events",
    "import_snapshots",
    "plan_from_heads",
    "plan_from_lookup",
    "plan_group",
]

_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

RACE_ATTEMPTS = 10
"""How often an append that keeps losing the race for its stream version is retried (``ANY``)."""


class _Raced(Exception):
    """Another transaction stored one of the group's (stream, version) pairs or ids first."""


class Plan(NamedTuple):
    """What one group transaction inserts, and the outcome of every unit not inserted."""

    outcomes: list[Any]
    inserts: list[tuple[int, list[tuple[int, int, int]]]]
    deferred: list[int]
    columns: list[list[Any]]
    rows: int


def plan_from_heads(
    known: dict[str, tuple[int, str]], sql: Sql, units: list[list[PreparedAppend]], now: int
) -> tuple[Plan, dict[str, tuple[int, str]], str, Any] | None:
    """A plan from the heads the store object knows (``known``), and its gated statement and parameters.

    None when a stream's head is unknown (a stream never seen is taken as new when the
    unit allows that), or when a unit would fail against the known heads: only the
    stored heads and ids can tell a re-send, a conflict or a stale head apart.
    """
    if len(units) == 1 and len(units[0]) == 1 and len(units[0][0].events) == 1:
        return _plan_one(known, sql, units[0][0], now)
    tips: dict[str, tuple[int, str]] = {}
    for unit in units:
        for entry in unit:
            if entry.stream not in tips:
                tip = known.get(entry.stream)
                if tip is None:
                    if entry.expected is not ANY and entry.expected != NO_STREAM:
                        return None
                    tip = (0, "")
                tips[entry.stream] = tip
    heads = list(tips.items())
    plan = plan_group(units, {}, tips, now)
    if plan.deferred or any(outcome is not None for outcome in plan.outcomes):
        return None
    if plan.rows == 1:
        return plan, tips, sql.insert_one, tuple(column[0] for column in plan.columns)
    params = [plan.rows, plan.columns[2], [stream for stream, _ in heads],
              [digest for _, (_, digest) in heads], plan.rows, *plan.columns]  # fmt: skip
    return plan, tips, sql.insert_checked, params


def _plan_one(
    known: dict[str, tuple[int, str]], sql: Sql, entry: PreparedAppend, now: int
) -> tuple[Plan, dict[str, tuple[int, str]], str, Any] | None:
    """``plan_from_heads`` for one event, the most common append, with less work per append."""
    tip = known.get(entry.stream)
    if tip is None:
        if entry.expected is not ANY and entry.expected != NO_STREAM:
            return None
        tip = (0, "")
    version, prev = tip
    if not version_matches(entry.expected, version):
        return None
    (digest,) = chain_hashes(entry.stream, version, prev, entry.events, now)
    event = entry.events[0]
    values = (entry.stream, version + 1, event.id, event.type, event.schema, event.data, event.meta,
              now, prev, digest)  # fmt: skip
    # The same plan as plan_group's for this unit: one row, one span.
    plan = Plan([None], [(0, [(0, 1, version + 1)])], [], [[value] for value in values], 1)
    return plan, {entry.stream: (version + 1, digest)}, sql.insert_one, values


async def plan_from_lookup(
    conn: Any, sql: Sql, units: list[list[PreparedAppend]], now: int
) -> tuple[Plan, dict[str, tuple[int, str]]]:
    """A plan from the heads and ids read from the store (one statement)."""
    ids = [event.id for unit in units for entry in unit for event in entry.events]
    streams = list(dict.fromkeys(entry.stream for unit in units for entry in unit))
    rows = await (await conn.execute(sql.lookup, [ids, streams])).fetchall()
    stored = {
        row[4]: (row[1], row[2], row[3], row[5], row[6], row[7], row[8]) for row in rows if row[0] == "id"
    }
    tips = {row[2]: (row[3] or 0, row[9] or "") for row in rows if row[0] == "head"}
    return plan_group(units, stored, tips, now), tips


def plan_group(
    units: list[list[PreparedAppend]],
    stored: dict[str, tuple[Any, ...]],
    tips: dict[str, tuple[int, str]],
    now: int,
    *,
    unrolled: bool = True,
) -> Plan:
    """Check each unit against the heads (and the units before it); chain and lay out the good ones.

    A unit whose ids are stored is a re-send (its original results) or an ``IdempotencyError``;
    one whose ``expected_version`` fails gets its ``ConcurrencyError``; one sharing a new id
    with an earlier unit of the group waits (``deferred``) until that one is stored. Rows of
    the others follow each other in the insert; their positions are known after the reservation.
    ``unrolled=False`` plans one-event units the general way (a test holds the two equal).
    """
    outcomes: list[Any] = [None] * len(units)
    inserts: list[tuple[int, list[tuple[int, int, int]]]] = []
    deferred: list[int] = []
    columns: list[list[Any]] = [[] for _ in range(10)]
    planned: set[str] = set()
    row = 0
    streams, versions, ids, types, schemas, data, metas, times, prevs, digests = columns
    for index, unit in enumerate(units):
        if unrolled and len(unit) == 1 and len(unit[0].events) == 1:
            # One event, the append of most groups: the steps of the loop below, unrolled.
            entry = unit[0]
            event = entry.events[0]
            event_id, stream = event.id, entry.stream
            if event_id not in stored and event_id not in planned:
                version, prev = tips[stream]
                if not version_matches(entry.expected, version):
                    outcomes[index] = ConcurrencyError(stream, entry.expected, version)
                    continue
                (digest,) = chain_hashes(stream, version, prev, entry.events, now)
                version += 1
                tips[stream] = (version, digest)
                planned.add(event_id)
                streams.append(stream)
                versions.append(version)
                ids.append(event_id)
                types.append(event.type)
                schemas.append(event.schema)
                data.append(event.data)
                metas.append(event.meta)
                times.append(now)
                prevs.append(prev)
                digests.append(digest)
                inserts.append((index, [(row, 1, version)]))
                row += 1
                continue
        unit_ids = [event.id for entry in unit for event in entry.events]
        if any(event_id in stored for event_id in unit_ids):
            try:
                outcomes[index] = match_resent(unit, stored)
            except IdempotencyError as exc:
                outcomes[index] = exc
            continue
        if not planned.isdisjoint(unit_ids):
            deferred.append(index)
            continue
        local: dict[str, tuple[int, str]] = {}
        chained: list[tuple[PreparedAppend, int, str, list[str]]] = []
        for entry in unit:
            version, prev = local.get(entry.stream) or tips[entry.stream]
            if not version_matches(entry.expected, version):
                outcomes[index] = ConcurrencyError(entry.stream, entry.expected, version)
                break
            hashes = chain_hashes(entry.stream, version, prev, entry.events, now)
            chained.append((entry, version, prev, hashes))
            local[entry.stream] = (version + len(hashes), hashes[-1])
        if outcomes[index] is not None:
            continue
        tips.update(local)
        planned.update(unit_ids)
        spans: list[tuple[int, int, int]] = []
        for entry, version, prev, hashes in chained:
            spans.append((row, len(hashes), version + len(hashes)))
            for event, digest in zip(entry.events, hashes, strict=True):
                version += 1
                values = (entry.stream, version, event.id, event.type, event.schema, event.data,
                          event.meta, now, prev, digest)  # fmt: skip
                for column, value in zip(columns, values, strict=True):
                    column.append(value)
                prev = digest
                row += 1
        inserts.append((index, spans))
    return Plan(outcomes, inserts, deferred, columns, row)


_INT4 = struct.Struct("!i")
_ARRAY_HEADER = struct.Struct("!iiIii")
# Element type oids: text, bigint, uuid, text, integer, bytea, bytea, bigint, text, text (the
# insert's columns; the prepared statement's parameters are arrays of these types).
_TEXT, _INT8, _UUID, _INT4_OID, _BYTEA = 25, 20, 2950, 23, 17


def _array_header(oid: int, count: int) -> bytes:
    # One dimension, no NULLs, the element type, then its length and lower bound (1).
    return _ARRAY_HEADER.pack(1, 0, oid, count, 1)


def _bytes_array(oid: int, items: Sequence[bytes]) -> bytes:
    parts = [_array_header(oid, len(items))]
    pack = _INT4.pack
    for item in items:
        parts.append(pack(len(item)))
        parts.append(item)
    return b"".join(parts)


def _text_array(items: Sequence[str]) -> bytes:
    return _bytes_array(_TEXT, [item.encode() for item in items])


def _int_array(oid: int, items: Sequence[int]) -> bytes:
    # Each element is its length (4 or 8) and its big-endian value.
    size, code = (8, "q") if oid == _INT8 else (4, "i")
    count = len(items)
    interleaved: list[int] = [size] * (2 * count)
    interleaved[1::2] = items
    return _array_header(oid, count) + struct.pack(f"!{('i' + code) * count}", *interleaved)


def group_params(
    rows: int, streams: Sequence[str], digests: Sequence[str], columns: Sequence[Sequence[Any]]
) -> tuple[bytes, ...]:
    """The parameters of ``Sql.insert_many`` in PostgreSQL's binary array format (the count in text).

    ``streams`` and ``digests`` are the heads the gate checks; ``columns`` the insert's
    (``Plan.columns``). psycopg's array dumper is written in Python and walks every element
    through its adapters (4.8 µs of client CPU per row of a group of 64, against 2.0 here);
    the columns' types are fixed, so the arrays are laid out directly, as ``array_recv``
    reads them, and the ids go as their 16 bytes (no text to cast on the server).
    """
    stream, version, event_id, type_, schema, data, meta, recorded_at, prev_hash, digest = columns
    return (
        b"%d" % rows,
        _text_array(streams),
        _text_array(digests),
        _text_array(stream),
        _int_array(_INT8, version),
        _bytes_array(_UUID, [bytes.fromhex(value.replace("-", "")) for value in event_id]),
        _text_array(type_),
        _int_array(_INT4_OID, schema),
        _bytes_array(_BYTEA, data),
        _bytes_array(_BYTEA, meta),
        _int_array(_INT8, recorded_at),
        _text_array(prev_hash),
        _text_array(digest),
    )


GROUP_FORMATS = (0, *(1,) * 12)
"""The formats of ``group_params``: the count as text, the arrays in binary."""


def check_uuid(event_id: str, stream: str, index: int) -> None:
    """Refuse an event id that is not a UUID in canonical form."""
    # The id column is a uuid: anything but the canonical spelling would come back spelled
    # differently from what was hashed. (The pattern is the spelling str(UUID(...)) gives.)
    if not _CANONICAL_UUID.fullmatch(event_id):
        raise InvalidEventError(
            f"event id {event_id!r} is not a UUID in canonical form (e.g. str(uuid7()))",
            stream=stream,
            index=index,
        )


async def import_events(conn: Any, sql: Sql, events: Sequence[RawEvent]) -> int | None:
    """Insert raw events after every position stored or handed out, under the position lock.

    Returns the transaction id of the insert, None when there was nothing to insert.

    The lock is held from reading the highest position to moving the sequence past the
    imported ones, so no append takes a position in between; the transaction id is taken
    under it too, as an append's is (see ``_postgres``'s module docstring).
    """
    quiet = bool(events) and await _reclaim_positions(conn, sql, events[0].position)
    await conn.execute(sql.take_lock)
    xid_text, handed_out, stored = await (await conn.execute(sql.reserved_high)).fetchone()
    # With every writer kept out, positions handed out but not stored never will be: an
    # import resumed after a kill may take them again, as its first run meant to.
    position = high = max(handed_out, stored)
    if quiet:
        position = stored
    streams = list(dict.fromkeys(e.stream for e in events)) or [""]
    rows = await (await conn.execute(sql.heads, [streams])).fetchall()
    tips = {row[0]: (row[1] or 0, row[2] or "") for row in rows}
    columns: list[list[Any]] = [[] for _ in range(11)]
    for index, event in enumerate(events):
        check_uuid(event.id, event.stream, index)
        check_continuation(event, tips[event.stream], position)
        position = event.position
        values = (
            event.position, event.stream, event.version, event.id, event.type, event.schema,
            event.data, event.meta, event.recorded_at_us, event.prev_hash, event.hash,
        )  # fmt: skip
        for column, value in zip(columns, values, strict=True):
            column.append(value)
        tips[event.stream] = (event.version, event.hash)
    if columns[0]:
        await conn.execute(sql.advance, [max(position, high), True])
    await conn.execute(sql.release_lock)
    if columns[0]:
        await conn.execute(sql.insert_raw, columns)
        return int(xid_text)
    return None


async def _reclaim_positions(conn: Any, sql: Sql, first: int) -> bool:
    """Keep writers out when ``first`` falls among positions handed out but not stored.

    An import or migrate killed after moving the sequence leaves it ahead of what is
    stored, and a re-run brings the same positions again. Waiting for every writer of the
    events table to end (``Sql.quiesce``, taken before the position lock, in the order
    appends take them) proves that those positions will never be stored by anyone else,
    so the re-run may use them; until commit, appends wait. Returns whether it did so.
    """
    handed_out, stored = await (await conn.execute(sql.positions_high)).fetchone()
    if not stored < first <= handed_out:
        return False
    await conn.execute(sql.quiesce)
    return True


async def import_snapshots(conn: Any, sql: Sql, snapshots: Sequence[RawSnapshot]) -> None:
    """Store snapshots as they are, replacing one of the same (stream, type, version)."""
    async with conn.cursor() as cursor:
        await cursor.executemany(
            f"""INSERT INTO {sql.snapshots} (stream, type, version, schema, data, meta,
                recorded_at) VALUES (%s, %s, %s, %s, %s, %s, %s)
                ON CONFLICT (stream, type, version) DO UPDATE SET schema = excluded.schema,
                data = excluded.data, meta = excluded.meta, recorded_at = excluded.recorded_at""",
            [astuple(snap) for snap in snapshots],
        )
