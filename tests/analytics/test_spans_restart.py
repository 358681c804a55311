"""The ``--follow`` checkpoints, as a property: a restart at any point loses no trace and repeats none.

The follower keeps two positions: ``done`` (the event that finished the last trace sent) and
``resume`` (just before the oldest run still open, from ``SpanView.open_from``). Restarting
reads from ``resume + 1`` and sends only the traces that finished after ``done``. For any
interleaving of runs and any stopping point, what was sent before plus what is sent after is
exactly every trace, once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.analytics import SpanView, Trace
from turnlog.eventstore import RecordedEvent
from turnlog.projections import ModelCalled, RunEnded, RunStarted, new_event

_T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _run_events(run: str) -> list[tuple[str, object]]:
    called = ModelCalled(
        call_id=f"c-{run}", provider="openai", model="m", endpoint="chat/completions", run_id=run,
        fingerprint="0" * 64, latency_ms=1.0, status="ok",
    )  # fmt: skip
    return [
        ("run.started", RunStarted(run_id=run, verb="chat")),
        ("model.called", called),
        ("run.ended", RunEnded(run_id=run, verb="chat", duration_ms=2.0)),
    ]


def _log(order: list[int]) -> list[RecordedEvent]:
    """The events of the runs, interleaved as ``order`` says (run index per event, in order)."""
    pending = {i: _run_events(f"r{i}") for i in set(order)}
    events = []
    for position, i in enumerate(order, start=1):
        _, data = pending[i].pop(0)
        new = new_event(data, meta={"branch_id": "b", "run_id": f"r{i}"})  # type: ignore[arg-type]
        events.append(
            RecordedEvent(
                id=new.id,
                stream="branch-b",
                version=position,
                position=position,
                type=new.type,
                schema=new.schema,
                data=dict(new.data),
                meta=dict(new.meta or {}),
                recorded_at=_T0 + timedelta(milliseconds=position),
                prev_hash="",
                hash="",
            )
        )
    return events


def _interleavings() -> st.SearchStrategy[list[int]]:
    """A run index per event: each of 1..6 runs appears exactly three times, in any interleaving."""
    return st.integers(1, 6).flatmap(lambda n: st.permutations([i for i in range(n) for _ in range(3)]))


def _ids(traces: list[Trace]) -> list[tuple[int, ...]]:
    return [tuple(s.span_id for s in t.spans) for t in traces]


@settings(max_examples=200, deadline=None)
@given(order=_interleavings(), data=st.data())
def test_a_restart_anywhere_sends_every_trace_exactly_once(order: list[int], data: st.DataObject) -> None:
    events = _log(order)
    stop = data.draw(st.integers(0, len(events)), label="events read before the stop")
    view = SpanView()
    sent: list[Trace] = []
    done, resume = 0, 0
    for event in events[:stop]:
        finished = view.apply(event)
        if finished:
            sent += finished
            done = event.position
            open_from = view.open_from()
            resume = max(resume, (open_from - 1) if open_from is not None else event.position)
    restarted = SpanView()
    for event in events[resume:]:
        sent += [t for t in restarted.apply(event) if t.end_position > done]
    everything = SpanView()
    expected = [t for e in events for t in everything.apply(e)]
    assert sorted(_ids(sent)) == sorted(_ids(expected))
    assert len(set(_ids(sent))) == len(sent) == len(order) // 3
