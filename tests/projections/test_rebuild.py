"""Rebuild, snapshots, time travel and forks: the properties users rely on."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from freezegun import freeze_time
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog.eventstore import NewEvent, NewSnapshot, open_store
from turnlog.projections import (
    PROJECTION_VERSION,
    SNAPSHOT_TYPE,
    AssistantResponse,
    BranchForked,
    FoldError,
    Instruction,
    InvalidTargetError,
    MessageAdded,
    MessagesCleared,
    ProviderSessionBound,
    SnapshotPolicy,
    StateCache,
    UnknownBranch,
    apply,
    apply_decoded,
    decode_event,
    fold,
    maybe_snapshot,
    rebuild,
    write_snapshots,
)

from .helpers import Script, append, assert_same_view, fork, new_branch, op_lists

PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(fn, *args):
    return anyio.run(fn, *args)


@PROPS
@given(op_lists, st.data())
def test_incremental_equals_rebuild_from_scratch_and_through_any_snapshots(op_list, data) -> None:
    url = data.draw(st.sampled_from(["memory://", "sqlite:///:memory:"]))

    async def main() -> None:
        async with open_store(url) as store:
            events = await new_branch(store, "b")
            events += await append(store, "b", Script().events(op_list))
            states = [None]
            for event in events:
                states.append(apply(states[-1], event))
            tip = states[-1]
            assert await rebuild(store, "b", snapshots=False) == tip
            assert fold(events) == tip
            # snapshots at arbitrary versions (delta chains), then every rebuild still agrees;
            # each writer holds some slice of the events (all it needs, part of it, or none)
            versions = sorted(data.draw(st.sets(st.integers(1, len(events)), max_size=4)))
            for v in versions:
                low = data.draw(st.integers(0, len(events)))
                held = events[low : data.draw(st.integers(low, len(events)))]
                await maybe_snapshot(store, states[v], SnapshotPolicy(every=1), events=held)
            assert await rebuild(store, "b") == tip
            for v in range(1, len(events) + 1):
                assert_same_view(await rebuild(store, "b", at_version=v), states[v])
                assert await rebuild(store, "b", at_version=v, snapshots=False) == states[v]
            # an in-process cache, visited in random order, agrees too
            cache = StateCache(store, every=data.draw(st.integers(1, 5)))
            order = data.draw(st.permutations(range(1, len(events) + 1)))
            for v in order:
                assert_same_view(await rebuild(store, "b", at_version=v, cache=cache), states[v])
            # a second cache visits in another order with snapshots on, so snapshot heads borrow
            # messages from the states it already holds, below and above the target
            lender = StateCache(store, every=1)
            for v in data.draw(st.permutations(range(1, len(events) + 1))):
                assert_same_view(await rebuild(store, "b", at_version=v, cache=lender), states[v])
                assert_same_view(await rebuild(store, "b", at_version=v, cache=lender), states[v])
            await store.delete_snapshots()
            assert await rebuild(store, "b") == tip
            assert await rebuild(store, "b", cache=cache) == tip
            # a whole chain written in one go (deltas of runs, links and overrides included)
            policy = SnapshotPolicy(
                every=data.draw(st.integers(1, 4)), keyframe_every=data.draw(st.integers(1, 4))
            )
            await write_snapshots(store, "b", policy)
            for v in range(1, len(events) + 1):
                assert_same_view(await rebuild(store, "b", at_version=v), states[v])

    run(main)


@PROPS
@given(op_lists, st.data())
def test_a_batch_folded_with_its_payloads_equals_applying_each_event(op_list, data) -> None:
    # the kernel folds what it appended with apply_decoded, one builder per append
    async def main() -> None:
        async with open_store("memory://") as store:
            events = await new_branch(store, "b")
            events += await append(store, "b", Script().events(op_list))
            payloads = [decode_event(e) for e in events]
            cuts = sorted(data.draw(st.sets(st.integers(0, len(events)), max_size=5)) | {0, len(events)})
            state = None
            expected = None
            for low, high in itertools.pairwise(cuts):
                for event in events[low:high]:
                    expected = apply(expected, event)
                state = apply_decoded(state, events[low:high], payloads[low:high])
                assert state is not None
                assert_same_view(state, expected)
            assert apply_decoded(state, [], []) is state
            # a batch whose event does not fit fails as apply does, and changes nothing
            late = events[-1]
            with pytest.raises(FoldError) as batch_error:
                apply_decoded(state, [late], [payloads[-1]])
            with pytest.raises(FoldError) as one_error:
                apply(state, late, payloads[-1])
            assert str(batch_error.value) == str(one_error.value)
            assert_same_view(state, fold(events))

    run(main)


@PROPS
@given(op_lists, st.data())
def test_the_lazy_message_view_reads_what_messages_holds(op_list, data) -> None:
    # prompt assembly reads state.message_view instead of state.messages
    async def main() -> None:
        async with open_store("memory://") as store:
            events = await new_branch(store, "b")
            events += await append(store, "b", Script().events(op_list))
            states = []
            state = None
            for event in events:
                state = apply(state, event)
                states.append(state)
            for state in states:
                view, messages = state.message_view, state.messages
                size = len(messages)
                assert len(view) == size
                assert tuple(view) == messages
                for i in range(-size, size):
                    assert view[i] is messages[i]
                for bad in (size, -size - 1):
                    with pytest.raises(IndexError):
                        view[bad]
                low = data.draw(st.integers(-size - 2, size + 2))
                high = data.draw(st.integers(-size - 2, size + 2))
                step = data.draw(st.sampled_from([None, 1, 2, -1]))
                assert view[low:high:step] == messages[low:high:step]
                assert view[low:] == messages[low:]

    run(main)


def test_a_batch_needs_one_payload_per_event() -> None:
    with pytest.raises(ValueError, match="1 events but 0 payloads"):
        apply_decoded(None, [object()], [])  # type: ignore[list-item]


@PROPS
@given(op_lists, op_lists, st.data())
def test_fork_equals_the_parent_prefix_plus_its_own_events(parent_ops, fork_ops, data) -> None:
    async def main() -> None:
        async with open_store("memory://") as store:
            script = Script()
            events = await new_branch(store, "p")
            events += await append(store, "p", script.events(parent_ops))
            at = data.draw(st.integers(1, len(events)))
            if data.draw(st.booleans()):
                await maybe_snapshot(store, fold(events[: max(1, at - 1)]), SnapshotPolicy(every=1))
            child = await fork(store, "p", at, name="child")
            # the parent moves on after the fork: the fork must not see it
            await append(store, "p", [MessageAdded(message=Instruction.create("parent only"))])
            own = await append(store, child, script.events(fork_ops))
            [forked] = [e async for e in store.read_stream(f"branch-{child}", 1, 1)]
            parent_at = fold(events[:at])
            expected = fold(own, apply(parent_at, forked))
            state = await rebuild(store, child)
            assert state == expected
            assert state == await rebuild(store, child, snapshots=False)
            cache = StateCache(store, every=2)
            assert await rebuild(store, "p", cache=cache) == fold(
                [*events, *[e async for e in store.read_stream("branch-p", len(events) + 1)]]
            )
            assert await rebuild(store, child, cache=cache) == expected
            assert state.forked_from is not None and state.forked_from.parent_version == at
            assert state.version == 1 + len(own)
            if not any(op[0] in ("clear", "upsert") for op in fork_ops):
                added = [e.data["message"]["id"] for e in own if e.type == "message.added"]
                prefix = [m.id for m in parent_at.messages]
                assert [m.id for m in state.messages] == prefix + [
                    i for i in added if i not in prefix and i in {m.id for m in state.messages}
                ]
            # a fork of the fork
            grandchild = await fork(store, child, state.version)
            assert (await rebuild(store, grandchild)).messages == state.messages

    run(main)


@pytest.fixture(params=["memory://", "sqlite:///:memory:"])
async def store(request):
    async with open_store(request.param) as s:
        yield s


async def test_rebuild_at_version_is_the_fold_of_the_first_versions(store) -> None:
    rng = random.Random(7)
    script = Script()
    ops = [
        rng.choice([("ins", "q"), ("asst", "a"), ("req", "t"), ("resp", 0, False), ("clear",)])
        for _ in range(60)
    ]
    events = await new_branch(store, "b")
    events += await append(store, "b", script.events(ops))
    written = await write_snapshots(store, "b", SnapshotPolicy(every=7))
    assert written == len(events) // 7
    for v in range(1, len(events) + 1):
        assert await rebuild(store, "b", at_version=v) == fold(events[:v])


async def test_rebuild_at_position_picks_the_last_event_at_or_before(store) -> None:
    a = await new_branch(store, "a")
    await new_branch(store, "other")
    a += await append(store, "a", [MessageAdded(message=Instruction.create("q"))])
    state = await rebuild(store, "a", at_position=a[1].position - 1)
    assert state.version == 1
    assert (await rebuild(store, "a", at_position=a[1].position)).version == 2
    with pytest.raises(UnknownBranch, match="at or before position 0"):
        await rebuild(store, "a", at_position=0)


async def test_rebuild_at_time_with_a_frozen_clock(store) -> None:
    with freeze_time("2026-03-01 09:00:00") as clock:
        await new_branch(store, "b")
        clock.move_to("2026-03-01 10:00:00")
        await append(store, "b", [MessageAdded(message=Instruction.create("at ten"))])
        clock.move_to("2026-03-01 11:00:00")
        await append(store, "b", [MessageAdded(message=AssistantResponse.create("at eleven"))])
    at = datetime(2026, 3, 1, 10, 30, tzinfo=UTC)
    state = await rebuild(store, "b", at_time=at)
    assert [m.kind for m in state.messages] == ["Instruction"]
    assert state.updated_at == datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
    assert len(await rebuild(store, "b", at_time=at + timedelta(hours=1))) == 2
    with pytest.raises(UnknownBranch):
        await rebuild(store, "b", at_time=datetime(2026, 3, 1, 8, 0, tzinfo=UTC))
    with pytest.raises(InvalidTargetError, match="aware"):
        await rebuild(store, "b", at_time=datetime(2026, 3, 1, 10, 30))


async def test_bad_targets_are_refused(store) -> None:
    await new_branch(store, "b")
    with pytest.raises(InvalidTargetError, match="at most one"):
        await rebuild(store, "b", at_version=1, at_position=1)
    with pytest.raises(InvalidTargetError, match="at version 1"):
        await rebuild(store, "b", at_version=2)
    with pytest.raises(InvalidTargetError):
        await rebuild(store, "b", at_version=0)
    with pytest.raises(UnknownBranch):
        await rebuild(store, "nope")


async def test_snapshots_of_another_projection_version_are_ignored(store) -> None:
    events = await new_branch(store, "b")
    events += await append(store, "b", [MessageAdded(message=Instruction.create("q"))])
    bogus = {"branch_id": "b", "this": "is not a state"}
    await store.save_snapshot(
        NewSnapshot("branch-b", 2, SNAPSHOT_TYPE, bogus, meta={"projection_version": PROJECTION_VERSION - 1})
    )
    assert await rebuild(store, "b") == fold(events)
    # the next snapshot written replaces the outdated one and is used
    assert await maybe_snapshot(store, fold(events), SnapshotPolicy(every=1))
    snap = await store.load_snapshot("branch-b", type=SNAPSHOT_TYPE)
    assert snap is not None and snap.meta["projection_version"] == PROJECTION_VERSION
    assert await rebuild(store, "b") == fold(events)


async def test_a_broken_snapshot_chain_falls_back_to_the_events(store) -> None:
    events = await new_branch(store, "b")
    for i in range(6):
        events += await append(store, "b", [MessageAdded(message=Instruction.create(f"q{i}"))])
        await maybe_snapshot(store, fold(events), SnapshotPolicy(every=2))
    # overwrite a middle link with a snapshot of a different shape: the chain no longer fits
    middle = await store.load_snapshot("branch-b", 5, type=SNAPSHOT_TYPE)
    assert middle is not None and middle.version in (4, 5)
    await store.save_snapshot(
        NewSnapshot("branch-b", middle.version, SNAPSHOT_TYPE, {**middle.data, "n": 0}, meta=middle.meta)
    )
    assert await rebuild(store, "b") == fold(events)


async def test_policy_writes_every_n_and_at_run_end(store) -> None:
    events = await new_branch(store, "b")
    policy = SnapshotPolicy(every=3)
    written = []
    for i in range(7):
        events += await append(store, "b", [MessageAdded(message=Instruction.create(f"q{i}"))])
        if await maybe_snapshot(store, fold(events), policy):
            written.append(len(events))
    assert written == [3, 6]
    assert await maybe_snapshot(store, fold(events), policy, run_ended=True)
    assert not await maybe_snapshot(store, fold(events), policy, run_ended=True)
    assert not await maybe_snapshot(
        store, fold(events), SnapshotPolicy(every=3, at_run_end=False), run_ended=True
    )
    with pytest.raises(ValueError, match="every"):
        SnapshotPolicy(every=0)


async def test_events_the_caller_holds_spare_reading_them_back_and_change_nothing(store, monkeypatch) -> None:
    events = await new_branch(store, "b")
    events += await append(store, "b", [MessageAdded(message=Instruction.create(f"q{i}")) for i in range(3)])
    policy = SnapshotPolicy(every=3)
    assert await maybe_snapshot(store, fold(events), policy)
    events += await append(store, "b", [MessageAdded(message=Instruction.create(f"r{i}")) for i in range(3)])
    reads: list[tuple[str, int]] = []
    real = store.read_stream

    def counting(stream, *args, **kwargs):
        reads.append((stream, args[0] if args else kwargs.get("from_version", 1)))
        return real(stream, *args, **kwargs)

    monkeypatch.setattr(store, "read_stream", counting)
    # every version since the last snapshot in hand: nothing is read back
    assert await maybe_snapshot(store, fold(events), policy, run_ended=True, events=events[-4:])
    assert reads == []
    held = await store.load_snapshot("branch-b", type=SNAPSHOT_TYPE)
    # a gap in what the caller holds: the events are read from the store, the same head is written
    await store.delete_snapshots()
    monkeypatch.setattr(store, "read_stream", real)
    assert await maybe_snapshot(store, fold(events[:4]), policy)
    monkeypatch.setattr(store, "read_stream", counting)
    assert await maybe_snapshot(store, fold(events), policy, run_ended=True, events=[events[-1]])
    assert reads == [("branch-b", 5)]
    read_back = await store.load_snapshot("branch-b", type=SNAPSHOT_TYPE)
    assert held is not None and read_back is not None
    assert (held.version, held.data) == (read_back.version, read_back.data)
    assert held.data["maps"] == "delta"
    assert await rebuild(store, "b") == fold(events)


async def test_large_deltas_are_split_into_parts(store, monkeypatch) -> None:
    from turnlog.projections import _snapshots

    monkeypatch.setattr(_snapshots, "_PART_BYTES", 2000)
    events = await new_branch(store, "b")
    events += await append(
        store, "b", [MessageAdded(message=Instruction.create("x" * 300)) for _ in range(20)]
    )
    assert await maybe_snapshot(store, fold(events), SnapshotPolicy(every=5))
    assert await store.load_snapshot("branch-b", type=f"{SNAPSHOT_TYPE}.part1") is not None
    assert await rebuild(store, "b") == fold(events)


async def test_provider_sessions_are_not_inherited_by_a_fork(store) -> None:
    await new_branch(store, "p")
    await append(store, "p", [ProviderSessionBound(provider="claude_code", model="m", session_id="s")])
    child = await fork(store, "p", 2)
    assert (await rebuild(store, "p")).provider_session("claude_code", "m") == "s"
    assert (await rebuild(store, child)).provider_sessions == {}


async def test_a_fork_past_its_parents_end_does_not_fold(store) -> None:
    await new_branch(store, "p")
    # a hand-made fork pointing past the parent's end does not fold
    await store.append(
        "branch-f",
        [
            NewEvent(
                "branch.forked",
                BranchForked(
                    branch_id="f", parent_branch_id="p", parent_stream="branch-p", parent_version=9
                ).model_dump(),
            )
        ],
    )
    with pytest.raises(FoldError, match="before 9"):
        await rebuild(store, "f")


async def test_snapshots_are_used_and_hold_only_the_delta(store) -> None:
    from turnlog.projections import load_snapshot_state

    events = await new_branch(store, "b")
    events += await append(store, "b", [MessageAdded(message=Instruction.create(f"q{i}")) for i in range(20)])
    assert await write_snapshots(store, "b", SnapshotPolicy(every=7)) == 3
    snap = await store.load_snapshot("branch-b", 14, type=SNAPSHOT_TYPE)
    assert snap is not None and snap.version == 14
    assert snap.data["base_version"] == 7 and snap.data["messages"] == []
    part = await store.load_snapshot("branch-b", 14, type=f"{SNAPSHOT_TYPE}.part1")
    assert part is not None and len(part.data["messages"]) == 7
    loaded = await load_snapshot_state(store, "branch-b", 20)
    assert loaded is not None and loaded.version == 14 and loaded == fold(events[:14])
    # running it again adds nothing new
    assert await write_snapshots(store, "b", SnapshotPolicy(every=7)) == 0


async def test_a_cache_serves_one_store(store) -> None:
    await new_branch(store, "b")
    async with open_store("memory://") as other:
        with pytest.raises(ValueError, match="another store"):
            await rebuild(store, "b", cache=StateCache(other))


async def test_a_cached_checkpoint_finds_a_message_added_again_after_a_clear(store) -> None:
    # a checkpoint frozen between two re-adds of one id used to share its index with the
    # builder, which then moved the id to the later slot: message() of the checkpoint said None
    await new_branch(store, "b")
    x = Instruction.create("again")
    await append(
        store,
        "b",
        [
            MessageAdded(message=x),
            MessagesCleared(),
            MessageAdded(message=x),
            MessagesCleared(),
            MessageAdded(message=x),
        ],
    )
    cache = StateCache(store, every=1)
    await rebuild(store, "b", cache=cache)
    at4 = await rebuild(store, "b", at_version=4, cache=cache)
    assert at4.message(x.id) == x
    assert_same_view(at4, await rebuild(store, "b", at_version=4, snapshots=False))


async def test_a_snapshot_head_borrows_the_messages_a_cached_state_holds(store) -> None:
    events = await new_branch(store, "b")
    events += await append(store, "b", [MessageAdded(message=Instruction.create(f"q{i}")) for i in range(60)])
    assert await write_snapshots(store, "b", SnapshotPolicy(every=10)) == 6
    cache = StateCache(store, every=4)
    top = await rebuild(store, "b", at_version=55, cache=cache)
    # below the cached state: the head at 30 shares the cached log instead of reading the chain
    mid = await rebuild(store, "b", at_version=32, cache=cache)
    assert mid._log is top._log
    assert_same_view(mid, fold(events[:32]))
    # above every cached state: the head's newer slots extend the cached log in place
    fresh = StateCache(store, every=4)
    low = await rebuild(store, "b", at_version=12, cache=fresh)
    high = await rebuild(store, "b", at_version=58, cache=fresh)
    assert high._log is low._log
    assert_same_view(high, fold(events[:58]))
    assert_same_view(await rebuild(store, "b", at_version=12, cache=fresh), fold(events[:12]))


async def test_runs_links_and_overrides_are_stored_as_deltas_between_keyframes(store) -> None:
    from turnlog.projections import ActionRequest, ActionResponse, MessageAnnotated, RunEnded, RunStarted

    keyframe_every = SnapshotPolicy().keyframe_every

    events = await new_branch(store, "b")
    datas: list = []
    for i in range(60):
        request = ActionRequest.create("tool", {"i": i})
        answer = AssistantResponse.create(f"a{i}")
        datas += [
            RunStarted(run_id=f"r{i}", verb="operate"),
            MessageAdded(message=request, run_id=f"r{i}"),
            MessageAdded(message=ActionResponse.create(request, output={"ok": i}), run_id=f"r{i}"),
            MessageAdded(message=answer, run_id=f"r{i}"),
            MessageAnnotated(message_id=answer.id, metadata={"seen": i}, reason="test"),
            RunEnded(run_id=f"r{i}", verb="operate", duration_ms=1.0),
        ]
    events += await append(store, "b", datas)
    written = await write_snapshots(store, "b", SnapshotPolicy(every=6))
    assert written == len(events) // 6
    heads = [
        await store.load_snapshot("branch-b", v, type=SNAPSHOT_TYPE) for v in range(6, len(events) + 1, 6)
    ]
    assert [h.data["maps"] for h in heads[: keyframe_every + 1]] == ["full"] + ["delta"] * (
        keyframe_every - 1
    ) + ["full"]
    # a delta head holds what its six events touched, not the branch's history
    assert all(
        len(h.data["runs"]) <= 2 and len(h.data["over"]) <= 3 for h in heads if h.data["maps"] == "delta"
    )
    for h in heads:
        if h.data["maps"] == "full":
            assert len(h.data["runs"]) == len(fold(events[: h.version]).runs)
    for h in heads:
        assert_same_view(await rebuild(store, "b", at_version=h.version), fold(events[: h.version]))
    # with a cache, decoded maps are kept and reused by later loads, in any order
    cache = StateCache(store, every=4)
    for v in random.Random(5).sample(range(1, len(events) + 1), 80):
        assert_same_view(await rebuild(store, "b", at_version=v, cache=cache), fold(events[:v]))
    assert len(cache.keyframes) > 0
    # the kernel's path writes deltas too, reading the events since the last head
    await store.delete_snapshots()
    for v in range(5, len(events) + 1, 5):
        assert await maybe_snapshot(store, fold(events[:v]), SnapshotPolicy(every=5))
    last = await store.load_snapshot("branch-b", type=SNAPSHOT_TYPE)
    assert last is not None and last.data["maps"] == "delta" and len(last.data["runs"]) <= 2
    assert_same_view(await rebuild(store, "b"), fold(events))


async def test_keyframes_wait_until_the_deltas_since_hold_as_many_runs(store) -> None:
    """A long branch does not copy its whole runs table every ``keyframe_every`` heads."""
    from turnlog.projections import RunEnded, RunStarted

    events = await new_branch(store, "b")
    datas: list = []
    for i in range(120):
        datas += [
            RunStarted(run_id=f"r{i}", verb="chat"),
            MessageAdded(message=Instruction.create(f"q{i}"), run_id=f"r{i}"),
            RunEnded(run_id=f"r{i}", verb="chat", duration_ms=1.0),
        ]
    events += await append(store, "b", datas)
    await write_snapshots(store, "b", SnapshotPolicy(every=3, keyframe_every=4))
    heads = [
        await store.load_snapshot("branch-b", v, type=SNAPSHOT_TYPE) for v in range(3, len(events) + 1, 3)
    ]
    assert all(h is not None for h in heads)
    full = [len(h.data["runs"]) for h in heads if h.data["maps"] == "full"]
    delta = [len(h.data["runs"]) for h in heads if h.data["maps"] == "delta"]
    # every fourth head a keyframe would store 120 * 121 / 8 = 1,815 runs in keyframes; waiting
    # for the deltas to catch up stores about as many in keyframes as in deltas
    assert sum(full) <= 2 * sum(delta) + 4 and len(full) < len(heads) // 4
    assert max(h.data["depth"] for h in heads) > 4
    for h in heads:
        link = h.data
        if link["maps"] == "delta" and link["depth"] >= 4:
            assert link["delta_entries"] - len(link["runs"]) < link["keyframe_entries"]
        assert await rebuild(store, "b", at_version=h.version) == fold(events[: h.version])
    # the kernel's path decides alike, one head at a time
    await store.delete_snapshots()
    for v in range(3, len(events) + 1, 3):
        assert await maybe_snapshot(store, fold(events[:v]), SnapshotPolicy(every=3, keyframe_every=4))
    again = [
        await store.load_snapshot("branch-b", v, type=SNAPSHOT_TYPE) for v in range(3, len(events) + 1, 3)
    ]
    assert [h.data["maps"] for h in again] == [h.data["maps"] for h in heads]
    assert await rebuild(store, "b") == fold(events)


async def test_an_extra_event_type_makes_the_next_head_a_keyframe(store) -> None:
    from turnlog.projections._snapshots import delta_changes

    events = await new_branch(store, "b")
    events += await append(store, "b", [MessageAdded(message=Instruction.create("q"))])
    await maybe_snapshot(store, fold(events), SnapshotPolicy(every=1))
    base = await store.load_snapshot("branch-b", type=SNAPSHOT_TYPE)
    await store.append("branch-b", [NewEvent("test.noted", {"text": "x"})])
    more = [e async for e in store.read_stream("branch-b", 3)]
    state = fold(events)  # the extra event is not folded here: only its type matters
    assert delta_changes(base, state.evolve(version=3), more, 16) is None
    assert delta_changes(base, fold(events), [], 16) is None  # the base is not older than the state
    with pytest.raises(ValueError, match="keyframe_every"):
        SnapshotPolicy(keyframe_every=0)


async def test_an_edited_snapshot_is_ignored_and_the_state_is_folded_from_events(tmp_path) -> None:
    """Editing a stored snapshot changes nothing a reader sees; verify names the snapshot."""
    import sqlite3

    from turnlog.kernel import Branch

    url = f"sqlite:///{tmp_path / 'edited.db'}"
    async with open_store(url) as store:
        events = await new_branch(store, "b")
        for i in range(4):
            events += await append(store, "b", [MessageAdded(message=Instruction.create(f"question {i}"))])
            await maybe_snapshot(store, fold(events), SnapshotPolicy(every=1))
        truth = fold(events)
    conn = sqlite3.connect(tmp_path / "edited.db", isolation_level=None)
    (edited,) = conn.execute(
        "UPDATE snapshots SET data = replace(data, 'question 3', 'forged 3') "
        "WHERE instr(data, 'question 3') > 0 RETURNING version"
    ).fetchone()
    conn.close()
    assert edited == truth.version
    async with open_store(url) as store:
        assert await rebuild(store, "b") == truth
        branch = await Branch.load(store, "b")
        assert [m.content.instruction for m in branch.messages] == [f"question {i}" for i in range(4)]
        report = await store.verify()
    assert not report.ok
    assert [(p.stream, p.version) for p in report.problems] == [("branch-b", edited)]
    assert "altered" in report.problems[0].what
