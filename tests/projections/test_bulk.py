"""The bulk path of stored messages: the same messages as pydantic makes, or a fallback."""

from __future__ import annotations

import copy
import pickle
from datetime import UTC
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from turnlog.eventstore import NewEvent, NewSnapshot, open_store
from turnlog.projections import (
    PROJECTION_VERSION,
    SNAPSHOT_TYPE,
    ActionResponse,
    AnyMessage,
    AssistantResponse,
    EventDecodeError,
    Instruction,
    MessageAdded,
    SnapshotPolicy,
    apply,
    fold,
    maybe_snapshot,
    rebuild,
)
from turnlog.projections._bulk import ENABLED, SharedFieldsSet, validate_messages

from .helpers import append, new_branch
from .strategies import json_values, messages

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STRICT: TypeAdapter[list[AnyMessage]] = TypeAdapter(list[AnyMessage])


def stored(msg: Any) -> dict[str, Any]:
    """The message as a store hands it back: its JSON form, encoded and decoded."""
    return orjson.loads(orjson.dumps(msg.to_dict()))


def strict_or_none(items: list[Any]) -> list[Any] | None:
    try:
        return STRICT.validate_python(items, strict=True)
    except ValidationError:
        return None


def assert_same(got: list[Any], expected: list[Any]) -> None:
    """Equal messages built alike: class, fields (in order), fields set, content, dump, UTC."""
    assert got == expected
    for a, b in zip(got, expected, strict=True):
        assert type(a) is type(b) and type(a.content) is type(b.content)
        assert list(a.__dict__.items()) == list(b.__dict__.items())
        assert list(a.content.__dict__.items()) == list(b.content.__dict__.items())
        assert a.model_fields_set == b.model_fields_set
        assert a.content.model_fields_set == b.content.model_fields_set
        assert (a.__pydantic_extra__, a.__pydantic_private__) == (
            b.__pydantic_extra__,
            b.__pydantic_private__,
        )
        assert a.model_dump() == b.model_dump() and a.to_dict() == b.to_dict()
        assert a.created_at.tzinfo is UTC


def test_the_bulk_path_is_on() -> None:
    """The message models use nothing the bulk path cannot reproduce (else it stays off)."""
    assert ENABLED
    msg = Instruction.create("q", guidance="g")
    assert validate_messages([stored(msg)]) == [msg]


@PROPS
@given(st.lists(messages, max_size=6))
def test_stored_messages_come_back_as_pydantic_makes_them(msgs) -> None:
    items = [stored(m) for m in msgs]
    before = copy.deepcopy(items)
    got = validate_messages(items)
    assert got is not None
    assert_same(got, STRICT.validate_python(items, strict=True))
    assert got == msgs
    assert items == before  # the input is not changed


# a change to a stored message: (path, new value), or (path, None) to drop the key
_TOP = ["kind", "id", "created_at", "sender", "recipient", "metadata", "role", "content", "extra"]
_CONTENT = [
    "text",
    "instruction",
    "guidance",
    "context",
    "images",
    "function",
    "arguments",
    "output",
    "extra",
]
_TIMES = [
    "2026-01-02T03:04:05+05:00",
    "2026-01-02T03:04:05",
    "2026-01-02",
    "2026-01-02T03:04:05.123456789Z",
    "not a time",
    "2026-01-02T03:04:05+00:00",
    1767323045,
]
changes = st.one_of(
    st.tuples(st.just("created_at"), st.sampled_from(_TIMES)),
    st.tuples(st.sampled_from(_TOP), st.none() | json_values),
    st.tuples(st.sampled_from(_CONTENT).map(lambda k: "content." + k), st.none() | json_values),
    st.tuples(st.sampled_from(_TOP), st.just("drop")),
    st.tuples(st.sampled_from(_CONTENT).map(lambda k: "content." + k), st.just("drop")),
)


def changed(item: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    item = copy.deepcopy(item)
    target = item
    *parents, key = path.split(".")
    for p in parents:
        target = target.get(p) if isinstance(target, dict) else None
    if not isinstance(target, dict):
        return item  # an earlier change replaced the parent
    if value == "drop":
        target.pop(key, None)
    else:
        target[key] = value
    return item


@PROPS
@given(messages, st.lists(changes, min_size=1, max_size=2), messages)
def test_what_the_bulk_path_takes_pydantic_takes_alike(msg, edits, other) -> None:
    """A changed message is either refused (None, nothing raised) or validated like pydantic does."""
    item = stored(msg)
    for path, value in edits:
        item = changed(item, path, value)
    items = [stored(other), item]
    got = validate_messages(items)
    expected = strict_or_none(items)
    if got is not None:
        assert expected is not None
        assert_same(got, expected)


def test_json_values_keep_their_types_as_pydantic_keeps_them() -> None:
    """Each JSON type takes its own choice (a bool stays a bool, an int is not made a float)."""
    values = [None, "s", True, False, 0, 7, 2**70, 1.5, float("inf"), [1, 1.0, True], {"k": [None, {"n": 2}]}]
    msg = ActionResponse.create(function="f", output=None)
    items = [
        {**stored(msg), "metadata": {"v": v}, "content": {**stored(msg)["content"], "output": v}}
        for v in values
    ]
    got = validate_messages(items)
    assert got is not None
    assert_same(got, STRICT.validate_python(items, strict=True))
    for message, value in zip(got, values, strict=True):
        assert repr(message.content.output) == repr(value) and repr(message.metadata["v"]) == repr(value)
        assert type(message.content.output) is type(value)
    assert type(got[-2].content.output[1]) is float and type(got[-2].content.output[2]) is bool


def test_images_still_go_through_their_validator() -> None:
    """An empty list is taken as it is; raw base64 is made a data URI as the validator does."""
    msg = stored(Instruction.create("q"))
    raw = {**msg, "content": {**msg["content"], "images": ["aGVsbG8="]}}
    bad = {**msg, "content": {**msg["content"], "images": ["ftp://x"]}}
    got = validate_messages([msg, raw])
    assert got is not None
    assert_same(got, STRICT.validate_python([msg, raw], strict=True))
    assert got[0].content.images == [] and got[1].content.images == ["data:image/jpeg;base64,aGVsbG8="]
    assert validate_messages([msg, bad]) is None


def test_a_time_in_another_offset_or_a_missing_field_falls_back() -> None:
    msg = AssistantResponse.create("a")
    offset = {**stored(msg), "created_at": "2026-01-02T08:04:05+05:00"}
    assert validate_messages([offset]) is None
    [general] = STRICT.validate_python([offset], strict=True)
    assert general.created_at.tzinfo is UTC and general.created_at.hour == 3
    assert validate_messages([{k: v for k, v in stored(msg).items() if k != "sender"}]) is None
    assert validate_messages([stored(msg), {**stored(msg), "kind": "Nope"}]) is None


def test_the_shared_fields_set_is_read_only_and_copies_are_ordinary() -> None:
    a, b = validate_messages([stored(Instruction.create("q")), stored(Instruction.create("r"))])  # type: ignore[misc]
    assert a.model_fields_set is b.model_fields_set
    assert isinstance(a.model_fields_set, SharedFieldsSet)
    assert a.model_fields_set == set(Instruction.model_fields)
    for change in (
        lambda s: s.add("x"),
        lambda s: s.update({"x"}),
        lambda s: s.discard("id"),
        lambda s: s.clear(),
    ):
        with pytest.raises(TypeError, match="read-only"):
            change(a.model_fields_set)
    with pytest.raises(TypeError):
        fields = a.model_fields_set
        fields |= {"x"}
    assert a.model_fields_set == set(Instruction.model_fields)
    moved = a.model_copy(update={"sender": "me"})
    assert moved.sender == "me" and type(moved.model_fields_set) is set
    assert a.sender is None and b == validate_messages([stored(b)])[0]  # type: ignore[index]
    assert copy.deepcopy(a) == a and pickle.loads(pickle.dumps(a)) == a
    assert a.model_dump(exclude_unset=True) == a.model_dump()
    assert a.model_fields_set | {"x"} == set(Instruction.model_fields) | {"x"}


@pytest.fixture
async def store():
    async with open_store("memory://") as s:
        yield s


async def test_a_run_with_a_time_in_another_offset_folds_like_apply(store) -> None:
    events = await new_branch(store, "b1")
    events += await append(store, "b1", [MessageAdded(message=Instruction.create(f"q{i}")) for i in range(4)])
    odd = {**Instruction.create("late").to_dict(), "created_at": "2026-01-02T08:04:05+05:00"}
    await store.append("branch-b1", [NewEvent("message.added", {"message": odd})])
    events += [e async for e in store.read_stream("branch-b1", 6)]
    events += await append(store, "b1", [MessageAdded(message=AssistantResponse.create("a"))])
    state = None
    for event in events:
        state = apply(state, event)
    assert fold(events) == state
    assert [m.created_at.tzinfo for m in fold(events).messages] == [UTC] * 6


async def test_an_invalid_message_among_many_raises_naming_its_event(store) -> None:
    events = await new_branch(store, "b1")
    events += await append(store, "b1", [MessageAdded(message=Instruction.create(f"q{i}")) for i in range(5)])
    bad = {**AssistantResponse.create("a").to_dict(), "created_at": "2026-01-02T03:04:05"}  # naive
    await store.append("branch-b1", [NewEvent("message.added", {"message": bad})])
    events += [e async for e in store.read_stream("branch-b1", 7)]
    with pytest.raises(EventDecodeError) as info:
        fold(events)
    assert (info.value.stream, info.value.version) == ("branch-b1", 7)
    assert "timezone-aware" in str(info.value)


async def test_snapshot_messages_in_another_offset_load_the_general_way(store) -> None:
    events = await new_branch(store, "b1")
    events += await append(store, "b1", [MessageAdded(message=Instruction.create(f"q{i}")) for i in range(4)])
    state = fold(events)
    assert await maybe_snapshot(store, state, SnapshotPolicy(every=1))
    # the messages of a snapshot are in its part records, the head holds none
    snap = await store.load_snapshot("branch-b1", type=f"{SNAPSHOT_TYPE}.part1")
    assert snap is not None
    data = dict(snap.data)
    first = dict(data["messages"][0])
    moment = state.messages[0].created_at.astimezone(__import__("datetime").timezone.max)
    data["messages"] = [{**first, "created_at": moment.isoformat()}, *data["messages"][1:]]
    await store.save_snapshot(
        NewSnapshot(
            snap.stream,
            snap.version,
            snap.type,
            data,
            snap.schema,
            {"projection_version": PROJECTION_VERSION},
        )
    )
    loaded = await rebuild(store, "b1")
    assert loaded == state
    assert loaded.messages[0].created_at.tzinfo is UTC


def test_a_model_with_more_than_fields_is_not_built_in_bulk() -> None:
    """A model validator, private attribute or other extra would be skipped: such models are refused."""
    from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator

    from turnlog.projections._bulk import _check_plain, _Unsupported

    class Plain(BaseModel):
        model_config = ConfigDict(frozen=True, extra="forbid")
        a: int

    class Checked(Plain):
        @model_validator(mode="after")
        def _check(self) -> Checked:
            return self

    class Private(Plain):
        _seen: int = PrivateAttr(default=0)

    class Open(BaseModel):
        a: int

    _check_plain(Plain)
    for cls in (Checked, Private, Open):
        with pytest.raises(_Unsupported):
            _check_plain(cls)
