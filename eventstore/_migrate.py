"""Copy a store to another backend unchanged: ``migrate(source, target)``.

Events are copied as stored bytes, so every id, version, position, time and hash survives and
``verify`` passes on the copy; snapshots are copied too. The target must be empty or hold an
exact prefix of the source (an earlier, interrupted or completed run of the same migration):
the copy then resumes after the target's head, and running it again copies nothing. Any other
non-empty target is refused before anything is written.

Backends: SQLite files and PostgreSQL, in either direction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass
from typing import Any, Protocol, cast

import anyio

from ._base import EventStore
from ._errors import InvalidEventError, StoreError, StoreUnavailable
from ._records import VerifyReport

__all__ = ["MigrateReport", "MigrationError", "RawEvent", "RawSnapshot", "check_continuation", "migrate"]

Progress = Callable[[int, int], None]
"""Called as ``progress(events_done, events_total)`` after each copied chunk."""

_CHUNK = 1000
_SQLITE_FORMAT = 1


@dataclass(frozen=True, slots=True)
class RawEvent:
    """A stored event exactly as kept: canonical bytes, not the decoded payload."""

    position: int
    id: str
    stream: str
    version: int
    type: str
    schema: int
    data: bytes
    meta: bytes
    recorded_at_us: int
    prev_hash: str
    hash: str


@dataclass(frozen=True, slots=True)
class RawSnapshot:
    """A stored snapshot exactly as kept."""

    stream: str
    type: str
    version: int
    schema: int
    data: bytes
    meta: bytes
    recorded_at_us: int


class MigrationError(StoreError):
    """A migration was refused; nothing was written by the step that refused.

    Attributes:
        reason: Why, in one sentence.
        position: The global position concerned, when there is one.
    """

    def __init__(self, reason: str, *, position: int | None = None) -> None:
        self.reason = reason
        self.position = position
        super().__init__(reason if position is None else f"position {position}: {reason}")


@dataclass(frozen=True, slots=True)
class MigrateReport:
    """What ``migrate`` did.

    Attributes:
        events_copied: Events written to the target by this run.
        events_present: Events the target already held (a resumed or repeated migration).
        snapshots_copied: Snapshots written (or rewritten) in the target.
        head: The target's highest position afterwards.
        verify: ``verify()`` of the whole target after the copy.
    """

    events_copied: int
    events_present: int
    snapshots_copied: int
    head: int
    verify: VerifyReport

    @property
    def ok(self) -> bool:
        """True when the copy verifies."""
        return self.verify.ok


def check_continuation(event: RawEvent, tip: tuple[int, str], head: int) -> None:
    """Check that ``event`` may follow a stream at ``tip`` (version, hash) in a log at ``head``.

    Raises:
        InvalidEventError: the event would break the stream's versions or hash chain, or
            the log's position order.
    """
    version, last_hash = tip
    if event.position <= head:
        raise InvalidEventError(
            f"event {event.id} has position {event.position}, not after the head {head}", stream=event.stream
        )
    if event.version != version + 1 or event.prev_hash != last_hash:
        raise InvalidEventError(
            f"event {event.id} (version {event.version}) does not continue the stream at version {version}",
            stream=event.stream,
        )


class _Raw(Protocol):
    async def raw_events(self, after_position: int = 0, limit: int = _CHUNK) -> list[RawEvent]: ...

    async def raw_snapshots(self) -> list[RawSnapshot]: ...

    async def import_raw(self, events: Sequence[RawEvent], snapshots: Sequence[RawSnapshot] = ()) -> None: ...


async def migrate(
    source: EventStore, target: EventStore, *, progress: Progress | None = None
) -> MigrateReport:
    """Copy every event and snapshot of ``source`` into ``target``, unchanged.

    The source is verified first; a source with problems is not copied. The target must be
    empty or hold a prefix of the source, in which case the copy resumes after it.

    Example::

        async with open_store("sqlite:///turnlog.db") as src, open_store(pg_url) as dst:
            report = await migrate(src, dst)
            assert report.ok

    Args:
        source: The store to read.
        target: The store to write.
        progress: Called as ``progress(done, total)`` after each chunk of events.

    Raises:
        MigrationError: the source does not verify, the target holds other events, or a
            backend cannot take part in a migration.
    """
    src, dst = _raw_access(source), _raw_access(target)
    checked = await source.verify()
    if not checked.ok:
        first = checked.problems[0]
        raise MigrationError(
            f"the source does not verify ({len(checked.problems)} problems, first: {first}); "
            "nothing was copied",
            position=first.position,
        )
    present = await _check_prefix(src, dst, await target.head())
    after, copied = present[1], 0
    while batch := await src.raw_events(after, _CHUNK):
        await dst.import_raw(batch)
        copied += len(batch)
        after = batch[-1].position
        if progress is not None:
            progress(present[0] + copied, checked.events)
    snapshots = await src.raw_snapshots()
    for start in range(0, len(snapshots), _CHUNK):
        await dst.import_raw([], snapshots[start : start + _CHUNK])
    return MigrateReport(copied, present[0], len(snapshots), await target.head(), await target.verify())


async def _check_prefix(src: _Raw, dst: _Raw, target_head: int) -> tuple[int, int]:
    """Count the target's events after checking they are the source's first ones.

    Returns (events present, last position present).
    """
    count, after = 0, 0
    while after < target_head:
        theirs = await dst.raw_events(after, _CHUNK)
        if not theirs:
            break
        ours = await src.raw_events(after, len(theirs))
        for index, event in enumerate(theirs):
            mine = ours[index] if index < len(ours) else None
            if mine is None or (mine.position, mine.id, mine.hash) != (event.position, event.id, event.hash):
                raise MigrationError(
                    "the target is not empty and is not a copy of this source (its event "
                    f"{event.id} in stream {event.stream!r} differs); use an empty target",
                    position=event.position,
                )
        count += len(theirs)
        after = theirs[-1].position
    return count, after


def _raw_access(store: EventStore) -> _Raw:
    if all(hasattr(store, name) for name in ("raw_events", "raw_snapshots", "import_raw")):
        return cast(_Raw, store)
    from ._sqlite import SQLiteEventStore

    if isinstance(store, SQLiteEventStore):
        if store.path == ":memory:":
            raise MigrationError("an in-memory SQLite store cannot take part in a migration: use a file")
        return _SQLiteFile(store.path)
    raise MigrationError(
        f"{type(store).__name__} cannot take part in a migration (SQLite files and PostgreSQL can)"
    )


class _SQLiteFile:
    """Raw access to a SQLite store file (format 1), through a connection of its own."""

    def __init__(self, path: str) -> None:
        self.path = path

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'format_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StoreUnavailable(f"{self.path}: cannot read the store: {exc}") from exc
        if row is None or str(row[0]) != str(_SQLITE_FORMAT):
            conn.close()
            raise MigrationError(
                f"{self.path} has SQLite store format {row and row[0]!r}; this turnlog copies format "
                f"{_SQLITE_FORMAT}"
            )
        return conn

    async def _run(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        def work() -> Any:
            conn = self._connect()
            try:
                return fn(conn)
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path}: {exc}") from exc
            finally:
                conn.close()

        return await anyio.to_thread.run_sync(work)

    async def raw_events(self, after_position: int = 0, limit: int = _CHUNK) -> list[RawEvent]:
        query = (
            "SELECT position, id, stream, version, type, schema, data, meta, recorded_at, prev_hash, hash "
            "FROM events WHERE position > ? ORDER BY position LIMIT ?"
        )

        def read(conn: sqlite3.Connection) -> list[RawEvent]:
            return [
                RawEvent(r[0], r[1], r[2], r[3], r[4], r[5], bytes(r[6]), bytes(r[7]), r[8], r[9], r[10])
                for r in conn.execute(query, (after_position, limit))
            ]

        result: list[RawEvent] = await self._run(read)
        return result

    async def raw_snapshots(self) -> list[RawSnapshot]:
        query = (
            "SELECT stream, type, version, schema, data, meta, recorded_at FROM snapshots ORDER BY 1, 2, 3"
        )

        def read(conn: sqlite3.Connection) -> list[RawSnapshot]:
            return [
                RawSnapshot(r[0], r[1], r[2], r[3], bytes(r[4]), bytes(r[5]), r[6])
                for r in conn.execute(query)
            ]

        result: list[RawSnapshot] = await self._run(read)
        return result

    async def import_raw(self, events: Sequence[RawEvent], snapshots: Sequence[RawSnapshot] = ()) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                _sqlite_insert(conn, events, snapshots)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

        await self._run(write)


def _sqlite_insert(
    conn: sqlite3.Connection, events: Sequence[RawEvent], snapshots: Sequence[RawSnapshot]
) -> None:
    head = conn.execute("SELECT coalesce(max(position), 0) FROM events").fetchone()[0]
    tips: dict[str, tuple[int, str]] = {}
    for event in events:
        tip = tips.get(event.stream)
        if tip is None:
            row = conn.execute(
                "SELECT version, hash FROM events WHERE stream = ? ORDER BY version DESC LIMIT 1",
                (event.stream,),
            ).fetchone()
            tip = (row[0], row[1]) if row is not None else (0, "")
        check_continuation(event, tip, head)
        head = event.position
        tips[event.stream] = (event.version, event.hash)
    conn.executemany(
        "INSERT INTO events (position, id, stream, version, type, schema, data, meta, recorded_at, "
        "prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [astuple(event) for event in events],
    )
    conn.executemany(
        "INSERT OR REPLACE INTO snapshots (stream, type, version, schema, data, meta, recorded_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [astuple(snap) for snap in snapshots],
    )
