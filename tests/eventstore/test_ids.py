"""UUIDv7 event ids: their layout, their order, and the counter that keeps one millisecond's ids in order."""

from __future__ import annotations

import itertools
import time
import uuid

import pytest

from turnlog.eventstore import _ids, uuid7


def test_uuid7_has_the_rfc_9562_layout_and_the_current_millisecond() -> None:
    """Version 7, RFC variant, 48-bit Unix milliseconds in front."""
    before = time.time_ns() // 1_000_000
    eid = uuid7()
    after = time.time_ns() // 1_000_000
    assert eid.version == 7
    assert eid.variant == uuid.RFC_4122
    assert before <= eid.int >> 80 <= after + 1  # +1: a burst may borrow the next millisecond


def test_uuid7_ids_strictly_increase_and_differ_in_their_random_tail() -> None:
    """Ids made in a burst (many per millisecond) sort in creation order and do not repeat their tails."""
    ids = [uuid7() for _ in range(5_000)]
    assert all(a < b for a, b in itertools.pairwise(ids))
    assert len({eid.int & 0x3FFF_FFFF_FFFF_FFFF for eid in ids}) == len(ids)
    assert all(str(eid) == str(uuid.UUID(str(eid))) for eid in ids[:10])


def test_uuid7_borrows_the_next_millisecond_when_the_counter_runs_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full 12-bit counter moves the id to the next millisecond, counter 0, still in order."""
    far = time.time_ns() // 1_000_000 + 60_000  # a minute ahead: the clock cannot catch up meanwhile
    monkeypatch.setattr(_ids, "_last_ms", far)
    monkeypatch.setattr(_ids, "_counter", 0xFFE)
    last_of_ms, borrowed = uuid7(), uuid7()
    assert (last_of_ms.int >> 80, (last_of_ms.int >> 64) & 0xFFF) == (far, 0xFFF)
    assert (borrowed.int >> 80, (borrowed.int >> 64) & 0xFFF) == (far + 1, 0)
    assert last_of_ms < borrowed


def test_uuid7_is_a_plain_uuid_that_compares_hashes_and_pickles_like_one() -> None:
    """An id built without ``UUID.__init__`` equals, hashes and round-trips as the parsed one."""
    import copy
    import pickle

    eid = uuid7()
    parsed = uuid.UUID(str(eid))
    assert eid == parsed and hash(eid) == hash(parsed) and eid.is_safe == parsed.is_safe
    assert pickle.loads(pickle.dumps(eid)) == eid == copy.deepcopy(eid)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_draws_fresh_randomness_not_its_parents_pool() -> None:
    """Ids are cut from a pool of OS randomness; a child must not reuse what its parent will."""
    import os
    import warnings

    uuid7()  # the pool is filled
    read, write = os.pipe()
    with warnings.catch_warnings():  # Python 3.12 warns of fork in a process with threads
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, b"".join(uuid7().bytes[8:] for _ in range(8)))
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 64)
    os.close(read)
    mine = b"".join(uuid7().bytes[8:] for _ in range(8))
    assert len(child) == 64 and child != mine
