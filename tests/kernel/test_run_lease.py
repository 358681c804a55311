"""A run is closed once, and only when its writer is gone.

- the live-run lease: while a process streams a run (no ``stream_persist`` buffer), ``turnlog
  recover`` in a second process leaves the run open and names it as live; once the writer is
  SIGKILLed the next ``recover`` closes it, and the log holds exactly one terminal;
- the conditional terminal: two processes racing to close one run write one terminal, the
  other gets ``RunClosed``;
- the lease API itself: held while held, free after release, on every backend.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from turnlog.eventstore import EventStore, MemoryEventStore, acquire_lease, held_leases, open_store
from turnlog.kernel import Branch, EndRun, FailRun, RunClosed, StartRun, recover
from turnlog.kernel.models import Usage
from turnlog.projections import catalogue_upcasters

from .streamkit import Child, kill_groups, make_fake

WORKERS = Path(__file__).parent / "_stream_workers"
HANG = {"steps": [{"text": "thinking it over"}, {"hang": True}]}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'lease.db'}"
        return
    yield request.getfixturevalue("pg_url")  # the shared fixture: skip or fail, and drop the schema


async def recover_in_another_process(url: str) -> dict[str, Any]:
    """``turnlog recover --json`` as a process of its own; its report."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = await anyio.run_process(
        [sys.executable, "-m", "turnlog", "recover", "--store", url, "--json"], env=env, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    report: dict[str, Any] = json.loads(done.stdout)
    return report


async def terminals(store: EventStore, branch_id: str) -> list[str]:
    return [
        e.type
        async for e in store.read_stream(f"branch-{branch_id}")
        if e.type in ("run.ended", "run.failed")
    ]


async def test_recover_skips_a_live_run_and_closes_it_once_its_writer_is_killed(
    url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The run streams in one process, recover runs in another: skipped while alive, closed after SIGKILL."""
    fake = make_fake(monkeypatch, tmp_path)
    fake.script(HANG)
    child = await Child.start([sys.executable, str(WORKERS / "lease_child.py"), url])
    try:
        branch_id = (await child.readline()).split()[1]
        assert (await child.readline()).strip() == "streaming"

        report = await recover_in_another_process(url)
        [live] = report["live"]
        assert live["branch_id"] == branch_id
        assert "lease" in live["reason"]
        assert report["runs"] == []
        async with open_store(url, upcasters=catalogue_upcasters()) as store:
            branch = await Branch.load(store, branch_id)
            [run] = branch.state.runs.values()
            assert run.status == "running" and run.run_id == live["run_id"]
            assert await terminals(store, branch_id) == []
    finally:
        await child.kill()
        kill_groups(fake.starts())

    report = await recover_in_another_process(url)
    assert report["live"] == []
    [closed] = report["runs"]
    assert closed["closed"] and closed["run_id"] == live["run_id"]
    async with open_store(url, upcasters=catalogue_upcasters()) as store:
        branch = await Branch.load(store, branch_id)
        [run] = branch.state.runs.values()
        assert (run.status, run.reason) == ("failed", "crashed")
        assert await terminals(store, branch_id) == ["run.failed"]
    again = await recover_in_another_process(url)
    assert again["runs"] == [] and again["live"] == []


RACE_CHILD = """
import sys, anyio
from turnlog.eventstore import open_store
from turnlog.kernel import Branch, EndRun, FailRun, RunClosed
from turnlog.kernel.models import Usage
from turnlog.projections import catalogue_upcasters

async def main(url, branch_id, run_id, which):
    async with open_store(url, upcasters=catalogue_upcasters()) as store:
        branch = await Branch.load(store, branch_id)
        if which == "end":
            command = EndRun(run_id, "communicate", 1.0)
        else:
            command = FailRun(run_id, "communicate", 1.0, Usage(), "ProcessCrashed", "x", "crashed")
        print("ready", flush=True)
        sys.stdin.readline()  # both processes start from the same folded state
        try:
            await branch.execute(command, run_id=run_id, terminal=True)
        except RunClosed as exc:
            print(f"refused {exc.status}", flush=True)
        else:
            print("written", flush=True)

anyio.run(main, *sys.argv[1:])
"""


async def test_two_processes_racing_to_close_a_run_write_one_terminal(url: str) -> None:
    """run.ended from one process and run.failed from another, released together: exactly one lands."""
    async with open_store(url, upcasters=catalogue_upcasters()) as store:
        branch = await Branch(store=store).save()
        run_id = str(uuid.uuid4())
        await branch.execute(StartRun(run_id, "communicate"), run_id=run_id)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        await anyio.open_process(
            [sys.executable, "-c", RACE_CHILD, url, branch.id, run_id, which],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        for which in ("end", "fail")
    ]
    try:
        readers = [BufferedByteReceiveStream(proc.stdout) for proc in procs if proc.stdout is not None]
        for reader in readers:
            assert await reader.receive_until(b"\n", 1024) == b"ready"
        for proc in procs:
            assert proc.stdin is not None
            await proc.stdin.send(b"go\n")
        with anyio.fail_after(60):
            outcomes = sorted([(await r.receive_until(b"\n", 1024)).decode() for r in readers])
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            await proc.aclose()
    assert outcomes[1] == "written", outcomes
    assert outcomes[0] in ("refused ended", "refused failed"), outcomes
    async with open_store(url, upcasters=catalogue_upcasters()) as store:
        assert len(await terminals(store, branch.id)) == 1


async def test_a_terminal_for_a_closed_or_unknown_run_is_refused(store: EventStore) -> None:
    """A second terminal, or one without a start, raises RunClosed and writes nothing."""
    branch = await Branch(store=store).save()
    run_id = str(uuid.uuid4())
    await branch.execute(StartRun(run_id, "communicate"), run_id=run_id)
    await branch.execute(EndRun(run_id, "communicate", 1.0), run_id=run_id)
    version = branch.version
    with pytest.raises(RunClosed) as info:
        await branch.execute(FailRun(run_id, "communicate", 1.0, Usage(), "E", "m"), run_id=run_id)
    assert (info.value.run_id, info.value.status) == (run_id, "ended")
    with pytest.raises(RunClosed, match="never started"):
        await branch.execute(EndRun(str(uuid.uuid4()), "communicate", 1.0))
    assert branch.version == version == await store.stream_version(f"branch-{branch.id}")


@pytest.mark.parametrize("backend", ["memory", "file"])
async def test_a_lease_is_held_until_released(backend: str, tmp_path: Path) -> None:
    """held_leases sees a lease from the moment it is taken until it is given up."""
    store = MemoryEventStore() if backend == "memory" else open_store(f"sqlite:///{tmp_path / 'l.db'}")
    try:
        await store.head()
        lease = await acquire_lease(store, "run-a")
        assert await held_leases(store, ["run-a", "run-b"]) == {"run-a"}
        await lease.release()
        await lease.release()  # idempotent
        assert await held_leases(store, ["run-a"]) == frozenset()
        # no lease file is left; the directory is kept for the next lease while the store is open
        assert [p.name for p in tmp_path.glob("*.leases/*")] == []
    finally:
        await store.close()
    assert (
        sorted(p.name for p in tmp_path.iterdir() if "leases" in p.name) == []
    )  # nothing left beside the store


async def test_a_lease_directory_is_kept_while_the_store_is_open(tmp_path: Path) -> None:
    """Runs one after another reuse the lease directory; a lease still held keeps it at close."""
    store = open_store(f"sqlite:///{tmp_path / 'l.db'}")
    directory = tmp_path / "l.db.leases"
    try:
        first = await acquire_lease(store, "run-a")
        await first.release()
        assert directory.is_dir() and not any(directory.iterdir())  # kept, empty, for the next run
        second = await acquire_lease(store, "run-b")
        assert await held_leases(store, ["run-a", "run-b"]) == {"run-b"}
        directory.joinpath("run-b.lock").unlink()  # as recover's cleanup would, once run-b's writer is gone
        await second.release()
        directory.rmdir()  # removed by another process (its store closing): the next lease makes it
        third = await acquire_lease(store, "run-c")
        assert await held_leases(store, ["run-c"]) == {"run-c"}
    finally:
        await store.close()
    assert directory.exists()  # run-c is still held: its file stays, and so does the directory
    async with open_store(f"sqlite:///{tmp_path / 'l.db'}") as again:
        assert await held_leases(again, ["run-c"]) == {"run-c"}
        await third.release()
        assert await held_leases(again, ["run-c"]) == frozenset()
    assert not directory.exists()


class _StaleScan:
    """A store whose log scan misses terminals: as if the run ended right after recover's scan."""

    def __init__(self, store: EventStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def read_all(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async for event in self._store.read_all(*args, **kwargs):
            if event.type not in ("run.ended", "run.failed"):
                yield event


async def test_a_run_its_writer_closed_after_the_scan_is_not_a_failure(
    store: EventStore, tmp_path: Path
) -> None:
    """recover's close loses the race to the writer's own terminal: RunClosed, taken as done, not failed."""
    branch = await Branch(store=store).save()
    run_id = str(uuid.uuid4())
    await branch.execute(StartRun(run_id, "communicate"), run_id=run_id)
    await branch.execute(EndRun(run_id, "communicate", 1.0), run_id=run_id)
    report = await recover(_StaleScan(store), tmp_path / "runs")  # type: ignore[arg-type]
    assert (report.runs, report.failed) == ((), ())
    assert await terminals(store, branch.id) == ["run.ended"]
