"""The store port: the abstract base class every backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from ._errors import StoreError
from ._raw import RAW_PAGE, StoredRow
from ._records import (
    ANY,
    AppendResult,
    EncodedEvent,
    ExpectedVersion,
    NewEvent,
    NewSnapshot,
    RecordedEvent,
    Snapshot,
    Tracking,
    VerifyReport,
)
from ._redaction import Redaction, RedactionResult, check_targets, merge_targets
from ._upcasting import Upcasters
from ._validation import DEFAULT_MAX_EVENT_BYTES

__all__ = ["EventStore"]


class EventStore(ABC):
    """An append-only log of events grouped in streams.

    Required core: ``append``, ``append_batch``, ``append_encoded``, the reads, ``subscribe``, ``verify``,
    snapshots and ``close``. Optional capabilities are declared in ``capabilities`` and
    tested by the conformance suite:

    - ``"gapless_positions"``: global positions have no gaps and are never reused;
    - ``"cross_process_subscribe"``: subscribers see events appended by other processes;
    - ``"raw_copy"``: the store exports and imports events and snapshots exactly as stored
      (``raw_events``, ``raw_snapshots``, ``import_raw``: the ``RawCopy`` protocol), which is
      what ``migrate`` uses to copy a store between backends;
    - ``"redact"``: ``redact`` and ``redact_many`` erase payloads while the chain stays
      provable (see docs/redaction.md);
    - ``"tracking"``: consumers keep their place in a log in the store (``save_tracking``,
      ``tracking_position``), also in the same transaction as the events they lead to
      (``append_tracked``), so a consumer that crashes never records its output twice.

    A store may declare fewer capabilities than its class when how it was opened rules one
    out (a SQLite store in memory has no ``"raw_copy"``), so check them on the instance.

    Use as an async context manager to close it::

        async with open_store("sqlite:///:memory:") as store:
            await store.append("branch-1", [NewEvent("message.added", {"content": "hi"})])
    """

    capabilities: frozenset[str] = frozenset()
    url: str

    def __init__(
        self, *, upcasters: Upcasters | None = None, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    ) -> None:
        self.upcasters = upcasters if upcasters is not None else Upcasters()
        self.max_event_bytes = max_event_bytes
        self._store_id: str | None = None

    @property
    def store_id(self) -> str | None:
        """The identity of this store: a UUID kept in the store's meta, never reused by another store.

        Made when the store is created; a store created by an older turnlog gets one on its
        first write. None until known (a PostgreSQL store before its first operation, or an
        older store not written since). A byte copy of a store file keeps the id.
        """
        return self._store_id

    @property
    def local_path(self) -> Path | None:
        """The resolved path of the file this store lives in; None for in-memory and server stores.

        Consumers that keep files of their own beside a store (run buffers, read models) place
        them from this, never from a backend's attributes.
        """
        return None

    @abstractmethod
    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: ExpectedVersion = ANY
    ) -> AppendResult:
        """Append ``events`` to ``stream`` atomically.

        Raises:
            ConcurrencyError: the stream's version does not satisfy ``expected_version``.
            IdempotencyError: an event id is stored already with different content.
            InvalidEventError: malformed input (nothing is written).
        """

    @abstractmethod
    async def append_encoded(
        self, stream: str, events: Sequence[EncodedEvent], expected_version: ExpectedVersion = ANY
    ) -> AppendResult:
        """Append events encoded beforehand (``EventEncoder``, ``encode_events``), as ``append`` does.

        The same atomicity, concurrency check, idempotent re-send and hash chain as ``append``,
        without validating and encoding each event again: only the stream name, the expected
        version, this store's size limit and repeated ids are checked.

        Raises:
            ConcurrencyError: the stream's version does not satisfy ``expected_version``.
            IdempotencyError: an event id is stored already with different content.
            InvalidEventError: malformed stream or expected version, an empty batch, an item
                that is not an ``EncodedEvent``, or an id twice (nothing is written).
            EventTooLarge: an event is over this store's ``max_event_bytes``.
        """

    @abstractmethod
    async def append_batch(
        self, entries: Sequence[tuple[str, Sequence[NewEvent], ExpectedVersion]]
    ) -> list[AppendResult]:
        """Append to several streams in one atomic transaction; one result per entry."""

    @abstractmethod
    def read_stream(
        self,
        stream: str,
        from_version: int = 1,
        to_version: int | None = None,
        *,
        backwards: bool = False,
        limit: int | None = None,
    ) -> AsyncIterator[RecordedEvent]:
        """Iterate the events of ``stream`` with versions in the inclusive range.

        With ``backwards=True`` the order is descending (from ``to_version`` or the end);
        ``limit`` applies in reading order.
        """

    @abstractmethod
    def read_all(
        self,
        from_position: int = 1,
        to_position: int | None = None,
        *,
        types: Iterable[str] | None = None,
        stream_prefix: str | None = None,
        limit: int | None = None,
        backwards: bool = False,
    ) -> AsyncIterator[RecordedEvent]:
        """Iterate the whole log by global position (inclusive range), optionally filtered."""

    @abstractmethod
    async def read_rows(
        self,
        after_position: int = 0,
        limit: int = RAW_PAGE,
        *,
        types: Iterable[str] | None = None,
        to_position: int | None = None,
    ) -> list[StoredRow]:
        """Up to ``limit`` stored events after ``after_position``, by position, as plain tuples.

        The read of a projection that decodes payloads itself (analytics): each event is a
        ``StoredRow`` ``(position, stream, version, type, schema, data, meta,
        recorded_at_us)``, with ``data`` and ``meta`` the stored canonical bytes and
        ``schema`` the one they were written with: nothing decoded, upcast or checked, and no
        object per row. A caller that reads a payload makes the checks ``read_all`` makes
        (``data`` and ``meta`` must be JSON objects, see ``RawEvent.decode``) and applies the
        store's ``upcasters`` itself.

        Args:
            after_position: Return only events whose position is greater.
            limit: The most events to return (the page size).
            types: Only events of these types (one string is one type; an empty iterable
                matches nothing); None for every type. Filtered by the backend.
            to_position: Return only events at or before this position; None for no bound.

        Fewer than ``limit`` rows means there are no more matching events up to
        ``to_position`` (or the head) at the time of the call; page on from the last position
        returned. A global reader's guarantee holds: once a page holds position k + 1, no
        event at or below k appears later.

        Raises:
            InvalidEventError: ``after_position``, ``to_position`` or ``limit`` is not an int >= 0,
                or ``types`` is malformed.
        """

    @abstractmethod
    async def stream_version(self, stream: str) -> int:
        """The current version of ``stream`` (0 when it has no event)."""

    @abstractmethod
    async def head(self) -> int:
        """The highest global position stored (0 when the store is empty)."""

    @abstractmethod
    async def list_streams(self, prefix: str | None = None) -> list[tuple[str, int]]:
        """Every stream (optionally those starting with ``prefix``) with its version, by name."""

    @abstractmethod
    def subscribe(
        self,
        from_position: int = 1,
        *,
        types: Iterable[str] | None = None,
        stream_prefix: str | None = None,
    ) -> AsyncIterator[RecordedEvent]:
        """Catch up from ``from_position`` (inclusive), then deliver live events forever.

        Live events include those appended by other processes when the backend declares
        ``cross_process_subscribe``. Positions are delivered in increasing order and none is
        skipped. Close the iterator (or cancel the task) to stop.
        """

    @abstractmethod
    async def verify(self, stream: str | None = None, *, quick: bool = False) -> VerifyReport:
        """Check hash chains, version contiguity and decodability of one or every stream.

        Snapshots are checked too: each must match its digest and stand on the log's event
        at its version. Damage is reported as problems, never raised. ``quick`` asks a
        backend with a costly storage check of its own (SQLite's ``integrity_check``) for
        the fast one instead; ``VerifyReport.checks`` says what ran.
        """

    @abstractmethod
    async def save_snapshot(self, snapshot: NewSnapshot) -> None:
        """Store a snapshot; one of the same stream, type and version is replaced."""

    @abstractmethod
    async def load_snapshot(
        self, stream: str, at_or_before_version: int | None = None, *, type: str | None = None
    ) -> Snapshot | None:
        """The newest snapshot of ``stream`` at or before a version (any when None)."""

    @abstractmethod
    async def delete_snapshots(self, stream: str | None = None) -> int:
        """Delete the snapshots of one stream, or all of them; return how many went."""

    async def redact(
        self,
        stream: str,
        version: int,
        *,
        reason: str,
        actor: str = "",
        include_meta: bool = False,
        keep: Mapping[str, Any] | None = None,
    ) -> RedactionResult:
        """Erase the payload of one event (and its meta when ``include_meta``), keeping the chain.

        The payload is replaced by a redaction marker and a ``store.redacted`` record (the
        digest of what went, ``reason``, ``actor``) is appended to ``turnlog.redactions`` in
        the same transaction; ids, versions, positions, types, times and hashes stay. The
        store's snapshots of the stream are deleted (they may hold copies). Redacting an
        event already redacted changes nothing (``RedactionResult.changed`` is False).
        ``keep`` names payload fields to keep beside the marker (see ``Redaction.keep``).

        Raises:
            RedactionError: the event does not exist, or its hash commits to its bytes (a
                store written by an older turnlog) or does not match them.
            InvalidEventError: malformed arguments.
        """
        results = await self.redact_many([Redaction(stream, version, reason, actor, include_meta, keep)])
        return results[0]

    async def redact_many(self, targets: Sequence[Redaction]) -> list[RedactionResult]:
        """Redact several events in one transaction (all or none); one result per distinct event."""
        targets = list(targets)
        check_targets(targets)
        return await self._redact(merge_targets(targets))

    async def upgrade_chain(self, *, actor: str = "") -> list[str]:
        """Move the events of the legacy chain to the digest chain, so they can be redacted.

        The whole log is verified first, in the same transaction: if anything is wrong,
        ``UpgradeRefused`` is raised and nothing changes. Each upgraded stream is re-hashed from
        its first legacy event on and gets a ``store.chain_upgraded`` record (old and new hash
        of its last event) in ``turnlog.upgrades``; its snapshots are deleted (they are bound to
        the old hashes). Returns the streams upgraded (none when there was nothing to do).

        Raises:
            UpgradeRefused: the log does not verify.
        """
        raise StoreError(f"{type(self).__name__} cannot upgrade its chain")

    # ------------------------------------------------------------------ capability "tracking"

    async def save_tracking(self, consumer: str, position: int) -> None:
        """Record that ``consumer`` has processed a log up to ``position`` (capability ``"tracking"``).

        A consumer's position only moves forward.

        Raises:
            TrackingError: ``position`` is at or below the one recorded (its ``recorded``
                says which); nothing changes.
            InvalidEventError: a malformed consumer name, or a position that is not an int >= 0.
        """
        raise StoreError(f"{type(self).__name__} does not record tracking")

    async def tracking_position(self, consumer: str) -> int | None:
        """The position last recorded for ``consumer``, or None when it has none."""
        raise StoreError(f"{type(self).__name__} does not record tracking")

    async def append_tracked(
        self, entries: Sequence[tuple[str, Sequence[NewEvent], ExpectedVersion]], tracking: Tracking
    ) -> list[AppendResult]:
        """``append_batch`` and ``save_tracking`` in one transaction: all of it is stored, or nothing.

        A consumer that records its output with the position of the event it processed can
        crash at any point and resume from ``tracking_position``: what it wrote for an event
        is stored exactly when that event's position is. Re-sending an append already stored
        returns its original results and stores nothing, as ``append_batch`` does.

        Raises:
            TrackingError: ``tracking.position`` is at or below the consumer's recorded one;
                nothing is stored.
            ConcurrencyError, IdempotencyError, InvalidEventError: as ``append_batch``.
        """
        raise StoreError(f"{type(self).__name__} does not record tracking")

    async def _redact(self, targets: list[Redaction]) -> list[RedactionResult]:
        """The backend's redaction; ``targets`` are validated and each event is named once."""
        raise StoreError(f"{type(self).__name__} cannot redact events")

    @abstractmethod
    async def close(self) -> None:
        """Release connections and threads. Idempotent."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
