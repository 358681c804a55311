"""The raw copy helpers: ``raw_event`` (the fast ``RawEvent`` a backend builds per stored row) and the bounds check."""

from __future__ import annotations

import dataclasses

import pytest

from turnlog.eventstore import CorruptEventError, InvalidEventError, RawEvent, Upcasters
from turnlog.eventstore._raw import check_raw_range, raw_event

ROW = (
    7,
    "0192f000-0000-7000-8000-000000000001",
    "branch-x",
    3,
    "model.called",
    1,
    b'{"a":1}',
    b"{}",
    12,
    "p",
    "h",
)


def test_raw_event_is_a_frozen_raw_event_equal_to_the_constructed_one() -> None:
    """A raw_event is a RawEvent in every way: type, equality, hash, repr, fields, immutability."""
    fast, slow = raw_event(ROW), RawEvent(*ROW)
    assert type(fast) is RawEvent and isinstance(fast, RawEvent)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert dataclasses.astuple(fast) == ROW
    assert dataclasses.replace(fast, version=4) == RawEvent(*ROW[:3], 4, *ROW[4:])
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.version = 4  # type: ignore[misc]
    assert not hasattr(fast, "__dict__")


def test_raw_event_needs_every_field() -> None:
    """A row with a field missing or one too many is refused, as by RawEvent itself."""
    for row in (ROW[:-1], (*ROW, "extra")):
        with pytest.raises(TypeError):
            raw_event(row)


def test_check_raw_range_names_the_bad_argument() -> None:
    """Bounds and limit must be ints >= 0 (to_position may be None)."""
    check_raw_range(0, None, 0)
    check_raw_range(5, 9, 500)
    for args, name in (
        ((-1, None, 1), "after_position"),
        ((0, "9", 1), "to_position"),
        ((0, None, None), "limit"),
    ):
        with pytest.raises(InvalidEventError, match=name):
            check_raw_range(*args)


def test_decode_makes_the_checks_of_read_all_and_applies_upcasters() -> None:
    event = RawEvent(*ROW)
    assert event.decode() == (1, {"a": 1}, {})
    ups = Upcasters()
    ups.add("model.called", 1, lambda data: {**data, "b": 2})
    assert event.decode(ups) == (2, {"a": 1, "b": 2}, {})
    for data, meta, words in [
        (b"{not json", b"{}", "not valid JSON"),
        (b"[1]", b"{}", "not a JSON object"),
        (b"{}", b'"text"', "not a JSON object"),
    ]:
        bad = dataclasses.replace(event, data=data, meta=meta)
        with pytest.raises(CorruptEventError, match=words) as caught:
            bad.decode()
        assert (caught.value.stream, caught.value.version, caught.value.position) == ("branch-x", 3, 7)
    failing = Upcasters()
    failing.add("model.called", 1, lambda data: 1 / 0)
    with pytest.raises(CorruptEventError, match=r"upcasting 'model\.called' from schema 1 failed"):
        event.decode(failing)
