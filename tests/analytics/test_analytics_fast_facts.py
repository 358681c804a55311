"""The common-shape rows of a batch (``_facts.model_call_row`` and the run rows) equal the fact functions'.

``Batch.add_row`` takes the facts of a stored row of a common-shape payload without building
an event; any other payload goes to ``model_call_fact``, ``run_start_fact`` and
``run_end_fact``. Whatever the payload, a stored row must give the row (or the error) that
the same event gives through ``Batch.add``, which always calls the fact functions.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.analytics import PriceTable
from turnlog.analytics._batch import Batch, DecodedRow
from turnlog.projections import CATALOGUE

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PRICES = PriceTable()
_SESSIONS = {"b1": "s1", "b2": None}

# Values of each kind a field may hold; the common shapes are drawn most often.
_ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**6),
    st.floats(-1e6, 1e6, allow_nan=False),
    st.text(max_size=5),
    st.lists(st.integers(-5, 5), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(-5, 5), max_size=2),
)
_NAME = st.sampled_from(["openai", "gpt-4o", "gpt-4o-mini", "", "nope", "chat"])
_TEXT = st.one_of(_NAME, st.none())
_MISSING = object()


def _value(common: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(common, common, common, _ANY)


def _field(common: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(_value(common), st.just(_MISSING))


_COUNT = st.one_of(st.none(), st.integers(0, 5000))
_USAGE = st.fixed_dictionaries(
    {"input_tokens": _COUNT, "output_tokens": _COUNT},
    optional={
        "cost_usd": _value(st.one_of(st.none(), st.floats(0, 5, allow_nan=False))),
        "cache_read_tokens": _value(_COUNT),
        "cache_write_tokens": _value(_COUNT),
    },
)
_LATENCY = st.floats(0, 1e5, allow_nan=False)
_PAYLOADS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "model.called": {
        "provider": _NAME, "model": _NAME, "status": st.sampled_from(["ok", "error"]),
        "latency_ms": _LATENCY, "endpoint": _TEXT, "verb": _TEXT, "call_id": _TEXT, "run_id": _TEXT,
        "error_type": _TEXT, "served_model": _TEXT, "ttft_ms": st.one_of(st.none(), _LATENCY),
        "attempts": st.integers(1, 3), "stream": st.booleans(), "usage": _USAGE,
    },
    "run.started": {"run_id": st.just("r1"), "verb": _TEXT, "parent_run_id": _TEXT, "provider": _TEXT, "model": _TEXT},
    "run.ended": {
        "run_id": st.just("r1"), "verb": _TEXT, "duration_ms": _LATENCY, "chunks": _COUNT, "usage": _USAGE,
    },
    "run.failed": {
        "run_id": st.just("r1"), "verb": _TEXT, "duration_ms": _LATENCY, "usage": _USAGE,
        "reason": st.sampled_from(["error", "timeout"]), "error_type": _TEXT,
    },
}  # fmt: skip


@st.composite
def _events(draw: st.DrawFn, kind: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    # A payload of the common shape with at most two fields changed (another value, or gone):
    # the fast path is taken, or left just before it would be wrong.
    fields = _PAYLOADS[kind]
    data = {key: draw(common) for key, common in fields.items()}
    keys = st.sampled_from(sorted(fields))
    for key in draw(st.lists(keys, max_size=1)):
        data[key] = draw(st.one_of(_ANY, st.sampled_from(["other", 1, 2.5, True])))
    for key in draw(st.lists(keys, max_size=1)):
        data.pop(key, None)
    meta = {}
    for key in ("branch_id", "session_id", "run_id"):
        value = draw(_field(st.sampled_from(["b1", "b2", "b3"])))
        if value is not _MISSING:
            meta[key] = value
    return kind, data, meta


def _schema(kind: str) -> int:
    schema = CATALOGUE.get(kind)
    assert schema is not None
    return schema.schema_version


def _outcome(batch: Batch, take: Any) -> Any:
    try:
        take()
    except Exception as exc:
        return type(exc), str(exc)
    # Types too: a float where the reference gives an int (or a bool) is a different value.
    return [[(type(v), v) for v in row] for row in (*batch.model_rows, *batch.runs)]


@pytest.mark.parametrize("kind", sorted(_PAYLOADS))
@settings(max_examples=300, deadline=None)
@given(data=st.data(), stream=st.sampled_from(["branch-b9", "session-x"]), us=st.integers(0, 2 * 10**15))
def test_a_stored_row_gives_the_facts_and_errors_of_the_event(
    kind: str, data: st.DataObject, stream: str, us: int
) -> None:
    """Any payload: the row taken from stored bytes equals the fact functions' row, errors included."""
    kind, payload, meta = data.draw(_events(kind))
    schema = _schema(kind)
    row = (42, stream, 3, kind, schema, orjson.dumps(payload), orjson.dumps(meta), us)
    moment = _EPOCH + timedelta(microseconds=us)
    stored, decoded = Batch(_PRICES, _SESSIONS, None), Batch(_PRICES, _SESSIONS, None)
    from_row = _outcome(stored, lambda: stored.add_row(row))
    reference = DecodedRow(stream, 3, 42, kind, schema, payload, meta, moment)
    assert from_row == _outcome(decoded, lambda: decoded.add(reference))


def test_the_common_shapes_take_the_rows_without_an_event(monkeypatch: Any) -> None:
    """The kernel's payloads never reach the fact functions from a stored row (the fast path is taken)."""
    from turnlog.analytics import _batch

    def refused(*args: Any) -> Any:
        raise AssertionError("the fact function was called")

    for name in ("model_call_fact", "run_start_fact", "run_end_fact"):
        monkeypatch.setattr(_batch, name, refused)
    usage = {"input_tokens": 10, "output_tokens": 5, "cost_usd": None}
    payloads = {
        "model.called": {"provider": "openai", "model": "gpt-4o", "status": "ok", "latency_ms": 12.5,
                         "ttft_ms": None, "usage": usage, "stream": False},
        "run.started": {"run_id": "r1", "verb": "chat", "parent_run_id": None, "provider": "openai",
                        "model": "gpt-4o"},
        "run.ended": {"run_id": "r1", "verb": "chat", "duration_ms": 900.0, "usage": usage, "chunks": None},
        "run.failed": {"run_id": "r1", "verb": "chat", "duration_ms": 900.0, "usage": usage,
                       "reason": "error", "error_type": "RateLimitError"},
    }  # fmt: skip
    batch = Batch(_PRICES, _SESSIONS, None)
    for position, (kind, data) in enumerate(payloads.items(), 1):
        schema = _schema(kind)
        batch.add_row((position, "branch-b1", position, kind, schema, orjson.dumps(data), b"{}", 10**15))
    assert len(batch.model_rows) == 1 and len(batch.runs) == 3
    assert batch.model_rows[0][1:3] == ("2001-09-09T01:46:40.000000+00:00", "2001-09-09")
    assert batch.model_rows[0][6:8] == ("b1", "s1")
