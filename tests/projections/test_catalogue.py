"""The event catalogue: every schema round-trips, writes and reads validate, old schemas upcast."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import ClassVar

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.eventstore import NewEvent, RecordedEvent, TurnlogError, Upcaster, open_store, uuid7
from turnlog.projections import (
    CATALOGUE,
    AssistantResponse,
    BranchCreated,
    BranchForked,
    BranchIncluded,
    BranchNameClaimed,
    BranchRemoved,
    BranchUserSet,
    ChunkReceived,
    DefaultBranchSet,
    EventData,
    EventDecodeError,
    EventRegistry,
    InvalidEventDataError,
    MessageAdded,
    MessageAnnotated,
    MessagesCleared,
    ModelCalled,
    NodeCompleted,
    NodeFailed,
    NodeQueued,
    NodeSkipped,
    NodeStarted,
    ProviderSessionBound,
    RunEnded,
    RunFailed,
    RunStarted,
    SessionCreated,
    System,
    UnknownEventType,
    Usage,
    catalogue_upcasters,
    content_fields,
    decode_event,
    holds_content,
    new_event,
    new_events,
    redaction_keep,
    stored_payload,
    without_content,
)

from .strategies import json_values, messages

USAGE = Usage(input_tokens=10, output_tokens=5, cost_usd=0.001)
EXAMPLES: list[EventData] = [
    BranchCreated(
        branch_id="b1",
        name="main",
        user="u",
        system=System.create("Be terse."),
        chat_model={"provider": "openai", "model": "gpt-4.1-mini"},
        metadata={"k": [1, 2]},
        session_id="s1",
    ),
    BranchForked(
        branch_id="b2", parent_branch_id="b1", parent_stream="branch-b1", parent_version=3, name="f"
    ),
    MessageAdded(
        message=AssistantResponse.create("hi", metadata={"run_id": "r1", "chunk_range": [1, 4]}), run_id="r1"
    ),
    BranchUserSet(user="s1", session_id="s1"),
    MessageAnnotated(message_id="m1", metadata={"parsed": {"n": 1}}, reason="parsed"),
    MessagesCleared(),
    ProviderSessionBound(provider="claude_code", model="sonnet", session_id="sess-1"),
    ModelCalled(
        call_id="c1",
        provider="openai",
        model="gpt-4.1-mini",
        endpoint="chat/completions",
        verb="communicate",
        run_id="r1",
        message_ids=["m1"],
        params={"temperature": 0.2},
        tools=["add"],
        response_format="Answer",
        fingerprint="ab" * 32,
        context_providers=["clock"],
        response={"choices": []},
        usage=USAGE,
        latency_ms=12.5,
        ttft_ms=3.0,
        attempts=2,
        status="error",
        error_type="RateLimited",
        error_message="slow down",
        stream=True,
    ),
    RunStarted(run_id="r1", verb="run", parent_run_id=None, provider="claude_code", model="sonnet"),
    RunEnded(run_id="r1", verb="run", duration_ms=10.0, usage=USAGE, chunks=7),
    RunFailed(
        run_id="r1",
        verb="run",
        duration_ms=1.0,
        error_type="CancelledError",
        error_message="",
        reason="crashed",
        recovered={"chunks": 3},
    ),
    ChunkReceived(seq=1, type="tool_use", tool_name="Read", tool_id="t1", tool_input={"path": "x"}),
    SessionCreated(session_id="s1", name="demo"),
    BranchIncluded(branch_id="b1"),
    BranchRemoved(branch_id="b1"),
    DefaultBranchSet(branch_id="b1"),
    BranchNameClaimed(name="main", branch_id="b1"),
    NodeQueued(node_id="n1", operation="chat", branch_id="b1"),
    NodeStarted(node_id="n1", operation="chat"),
    NodeCompleted(node_id="n1", duration_ms=2.0, result={"ok": True}),
    NodeFailed(node_id="n1", duration_ms=2.0, error_type="ValueError", error_message="bad"),
    NodeSkipped(node_id="n1", reason="upstream failed"),
]


def recorded(ev: NewEvent, *, stream: str = "branch-b1", version: int = 1) -> RecordedEvent:
    """What a store would hand back for ``ev`` (after a real JSON encode/decode)."""
    return RecordedEvent(
        id=ev.id,
        stream=stream,
        version=version,
        position=version,
        type=ev.type,
        schema=ev.schema,
        data=orjson.loads(orjson.dumps(dict(ev.data))),
        meta=dict(ev.meta or {}),
        recorded_at=datetime.now(UTC),
        prev_hash="",
        hash="",
    )


def test_every_catalogue_type_has_an_example() -> None:
    assert {type(e).event_type for e in EXAMPLES} == set(CATALOGUE)


@pytest.mark.parametrize("data", EXAMPLES, ids=lambda d: d.event_type)
def test_every_schema_round_trips_through_new_event_and_decode_event(data: EventData) -> None:
    ev = new_event(data, meta={"branch_id": "b1", "actor": "test"})
    assert (ev.type, ev.schema) == (data.event_type, data.schema_version)
    assert ev.meta == {"branch_id": "b1", "actor": "test"}
    back = decode_event(recorded(ev))
    assert back == data
    assert type(back) is type(data)


@settings(max_examples=60, deadline=None)
@given(messages, st.none() | st.text(max_size=8))
def test_message_added_round_trips_every_message(msg, run_id) -> None:
    data = MessageAdded(message=msg, run_id=run_id)
    back = decode_event(recorded(new_event(data)))
    assert isinstance(back, MessageAdded)
    assert back.message == msg and type(back.message) is type(msg)


@settings(max_examples=40, deadline=None)
@given(json_values)
def test_node_result_is_any_json(value) -> None:
    data = NodeCompleted(node_id="n", duration_ms=1.0, result=value)
    assert decode_event(recorded(new_event(data))) == data


def test_new_event_keeps_a_given_id() -> None:
    eid = uuid7()
    assert new_event(MessagesCleared(), id=eid).id == eid


def test_new_event_rejects_a_payload_that_bypassed_validation() -> None:
    sneaky = RunStarted.model_construct(run_id=123, verb="run")
    with pytest.raises(InvalidEventDataError, match="run_id") as info:
        new_event(sneaky)
    assert isinstance(info.value, TurnlogError)


def test_new_event_rejects_unregistered_types() -> None:
    class Stray(EventData):
        event_type: ClassVar[str] = "stray.thing"

    with pytest.raises(InvalidEventDataError, match="not a registered schema"):
        new_event(Stray())


def test_new_event_rejects_non_string_known_meta() -> None:
    with pytest.raises(InvalidEventDataError, match="run_id"):
        new_event(MessagesCleared(), meta={"run_id": 5})


def test_new_events_share_one_checked_copy_of_the_meta() -> None:
    """A batch's events hold one copy of the meta, so an append encodes it once; the caller's dict stays its own."""
    meta = {"run_id": "r1"}
    first, second = new_events([MessagesCleared(), RunStarted(run_id="r1", verb="run")], meta=meta)
    assert first.meta is second.meta
    assert first.meta == meta and first.meta is not meta
    assert (first.type, second.type) == ("messages.cleared", "run.started")
    assert first.id != second.id


def test_new_events_reject_what_new_event_rejects() -> None:
    """Every payload of a batch is validated again, and the meta checked, as by ``new_event``."""
    sneaky = RunStarted.model_construct(run_id=123, verb="run")
    with pytest.raises(InvalidEventDataError, match="run_id"):
        new_events([MessagesCleared(), sneaky])
    with pytest.raises(InvalidEventDataError, match="run_id"):
        new_events([MessagesCleared()], meta={"run_id": 5})


def test_schemas_reject_bad_input_on_construction() -> None:
    with pytest.raises(ValueError):
        RunFailed(run_id="r", verb="v", duration_ms=1, error_type="E", error_message="m", reason="oops")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ChunkReceived(seq=0, type="text")


def test_decode_event_names_stream_version_and_type_on_a_bad_payload() -> None:
    ev = NewEvent("run.started", {"run_id": "r1"})
    with pytest.raises(EventDecodeError) as info:
        decode_event(recorded(ev, stream="branch-x", version=7))
    err = info.value
    assert (err.stream, err.version, err.type) == ("branch-x", 7, "run.started")
    assert "verb" in str(err) and "branch-x" in str(err)
    assert isinstance(err, TurnlogError)


def test_decode_event_rejects_unknown_types() -> None:
    with pytest.raises(UnknownEventType, match=r"mystery\.event"):
        decode_event(recorded(NewEvent("mystery.event", {})))


def test_decode_event_rejects_a_newer_schema_than_the_code_knows() -> None:
    ev = NewEvent("messages.cleared", {}, schema=9)
    with pytest.raises(EventDecodeError, match="schema 9"):
        decode_event(recorded(ev))


# --------------------------------------------------------------------------- registering and upcasting


class NoteAddedV2(EventData):
    """A test type whose schema 1 had ``body`` and no ``tags``."""

    event_type: ClassVar[str] = "note.added"
    schema_version: ClassVar[int] = 2
    upcasters: ClassVar[dict[int, Upcaster]] = {
        1: lambda d: {"text": d["body"], "tags": d.get("tags", ["legacy"])},
    }
    text: str
    tags: list[str]


def test_catalogue_upcasters_exist_and_are_empty_until_a_schema_moves() -> None:
    ups = catalogue_upcasters()
    assert ups.upcast("message.added", 1, {"x": 1}) == (1, {"x": 1})


def test_registered_type_is_upcast_by_the_registry_upcasters() -> None:
    registry = CATALOGUE.copy()
    registry.register(NoteAddedV2)
    assert "note.added" not in CATALOGUE
    ups = catalogue_upcasters(registry)
    assert ups.upcast("note.added", 1, {"body": "hello"}) == (2, {"text": "hello", "tags": ["legacy"]})


def test_decode_event_upcasts_an_old_schema_itself() -> None:
    registry = CATALOGUE.copy()
    registry.register(NoteAddedV2)
    old = NewEvent("note.added", {"body": "hello"}, schema=1)
    note = decode_event(recorded(old), registry)
    assert note == NoteAddedV2(text="hello", tags=["legacy"])
    current = new_event(NoteAddedV2(text="t", tags=[]), registry=registry)
    assert current.schema == 2 and decode_event(recorded(current), registry) == NoteAddedV2(text="t", tags=[])


async def test_store_opened_with_catalogue_upcasters_lifts_old_events() -> None:
    registry = CATALOGUE.copy()
    registry.register(NoteAddedV2)
    async with open_store("sqlite:///:memory:", upcasters=catalogue_upcasters(registry)) as store:
        await store.append("notes-1", [NewEvent("note.added", {"body": "hello"}, schema=1)])
        [stored] = [ev async for ev in store.read_stream("notes-1")]
        assert stored.schema == 2
        assert decode_event(stored, registry) == NoteAddedV2(text="hello", tags=["legacy"])


def test_registering_a_clashing_name_fails() -> None:
    class Other(EventData):
        event_type: ClassVar[str] = "message.added"

    with pytest.raises(ValueError, match="already registered"):
        CATALOGUE.copy().register(Other)


def test_ids_in_new_events_are_uuids() -> None:
    assert isinstance(new_event(MessagesCleared()).id, uuid.UUID)


def _undeclared(registry: EventRegistry) -> list[str]:
    """The types of ``registry`` that do not say which of their fields hold content."""
    found = []
    for name in registry:
        schema = registry.get(name)
        assert schema is not None
        fields = schema.content_fields
        if fields is None:
            found.append(name)
        else:
            unknown = set(fields) - set(schema.model_fields)
            assert not unknown, f"{name} declares content fields it does not have: {unknown}"
    return found


def test_every_catalogue_type_declares_its_content_fields() -> None:
    """redact, forget and the exports find content only where the catalogue says it is."""
    assert _undeclared(CATALOGUE) == []
    # The walk notices a type that declares nothing (and would be erased whole).
    reg = CATALOGUE.copy()

    class NoteAdded(EventData):
        event_type: ClassVar[str] = "test.note_added"
        text: str

    reg.register(NoteAdded)
    assert _undeclared(reg) == ["test.note_added"]
    assert content_fields("test.note_added", reg) is None
    assert redaction_keep("test.note_added", {"text": "x"}, registry=reg) is None


def test_the_content_of_the_model_call_and_the_run_is_declared() -> None:
    """What the issue names as content is declared: raw response, errors, chunks, tool data."""
    assert {"response", "error_message", "params"} <= set(content_fields("model.called") or ())
    assert {"error_message", "recovered"} <= set(content_fields("run.failed") or ())
    assert {"content", "tool_input", "tool_output", "metadata"} <= set(content_fields("stream.chunk") or ())
    assert content_fields("message.added") == ("message",)
    assert content_fields("node.completed") == ("result",)
    assert content_fields("run.started") == ()


def test_redaction_keep_keeps_structure_and_a_decodable_payload() -> None:
    """What a redaction keeps still decodes, and holds no content."""
    failed = RunFailed(
        run_id="r", verb="chat", duration_ms=2.0, error_type="X", error_message="alice", reason="error"
    ).model_dump(mode="json")
    kept = redaction_keep("run.failed", failed)
    assert kept is not None and "alice" not in repr(kept)
    assert RunFailed.model_validate(kept).run_id == "r"
    chunk = ChunkReceived(seq=3, type="tool_use", tool_name="f", tool_input={"q": "alice"}).model_dump(
        mode="json"
    )
    kept = redaction_keep("stream.chunk", chunk)
    assert kept is not None and "alice" not in repr(kept)
    assert ChunkReceived.model_validate(kept).seq == 3
    assert holds_content("stream.chunk", chunk)
    assert not holds_content("stream.chunk", kept)
    assert without_content("run.started", {"run_id": "r", "verb": "chat"}) == {"run_id": "r", "verb": "chat"}


def test_stored_payload_is_what_new_event_stores() -> None:
    """A payload journaled before its commit (``turnlog proxy``) equals what the append stores."""
    for data in (
        ChunkReceived(seq=3, type="text", content="hi"),
        ChunkReceived(seq=4, type="text", content="", is_delta=True, metadata={"wire": True}),
        RunStarted(run_id=str(uuid7()), verb="communicate"),
    ):
        assert stored_payload(data) == new_event(data).data
