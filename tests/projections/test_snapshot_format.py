"""Snapshot heads written in an earlier format keep loading into the same state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from turnlog.eventstore import NewSnapshot, open_store
from turnlog.projections import PROJECTION_VERSION, SNAPSHOT_TYPE, BranchState, load_snapshot_state
from turnlog.projections._snapshot_head import SnapshotHead

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
        assert record["schema"] == SnapshotHead.SCHEMA
        head = SnapshotHead.model_validate(record["data"])
        assert head.model_dump(mode="json") == record["data"]


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
