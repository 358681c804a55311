"""Snapshot heads written in an earlier format keep loading into the same state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from turnlog.eventstore import NewSnapshot, open_store
from turnlog.projections import PROJECTION_VERSION, BranchState, load_snapshot_state

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
