"""The PostgreSQL group append's plan and parameters, without a server.

``plan_group`` has an unrolled path for one-event units, held equal to its general loop.
``group_params`` writes the arrays of ``Sql.insert_many`` itself instead of through psycopg's
dumpers. These tests read them back with psycopg's binary array loaders (the format the
server's ``array_send`` writes and ``array_recv`` reads) and require every value as given.
The server itself reads them in ``test_postgres_appends`` and ``test_group_commit``.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnlog.eventstore import ANY, NO_STREAM, STREAM_EXISTS, ConcurrencyError, NewEvent
from turnlog.eventstore._postgres_write import GROUP_FORMATS, group_params, plan_group
from turnlog.eventstore._validation import PreparedAppend, prepare_events

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")

# The array types of the parameters after the count, in order (pg_type oids).
_ARRAY_OIDS = {
    "text[]": 1009,
    "bigint[]": 1016,
    "uuid[]": 2951,
    "integer[]": 1007,
    "bytea[]": 1001,
}
_PARAM_TYPES = ["text[]", "text[]", "text[]", "bigint[]", "uuid[]", "text[]", "integer[]", "bytea[]",
                "bytea[]", "bigint[]", "text[]", "text[]"]  # fmt: skip


def _load(type_name: str, data: bytes) -> list[Any]:
    from psycopg.adapt import Transformer
    from psycopg.pq import Format

    loader = Transformer().get_loader(_ARRAY_OIDS[type_name], Format.BINARY)
    loaded: list[Any] = loader.load(data)
    return loaded


texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
rows = st.lists(
    st.tuples(
        texts,
        st.integers(-(2**63), 2**63 - 1),
        st.uuids(),
        texts,
        st.integers(-(2**31), 2**31 - 1),
        st.binary(max_size=300),
        st.binary(max_size=60),
        st.integers(-(2**63), 2**63 - 1),
        texts,
        texts,
    ),
    min_size=1,
    max_size=70,
)


@given(rows, st.lists(st.tuples(texts, texts), max_size=5))
def test_group_params_read_back_as_the_values_given(
    values: list[tuple[Any, ...]], heads: list[tuple[str, str]]
) -> None:
    columns = [list(column) for column in zip(*values, strict=True)]
    columns[2] = [str(value) for value in columns[2]]  # the store's ids are canonical text
    streams, digests = [h[0] for h in heads], [h[1] for h in heads]
    params = group_params(len(values), streams, digests, columns)
    assert len(params) == len(GROUP_FORMATS) == 1 + len(_PARAM_TYPES)
    assert params[0] == str(len(values)).encode() and GROUP_FORMATS[0] == 0
    loaded = [_load(type_name, data) for type_name, data in zip(_PARAM_TYPES, params[1:], strict=True)]
    assert loaded[0] == streams and loaded[1] == digests
    expected = [list(column) for column in zip(*values, strict=True)]
    assert loaded[2:] == expected


def test_an_id_is_sent_as_its_sixteen_bytes() -> None:
    event_id = str(uuid.UUID(int=2**128 - 2))
    params = group_params(1, [], [], [["s"], [1], [event_id], ["t"], [1], [b"{}"], [b"{}"], [0], [""], ["h"]])
    assert _load("uuid[]", params[5]) == [uuid.UUID(event_id)]


_IDS = [str(uuid.UUID(int=n + 1)) for n in range(6)]
_entries = st.tuples(
    st.sampled_from(["a", "b", "c"]),
    st.lists(
        st.tuples(st.sampled_from(_IDS), st.sampled_from(["t.x", "t.y"]), st.integers(0, 3)),
        min_size=1,
        max_size=3,
        unique_by=lambda e: e[0],
    ),
    st.sampled_from([ANY, NO_STREAM, STREAM_EXISTS, 1, 2, 3]),
)


def _unit(entries: list[tuple[str, list[tuple[str, str, int]], Any]]) -> list[PreparedAppend] | None:
    ids = [event[0] for _, events, _ in entries for event in events]
    if len(set(ids)) != len(ids):
        return None  # append_batch refuses an id twice in one call
    unit = []
    for stream, events, expected in entries:
        news = [NewEvent(type_, {"n": n}, id=uuid.UUID(event_id)) for event_id, type_, n in events]
        unit.append(PreparedAppend(*prepare_events(stream, news, 1 << 20), expected))
    return unit


def _comparable(outcome: Any) -> Any:
    if isinstance(outcome, ConcurrencyError):
        return (type(outcome), str(outcome), outcome.stream, outcome.expected, outcome.actual)
    return outcome


@given(
    st.lists(st.lists(_entries, min_size=1, max_size=2), min_size=1, max_size=8),
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 3)),
)
def test_one_event_units_are_planned_as_the_general_loop_plans_them(
    drawn: list[list[Any]], heads: dict[str, int]
) -> None:
    """Versions, chains, ConcurrencyErrors, deferred units and the columns: the same either way."""
    units = [unit for unit in map(_unit, drawn) if unit is not None]
    start = {stream: (heads.get(stream, 0), f"h-{stream}" if heads.get(stream) else "") for stream in "abc"}
    plans, ends = [], []
    for unrolled in (True, False):
        tips = dict(start)
        plan = plan_group(units, {}, tips, 1_700_000_000_000_000, unrolled=unrolled)
        plans.append(plan._replace(outcomes=[_comparable(o) for o in plan.outcomes]))
        ends.append(tips)
    assert plans[0] == plans[1]
    assert ends[0] == ends[1]
