"""model.called names its history by version: constant size, same message ids as were sent."""

from __future__ import annotations

import anyio
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog.eventstore import EventStore, NewEvent, RecordedEvent, open_store
from turnlog.kernel import Branch, called_message_ids
from turnlog.projections import Instruction, ModelCalled, StateCache, catalogue_upcasters
from turnlog.testing import ScriptedModel


async def calls_of(store: EventStore, branch: Branch) -> list[RecordedEvent]:
    return [e async for e in store.read_stream(branch.stream) if e.type == "model.called"]


async def test_branch_history_is_named_by_version_not_listed(store: EventStore) -> None:
    model = ScriptedModel(*(f"answer {i}" for i in range(40)))
    branch = Branch(store=store, system="Be brief.", chat_model=model)
    for i in range(40):
        await branch.chat_and_record(f"question {i} " + "x" * 50)
    events = await calls_of(store, branch)
    first, last = events[0].data, events[-1].data
    # an empty list is a default: schema 3 does not store it
    assert "message_ids" not in first and "message_ids" not in last
    assert (first["history_version"], last["history_version"]) == (1, events[-1].version - 2)
    assert last["instruction_id"] == branch.messages[-2].id
    sizes = [len(orjson.dumps(e.data)) for e in events]
    assert max(sizes) - min(sizes) < 32, "the record does not grow with the conversation"
    resolved = await called_message_ids(store, events[-1])
    assert resolved == [branch.system.id, *(m.id for m in branch.messages[:-1])]
    assert resolved == model.calls[-1].request.message_ids


async def test_an_explicit_progression_is_listed(store: EventStore) -> None:
    model = ScriptedModel("a", "b", "c")
    branch = Branch(store=store, chat_model=model)
    await branch.chat_and_record("one")
    await branch.chat_and_record("two")
    await branch.chat("three", progression=[branch.messages[0].id, branch.messages[1].id])
    event = (await calls_of(store, branch))[-1]
    assert "history_version" not in event.data and "instruction_id" not in event.data
    assert event.data["message_ids"] == model.calls[-1].request.message_ids
    assert await called_message_ids(store, event) == model.calls[-1].request.message_ids


async def test_calls_recorded_with_a_listed_history_still_resolve(store: EventStore) -> None:
    old = ModelCalled(
        call_id="c1",
        provider="test",
        model="m",
        endpoint="test",
        message_ids=["m1", "m2"],
        fingerprint="0" * 64,
        latency_ms=1.0,
        status="ok",
    )
    # as written before history_version existed: the two fields are absent
    payload = old.model_dump(mode="json")
    del payload["history_version"], payload["instruction_id"]
    await store.append("branch-old", [NewEvent("model.called", payload)])
    recorded = next(iter([e async for e in store.read_stream("branch-old")]))
    assert await called_message_ids(store, recorded) == ["m1", "m2"]


# ------------------------------------------------------------------------------------ property

STEPS = st.lists(
    st.sampled_from(["record", "chat", "clear", "system", "progression", "fork", "other_writer"]),
    min_size=1,
    max_size=12,
)


async def scenario(steps: list[str]) -> None:
    async with open_store("sqlite:///:memory:", upcasters=catalogue_upcasters()) as store:
        model = ScriptedModel(*(f"reply {i}" for i in range(len(steps) + 1)))
        branch = Branch(store=store, system="Start.", chat_model=model)
        branches = [branch]
        for i, step in enumerate(steps):
            if step == "record":
                await branch.chat_and_record(f"q{i}")
            elif step == "chat":
                await branch.chat(f"q{i}")
            elif step == "clear":
                await branch.refresh()  # order-dependent: it refuses a stale view
                await branch.clear_messages()
            elif step == "system":
                await branch.set_system(f"System {i}.")
            elif step == "progression":
                await branch.chat(
                    f"q{i}", progression=[m.id for m in branch.messages[-2:] if m.role == "user"]
                )
            elif step == "fork":
                branch = await branch.fork()
                branches.append(branch)
            else:
                await branch.save()
                other = await Branch.load(store, branch.id)
                await other.add_message(Instruction.create(f"written elsewhere {i}"))
        await branch.chat_and_record("last")
        cache = StateCache(store)
        resolved = [
            await called_message_ids(store, e, cache=cache)
            for b in branches
            for e in await calls_of(store, b)
        ]
        sent = [c.request.message_ids for c in model.calls]
        assert sorted(map(tuple, resolved)) == sorted(map(tuple, sent))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_resolved_ids_are_the_ids_sent(steps: list[str]) -> None:
    anyio.run(scenario, steps)
