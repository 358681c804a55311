"""A read-only view of an event store: every read passes through, every write is refused.

``turnlog ui`` without ``--allow-writes`` serves through it, so that no page, and no bug in
one, can change the log it shows, while a writer keeps appending in another process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence

from turnlog.eventstore import (
    ANY,
    AppendResult,
    EncodedEvent,
    EventStore,
    ExpectedVersion,
    NewEvent,
    NewSnapshot,
    RecordedEvent,
    Snapshot,
    StoredRow,
    VerifyReport,
)

from ._errors import WriteRefused

__all__ = ["ReadOnlyStore", "WriteRefused"]


class ReadOnlyStore(EventStore):
    """Wrap ``inner``: reads, subscriptions and ``verify`` delegate; appends and snapshots raise.

    Args:
        inner: The store to read.
    """

    def __init__(self, inner: EventStore) -> None:
        super().__init__(upcasters=inner.upcasters, max_event_bytes=inner.max_event_bytes)
        self.inner = inner
        self.url = inner.url
        self.capabilities = inner.capabilities - {"raw_copy", "tracking"}

    def _refuse(self, what: str) -> WriteRefused:
        return WriteRefused(f"{what}: the store is open read-only (start turnlog ui with --allow-writes)")

    async def append(
        self, stream: str, events: Sequence[NewEvent], expected_version: ExpectedVersion = ANY
    ) -> AppendResult:
        raise self._refuse(f"append to {stream!r}")

    async def append_encoded(
        self, stream: str, events: Sequence[EncodedEvent], expected_version: ExpectedVersion = ANY
    ) -> AppendResult:
        raise self._refuse(f"append to {stream!r}")

    async def append_batch(
        self, entries: Sequence[tuple[str, Sequence[NewEvent], ExpectedVersion]]
    ) -> list[AppendResult]:
        raise self._refuse("append")

    def read_stream(
        self,
        stream: str,
        from_version: int = 1,
        to_version: int | None = None,
        *,
        backwards: bool = False,
        limit: int | None = None,
    ) -> AsyncIterator[RecordedEvent]:
        return self.inner.read_stream(stream, from_version, to_version, backwards=backwards, limit=limit)

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
        return self.inner.read_all(
            from_position,
            to_position,
            types=types,
            stream_prefix=stream_prefix,
            limit=limit,
            backwards=backwards,
        )

    async def read_rows(
        self,
        after_position: int = 0,
        limit: int = 500,  # the store's default page
        *,
        types: Iterable[str] | None = None,
        to_position: int | None = None,
    ) -> list[StoredRow]:
        return await self.inner.read_rows(after_position, limit, types=types, to_position=to_position)

    async def stream_version(self, stream: str) -> int:
        return await self.inner.stream_version(stream)

    async def head(self) -> int:
        return await self.inner.head()

    async def list_streams(self, prefix: str | None = None) -> list[tuple[str, int]]:
        return await self.inner.list_streams(prefix)

    def subscribe(
        self,
        from_position: int = 1,
        *,
        types: Iterable[str] | None = None,
        stream_prefix: str | None = None,
    ) -> AsyncIterator[RecordedEvent]:
        return self.inner.subscribe(from_position, types=types, stream_prefix=stream_prefix)

    async def verify(self, stream: str | None = None, *, quick: bool = False) -> VerifyReport:
        return await self.inner.verify(stream, quick=quick)

    async def save_snapshot(self, snapshot: NewSnapshot) -> None:
        raise self._refuse(f"snapshot of {snapshot.stream!r}")

    async def load_snapshot(
        self, stream: str, at_or_before_version: int | None = None, *, type: str | None = None
    ) -> Snapshot | None:
        return await self.inner.load_snapshot(stream, at_or_before_version, type=type)

    async def delete_snapshots(self, stream: str | None = None) -> int:
        raise self._refuse("delete snapshots")

    async def close(self) -> None:
        await self.inner.close()
