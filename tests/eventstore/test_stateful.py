"""A hypothesis state machine comparing the store with a trivial in-memory model.

The model is a list (the global log) and a dict of snapshots. Rules append with every kind of
``expected_version`` (right, wrong, ANY, NO_STREAM, STREAM_EXISTS), re-send acknowledged
appends, clash on ids, append atomically across streams, send bad input, read with ranges,
directions, limits and filters, and save and load snapshots. After every step the whole log
must equal the model, positions must be gapless, versions contiguous and ``verify()`` clean.

The store is async; the machine drives it through an anyio blocking portal (one event loop
thread per test case).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from turnlog.eventstore import (
    ANY,
    NO_STREAM,
    STREAM_EXISTS,
    AppendResult,
    ConcurrencyError,
    EventStore,
    IdempotencyError,
    InvalidEventError,
    NewEvent,
    NewSnapshot,
    RecordedEvent,
    encode_events,
    open_store,
)

STREAMS = ("branch-x", "branch-y", "run-z")
TYPES = ("a.one", "b.two")
SNAPSHOT_TYPE = "test_state"

streams = st.sampled_from(STREAMS)
modes = st.sampled_from(("right", "wrong", "any", "no_stream", "stream_exists"))
payloads = st.dictionaries(
    st.sampled_from(("text", "n", "nested")),
    st.one_of(st.integers(-5, 5), st.text(max_size=8), st.lists(st.booleans(), max_size=2)),
    max_size=3,
)
new_events = st.builds(
    lambda type_, data: NewEvent(type_, data, {"actor": "machine"}), st.sampled_from(TYPES), payloads
)
batches = st.lists(new_events, min_size=1, max_size=3)
small = st.integers(0, 8)
maybe_small = st.none() | small


@dataclass(frozen=True, slots=True)
class Row:
    """The model of one stored event."""

    stream: str
    version: int
    position: int
    event: NewEvent


def _collect(iterator: AsyncIterator[RecordedEvent]) -> Any:
    async def run() -> list[RecordedEvent]:
        return [e async for e in iterator]

    return run


class StoreMachine(RuleBasedStateMachine):
    """Subclasses set ``url`` (``{tmp}`` is replaced by a fresh directory per test case)."""

    url = "sqlite:///:memory:"

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="turnlog-stateful-")
        self._portal_cm = start_blocking_portal()
        self.portal: BlockingPortal = self._portal_cm.__enter__()
        self.store: EventStore = open_store(self.url.format(tmp=self.tmp))
        self.log: list[Row] = []
        self.acked: list[tuple[str, list[NewEvent], Any, AppendResult]] = []
        self.snapshots: dict[tuple[str, int], dict[str, Any]] = {}

    def teardown(self) -> None:
        try:
            self.portal.call(self.store.close)
        finally:
            self._portal_cm.__exit__(None, None, None)
            shutil.rmtree(self.tmp, ignore_errors=True)

    # --- model helpers

    def version(self, stream: str) -> int:
        return sum(1 for row in self.log if row.stream == stream)

    def expected(self, stream: str, mode: str, offset: int) -> tuple[Any, bool]:
        current = self.version(stream)
        if mode == "right":
            return current, True
        if mode == "wrong":
            return current + 1 + offset, False
        if mode == "any":
            return ANY, True
        if mode == "no_stream":
            return NO_STREAM, current == 0
        return STREAM_EXISTS, current > 0

    def record(self, stream: str, events: list[NewEvent]) -> AppendResult:
        start, version = len(self.log), self.version(stream)
        for k, event in enumerate(events, 1):
            self.log.append(Row(stream, version + k, start + k, event))
        return AppendResult(tuple(range(start + 1, start + len(events) + 1)), version + len(events))

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return self.portal.call(partial(fn, *args, **kwargs))

    # --- appends

    @rule(stream=streams, events=batches, mode=modes, offset=st.integers(0, 2), encoded=st.booleans())
    def append(self, stream: str, events: list[NewEvent], mode: str, offset: int, encoded: bool) -> None:
        expected, ok = self.expected(stream, mode, offset)
        # The same events through append, or encoded once and through append_encoded.
        method, batch = (
            (self.store.append_encoded, encode_events(events)) if encoded else (self.store.append, events)
        )
        if ok:
            result = self.call(method, stream, batch, expected_version=expected)
            assert result == self.record(stream, events)
            self.acked.append((stream, events, expected, result))
        else:
            with pytest.raises(ConcurrencyError) as caught:
                self.call(method, stream, batch, expected_version=expected)
            assert (caught.value.stream, caught.value.actual) == (stream, self.version(stream))
            assert caught.value.expected == expected

    @rule(first=streams, second=streams, a=batches, b=batches, mode_a=st.booleans(), mode_b=st.booleans())
    def append_batch(
        self, first: str, second: str, a: list[NewEvent], b: list[NewEvent], mode_a: bool, mode_b: bool
    ) -> None:
        if first == second:
            return
        exp_a, ok_a = self.expected(first, "right" if mode_a else "wrong", 0)
        exp_b, ok_b = self.expected(second, "right" if mode_b else "wrong", 0)
        entries = [(first, a, exp_a), (second, b, exp_b)]
        if ok_a and ok_b:
            results = self.call(self.store.append_batch, entries)
            assert results == [self.record(first, a), self.record(second, b)]
            self.acked += [(first, a, exp_a, results[0]), (second, b, exp_b, results[1])]
        else:
            with pytest.raises(ConcurrencyError) as caught:
                self.call(self.store.append_batch, entries)
            assert caught.value.stream == (first if not ok_a else second)

    @precondition(lambda self: self.acked)
    @rule(data=st.data(), with_any=st.booleans())
    def resend_acknowledged(self, data: st.DataObject, with_any: bool) -> None:
        stream, events, expected, original = data.draw(st.sampled_from(self.acked))
        version = ANY if with_any else expected
        assert self.call(self.store.append, stream, events, expected_version=version) == original
        assert (
            self.call(self.store.append_encoded, stream, encode_events(events), expected_version=version)
            == original
        )

    @precondition(lambda self: self.log)
    @rule(data=st.data(), other=payloads)
    def same_id_other_content(self, data: st.DataObject, other: dict[str, Any]) -> None:
        row = data.draw(st.sampled_from(self.log))
        clash = NewEvent(row.event.type, {**other, "clash": True}, row.event.meta, id=row.event.id)
        with pytest.raises(IdempotencyError):
            self.call(self.store.append, row.stream, [clash])

    @precondition(lambda self: self.log)
    @rule(data=st.data(), fresh=new_events)
    def stored_and_new_mixed(self, data: st.DataObject, fresh: NewEvent) -> None:
        row = data.draw(st.sampled_from(self.log))
        with pytest.raises(IdempotencyError):
            self.call(self.store.append, row.stream, [row.event, fresh])

    @rule(
        stream=streams,
        bad=st.sampled_from(
            [
                NewEvent("a.one", [1, 2]),  # type: ignore[arg-type]
                NewEvent("", {}),
                NewEvent("not a type", {}),
                NewEvent("a.one", {"x": object()}),
                NewEvent("a.one", {}, schema=0),
            ]
        ),
        good=new_events,
    )
    def bad_input_writes_nothing(self, stream: str, bad: NewEvent, good: NewEvent) -> None:
        with pytest.raises(InvalidEventError):
            self.call(self.store.append, stream, [good, bad])

    @rule(stream=streams, expected=st.sampled_from(["1", -1, 1.0, None, True]), events=batches)
    def wrong_expected_version_type(self, stream: str, expected: Any, events: list[NewEvent]) -> None:
        with pytest.raises(InvalidEventError):
            self.call(self.store.append, stream, events, expected_version=expected)

    # --- reads

    @rule(stream=streams, low=small, high=maybe_small, backwards=st.booleans(), limit=maybe_small)
    def read_stream(
        self, stream: str, low: int, high: int | None, backwards: bool, limit: int | None
    ) -> None:
        rows = [
            r
            for r in self.log
            if r.stream == stream and r.version >= low and (high is None or r.version <= high)
        ]
        if backwards:
            rows.reverse()
        if limit is not None:
            rows = rows[:limit]
        got = self.call(_collect(self.store.read_stream(stream, low, high, backwards=backwards, limit=limit)))
        assert [(e.id, e.version, e.position) for e in got] == [
            (r.event.id, r.version, r.position) for r in rows
        ]

    @rule(
        low=small,
        high=maybe_small,
        types=st.none() | st.lists(st.sampled_from(TYPES), max_size=2),
        prefix=st.sampled_from([None, "branch-", "run-", "branch-y"]),
        backwards=st.booleans(),
        limit=maybe_small,
    )
    def read_all(
        self,
        low: int,
        high: int | None,
        types: list[str] | None,
        prefix: str | None,
        backwards: bool,
        limit: int | None,
    ) -> None:
        rows = [
            r
            for r in self.log
            if r.position >= low
            and (high is None or r.position <= high)
            and (types is None or r.event.type in types)
            and (prefix is None or r.stream.startswith(prefix))
        ]
        if backwards:
            rows.reverse()
        if limit is not None:
            rows = rows[:limit]
        it = self.store.read_all(
            low, high, types=types, stream_prefix=prefix, limit=limit, backwards=backwards
        )
        got = self.call(_collect(it))
        assert [e.position for e in got] == [r.position for r in rows]
        assert [e.id for e in got] == [r.event.id for r in rows]

    @rule(stream=streams)
    def stream_version(self, stream: str) -> None:
        assert self.call(self.store.stream_version, stream) == self.version(stream)

    @rule(prefix=st.sampled_from([None, "branch-", "run-"]))
    def list_streams(self, prefix: str | None) -> None:
        want = sorted(
            {
                (r.stream, self.version(r.stream))
                for r in self.log
                if prefix is None or r.stream.startswith(prefix)
            }
        )
        assert self.call(self.store.list_streams, prefix) == want

    # --- snapshots

    @rule(stream=streams, back=st.integers(0, 3), state=payloads)
    def save_snapshot(self, stream: str, back: int, state: dict[str, Any]) -> None:
        version = max(0, self.version(stream) - back)
        self.call(self.store.save_snapshot, NewSnapshot(stream, version, SNAPSHOT_TYPE, state))
        self.snapshots[(stream, version)] = state

    @rule(stream=streams, at=maybe_small)
    def load_snapshot(self, stream: str, at: int | None) -> None:
        versions = [v for (s, v) in self.snapshots if s == stream and (at is None or v <= at)]
        got = self.call(self.store.load_snapshot, stream, at)
        if not versions:
            assert got is None
        else:
            best = max(versions)
            assert got is not None
            assert (got.stream, got.version, got.type, got.data) == (
                stream,
                best,
                SNAPSHOT_TYPE,
                self.snapshots[(stream, best)],
            )

    # --- invariants

    @invariant()
    def log_equals_model(self) -> None:
        got = self.call(_collect(self.store.read_all()))
        assert [(e.position, e.stream, e.version, e.id) for e in got] == [
            (r.position, r.stream, r.version, r.event.id) for r in self.log
        ]
        assert [(e.type, e.data, e.meta) for e in got] == [
            (r.event.type, dict(r.event.data), dict(r.event.meta or {})) for r in self.log
        ]
        assert self.call(self.store.head) == len(self.log)
        for stream in STREAMS:
            chain = [e for e in got if e.stream == stream]
            assert [e.version for e in chain] == list(range(1, len(chain) + 1))
            assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(chain))

    @invariant()
    def verify_is_clean(self) -> None:
        report = self.call(self.store.verify)
        assert report.ok, [str(p) for p in report.problems]
        assert report.events == len(self.log)


SETTINGS = settings(
    max_examples=25, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


class SQLiteMemoryMachine(StoreMachine):
    url = "sqlite:///:memory:"


class SQLiteFileMachine(StoreMachine):
    url = "sqlite:///{tmp}/machine.db"


class MemoryMachine(StoreMachine):
    url = "memory://"


TestSQLiteMemory = SQLiteMemoryMachine.TestCase
TestSQLiteMemory.settings = SETTINGS
TestSQLiteFile = SQLiteFileMachine.TestCase
TestSQLiteFile.settings = SETTINGS
TestMemoryStore = MemoryMachine.TestCase
TestMemoryStore.settings = SETTINGS
