"""The fold rules: what each branch event does to the view, and that apply is pure."""

from __future__ import annotations

from typing import ClassVar

import pytest

from turnlog.eventstore import NewEvent, open_store
from turnlog.projections import (
    ActionRequest,
    ActionResponse,
    Appliers,
    AssistantResponse,
    BranchState,
    ChunkReceived,
    EventData,
    EventDecodeError,
    FoldError,
    Instruction,
    MessageAdded,
    MessageAnnotated,
    MessagesCleared,
    ModelCalled,
    ProviderSessionBound,
    RunEnded,
    RunFailed,
    RunStarted,
    System,
    UnknownEventType,
    Usage,
    apply,
    fold,
    new_event,
)

from .helpers import append, new_branch


@pytest.fixture
async def store():
    async with open_store("memory://") as s:
        yield s


async def folded(store, branch_id, *datas, **created):
    events = await new_branch(store, branch_id, **created)
    events += await append(store, branch_id, list(datas))
    return fold(events), events


async def test_created_sets_identity_system_and_models(store) -> None:
    system = System.create("Be terse.")
    state, events = await folded(
        store, "b1", name="main", user="alice", system=system, chat_model={"model": "m"}, metadata={"k": 1}
    )
    assert (state.branch_id, state.name, state.user, state.system) == ("b1", "main", "alice", system)
    assert dict(state.chat_model) == {"model": "m"} and state.parse_model is None
    assert state.metadata == {"k": 1}
    assert (state.version, state.position) == (1, events[0].position)
    assert state.created_at == state.updated_at == events[0].recorded_at
    assert state.messages == ()


async def test_messages_keep_progression_order_and_system_replaces(store) -> None:
    ins, res = Instruction.create("q"), AssistantResponse.create("a")
    new_sys = System.create("new rules")
    state, _ = await folded(
        store,
        "b1",
        MessageAdded(message=ins),
        MessageAdded(message=new_sys),
        MessageAdded(message=res),
        system=System.create("old"),
    )
    assert state.messages == (ins, res)
    assert state.system == new_sys
    assert state.message(new_sys.id) == new_sys
    assert state.last_response == res and state.last_instruction == ins


async def test_action_request_shows_the_response_that_answers_it(store) -> None:
    req = ActionRequest.create("add", {"a": 1})
    res = ActionResponse.create(req, output=2)
    state, events = await folded(store, "b1", MessageAdded(message=req), MessageAdded(message=res))
    view_req = state.message(req.id)
    assert isinstance(view_req, ActionRequest) and view_req.is_responded
    assert view_req.content.action_response_id == res.id
    assert state.response_for(req.id) == res
    assert state.action_links == {req.id: res.id}
    # history is not rewritten: the recorded request still has no link
    assert events[1].data["message"]["content"]["action_response_id"] is None


async def test_annotation_merges_metadata_into_the_view_only(store) -> None:
    res = AssistantResponse.create("{}", metadata={"model_response": {"raw": 1}})
    state, events = await folded(
        store,
        "b1",
        MessageAdded(message=res),
        MessageAnnotated(message_id=res.id, metadata={"parsed": {"n": 1}}, reason="parsed"),
        MessageAnnotated(message_id="not-there", metadata={"x": 1}),
    )
    [view] = state.messages
    assert view.metadata == {"model_response": {"raw": 1}, "parsed": {"n": 1}}
    assert view.content == res.content and view.id == res.id
    assert events[1].data["message"]["metadata"] == {"model_response": {"raw": 1}}


async def test_annotating_the_system_message(store) -> None:
    system = System.create("s")
    state, _ = await folded(
        store, "b1", MessageAnnotated(message_id=system.id, metadata={"v": 2}), system=system
    )
    assert state.system is not None and state.system.metadata == {"v": 2}


async def test_clear_keeps_the_system_message(store) -> None:
    system = System.create("s")
    ins = Instruction.create("q")
    after = AssistantResponse.create("after")
    state, _ = await folded(
        store, "b1", MessageAdded(message=ins), MessagesCleared(), MessageAdded(message=after), system=system
    )
    assert state.messages == (after,)
    assert state.system == system
    assert state.message(ins.id) is None


async def test_same_id_replaces_in_place(store) -> None:
    first, second = AssistantResponse.create("v1"), Instruction.create("q")
    replacement = AssistantResponse.create("v2", id=first.id)
    state, _ = await folded(
        store,
        "b1",
        MessageAdded(message=first),
        MessageAdded(message=second),
        MessageAdded(message=replacement),
    )
    assert state.messages == (replacement, second)


async def test_provider_sessions_model_calls_and_runs(store) -> None:
    usage = Usage(input_tokens=10, output_tokens=2, cost_usd=0.5)
    state, events = await folded(
        store,
        "b1",
        ProviderSessionBound(provider="claude_code", model="sonnet", session_id="s1"),
        ProviderSessionBound(provider="claude_code", model="sonnet", session_id="s2"),
        ModelCalled(
            call_id="c", provider="p", model="m", endpoint="e", fingerprint="f", latency_ms=1, status="ok"
        ),
        RunStarted(run_id="r1", verb="run", provider="claude_code", model="sonnet"),
        RunEnded(run_id="r1", verb="run", duration_ms=12.0, usage=usage, chunks=4),
        RunStarted(run_id="r2", verb="chat"),
        RunFailed(
            run_id="r2",
            verb="chat",
            duration_ms=1.0,
            error_type="Timeout",
            error_message="t",
            reason="timeout",
        ),
        RunStarted(run_id="r3", verb="chat"),
    )
    assert state.provider_session("claude_code", "sonnet") == "s2"
    assert state.model_calls == 1
    r1, r2, r3 = state.runs["r1"], state.runs["r2"], state.runs["r3"]
    assert (r1.status, r1.duration_ms, r1.usage, r1.chunks) == ("ended", 12.0, usage, 4)
    assert r1.started_at == events[4].recorded_at and r1.ended_at == events[5].recorded_at
    assert (r2.status, r2.reason, r2.error_type) == ("failed", "timeout", "Timeout")
    assert state.open_runs == (r3,)


async def test_apply_is_pure_and_siblings_do_not_see_each_other(store) -> None:
    events = await new_branch(store, "b1")
    base = apply(None, events[0])
    a1, a2 = AssistantResponse.create("one"), AssistantResponse.create("two")
    ev1 = (await append(store, "b1", [MessageAdded(message=a1)]))[0]
    s1 = apply(base, ev1)
    # a second, different event at the same version (as another writer would have made it)
    ev2 = type(ev1)(
        **{f: getattr(ev1, f) for f in ev1.__slots__} | {"data": new_event(MessageAdded(message=a2)).data}
    )
    s2 = apply(base, ev2)
    assert base.messages == () and base.version == 1
    assert s1.messages == (a1,) and s2.messages == (a2,)
    assert s1.message(a2.id) is None and s2.message(a1.id) is None
    assert apply(s1, (await append(store, "b1", [MessagesCleared()]))[0]).messages == ()
    assert s1.messages == (a1,)


def test_state_is_immutable() -> None:
    state = BranchState("b1")
    with pytest.raises(AttributeError):
        state.name = "x"  # type: ignore[misc]
    assert state.evolve(name="x").name == "x" and state.name is None


async def test_events_must_follow_in_order(store) -> None:
    events = await new_branch(store, "b1")
    more = await append(store, "b1", [MessagesCleared(), MessagesCleared()])
    state = apply(None, events[0])
    with pytest.raises(FoldError, match="expected version 2"):
        apply(state, more[1])
    with pytest.raises(FoldError, match="must start with"):
        apply(None, more[0])


async def test_other_stream_events_are_not_branch_events(store) -> None:
    events = await new_branch(store, "b1")
    await store.append("branch-b1", [new_event(ChunkReceived(seq=1, type="text"))])
    [chunk] = [e async for e in store.read_stream("branch-b1", 2)]
    with pytest.raises(FoldError, match="not a branch event"):
        apply(apply(None, events[0]), chunk)


async def test_unknown_types_raise_unless_registered(store) -> None:
    class Pinned(EventData):
        event_type: ClassVar[str] = "branch.pinned"
        label: str

    events = await new_branch(store, "b1")
    await store.append("branch-b1", [NewEvent("branch.pinned", {"label": "keep"})])
    [pinned] = [e async for e in store.read_stream("branch-b1", 2)]
    state = apply(None, events[0])
    with pytest.raises(UnknownEventType, match=r"branch\.pinned"):
        apply(state, pinned)

    extra = Appliers()

    @extra.register(Pinned)
    def _pin(state: BranchState, data: Pinned, event) -> BranchState:
        return state.evolve(metadata={**state.metadata, "pinned": data.label})

    after = apply(state, pinned, appliers=extra)
    assert after.metadata == {"pinned": "keep"} and after.version == 2
    with pytest.raises(ValueError, match="catalogue type"):
        extra.register(MessageAdded)


async def test_a_bad_payload_raises_naming_stream_and_version(store) -> None:
    events = await new_branch(store, "b1")
    await store.append("branch-b1", [NewEvent("message.added", {"message": {"kind": "Nope"}})])
    [bad] = [e async for e in store.read_stream("branch-b1", 2)]
    with pytest.raises(EventDecodeError) as info:
        apply(apply(None, events[0]), bad)
    assert (info.value.stream, info.value.version, info.value.type) == ("branch-b1", 2, "message.added")


async def test_state_mappings_are_read_only(store) -> None:
    state, _ = await folded(
        store, "b1", RunStarted(run_id="r", verb="chat"), RunStarted(run_id="s", verb="chat")
    )
    for mapping in (state.runs, state.provider_sessions, state.action_links, state.metadata):
        with pytest.raises(TypeError):
            mapping["x"] = 1  # type: ignore[index]


async def test_a_bad_message_in_a_long_run_is_reported_by_fold_and_rebuild(store) -> None:
    from turnlog.projections import rebuild

    events = await new_branch(store, "b1")
    events += await append(
        store, "b1", [MessageAdded(message=Instruction.create(f"q{i}")) for i in range(10)]
    )
    await store.append(
        "branch-b1", [NewEvent("message.added", {"message": {"kind": "Instruction", "id": 5}})]
    )
    events += [e async for e in store.read_stream("branch-b1", 12)]
    with pytest.raises(EventDecodeError) as info:
        fold(events)
    assert (info.value.version, info.value.type) == (12, "message.added")
    with pytest.raises(EventDecodeError, match="version 12"):
        await rebuild(store, "b1")
    assert fold(events[:11]) == await rebuild(store, "b1", at_version=11)


async def test_a_long_run_of_messages_is_checked_for_order_like_apply(store) -> None:
    first = await new_branch(store, "b1")
    run = await append(store, "b1", [MessageAdded(message=Instruction.create(f"q{i}")) for i in range(6)])
    other = await new_branch(store, "b2")
    stranger = await append(store, "b2", [MessageAdded(message=Instruction.create("elsewhere"))])
    with pytest.raises(FoldError, match="expected version 5") as batched:
        fold([*first, *run[:3], *run[4:]])
    with pytest.raises(FoldError, match="expected version 5") as single:
        apply(fold([*first, *run[:3]]), run[4])
    assert str(batched.value) == str(single.value)
    with pytest.raises(FoldError, match="the state is of stream 'branch-b1'"):
        fold([*first, *run[:2], *stranger, *run[2:]])
    with pytest.raises(FoldError, match="must start with"):
        fold(run)
    assert [m.content.instruction for m in fold([*other, *stranger]).messages] == ["elsewhere"]


async def test_batch_decoding_gives_what_decode_event_gives_and_checks_run_ids(store) -> None:
    """The fold's batch decoder: per event what decode_event gives (a message.added: its message)."""
    from turnlog.projections import decode_event
    from turnlog.projections._decode import decode_payloads

    events = await new_branch(store, "b1")
    asked = Instruction.create("q")
    events += await append(
        store,
        "b1",
        [MessageAdded(message=asked, run_id="r1"), MessagesCleared(), MessageAdded(message=asked)],
    )
    one_by_one = [decode_event(e) for e in events]
    assert [d.message for d in (one_by_one[1], one_by_one[3])] == [asked, asked]  # type: ignore[attr-defined]
    assert (one_by_one[1].run_id, one_by_one[3].run_id) == ("r1", None)  # type: ignore[attr-defined]
    decoded = decode_payloads(events)
    assert decoded == [one_by_one[0], asked, one_by_one[2], asked]
    assert isinstance(decoded[2], MessagesCleared)
    await store.append("branch-b1", [NewEvent("message.added", {"message": asked.to_dict(), "run_id": 5})])
    bad = [e async for e in store.read_stream("branch-b1", 5)]
    with pytest.raises(EventDecodeError, match="run_id"):
        fold([*events, *bad])


async def test_folding_leaves_the_collector_as_it_found_it(store) -> None:
    import gc
    import weakref

    events = await new_branch(store, "b1")
    events += await append(
        store, "b1", [MessageAdded(message=Instruction.create(f"q{i}")) for i in range(40)]
    )

    class Ring:
        def __init__(self) -> None:
            self.me = self

    ring = Ring()
    gone = weakref.ref(ring)
    del ring  # unreachable now: only the collector can free it
    assert gc.isenabled()
    state = fold(events)
    assert gc.isenabled() and len(state) == 40
    gc.collect()
    assert gone() is None  # a cycle that was young during the fold is still found and freed

    gc.disable()
    try:
        fold(events)
        assert not gc.isenabled()  # a caller who turned it off keeps it off
    finally:
        gc.enable()

    gc.freeze()  # a process that keeps objects frozen (say, before a fork) keeps them frozen
    try:
        frozen = gc.get_freeze_count()
        fold(events)
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
