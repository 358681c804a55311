"""Validation, canonical encoding, the hash chain and time conversion shared by every backend."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from types import MappingProxyType
from uuid import UUID

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.eventstore import (
    ANY,
    STREAM_EXISTS,
    CorruptEventError,
    EventTooLarge,
    IdempotencyError,
    InvalidEventError,
    NewEvent,
    RecordedEvent,
    Upcasters,
    encode_json,
    event_hash,
)
from turnlog.eventstore import _encoding as encoding_module
from turnlog.eventstore._chain import ChainChecker
from turnlog.eventstore._decoding import decode_event, decode_payload
from turnlog.eventstore._encoding import check_all_finite, check_finite, encode_object, from_micros, to_micros
from turnlog.eventstore._results import match_resent
from turnlog.eventstore._validation import (
    PreparedAppend,
    check_event_type,
    check_expected_version,
    check_stream_name,
    prepare_batch,
    prepare_events,
    version_matches,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=5)


@given(json_objects)
def test_encoding_is_canonical(data: dict) -> None:
    """Equal objects encode to equal bytes whatever their key order."""
    reordered = dict(reversed(list(data.items())))
    assert encode_json(data) == encode_json(reordered)


@given(st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)))
def test_micros_round_trip(moment: datetime) -> None:
    """to_micros and from_micros are inverse on aware UTC datetimes."""
    assert from_micros(to_micros(moment)) == moment


def test_micros_treat_naive_as_utc_and_convert_offsets() -> None:
    """A naive time counts as UTC; an offset time is converted."""
    naive = datetime(2026, 1, 2, 3, 4, 5, 6)
    assert to_micros(naive) == to_micros(naive.replace(tzinfo=UTC))
    paris = datetime(2026, 1, 2, 4, 4, 5, 6, tzinfo=timezone(timedelta(hours=1)))
    assert to_micros(paris) == to_micros(naive)


HASH_ARGS = ("", "id-1", "s-1", 1, "a.b", 1, b'{"x":1}', b"{}", 123)


@pytest.mark.parametrize("index", range(len(HASH_ARGS)))
def test_hash_covers_every_field(index: int) -> None:
    """Changing any single hashed field changes the hash."""
    args = list(HASH_ARGS)
    value = args[index]
    args[index] = value + 1 if isinstance(value, int) else value + (b"!" if isinstance(value, bytes) else "!")
    assert event_hash(*args) != event_hash(*HASH_ARGS)  # type: ignore[arg-type]


def test_hash_fields_cannot_be_shifted() -> None:
    """Moving bytes from one field to the next gives another hash (fields are length-prefixed)."""
    a = event_hash("", "id", "s-1", 1, "a.b", 1, b'{"x":1}', b"{}", 1)
    b = event_hash("", "id", "s-1", 1, "a.b", 1, b'{"x":1}{', b"}", 1)
    assert a != b and len(a) == 64


def test_prepare_events_encodes_and_defaults_meta() -> None:
    """prepare_events returns canonical bytes, {} for missing meta, and the id as str."""
    event = NewEvent("a.b", {"b": 1, "a": 2}, schema=2)
    name, (prepared,) = prepare_events("s-1", [event], 1000)
    assert (name, prepared.id, prepared.data, prepared.meta, prepared.schema) == (
        "s-1",
        str(event.id),
        b'{"a":2,"b":1}',
        b"{}",
        2,
    )


def test_prepare_events_refuses_duplicate_ids_and_oversize() -> None:
    """One id twice in a batch, or an event over the limit, is refused with where it is."""
    event = NewEvent("a.b", {})
    with pytest.raises(InvalidEventError, match="twice") as info:
        prepare_events("s-1", [event, event], 1000)
    assert (info.value.stream, info.value.index) == ("s-1", 1)
    with pytest.raises(EventTooLarge) as too_big:
        prepare_events("s-1", [NewEvent("a.b", {"x": "y" * 100})], 50)
    assert too_big.value.size > 50 and too_big.value.limit == 50


@pytest.mark.parametrize("name", ["branch-1", "run-" + "x" * 196, "session-ü", "a b"])
def test_valid_stream_names(name: str) -> None:
    assert check_stream_name(name) == name


@pytest.mark.parametrize("name", ["", "x" * 201, "a\tb", "a\x00", "a\x7f", None, 3])
def test_invalid_stream_names(name: object) -> None:
    with pytest.raises(InvalidEventError):
        check_stream_name(name)


def test_expected_version_checks() -> None:
    """expected_version accepts ints >= 0 and the constants; version_matches applies them."""
    assert check_expected_version("s", 0) == 0 and check_expected_version("s", ANY) is ANY
    for bad in (-1, 1.0, "1", None, True):
        with pytest.raises(InvalidEventError):
            check_expected_version("s", bad)
    assert version_matches(ANY, 0) and version_matches(STREAM_EXISTS, 1)
    assert not version_matches(STREAM_EXISTS, 0) and not version_matches(3, 2)


def test_prepare_batch_refuses_an_id_shared_by_two_entries() -> None:
    """An id may appear once per append_batch call, across entries too."""
    event = NewEvent("a.b", {})
    with pytest.raises(InvalidEventError, match="twice"):
        prepare_batch([("s-1", [event], ANY), ("s-2", [event], ANY)], 1000)


def test_a_decoded_event_is_a_frozen_recorded_event_equal_to_the_constructed_one() -> None:
    """decode_event's event is a RecordedEvent in every way: type, equality, repr, fields, immutability."""
    eid = "0192f000-0000-7000-8000-000000000001"
    row = (7, eid, "branch-x", 3, "model.called", 1, b'{"a":1}', b'{"actor":"me"}', 12, "p", "h")
    fast = decode_event(Upcasters(), row)
    slow = RecordedEvent(
        UUID(eid), "branch-x", 3, 7, "model.called", 1, {"a": 1}, {"actor": "me"}, from_micros(12), "p", "h"
    )
    assert type(fast) is RecordedEvent and isinstance(fast, RecordedEvent)
    assert fast == slow and repr(fast) == repr(slow)
    assert dataclasses.astuple(fast) == dataclasses.astuple(slow)
    assert dataclasses.replace(fast, version=4) == dataclasses.replace(slow, version=4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.version = 4  # type: ignore[misc]
    assert not hasattr(fast, "__dict__")


def test_decode_payload_refuses_non_objects_and_bad_json() -> None:
    """Undecodable or non-object payloads raise CorruptEventError naming the event."""
    ups = Upcasters()
    for data in (b"[1]", b"{", b"\xff"):
        with pytest.raises(CorruptEventError) as info:
            decode_payload(ups, "a.b", 1, data, b"{}", stream="s-1", version=4, position=9)
        assert (info.value.stream, info.value.version, info.value.position) == ("s-1", 4, 9)


def test_decode_payload_reports_a_failing_upcaster() -> None:
    """An upcaster that raises surfaces as CorruptEventError chained to its error."""
    ups = Upcasters()
    ups.add("a.b", 1, lambda d: d["missing"])
    with pytest.raises(CorruptEventError, match="upcasting") as info:
        decode_payload(ups, "a.b", 1, b"{}", b"{}", stream="s-1", version=1, position=1)
    assert isinstance(info.value.__cause__, KeyError)


def _prepared(stream: str, *events: NewEvent) -> PreparedAppend:
    return PreparedAppend(stream, prepare_events(stream, list(events), 1000)[1], ANY)


def test_match_resent_returns_original_and_refuses_differences() -> None:
    """A re-send matches what is stored; other content, stream or order is an IdempotencyError."""
    a, b = NewEvent("a.b", {"n": 1}), NewEvent("a.b", {"n": 2})
    entry = _prepared("s-1", a, b)
    stored = {
        ev.id: (10 + i, "s-1", 3 + i, ev.type, ev.schema, ev.data, ev.meta)
        for i, ev in enumerate(entry.events)
    }
    assert [(r.positions, r.version) for r in match_resent([entry], stored)] == [((10, 11), 4)]
    with pytest.raises(IdempotencyError, match="already stored in stream 's-1'"):
        match_resent([_prepared("s-2", a, b)], stored)
    with pytest.raises(IdempotencyError, match="another order"):
        match_resent([_prepared("s-1", b, a)], stored)
    with pytest.raises(IdempotencyError, match="mixes"):
        match_resent([_prepared("s-1", a, b, NewEvent("a.b", {}))], stored)
    with pytest.raises(IdempotencyError, match="different content"):
        match_resent([_prepared("s-1", a, NewEvent("a.b", {"n": 3}, id=b.id))], stored)


def _chain(count: int) -> list[dict]:
    rows, prev = [], ""
    for version in range(1, count + 1):
        data = encode_json({"v": version})
        event_id = str(UUID(int=version))
        digest = event_hash(prev, event_id, "s-1", version, "a.b", 1, data, b"{}", 5)
        rows.append(
            dict(
                position=version,
                event_id=event_id,
                stream="s-1",
                version=version,
                type_="a.b",
                schema=1,
                data=data,
                meta=b"{}",
                recorded_at_us=5,
                prev_hash=prev,
                hash_=digest,
            )
        )
        prev = digest
    return rows


def test_chain_checker_accepts_a_sound_chain_and_names_a_missing_version() -> None:
    """A deleted middle event shows as a version gap and a broken link at the next version."""
    checker = ChainChecker()
    for row in _chain(4):
        checker.add(**row)
    assert checker.problems == [] and (checker.streams, checker.events) == (1, 4)
    broken = ChainChecker()
    for row in _chain(4)[:1] + _chain(4)[2:]:
        broken.add(**row)
    assert {(p.stream, p.version) for p in broken.problems} == {("s-1", 3)}
    assert any("gap" in p.what for p in broken.problems) and any("chain" in p.what for p in broken.problems)


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=20,
)


def _non_finite_inside(value: object) -> bool:
    if isinstance(value, float):
        return value != value or value in (float("inf"), float("-inf"))
    if isinstance(value, dict):
        return any(_non_finite_inside(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_non_finite_inside(v) for v in value)
    return False


@given(st.dictionaries(st.text(max_size=3), _JSONISH, max_size=4))
def test_encoding_refuses_exactly_the_payloads_holding_nan_or_infinity(data: dict) -> None:
    """Every payload with a NaN or an infinity anywhere is refused; every other one round-trips."""
    if _non_finite_inside(data):
        with pytest.raises(InvalidEventError, match="JSON has no NaN or Infinity"):
            encode_json(data)
    else:
        assert orjson.loads(encode_json(data)) == orjson.loads(orjson.dumps(data))


def _encode_one_by_one(events: list[NewEvent], max_event_bytes: int) -> list[tuple[object, ...]]:
    """The validation of ``prepare_events`` written plainly, each check in order (the oracle)."""
    out: list[tuple[object, ...]] = []
    seen: set[str] = set()
    for index, event in enumerate(events):
        check_event_type(event.type, "s-1", index)
        if not isinstance(event.schema, int) or isinstance(event.schema, bool) or event.schema < 1:
            raise InvalidEventError(
                f"schema must be an int >= 1, not {event.schema!r}", stream="s-1", index=index
            )
        data = encode_object(event.data, "data", "s-1", index)
        meta = encode_object({} if event.meta is None else event.meta, "meta", "s-1", index)
        if len(data) + len(meta) > max_event_bytes:
            raise EventTooLarge(len(data) + len(meta), max_event_bytes, stream="s-1", index=index)
        eid = str(event.id)
        if eid in seen:
            raise InvalidEventError(f"event id {eid} appears twice in one batch", stream="s-1", index=index)
        seen.add(eid)
        out.append((eid, event.type, event.schema, data, meta))
    return out


def _outcome(fn: Callable[[], object]) -> object:
    """What ``fn`` returns, or its error as (type, message, index, context shown)."""
    try:
        return fn()
    except (InvalidEventError, EventTooLarge) as exc:
        return type(exc), str(exc), exc.index, exc.__suppress_context__ or exc.__context__ is None


_IDS = [UUID(int=n) for n in range(1, 4)]
_NULLISH = st.recursive(  # nulls, NaNs and infinities often, so that errors meet in one batch
    st.sampled_from([None, float("nan"), float("-inf"), 1.5, "x", 7]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.tuples(inner) | st.dictionaries(st.sampled_from("ab"), inner)
    ),
    max_leaves=6,
)
_PAYLOADS = st.dictionaries(st.sampled_from("abc"), _NULLISH | _JSONISH, max_size=3)
_EVENTS = st.builds(
    NewEvent,
    type=st.sampled_from(["a.b", "a.b", "a.b", "c", "bad type"]),
    data=_PAYLOADS | _PAYLOADS.map(MappingProxyType),
    meta=st.none() | _PAYLOADS,
    id=st.sampled_from(_IDS) | st.uuids(),
    schema=st.sampled_from([1, 1, 1, 2, 0]),
)


@settings(max_examples=300)
@given(st.lists(_EVENTS, min_size=1, max_size=8), st.integers(20, 200), st.integers(1, 3))
def test_prepare_events_gives_the_results_and_first_error_of_checking_each_event_in_order(
    events: list[NewEvent], max_event_bytes: int, chunk: int
) -> None:
    """The validation loop (NaN checks of payloads deferred and done together, ids formatted
    inline) returns what checking each event in turn returns, and raises the same first error."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(encoding_module, "_FINITE_CHUNK", chunk)  # several chunks in a small batch
        got = _outcome(lambda: [tuple(ev) for ev in prepare_events("s-1", events, max_event_bytes)[1]])
    assert got == _outcome(lambda: _encode_one_by_one(events, max_event_bytes))


@given(st.lists(_PAYLOADS, min_size=1, max_size=9), st.integers(1, 4))
def test_check_all_finite_raises_the_first_error_of_check_finite_in_order(
    values: list[dict], chunk: int
) -> None:
    """``check_all_finite`` is ``check_finite`` of each value in turn: no error, or the first one."""
    raws = [orjson.dumps(value, option=orjson.OPT_SORT_KEYS) for value in values]
    indexes = list(range(10, 10 + len(values)))

    def one_by_one() -> None:
        for value, raw, index in zip(values, raws, indexes, strict=True):
            check_finite(value, "data", "s-1", index, raw)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(encoding_module, "_FINITE_CHUNK", chunk)
        got = _outcome(lambda: check_all_finite(values, raws, "data", "s-1", indexes))
    assert got == _outcome(one_by_one)
