"""``turnlog verify`` checks the log's invariants, each fed a crafted log written straight to the store.

The events are appended with the store's own API (the kernel would refuse them), so the hash
chains all verify: only the invariant checks can find what is wrong, and each names the
stream and version of the event at fault.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from turnlog.eventstore import EventStore, open_store
from turnlog.kernel import Branch
from turnlog.projections import (
    BranchForked,
    ChunkReceived,
    RunEnded,
    RunFailed,
    RunStarted,
    catalogue_upcasters,
    check_invariants,
    new_event,
)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "crafted.db"


async def crafted_branch(db: Path, *payloads: Any) -> str:
    """A branch stream (created by the kernel) followed by ``payloads`` appended as they are."""
    async with open_store(f"sqlite:///{db}", upcasters=catalogue_upcasters()) as store:
        branch = await Branch(store=store).save()
        if payloads:
            await store.append(branch.stream, [new_event(p) for p in payloads], branch.version)
        return branch.id


async def verify_json(db: Path) -> tuple[int, dict[str, Any]]:
    """``turnlog verify --json`` run as the user runs it: its exit status and report."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = await anyio.run_process(
        [sys.executable, "-m", "turnlog", "verify", "--store", str(db), "--json"], env=env, check=False
    )
    report: dict[str, Any] = json.loads(done.stdout)
    return done.returncode, report


def started(run_id: str) -> RunStarted:
    return RunStarted(run_id=run_id, verb="run")


def ended(run_id: str, chunks: int | None = None) -> RunEnded:
    return RunEnded(run_id=run_id, verb="run", duration_ms=1.0, chunks=chunks)


def failed(run_id: str) -> RunFailed:
    return RunFailed(
        run_id=run_id, verb="run", duration_ms=1.0, error_type="E", error_message="m", reason="crashed"
    )


async def test_a_sound_log_has_no_invariant_problem(db: Path) -> None:
    """Started, chunks, then one terminal counting them: ok, and "invariants" among the checks."""
    run = str(uuid.uuid4())
    branch_id = await crafted_branch(db, started(run))
    async with open_store(f"sqlite:///{db}") as store:
        await append_chunks(store, run, 2)
        await store.append(f"branch-{branch_id}", [new_event(ended(run, chunks=2))], 2)
    status, report = await verify_json(db)
    assert (status, report["problems"]) == (0, [])
    assert "invariants" in report["checks"]


async def test_two_terminals_for_one_run(db: Path) -> None:
    run = str(uuid.uuid4())
    branch_id = await crafted_branch(db, started(run), failed(run), ended(run))
    status, report = await verify_json(db)
    assert status == 1
    [problem] = report["problems"]
    assert (problem["stream"], problem["version"]) == (f"branch-{branch_id}", 4)
    assert "second terminal" in problem["what"] and "run.failed at" in problem["what"]


async def test_a_terminal_without_a_start(db: Path) -> None:
    run = str(uuid.uuid4())
    branch_id = await crafted_branch(db, ended(run))
    status, report = await verify_json(db)
    assert status == 1
    [problem] = report["problems"]
    assert (problem["stream"], problem["version"]) == (f"branch-{branch_id}", 2)
    assert "no run.started" in problem["what"]


async def append_chunks(store: EventStore, run_id: str, count: int, after: int = 0) -> None:
    chunks = [new_event(ChunkReceived(seq=after + i + 1, type="text", content="x")) for i in range(count)]
    await store.append(f"run-{run_id}", chunks, after)


async def test_a_chunk_after_its_runs_terminal(db: Path) -> None:
    """Recorded after the terminal, and beyond the count run.ended gives: the late chunk is named."""
    run = str(uuid.uuid4())
    await crafted_branch(db, started(run))
    async with open_store(f"sqlite:///{db}", upcasters=catalogue_upcasters()) as store:
        await append_chunks(store, run, 8)
        branch_stream = next(s for s, _ in await store.list_streams() if s.startswith("branch-"))
        await store.append(branch_stream, [new_event(ended(run, chunks=8))], 2)
        await append_chunks(store, run, 1, after=8)  # a chunk imported into an ended run
    status, report = await verify_json(db)
    assert status == 1
    [problem] = report["problems"]
    assert (problem["stream"], problem["version"]) == (f"run-{run}", 9)
    assert "after its run's terminal" in problem["what"]


async def test_a_fork_whose_parent_version_does_not_exist(db: Path) -> None:
    parent_id = await crafted_branch(db)
    fork_id = str(uuid.uuid4())
    fork = BranchForked(
        branch_id=fork_id, parent_branch_id=parent_id, parent_stream=f"branch-{parent_id}", parent_version=7
    )
    async with open_store(f"sqlite:///{db}", upcasters=catalogue_upcasters()) as store:
        await store.append(f"branch-{fork_id}", [new_event(fork)], 0)
        # the check as a library function too, limited to one stream
        [alone] = await check_invariants(store, f"branch-{fork_id}")
        assert await check_invariants(store, f"branch-{parent_id}") == ()
    status, report = await verify_json(db)
    assert status == 1
    [problem] = report["problems"]
    assert (
        (problem["stream"], problem["version"]) == (f"branch-{fork_id}", 1) == (alone.stream, alone.version)
    )
    assert "version 7, which does not exist" in problem["what"]
