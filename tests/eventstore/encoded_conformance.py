"""The conformance tests of ``append_encoded`` and of long appends, mixed into ``StoreConformance``.

Every backend runs them through ``StoreConformance``; they live here to keep that file short.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any
from uuid import UUID

import pytest

from turnlog.eventstore import (
    ANY,
    NO_STREAM,
    ConcurrencyError,
    EncodedEvent,
    EventEncoder,
    EventStore,
    EventTooLarge,
    IdempotencyError,
    InvalidEventError,
    NewEvent,
    RecordedEvent,
    encode_events,
    encode_json,
    event_hash,
    uuid7,
)

__all__ = ["EncodedAppendConformance"]


async def _read(store: EventStore, stream: str) -> list[RecordedEvent]:
    async with aclosing(store.read_stream(stream)) as events:
        return [event async for event in events]


def _rehash(events: list[RecordedEvent]) -> list[str]:
    """Every event's hash recomputed one by one with ``event_hash`` from what was read."""
    out = []
    for event in events:
        micros = int(event.recorded_at.timestamp()) * 1_000_000 + event.recorded_at.microsecond
        out.append(
            event_hash(
                event.prev_hash,
                str(event.id),
                event.stream,
                event.version,
                event.type,
                event.schema,
                encode_json(event.data),
                encode_json(event.meta),
                micros,
            )
        )
    return out


class EncodedAppendConformance:
    """``append_encoded`` keeps every guarantee of ``append``; long appends chain like short ones."""

    async def test_append_encoded_round_trips_like_append(self, store: EventStore) -> None:
        """Events from an encoder read back with their ids, types, schema, data and meta."""
        encoder = EventEncoder("stream.chunk", schema=2, meta={"run_id": "r1"})
        ids = [uuid7(), uuid7()]
        batch = [encoder.encode({"seq": 1, "text": "a"}, ids[0]), encoder.encode({"seq": 2}, ids[1].int)]
        result = await store.append_encoded("run-1", batch, expected_version=NO_STREAM)
        got = await _read(store, "run-1")
        assert result.version == 2 and [e.position for e in got] == list(result.positions)
        assert [(e.id, e.type, e.schema, e.data, e.meta) for e in got] == [
            (ids[0], "stream.chunk", 2, {"seq": 1, "text": "a"}, {"run_id": "r1"}),
            (ids[1], "stream.chunk", 2, {"seq": 2}, {"run_id": "r1"}),
        ]
        assert got[1].prev_hash == got[0].hash and (await store.verify()).ok

    async def test_append_encoded_continues_a_chain_append_began(self, store: EventStore) -> None:
        """append and append_encoded interleave on one stream into one sound chain."""
        await store.append("s-1", [NewEvent("a.b", {"n": 1})])
        await store.append_encoded("s-1", encode_events([NewEvent("a.b", {"n": 2})]), expected_version=1)
        await store.append("s-1", [NewEvent("a.b", {"n": 3})], expected_version=2)
        got = await _read(store, "s-1")
        assert [e.data["n"] for e in got] == [1, 2, 3] and [e.hash for e in got] == _rehash(got)
        assert (await store.verify()).ok

    async def test_append_encoded_checks_expected_version(self, store: EventStore) -> None:
        """A wrong expected_version raises ConcurrencyError and stores nothing."""
        await store.append("s-1", [NewEvent("a.b", {})])
        with pytest.raises(ConcurrencyError) as info:
            await store.append_encoded("s-1", encode_events([NewEvent("a.b", {})]), expected_version=0)
        assert info.value.actual == 1 and await store.head() == 1

    async def test_append_encoded_resend_returns_original_result(self, store: EventStore) -> None:
        """Re-sending encoded events returns the original result, even after the stream moved on."""
        batch = encode_events([NewEvent("a.b", {"n": 1}), NewEvent("a.b", {"n": 2})])
        first = await store.append_encoded("s-1", batch, expected_version=NO_STREAM)
        await store.append("s-1", [NewEvent("a.b", {"n": 3})])
        assert await store.append_encoded("s-1", batch, expected_version=NO_STREAM) == first
        assert await store.head() == 3

    async def test_append_encoded_refuses_a_stored_id_with_other_content(self, store: EventStore) -> None:
        """An encoded event whose id is stored with other content raises IdempotencyError."""
        original = NewEvent("a.b", {"text": "a"})
        await store.append("s-1", [original])
        forged = EventEncoder("a.b").encode({"text": "b"}, original.id)
        with pytest.raises(IdempotencyError):
            await store.append_encoded("s-1", [forged])
        assert await store.head() == 1

    @pytest.mark.parametrize(
        ("stream", "batch", "expected", "match"),
        [
            ("s-1", "empty", ANY, "at least one event"),
            ("s-1", "a NewEvent", ANY, "expected an EncodedEvent"),
            ("s-1", "a plain tuple", ANY, "expected an EncodedEvent"),
            ("s-1", "an event, not a list", ANY, "sequence of EncodedEvent"),
            ("s-1", "one id twice", ANY, "appears twice"),
            ("s-1", "one", -1, "expected_version"),
            ("s-1", "one", "1", "expected_version"),
            ("", "one", ANY, "stream name"),
            ("s\n1", "one", ANY, "control character"),
        ],
    )
    async def test_append_encoded_refuses_bad_input(
        self, store: EventStore, stream: Any, batch: str, expected: Any, match: str
    ) -> None:
        """Malformed encoded appends raise InvalidEventError naming the problem and write nothing."""
        event = EventEncoder("a.b").encode({})
        batches: dict[str, Any] = {
            "empty": [],
            "a NewEvent": [NewEvent("a.b", {})],
            "a plain tuple": [tuple(event)],
            "an event, not a list": event,
            "one id twice": [event, event],
            "one": [event],
        }
        with pytest.raises(InvalidEventError, match=match):
            await store.append_encoded(stream, batches[batch], expected_version=expected)
        assert await store.head() == 0

    async def test_append_encoded_refuses_an_event_over_this_stores_limit(self, store: EventStore) -> None:
        """An event encoded under a larger limit than the store's raises EventTooLarge at the append."""
        encoder = EventEncoder("a.b", max_event_bytes=store.max_event_bytes * 2)
        big = encoder.encode({"blob": "x" * store.max_event_bytes})
        with pytest.raises(EventTooLarge) as info:
            await store.append_encoded("s-1", [encoder.encode({}), big])
        assert info.value.index == 1 and info.value.limit == store.max_event_bytes
        assert await store.head() == 0

    async def test_encoded_event_is_made_only_by_the_encoders(self) -> None:
        """EncodedEvent cannot be built or changed by hand, so the store may trust one."""
        event = EventEncoder("a.b").encode({})
        with pytest.raises(TypeError):
            EncodedEvent(event.id, "a.b", 1, b"{}", b"{}")  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            event._replace(data=b"[]")

    @pytest.mark.parametrize("count", [2, 63, 64, 65, 203])
    async def test_long_appends_chain_and_number_every_event(self, store: EventStore, count: int) -> None:
        """Appends of many events, with types, schemas and metas that change, chain one by one."""
        await store.append("s-1", [NewEvent("a.b", {"first": True})])
        batch = [
            NewEvent("a.b" if n % 3 else "c.d", {"n": n, "pad": "p" * (n * 3)}, {"k": n % 2} if n % 5 else None,
                     schema=1 + n % 2)
            for n in range(count)
        ]  # fmt: skip
        result = await store.append("s-1", batch, expected_version=1)
        encoded = encode_events([NewEvent("e.f", {"n": n}) for n in range(count)])
        again = await store.append_encoded("s-1", encoded, expected_version=1 + count)
        got = await _read(store, "s-1")
        assert [e.version for e in got] == list(range(1, 2 + 2 * count))
        assert list(result.positions) + list(again.positions) == [e.position for e in got[1:]]
        assert [e.id for e in got[1:]] == [e.id for e in batch] + [UUID(e.id) for e in encoded]
        assert [(e.type, e.schema, e.data, e.meta) for e in got[1 : 1 + count]] == [
            (e.type, e.schema, e.data, e.meta or {}) for e in batch
        ]
        assert [e.prev_hash for e in got[1:]] == [e.hash for e in got[:-1]]
        assert [e.hash for e in got] == _rehash(got) and (await store.verify()).ok
