"""Snapshot heads written in an earlier format keep loading into the same state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnlog.eventstore import NewSnapshot, open_store
from turnlog.projections import (
    PROJECTION_VERSION,
    SNAPSHOT_TYPE,
    BranchState,
    RunInfo,
    load_snapshot_state,
)
from turnlog.projections._snapshot_head import SnapshotHead

from .strategies import run_infos

DATA = Path(__file__).parent / "data"


def describe(s: BranchState) -> dict[str, Any]:
    """What a state shows, as JSON (the form the fixture stores)."""
    assert s.created_at is not None and s.updated_at is not None
    return {
        "branch_id": s.branch_id,
        "name": s.name,
        "user": s.user,
        "session_id": s.session_id,
        "system": s.system.to_dict() if s.system else None,
        "chat_model": dict(s.chat_model) if s.chat_model is not None else None,
        "parse_model": dict(s.parse_model) if s.parse_model is not None else None,
        "metadata": dict(s.metadata),
        "runs": [
            [
                r.run_id,
                r.status,
                r.verb,
                r.usage.input_tokens,
                r.usage.output_tokens,
                r.started_at.isoformat() if r.started_at else None,
            ]
            for r in s.runs.values()
        ],
        "provider_sessions": sorted(
            [p, m, v, s.provider_cwds.get((p, m))] for (p, m), v in s.provider_sessions.items()
        ),
        "action_links": dict(s.action_links),
        "forked_from": (
            [s.forked_from.parent_branch_id, s.forked_from.parent_stream, s.forked_from.parent_version]
            if s.forked_from
            else None
        ),
        "version": s.version,
        "position": s.position,
        "created_at": s.created_at.isoformat(),
        "updated_at": s.updated_at.isoformat(),
        "model_calls": s.model_calls,
        "messages": [m.to_dict() for m in s.messages],
    }


async def test_a_schema_2_chain_written_by_the_earlier_head_code_still_loads() -> None:
    """Heads (a keyframe and deltas after it) and parts as the untyped-dict writer stored them."""
    fixture = json.loads((DATA / "branch_state_schema2.json").read_text())
    async with open_store("memory://") as scratch:
        for record in fixture["records"]:
            await scratch.save_snapshot(
                NewSnapshot(
                    "branch-b",
                    record["version"],
                    record["type"],
                    record["data"],
                    record["schema"],
                    {"projection_version": PROJECTION_VERSION},
                )
            )
        state = await load_snapshot_state(scratch, "branch-b", fixture["version"])
    assert state is not None
    assert describe(state) == fixture["state"]


def test_the_typed_head_writes_back_exactly_what_the_schema_2_writer_stored() -> None:
    fixture = json.loads((DATA / "branch_state_schema2.json").read_text())
    heads = [r for r in fixture["records"] if r["type"] == SNAPSHOT_TYPE]
    assert {h["data"]["maps"] for h in heads} == {"full", "delta"}
    for record in heads:
        assert record["schema"] == 2
        head = SnapshotHead.model_validate(record["data"])
        # the two counts schema 3 added read as 0 from an older head
        assert head.keyframe_entries == head.delta_entries == 0
        assert head.model_dump(mode="json", exclude={"keyframe_entries", "delta_entries"}) == record["data"]
        # and the schema 3 form of the same head (runs without their unset fields) reads back equal
        assert SnapshotHead.model_validate(head.stored()) == head


async def test_a_schema_1_head_loads_like_the_schema_2_head_it_holds() -> None:
    """Schema 1: every head a keyframe, its messages in the head, no maps, depth or last_id."""
    fixture = json.loads((DATA / "branch_state_schema2.json").read_text())
    by_key = {(r["type"], r["version"]): r for r in fixture["records"]}
    head, part = by_key[(SNAPSHOT_TYPE, 5)], by_key[(f"{SNAPSHOT_TYPE}.part1", 5)]
    old = {k: v for k, v in head["data"].items() if k not in ("maps", "depth", "last_id")}
    old.update(messages=part["data"]["messages"], parts=1)
    meta = {"projection_version": PROJECTION_VERSION}
    async with open_store("memory://") as new_store, open_store("memory://") as old_store:
        for record in (head, part):
            await new_store.save_snapshot(
                NewSnapshot("branch-b", 5, record["type"], record["data"], record["schema"], meta)
            )
        await old_store.save_snapshot(NewSnapshot("branch-b", 5, SNAPSHOT_TYPE, old, 1, meta))
        expected = await load_snapshot_state(new_store, "branch-b", 5)
        loaded = await load_snapshot_state(old_store, "branch-b", 5)
    assert expected is not None and loaded is not None
    assert loaded == expected and len(loaded) > 0


_HEAD: dict[str, Any] = {
    "branch_id": "b", "start": 0, "n": 0, "base_version": None, "base_n": 0, "messages": [],
    "name": None, "user": None, "session_id": None, "system": None, "chat_model": None,
    "parse_model": None, "metadata": {}, "provider_sessions": [], "action_links": {},
    "forked_from": None, "version": 1, "position": 1, "created_at": None, "updated_at": None,
    "model_calls": 0, "over": [],
}  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(run_infos, max_size=4))
def test_a_head_stores_runs_without_their_unset_fields_and_reads_them_back_equal(runs: list[RunInfo]) -> None:
    """Schema 3: whatever a run holds, the stored head gives it back; no null is stored for it."""
    head = SnapshotHead.model_construct(**{**_HEAD, "runs": runs})
    stored = json.loads(json.dumps(head.stored()))  # what the store keeps is JSON
    assert SnapshotHead.model_validate(stored).runs == runs
    for run in stored["runs"]:
        assert None not in run.values()
    assert {k: v for k, v in stored.items() if k != "runs"} == {
        k: v for k, v in head.model_dump(mode="json").items() if k != "runs"
    }


async def test_a_kernel_conversation_reads_back_through_its_snapshots_as_folded(tmp_path: Path) -> None:
    """Heads written by the kernel (compact runs, failed ones too) give the fold's state at every head."""
    from turnlog.eventstore import open_store as open_
    from turnlog.kernel import Branch, Kernel
    from turnlog.projections import SnapshotPolicy, fold, rebuild
    from turnlog.testing import ScriptedModel

    url = f"sqlite:///{tmp_path / 'k.db'}"
    async with open_(url) as store:
        Kernel.for_store(store).policy = SnapshotPolicy(every=7, keyframe_every=3)
        model = ScriptedModel("one", RuntimeError("down"), "three", "four", "five", "six")
        branch = Branch(store=store, system="s", chat_model=model)
        for i in range(6):
            try:
                await branch.communicate(f"q{i}")
            except RuntimeError:
                pass
        events = [e async for e in store.read_stream(f"branch-{branch.id}")]
        heads = [s async for s in _heads(store, f"branch-{branch.id}", len(events))]
        assert len(heads) >= 3 and {h.schema for h in heads} == {SnapshotHead.SCHEMA}
        assert any(r.get("status") == "failed" for h in heads for r in h.data["runs"])
        for head in heads:
            assert await rebuild(store, branch.id, at_version=head.version) == fold(events[: head.version])
        assert await rebuild(store, branch.id) == fold(events)


async def _heads(store: Any, stream: str, last: int) -> Any:
    seen = set()
    for v in range(1, last + 1):
        snap = await store.load_snapshot(stream, v, type=SNAPSHOT_TYPE)
        if snap is not None and snap.version not in seen:
            seen.add(snap.version)
            yield snap


async def test_a_cold_read_leaves_the_stored_runs_as_stored_until_they_are_used(tmp_path: Path) -> None:
    """A read from the snapshots builds the runs it is asked for; a run that does not validate
    fails where it is used, naming the snapshot; without snapshots the fold says the same."""
    from turnlog.kernel import Branch, Kernel
    from turnlog.projections import ProjectionError, SnapshotPolicy, fold, rebuild
    from turnlog.projections._runs import Deferred, RunTable
    from turnlog.testing import ScriptedModel

    async with open_store(f"sqlite:///{tmp_path / 'k.db'}") as store:
        Kernel.for_store(store).policy = SnapshotPolicy(every=7, keyframe_every=3)
        branch = Branch(store=store, system="s", chat_model=ScriptedModel(*"abcdef"))
        for i in range(6):
            await branch.communicate(f"q{i}")
        stream = f"branch-{branch.id}"
        head = await store.load_snapshot(stream, type=SNAPSHOT_TYPE)
        assert head is not None
        state = await rebuild(store, branch.id, at_version=head.version)
        table = state.runs
        assert isinstance(table, RunTable) and any(type(v) is Deferred for v in table._base.values())
        events = [e async for e in store.read_stream(stream)]
        assert state == fold(events[: head.version])  # every run decoded to compare, and equal

        data = dict(head.data)
        data["runs"] = [{**data["runs"][0], "verb": 7}, *data["runs"][1:]]
        await store.save_snapshot(
            NewSnapshot(stream, head.version, SNAPSHOT_TYPE, data, head.schema, dict(head.meta))
        )
        broken = await rebuild(store, branch.id, at_version=head.version)
        assert broken.messages == state.messages
        with pytest.raises(ProjectionError, match=f"at version {head.version}: a stored run does not decode"):
            list(broken.runs.values())
