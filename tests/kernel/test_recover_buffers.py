"""recover at the edges: buffers of other stores and copies, gaps and forged lines, live buffers, races."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any
from uuid import UUID

import anyio
import pytest

from turnlog.eventstore import (
    ANY,
    EventStore,
    ExpectedVersion,
    MemoryEventStore,
    NewEvent,
    StoreUnavailable,
    open_store,
    uuid7,
)
from turnlog.kernel import Branch, EndRun, PersistOptions, StartRun, recover
from turnlog.kernel._persist import ChunkLog, RunBuffer, buffer_path, default_persist_dir
from turnlog.kernel.models import StreamChunk
from turnlog.projections import AssistantResponse, Instruction, catalogue_upcasters

pytestmark = pytest.mark.anyio

CHUNKS = 8
NEVER = PersistOptions(batch_chunks=10**6, batch_ms=10**9)


async def crashed_run(
    store: EventStore, persist: Path | None = None, *, committed: int = 3, chunks: int = CHUNKS
) -> tuple[Branch, str, Path]:
    """A run that buffered ``chunks`` text chunks, committed ``committed`` of them, and died."""
    branch = await Branch(store=store).save()
    run_id = str(uuid7())
    await branch.add_message(Instruction.create("go"), run_id=run_id)
    await branch.execute(StartRun(run_id, "run", None, "claude_code", "fake"), run_id=run_id)
    directory = persist if persist is not None else default_persist_dir(store)
    buffer = RunBuffer(buffer_path(directory, branch.id, run_id))
    log = ChunkLog(store, run_id, {"branch_id": branch.id, "run_id": run_id}, buffer=buffer, options=NEVER)
    for n in range(1, chunks + 1):
        log.add(StreamChunk("text", content=f"{n} "))
        if n == committed:
            await log.commit()
    buffer.close()  # the process is gone: so is its lock
    return branch, run_id, buffer.path


async def stored_seqs(store: EventStore, run_id: str) -> list[tuple[int, int]]:
    """(version, seq) of every stored chunk of the run."""
    return [(e.version, e.data["seq"]) async for e in store.read_stream(f"run-{run_id}")]


async def recovered_text(store: EventStore, branch_id: str) -> str:
    branch = await Branch.load(store, branch_id)
    return "".join(m.response for m in branch.messages if isinstance(m, AssistantResponse))


def rewrite(path: Path, edit: Any) -> None:
    """Apply ``edit`` to the decoded chunk lines of a buffer (the header stays)."""
    header, *lines = path.read_bytes().split(b"\n")[:-1]
    chunks = edit([json.loads(line) for line in lines])
    path.write_bytes(
        b"\n".join([header, *(c if isinstance(c, bytes) else json.dumps(c).encode() for c in chunks)]) + b"\n"
    )


def sqlite(path: Path) -> Any:
    return open_store(f"sqlite:///{path}", upcasters=catalogue_upcasters())


# ------------------------------------------------------------------------- stores and copies


async def test_two_stores_in_one_directory_keep_their_buffers_apart(tmp_path: Path) -> None:
    """Each store file has a buffer directory of its own; recover on one never sees the other's."""
    async with sqlite(tmp_path / "a.db") as a, sqlite(tmp_path / "b.db") as b:
        branch_a, run_a, path_a = await crashed_run(a)
        _, run_b, path_b = await crashed_run(b)
        assert path_a.parent == tmp_path / "a.db.runs" and path_b.parent == tmp_path / "b.db.runs"
        report = await recover(b)
        assert [r.run_id for r in report.runs] == [run_b] and path_a.exists()
        report = await recover(a)
        assert [(r.run_id, r.chunks, r.imported) for r in report.runs] == [(run_a, CHUNKS, CHUNKS - 3)]
        assert await recovered_text(a, branch_a.id) == "".join(f"{n} " for n in range(1, CHUNKS + 1))


async def test_a_shared_directory_never_mixes_stores(tmp_path: Path) -> None:
    """In a persist_dir shared by two stores, recover imports only its own store's buffers."""
    shared = tmp_path / "runs"
    async with sqlite(tmp_path / "a.db") as a, sqlite(tmp_path / "b.db") as b:
        _, run_a, path_a = await crashed_run(a, shared)
        _, run_b, path_b = await crashed_run(b, shared)
        report = await recover(b, shared)
        assert [r.run_id for r in report.runs] == [run_b] and report.skipped == (str(path_a),)
        [problem] = [p for p in report.problems if p.path == str(path_a)]
        assert problem.line_number == 0 and "another store" in problem.what
        assert path_a.read_bytes() and await stored_seqs(b, run_a) == []
        report = await recover(a, shared)
        assert [(r.run_id, r.imported) for r in report.runs] == [(run_a, CHUNKS - 3)]
        assert not path_a.exists() and not path_b.exists()


async def test_recover_on_a_copy_does_not_steal_the_original_buffer(tmp_path: Path) -> None:
    """A byte copy (a backup) has the same store id: recover on it leaves the original's buffer alone."""
    async with sqlite(tmp_path / "a.db") as a:
        _, run_id, path = await crashed_run(a)
    for suffix in ("", "-wal"):
        if (tmp_path / f"a.db{suffix}").exists():
            shutil.copyfile(tmp_path / f"a.db{suffix}", tmp_path / f"backup.db{suffix}")
    async with sqlite(tmp_path / "backup.db") as backup:
        assert not (await recover(backup)).runs[0].imported  # its own directory has no buffer
        report = await recover(backup, path.parent)  # pointed at the original's buffers
        assert report.skipped == (str(path),) and "a copy" in report.problems[0].what
    async with sqlite(tmp_path / "a.db") as a:
        report = await recover(a)
        assert [(r.chunks, r.imported) for r in report.runs] == [(CHUNKS, CHUNKS - 3)]
        assert await stored_seqs(a, run_id) == [(n, n) for n in range(1, CHUNKS + 1)]


async def test_recover_on_a_migrate_target_leaves_the_buffer_alone(tmp_path: Path) -> None:
    """A migrated copy is another store (another id): the source's buffers are not its own."""
    from turnlog.eventstore import migrate

    async with sqlite(tmp_path / "a.db") as a, sqlite(tmp_path / "m.db") as target:
        _, _, path = await crashed_run(a)
        await migrate(a, target)
        assert target.store_id != a.store_id
        report = await recover(target, path.parent)
        assert report.skipped == (str(path),) and path.exists()
        assert [(r.imported, r.chunks) for r in (await recover(a)).runs] == [(CHUNKS - 3, CHUNKS)]


async def test_a_buffer_of_an_unknown_branch_is_reported_and_the_others_recovered(tmp_path: Path) -> None:
    """A stray buffer (its branch is not in the store) never blocks the recovery of another."""
    store = MemoryEventStore(upcasters=catalogue_upcasters())
    _, run_id, good = await crashed_run(store, tmp_path)
    other = MemoryEventStore(upcasters=catalogue_upcasters())
    _, _, stray = await crashed_run(other, tmp_path)
    # the stray one claims this store: only its branch is unknown here
    header, rest = stray.read_bytes().split(b"\n", 1)
    stray.write_bytes(
        header.replace(str(other.store_id).encode(), str(store.store_id).encode()) + b"\n" + rest
    )
    (tmp_path / "notes.jsonl").write_text("{}\n")
    report = await recover(store, tmp_path)
    assert [r.run_id for r in report.runs] == [run_id] and not good.exists()
    reasons = {Path(p.path).name: p.what for p in report.problems}
    assert "is not in this store" in reasons[stray.name] and "not a run buffer" in reasons["notes.jsonl"]
    assert stray.exists() and (tmp_path / "notes.jsonl").exists()


async def test_a_buffer_of_a_newer_format_is_left_alone(tmp_path: Path) -> None:
    store = MemoryEventStore(upcasters=catalogue_upcasters())
    _, run_id, path = await crashed_run(store, tmp_path)
    header, rest = path.read_bytes().split(b"\n", 1)
    path.write_bytes(header.replace(b'"format_version":1', b'"format_version":99') + b"\n" + rest)
    report = await recover(store, tmp_path)
    assert report.skipped == (str(path),) and "newer turnlog" in report.problems[0].what
    assert path.exists() and await stored_seqs(store, run_id) == [(n, n) for n in (1, 2, 3)]


# ----------------------------------------------------------------------------- seq == version


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda lines: lines[:4] + lines[5:], "seq 5 is missing"),  # the line of seq 5 lost
        (lambda lines: [*lines[:4], b"\x00garbage", *lines[5:]], "seq 5 is missing"),
        (lambda lines: [*lines[:4], {**lines[4], "id": str(uuid7())}, *lines[4:]], "two lines"),
        (
            lambda lines: [*lines[:4], {**lines[4], "data": {**lines[4]["data"], "seq": "5"}}, *lines[5:]],
            "missing",
        ),
        (
            lambda lines: [
                *lines[:4],
                {**lines[4], "version": 1000, "data": {**lines[4]["data"], "seq": 1000}},
                *lines[5:],
            ],
            "missing",
        ),
    ],
    ids=["missing", "garbage", "duplicate", "string-seq", "jump"],
)
async def test_recover_stops_at_a_gap_and_reports_it(tmp_path: Path, edit: Any, why: str) -> None:
    """A missing, unreadable, doubled or renumbered line stops the import: seq == version always."""
    store = MemoryEventStore(upcasters=catalogue_upcasters())
    branch, run_id, path = await crashed_run(store, tmp_path)
    rewrite(path, edit)
    report = await recover(store, tmp_path)
    stored = await stored_seqs(store, run_id)
    assert stored == [(n, n) for n in range(1, len(stored) + 1)]
    assert len(stored) == 4  # chunks 1..3 committed, 4 imported, nothing after the gap
    assert any(why in p.what for p in report.problems), report.problems
    assert await recovered_text(store, branch.id) == "1 2 3 4 "
    assert report.kept == (str(path) + ".corrupt",) and not path.exists()
    assert not (await recover(store, tmp_path)).changed


async def test_two_lines_of_one_seq_are_never_both_imported(tmp_path: Path) -> None:
    store = MemoryEventStore(upcasters=catalogue_upcasters())
    branch, run_id, path = await crashed_run(store, tmp_path, committed=0, chunks=2)
    rewrite(
        path,
        lambda lines: [
            lines[0],
            {**lines[0], "id": str(uuid7()), "data": {**lines[0]["data"], "content": "forged"}},
            lines[1],
        ],
    )
    report = await recover(store, tmp_path)
    assert await stored_seqs(store, run_id) == [] and report.imported == 0
    assert "forged" not in await recovered_text(store, branch.id)


async def test_a_line_that_contradicts_the_store_refuses_the_buffer(tmp_path: Path) -> None:
    """A buffered chunk whose id differs from the stored chunk at its seq: nothing is imported."""
    store = MemoryEventStore(upcasters=catalogue_upcasters())
    _, run_id, path = await crashed_run(store, tmp_path)
    rewrite(path, lambda lines: [{**lines[0], "id": str(uuid7())}, *lines[1:]])
    report = await recover(store, tmp_path)
    assert report.imported == 0 and "not this run's" in report.problems[0].what
    assert await stored_seqs(store, run_id) == [(1, 1), (2, 2), (3, 3)]


async def test_a_foreign_line_is_reported_not_imported(tmp_path: Path) -> None:
    """A line of another run (its stream or meta) is a bad line, and stops the import at its seq."""
    store = MemoryEventStore(upcasters=catalogue_upcasters())
    _, run_id, path = await crashed_run(store, tmp_path)
    other = str(uuid7())
    rewrite(
        path,
        lambda lines: [*lines[:5], {**lines[5], "meta": {**lines[5]["meta"], "run_id": other}}, *lines[6:]],
    )
    report = await recover(store, tmp_path)
    assert [p.line_number for p in report.problems][:1] == [7]  # the header is line 1
    assert await stored_seqs(store, run_id) == [(n, n) for n in range(1, 6)]


# ------------------------------------------------------------------------- live and racing


async def test_a_live_buffer_and_its_run_are_left_alone(tmp_path: Path) -> None:
    """A buffer its writer still holds (a run streaming now) is skipped, and the run stays open."""
    store = MemoryEventStore(upcasters=catalogue_upcasters())
    branch = await Branch(store=store).save()
    run_id = str(uuid7())
    await branch.execute(StartRun(run_id, "run", None, "claude_code", "fake"), run_id=run_id)
    buffer = RunBuffer(buffer_path(tmp_path, branch.id, run_id))
    log = ChunkLog(store, run_id, {"branch_id": branch.id, "run_id": run_id}, buffer=buffer, options=NEVER)
    log.add(StreamChunk("text", content="live"))
    report = await recover(store, tmp_path)
    assert report.runs == () and report.skipped == (str(buffer.path),) and "in use" in report.problems[0].what
    assert (await Branch.load(store, branch.id)).state.runs[run_id].status == "running"
    assert await log.finish() and not buffer.path.exists()


async def test_two_recovers_racing_import_once_and_never_raise(tmp_path: Path) -> None:
    store = MemoryEventStore(upcasters=catalogue_upcasters())
    runs = [await crashed_run(store, tmp_path) for _ in range(3)]
    reports: list[Any] = []

    async def one() -> None:
        reports.append(await recover(store, tmp_path))

    async with anyio.create_task_group() as tg:
        tg.start_soon(one)
        tg.start_soon(one)
    assert sum(r.imported for r in reports) == 3 * (CHUNKS - 3)
    for branch, run_id, _ in runs:
        assert await stored_seqs(store, run_id) == [(n, n) for n in range(1, CHUNKS + 1)]
        events = [e.type async for e in store.read_stream(f"branch-{branch.id}")]
        assert events.count("run.failed") == 1
    assert not list(tmp_path.glob("*.jsonl"))


class _FlakyStore(MemoryEventStore):
    """A memory store whose appends to one stream fail as if the server went away."""

    def __init__(self, broken: str) -> None:
        super().__init__(upcasters=catalogue_upcasters())
        self.broken = broken

    async def append_encoded(self, stream: str, events: Any, expected_version: ExpectedVersion = ANY) -> Any:
        if stream == self.broken:
            raise StoreUnavailable("connection lost")
        return await super().append_encoded(stream, events, expected_version)


async def test_one_failing_run_never_blocks_the_others(tmp_path: Path) -> None:
    """A run whose import fails is reported in failed; the other runs are recovered."""
    store = _FlakyStore("")
    _, bad_run, bad_path = await crashed_run(store, tmp_path)
    _, good_run, _ = await crashed_run(store, tmp_path)
    store.broken = f"run-{bad_run}"
    report = await recover(store, tmp_path)
    assert [r.run_id for r in report.runs] == [good_run]
    [failure] = report.failed
    assert (failure.run_id, failure.error_type) == (bad_run, "StoreUnavailable")
    assert bad_path.exists()  # kept for the next recover
    store.broken = ""
    assert [r.run_id for r in (await recover(store, tmp_path)).runs] == [bad_run]


# ---------------------------------------------------------------------------- path traversal


@pytest.mark.parametrize("bad", ["../../x", "/abs/victim", "x", "01A23B16-A85E-70B7-9B33-AD26A58336DE", ""])
def test_ids_that_name_files_must_be_canonical_uuids(tmp_path: Path, bad: str) -> None:
    from turnlog.kernel._persist import UnsafePathError, snapshot_path

    good = str(uuid7())
    with pytest.raises(UnsafePathError, match="cannot name a run file"):
        buffer_path(tmp_path, bad, good)
    with pytest.raises(UnsafePathError):
        buffer_path(tmp_path, good, bad)
    with pytest.raises(UnsafePathError):
        snapshot_path(tmp_path, bad)


async def test_a_crafted_branch_id_writes_nothing_outside(tmp_path: Path) -> None:
    """A branch planted under the id ``../../victim`` cannot make a stream_persist run write outside."""
    from turnlog.kernel import UnsafePathError

    from .streamkit import ChunkModel

    store = MemoryEventStore(upcasters=catalogue_upcasters())
    real = await Branch(store=store).save()
    created = [e async for e in store.read_stream(f"branch-{real.id}")]
    crafted = "../../victim"
    await store.append(
        f"branch-{crafted}", [NewEvent(e.type, {**e.data, "branch_id": crafted}, e.meta) for e in created]
    )
    victim = tmp_path / "victim.json"
    victim.write_text("keep")
    persist = tmp_path / "a" / "b"
    branch = await Branch.load(store, crafted)
    with pytest.raises(UnsafePathError, match="branch id"):
        [
            m
            async for m in branch.run(
                "go",
                chat_model=ChunkModel([StreamChunk("text", content="x")]),
                stream_persist=True,
                persist_dir=persist,
            )
        ]
    assert victim.read_text() == "keep"
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == [Path("victim.json")]


# -------------------------------------------------------------------------------- permissions


async def test_run_files_are_private(tmp_path: Path) -> None:
    """Buffers and snapshots are 0600 in 0700 directories under the usual umask."""
    from .streamkit import ChunkModel

    seen: list[int] = []
    persist = tmp_path / "runs" / "deep"

    def hook(i: int) -> None:
        if i == 1:
            [path] = persist.glob("*.jsonl")
            seen.append(path.stat().st_mode & 0o777)

    store = MemoryEventStore(upcasters=catalogue_upcasters())
    branch = Branch(store=store)
    old = os.umask(0o022)
    try:
        model = ChunkModel([StreamChunk("text", content="a"), StreamChunk("text", content="b")], hook=hook)
        [m async for m in branch.run("go", chat_model=model, stream_persist=True, persist_dir=persist)]
    finally:
        os.umask(old)
    assert seen == [0o600]
    assert (persist / f"{branch.id}.json").stat().st_mode & 0o777 == 0o600
    assert persist.stat().st_mode & 0o777 == 0o700 and (tmp_path / "runs").stat().st_mode & 0o777 == 0o700
    assert not list(persist.glob(".*.tmp"))


def test_a_planted_link_at_the_buffer_path_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    path = buffer_path(tmp_path, str(uuid7()), str(uuid7()))
    path.symlink_to(victim)
    with pytest.raises(OSError):
        RunBuffer(path)
    assert victim.read_text() == "keep"


# ------------------------------------------------------------------------- a real live writer


async def test_a_live_child_keeps_its_buffer_from_recover_on_a_copy_and_on_its_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A child streaming into a.db: recover on a backup copy and on a.db itself leaves its buffer
    and its run alone; once the child is killed, a.db recovers every buffered chunk."""
    import sys

    from .streamkit import Child, kill_groups, make_fake

    fake = make_fake(monkeypatch, tmp_path)
    fake.script({"steps": [{"text": [f"{n} " for n in range(1, 8)]}, {"hang": True}]})
    child_script = Path(__file__).parent / "_stream_workers" / "stream_child.py"
    store_file, persist = tmp_path / "a.db", tmp_path / "a.db.runs"
    child = await Child.start([sys.executable, str(child_script), f"sqlite:///{store_file}", str(persist)])
    try:
        branch_id = (await child.readline()).split()[1]
        with anyio.fail_after(20):  # the header, the session start and the 7 words
            while sum(len(p.read_bytes().split(b"\n")) - 1 for p in persist.glob("*.jsonl")) < 9:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        [buffer] = persist.glob("*.jsonl")
        before = buffer.read_bytes()
        for suffix in ("", "-wal"):
            shutil.copyfile(tmp_path / f"a.db{suffix}", tmp_path / f"backup.db{suffix}")
        async with sqlite(tmp_path / "backup.db") as backup:
            report = await recover(backup, persist)
            assert report.skipped == (str(buffer),) and report.imported == 0
        async with sqlite(store_file) as original:
            report = await recover(original)
            assert report.skipped == (str(buffer),) and report.runs == ()
            assert "in use" in report.problems[0].what
        assert buffer.read_bytes() == before
    finally:
        await child.kill()
        kill_groups(fake.starts())
    async with sqlite(store_file) as original:
        report = await recover(original)
        [run] = report.runs
        assert run.closed and run.chunks == 8 and not buffer.exists()
        assert await recovered_text(original, branch_id) == "".join(f"{n} " for n in range(1, 8))


async def test_a_colliding_buffer_line_is_reported_and_the_rest_imported(tmp_path: Path) -> None:
    """A buffered chunk whose id the store holds elsewhere: that line is reported, every chunk imported."""
    store = MemoryEventStore(upcasters=catalogue_upcasters())
    branch, bad_run, _ = await crashed_run(store, tmp_path)
    _, good_run, _ = await crashed_run(store, tmp_path)
    [bad] = [p for p in tmp_path.glob("*.jsonl") if bad_run in p.name]
    taken = json.loads(bad.read_bytes().split(b"\n")[4])["id"]  # seq 4 (line 5), not yet stored
    await store.append("elsewhere-1", [NewEvent("x.y", {}, id=UUID(taken))])
    report = await recover(store, tmp_path)
    assert report.failed == ()
    assert sorted(r.run_id for r in report.runs) == sorted([bad_run, good_run])
    assert all(r.closed and r.chunks == CHUNKS for r in report.runs)
    [problem] = report.problems
    assert problem.line_number == 5 and taken in problem.what and "chunk 4 imported as" in problem.what
    stored = [e async for e in store.read_stream(f"run-{bad_run}")]
    assert [e.data["seq"] for e in stored] == list(range(1, CHUNKS + 1))  # seq == version, none lost
    assert str(stored[3].id) != taken and str(stored[3].id) in problem.what
    assert report.kept == (str(bad) + ".corrupt",)
    assert await recovered_text(store, branch.id) == "".join(f"{n} " for n in range(1, CHUNKS + 1))


async def test_no_chunk_is_appended_to_a_run_that_has_ended(tmp_path: Path) -> None:
    """run.ended counts 8 chunks; the buffer holds a 9th: it is reported, never imported."""
    store = MemoryEventStore(upcasters=catalogue_upcasters())
    branch, run_id, path = await crashed_run(store, tmp_path, committed=CHUNKS, chunks=CHUNKS + 1)
    await branch.execute(EndRun(run_id, "run", 1.0, chunks=CHUNKS), run_id=run_id)
    report = await recover(store, tmp_path)
    assert (report.runs, report.imported, report.failed) == ((), 0, ())
    [problem] = report.problems
    assert (
        problem.line_number == CHUNKS + 2 and "has ended" in problem.what and "not imported" in problem.what
    )
    assert await store.stream_version(f"run-{run_id}") == CHUNKS
    assert report.kept == (str(path) + ".corrupt",)
    assert [(r.status, r.chunks) for r in (await Branch.load(store, branch.id)).state.runs.values()] == [
        ("ended", CHUNKS)
    ]
    again = await recover(store, tmp_path)
    assert not again.changed and again.problems == ()
