"""Fact extraction: the fast paths for common payloads give the same rows and the same errors."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from turnlog.analytics import PriceTable
from turnlog.analytics._facts import model_call_fact, run_end_fact, run_start_fact
from turnlog.eventstore import RecordedEvent
from turnlog.projections import EventDecodeError

_WHEN = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _event(type_: str, data: dict[str, Any], position: int = 7) -> RecordedEvent:
    meta = {"branch_id": "b1"}
    return RecordedEvent(uuid.uuid4(), "branch-b1", 3, position, type_, 1, data, meta, _WHEN, "", "")


def _no_session(branch: str | None) -> str | None:
    return None


_CALL = {"provider": "openai", "model": "gpt-4o", "status": "ok", "latency_ms": 250.0, "ttft_ms": 20.0,
         "usage": {"input_tokens": 1000, "output_tokens": 500, "cost_usd": None}}  # fmt: skip
_END = {"run_id": "r1", "verb": "chat", "duration_ms": 1500.0, "chunks": 4,
        "usage": {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.25}}  # fmt: skip


def test_integer_and_float_payloads_give_the_same_facts() -> None:
    prices = PriceTable()
    as_float = model_call_fact(_event("model.called", _CALL), prices, _no_session)
    as_int = model_call_fact(
        _event("model.called", {**_CALL, "latency_ms": 250, "ttft_ms": 20, "usage": {**_CALL["usage"]}}),
        prices,
        _no_session,
    )
    assert as_float == as_int
    assert as_float[18:20] == (0.25, 0.02) and type(as_int[18]) is float and type(as_int[19]) is float
    ended = run_end_fact(_event("run.ended", _END), _no_session)
    ended_int = run_end_fact(
        _event("run.ended", {**_END, "duration_ms": 1500, "usage": {**_END["usage"], "cost_usd": 0}}),
        _no_session,
    )
    assert ended[14] == ended_int[14] == 1.5 and type(ended_int[14]) is float
    assert (ended[-1], ended_int[-1]) == (0.25, 0.0)
    assert type(ended_int[-1]) is float


@pytest.mark.parametrize(
    ("type_", "data", "message"),
    [
        ("model.called", {**_CALL, "latency_ms": "fast"}, "latency_ms must be a number"),
        ("model.called", {**_CALL, "ttft_ms": True}, "ttft_ms must be a number"),
        ("model.called", {**_CALL, "usage": {"input_tokens": 1.5}}, "usage.input_tokens must be an integer"),
        ("model.called", {**_CALL, "usage": {"cost_usd": "1"}}, "usage.cost_usd must be a number"),
        ("model.called", {**_CALL, "usage": []}, "usage must be an object"),
        ("run.started", {"run_id": "r1"}, "data has no 'verb'"),
        ("run.started", {"run_id": "r1", "verb": 3}, "verb must be a string"),
        ("run.started", {"run_id": "r1", "verb": "chat", "model": 4}, "model must be a string"),
        ("run.ended", {**_END, "duration_ms": "long"}, "duration_ms must be a number"),
        ("run.ended", {k: v for k, v in _END.items() if k != "duration_ms"}, "data has no 'duration_ms'"),
        ("run.ended", {**_END, "chunks": 2.0}, "chunks must be an integer"),
        ("run.ended", {k: v for k, v in _END.items() if k != "verb"}, "data has no 'verb'"),
        ("run.ended", {**_END, "verb": ["chat"]}, "verb must be a string"),
    ],
)
def test_a_malformed_field_is_an_error_naming_it(type_: str, data: dict[str, Any], message: str) -> None:
    event = _event(type_, data)
    with pytest.raises(EventDecodeError, match=message) as caught:
        if type_ == "model.called":
            model_call_fact(event, PriceTable(), _no_session)
        elif type_ == "run.started":
            run_start_fact(event, _no_session)
        else:
            run_end_fact(event, _no_session)
    assert caught.value.position == 7
