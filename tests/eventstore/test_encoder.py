"""Encode once: ``EventEncoder``, ``encode_events``, ``EncodedEvent`` and the batched hash chain."""

from __future__ import annotations

import copy
import pickle
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnlog.eventstore import (
    EncodedEvent,
    EventEncoder,
    EventTooLarge,
    InvalidEventError,
    MemoryEventStore,
    NewEvent,
    encode_events,
    event_hash,
    uuid7,
)
from turnlog.eventstore._encoding import chain_hashes
from turnlog.eventstore._validation import prepare_events

kinds = st.tuples(
    st.sampled_from(["a.b", "stream.chunk", "x" * 40]),
    st.integers(1, 12),
    st.dictionaries(st.sampled_from(["run_id", "k"]), st.text(max_size=5), max_size=2),
)


@given(
    events=st.lists(st.tuples(kinds, st.text(max_size=300)), min_size=1, max_size=12),
    version=st.integers(0, 10**6),
    prev=st.sampled_from(["", "f" * 64]),
    stream=st.text(min_size=1, max_size=300),
)
def test_chain_hashes_equal_event_hash_one_by_one(
    events: list[tuple[tuple[str, int, dict[str, str]], str]], version: int, prev: str, stream: str
) -> None:
    """The batched chain gives exactly what event_hash gives event after event."""
    encoded = encode_events([NewEvent(t, {"text": text}, meta, schema=s) for (t, s, meta), text in events])
    expected = []
    last = prev
    for offset, ev in enumerate(encoded, 1):
        last = event_hash(last, ev.id, stream, version + offset, ev.type, ev.schema, ev.data, ev.meta, 1234)
        expected.append(last)
    assert chain_hashes(stream, version, prev, encoded, 1234) == expected


def test_encoder_writes_the_canonical_bytes_append_writes() -> None:
    """An encoded event holds the bytes, id, type and schema that append would store."""
    new = NewEvent("message.added", {"b": 1, "a": [True, None]}, {"z": "1", "y": 2}, schema=3)
    encoded = EventEncoder("message.added", schema=3, meta={"z": "1", "y": 2}).encode(new.data, new.id)
    _, (prepared,) = prepare_events("s-1", [new], 1000)
    assert encoded == prepared == encode_events([new])[0]
    assert encoded.data == b'{"a":[true,null],"b":1}' and encoded.meta == b'{"y":2,"z":"1"}'


def test_encoder_takes_a_uuid_its_int_or_none() -> None:
    """The id may be a UUID or its 128-bit value; None gives a fresh UUIDv7."""
    encoder = EventEncoder("a.b")
    known = uuid7()
    assert encoder.encode({}, known).id == str(known) == encoder.encode({}, known.int).id
    assert encoder.encode({}, 0).id == str(UUID(int=0))
    fresh = UUID(encoder.encode({}).id)
    assert fresh.version == 7
    for bad in (-1, 1 << 128):
        with pytest.raises(InvalidEventError, match="128-bit"):
            encoder.encode({}, bad)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"type": ""}, "non-empty"),
        ({"type": "bad type!"}, "malformed event type"),
        ({"type": "a.b", "schema": 0}, "schema"),
        ({"type": "a.b", "schema": True}, "schema"),
        ({"type": "a.b", "meta": "m"}, "meta must be a JSON object"),
        ({"type": "a.b", "meta": {"x": object()}}, "meta is not JSON-serializable"),
    ],
)
def test_encoder_refuses_a_bad_type_schema_or_meta(kwargs: dict[str, Any], match: str) -> None:
    """A malformed type, schema or meta is refused when the encoder is made."""
    kind = kwargs.pop("type")
    with pytest.raises(InvalidEventError, match=match):
        EventEncoder(kind, **kwargs)


def test_encoder_refuses_bad_data_and_oversize() -> None:
    """Non-object data, unserializable data and events over the limit raise as append does."""
    encoder = EventEncoder("a.b", meta={"k": "v"}, max_event_bytes=40)
    with pytest.raises(InvalidEventError, match="data must be a JSON object"):
        encoder.encode([1, 2])  # type: ignore[arg-type]
    with pytest.raises(InvalidEventError, match="data is not JSON-serializable"):
        encoder.encode({"x": object()})
    with pytest.raises(EventTooLarge) as info:
        encoder.encode({"blob": "x" * 40})
    assert info.value.limit == 40 and info.value.size == len(b'{"blob":"' + b"x" * 40 + b'"}{"k":"v"}')


def test_encode_events_refuses_what_append_refuses() -> None:
    """encode_events names the event at fault, like append."""
    shared = NewEvent("a.b", {})
    for events, match in (
        ([], "at least one event"),
        ([shared, shared], "appears twice"),
        ([NewEvent("a.b", {}), "x"], "expected a NewEvent"),
        (shared, "sequence of NewEvent"),
    ):
        with pytest.raises(InvalidEventError, match=match):
            encode_events(events)  # type: ignore[arg-type]
    with pytest.raises(EventTooLarge):
        encode_events([NewEvent("a.b", {"x": "y" * 10})], max_event_bytes=10)


def test_encoded_events_survive_copy_and_pickle() -> None:
    """Copies and pickles of an encoded event are encoded events equal to it."""
    event = EventEncoder("a.b").encode({"n": 1})
    for twin in (copy.copy(event), copy.deepcopy(event), pickle.loads(pickle.dumps(event))):
        assert type(twin) is EncodedEvent and twin == event
    with pytest.raises(TypeError):
        EncodedEvent._make(tuple(event))


async def test_append_points_encoded_events_to_append_encoded() -> None:
    """Handing encoded events to append says which method takes them."""
    async with MemoryEventStore() as store:
        with pytest.raises(InvalidEventError, match="append_encoded"):
            await store.append("s-1", [EventEncoder("a.b").encode({})])  # type: ignore[list-item]
