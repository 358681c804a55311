"""A stored head reads the same through the exact-shape path as through pydantic's validation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from turnlog.projections import ForkOrigin, RunInfo
from turnlog.projections._head_read import ENABLED, _head_fields, head_of, link_of
from turnlog.projections._snapshot_head import HeadLink, SnapshotHead

from .strategies import json_values, messages, optional_texts, optional_times, run_infos

_stored_message = messages.map(lambda m: m.to_dict())
_small_dicts = st.one_of(st.none(), st.dictionaries(st.text(max_size=4), json_values, max_size=2))
_session = st.one_of(
    st.tuples(st.text(max_size=4), st.text(max_size=4), st.text(max_size=4)),
    st.tuples(st.text(max_size=4), st.text(max_size=4), st.text(max_size=4), st.text(max_size=4)),
)
_heads = st.builds(
    SnapshotHead.model_construct,
    branch_id=st.text(max_size=8),
    start=st.integers(0, 100),
    n=st.integers(0, 100),
    maps=st.sampled_from(["full", "delta"]),
    depth=st.integers(0, 50),
    base_version=st.one_of(st.none(), st.integers(0, 10**6)),
    base_n=st.integers(0, 100),
    last_id=optional_texts,
    messages=st.lists(st.one_of(st.none(), _stored_message), max_size=2),
    parts=st.integers(1, 4),
    keyframe_entries=st.integers(0, 100),
    delta_entries=st.integers(0, 100),
    name=optional_texts,
    user=optional_texts,
    session_id=optional_texts,
    system=st.one_of(st.none(), _stored_message),
    chat_model=_small_dicts,
    parse_model=_small_dicts,
    metadata=st.dictionaries(st.text(max_size=4), json_values, max_size=2),
    runs=st.lists(run_infos, max_size=3),
    provider_sessions=st.lists(_session, max_size=2),
    action_links=st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
    forked_from=st.one_of(
        st.none(), st.builds(ForkOrigin, st.text(max_size=4), st.text(max_size=4), st.integers())
    ),
    version=st.integers(0, 10**6),
    position=st.integers(0, 10**6),
    created_at=optional_times,
    updated_at=optional_times,
    model_calls=st.integers(0, 100),
    over=st.lists(st.tuples(st.integers(0, 100), _stored_message), max_size=2),
)


def _stored(head: SnapshotHead) -> dict[str, Any]:
    """What the store gives back for a head: its stored JSON, through JSON text."""
    data: dict[str, Any] = json.loads(json.dumps(head.stored()))
    return data


def _tz(value: Any) -> Any:
    """The timezone classes of every time in a value (pydantic's own would differ from the fold's)."""
    if isinstance(value, BaseModel):
        return {k: _tz(v) for k, v in value.__dict__.items()}
    if isinstance(value, RunInfo):
        return [type(value.started_at.tzinfo) if value.started_at else None, _tz(value.ended_at)]
    if isinstance(value, list | tuple):
        return [_tz(v) for v in value]
    return type(value.tzinfo) if hasattr(value, "tzinfo") else None


def _same(fast: BaseModel, general: BaseModel) -> None:
    assert type(fast) is type(general)
    assert fast == general
    assert fast.__dict__ == general.__dict__
    assert fast.model_fields_set == general.model_fields_set
    assert _tz(fast) == _tz(general)
    assert fast.model_dump(mode="json") == general.model_dump(mode="json")


def _read(read: Any, model: type[BaseModel], data: Any) -> None:
    """``read`` gives what ``model.model_validate`` gives, or raises what it raises."""
    try:
        general = model.model_validate(data)
    except ValidationError as exc:
        with pytest.raises(ValidationError) as raised:
            read(data)
        assert raised.value.errors(include_context=False) == exc.errors(include_context=False)
        return
    _same(read(data), general)


def test_the_exact_shape_path_is_on() -> None:
    assert ENABLED


@settings(max_examples=200, deadline=None)
@given(_heads)
def test_a_stored_head_reads_as_pydantic_validates_it(head: SnapshotHead) -> None:
    data = _stored(head)
    _head_fields(data)  # what the writer stores takes the exact-shape path (raises if refused)
    _read(head_of, SnapshotHead, data)
    _read(link_of, HeadLink, data)


_paths = st.lists(st.integers(0, 50), min_size=1, max_size=4)
_odd_values = st.one_of(
    json_values,
    st.sampled_from(
        [1, 1.0, -1, True, None, "", "x", "2026-01-01T00:00:00+00:00", "full", [], {}, ["a", "b", "c"]]
    ),
)


def _mutate(data: Any, path: list[int], value: Any, how: int) -> Any:
    """``data`` with one value somewhere in it replaced, or a key removed or added."""
    if not path or not isinstance(data, dict | list) or not data:
        return value
    if isinstance(data, dict):
        keys = sorted(data)
        key = keys[path[0] % len(keys)]
        out = dict(data)
        if len(path) == 1 and how == 1:
            del out[key]
        elif len(path) == 1 and how == 2:
            out[f"{key}_extra"] = value
        else:
            out[key] = _mutate(data[key], path[1:], value, how)
        return out
    items = list(data)
    i = path[0] % len(items)
    items[i] = _mutate(items[i], path[1:], value, how)
    return items


@settings(max_examples=300, deadline=None)
@given(_heads, _paths, _odd_values, st.integers(0, 2))
def test_a_changed_head_reads_as_pydantic_validates_it_or_fails_alike(
    head: SnapshotHead, path: list[int], value: Any, how: int
) -> None:
    data = _mutate(_stored(head), path, value, how)
    _read(head_of, SnapshotHead, data)
    _read(link_of, HeadLink, data)


@pytest.mark.parametrize("data", [None, [], "head", 3, {}])
def test_a_head_that_is_not_an_object_fails_as_pydantic_says(data: Any) -> None:
    _read(head_of, SnapshotHead, data)
    _read(link_of, HeadLink, data)
