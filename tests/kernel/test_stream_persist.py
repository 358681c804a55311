"""stream_persist: the live buffer, batched commits with the same ids, snapshot files."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, PersistOptions, SnapshotFileError, verify_snapshot_files
from turnlog.kernel.models import StreamChunk
from turnlog.projections import PROJECTION_VERSION, AssistantResponse, BranchState, snapshot_records

from .conftest import assert_rebuilds
from .streamkit import ChunkModel, text


def buffer_lines(directory: Path) -> list[dict[str, Any]]:
    files = list(directory.glob("*.jsonl"))
    assert len(files) == 1, files
    header, *lines = [json.loads(line) for line in files[0].read_text().splitlines()]
    assert header["format"] == "turnlog.run_buffer"
    return lines


async def test_each_line_is_written_before_its_chunk_is_processed(store: EventStore, tmp_path: Path) -> None:
    persist = tmp_path / "p"
    counts: list[int] = []

    def hook(i: int) -> None:
        # Asked for chunk i: chunks 0..i-1 are processed, so their lines must be there.
        if i:
            lines = buffer_lines(persist)
            counts.append(len(lines))
            assert [line["data"]["seq"] for line in lines] == list(range(1, i + 1))

    model = ChunkModel([text(f"{i} ") for i in range(6)], hook=hook)
    branch = Branch(store=store)
    [m async for m in branch.run("go", chat_model=model, stream_persist=True, persist_dir=persist)]
    assert counts == [1, 2, 3, 4, 5]
    assert not list(persist.glob("*.jsonl"))  # everything committed: the buffer is gone


async def test_buffer_lines_are_the_store_envelope_with_the_same_ids(
    store: EventStore, tmp_path: Path
) -> None:
    persist = tmp_path / "p"
    seen: list[list[dict[str, Any]]] = []
    chunks = [StreamChunk("system", metadata={"session_id": "s"}), text("a"), text("b")]
    model = ChunkModel([*chunks, StreamChunk("result", metadata={"usage": {}})])
    model.hook = lambda i: seen.append(buffer_lines(persist)) if i == 3 else None
    branch = Branch(store=store)
    got = [m async for m in branch.run("go", chat_model=model, stream_persist=True, persist_dir=persist)]
    run_id = got[-1].metadata["run_id"]
    stored = [e async for e in store.read_stream(f"run-{run_id}")]
    for line, event in zip(seen[0], stored, strict=False):
        assert set(line) == {"id", "stream", "version", "type", "schema", "data", "meta", "recorded_at"}
        assert line["id"] == str(event.id) and line["stream"] == event.stream
        assert (line["version"], line["type"], line["schema"]) == (event.version, event.type, event.schema)
        assert line["data"] == event.data and line["meta"] == event.meta
    assert stored[0].meta["branch_id"] == branch.id and stored[0].meta["run_id"] == run_id


async def test_commits_are_batched_and_messages_never_outrun_their_chunks(
    store: EventStore, tmp_path: Path
) -> None:
    branch = Branch(store=store)
    committed: list[int] = []
    run_ids: list[str] = []

    async def stored() -> int:
        return await store.stream_version(f"run-{run_ids[0]}") if run_ids else 0

    chunks = [text(f"{i}") for i in range(10)]
    chunks.insert(7, StreamChunk("tool_use", tool_name="t", tool_id="c"))
    model = ChunkModel(chunks)
    options = PersistOptions(batch_chunks=4, batch_ms=60_000)
    async for message in branch.run("go", chat_model=model, persist_options=options):
        if isinstance(message, AssistantResponse) or message.kind == "ActionRequest":
            run_ids.append(message.metadata["run_id"])
            committed.append(await stored())
            assert committed[-1] >= message.metadata["chunk_range"][1]
    # the response before the tool call forced a commit of the 7 chunks before it (and the call)
    assert committed[0] == 8
    assert await store.stream_version(f"run-{run_ids[0]}") == 11
    await assert_rebuilds(branch)


async def test_without_batching_every_chunk_is_committed_at_once(store: EventStore) -> None:
    branch = Branch(store=store)
    seen: list[int] = []

    class Probe(ChunkModel):
        async def _gen(self) -> AsyncIterator[StreamChunk]:
            for chunk in self.chunks:
                yield chunk
                # back here only once the chunk was processed: it must be in the store already
                run_id = next(iter(branch.state.runs))
                seen.append(await store.stream_version(f"run-{run_id}"))

    model = Probe([text("a"), text("b"), text("c")])
    [m async for m in branch.run("go", chat_model=model, persist_options=PersistOptions(batch_chunks=1))]
    assert seen == [1, 2, 3]


async def test_fsync_mode_streams_and_cleans_up(store: EventStore, tmp_path: Path) -> None:
    branch = Branch(store=store)
    options = PersistOptions(fsync=True)
    got = [
        m
        async for m in branch.run(
            "go",
            chat_model=ChunkModel([text("a")]),
            stream_persist=True,
            persist_dir=tmp_path,
            persist_options=options,
        )
    ]
    assert got[-1].response == "a"  # type: ignore[union-attr]
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".json", ".jsonl", ".tmp")) == [
        f"{branch.id}.json"
    ]


def test_bad_persist_options_are_refused() -> None:
    with pytest.raises(ValueError, match="batch_chunks"):
        PersistOptions(batch_chunks=0)
    with pytest.raises(ValueError, match="batch_ms"):
        PersistOptions(batch_ms=-1)


async def test_unreadable_snapshot_files_are_refused(store: EventStore, tmp_path: Path) -> None:
    garbage = tmp_path / "x.json"
    garbage.write_text("{not json")
    with pytest.raises(SnapshotFileError, match="not JSON"):
        await Branch.from_snapshot(garbage, store=store)
    other = tmp_path / "y.json"
    other.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(SnapshotFileError, match=r"not a turnlog\.branch_snapshot"):
        await Branch.from_snapshot(other, store=store)
    branch = Branch(store=store)
    [
        m
        async for m in branch.run(
            "go", chat_model=ChunkModel([text("a")]), stream_persist=True, persist_dir=tmp_path
        )
    ]
    path = tmp_path / f"{branch.id}.json"
    body = json.loads(path.read_text())
    body["projection_version"] = -1
    path.write_text(json.dumps(body))
    with pytest.raises(SnapshotFileError, match="projection version"):
        await Branch.from_snapshot(path, store=store)
    with pytest.raises(SnapshotFileError, match="cannot read"):
        await Branch.from_snapshot(tmp_path / "missing.json", store=store)


def test_stream_benchmark_runs_and_reports_every_peer(capsys: pytest.CaptureFixture[str]) -> None:
    from turnlog.tools._cli import main

    assert main(["bench", "stream", "--chunks", "200", "--repeat", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rates = report["chunks_per_s"]
    assert report["chunks"] == 200
    assert rates["turnlog run(stream_persist=True)"] > 0 and rates["turnlog run(stream_persist=False)"] > 0
    if report["lionagi"] is not None:
        assert report["ratio_persist_vs_lionagi"] > 0


async def _snapshot_file(store: EventStore, tmp_path: Path) -> tuple[Branch, Path]:
    """A branch run with ``stream_persist`` into the store's own run directory, and its snapshot file."""
    branch = Branch(store=store)
    [m async for m in branch.run("go", chat_model=ChunkModel([text("a")]), stream_persist=True)]
    (path,) = Path(f"{tmp_path / 'turnlog.db'}.runs").glob("*.json")
    return branch, path


def _rewrite(path: Path, change: Any, *, redigest: bool = False) -> None:
    body = json.loads(path.read_text())
    change(body)
    if redigest:  # the edit of someone who knows the format: the digest recomputed
        rest = {key: value for key, value in body.items() if key != "digest"}
        body["digest"] = hashlib.sha256(orjson.dumps(rest, option=orjson.OPT_SORT_KEYS)).hexdigest()
    path.write_text(json.dumps(body))


async def test_an_edited_snapshot_file_is_refused_naming_the_file(store: EventStore, tmp_path: Path) -> None:
    """An edit of the content, a stripped digest, or a file bound to another history: each is refused."""
    branch, path = await _snapshot_file(store, tmp_path)
    assert (await Branch.from_snapshot(path, store=store)).id == branch.id
    original = path.read_bytes()

    def edit_text(body: dict[str, Any]) -> None:
        for record in body["records"]:
            record["data"] = json.loads(json.dumps(record["data"]).replace('"a"', '"forged"'))

    _rewrite(path, edit_text)
    assert b"forged" in path.read_bytes()
    with pytest.raises(SnapshotFileError, match="digest does not match its content") as info:
        await Branch.from_snapshot(path, store=store)
    assert info.value.path == str(path) and str(path) in str(info.value)
    path.write_bytes(original)
    _rewrite(path, lambda body: body.pop("digest"))
    with pytest.raises(SnapshotFileError, match="carries no digest"):
        await Branch.from_snapshot(path, store=store)
    path.write_bytes(original)
    _rewrite(path, lambda body: body.update(event_hash="0" * 64), redigest=True)
    with pytest.raises(SnapshotFileError, match="hash in this store differs"):
        await Branch.from_snapshot(path, store=store)


async def test_verify_reports_an_edited_snapshot_file(store: EventStore, tmp_path: Path) -> None:
    """``turnlog verify`` checks the snapshot files in the store's run directory."""
    _, path = await _snapshot_file(store, tmp_path)
    db = str(tmp_path / "turnlog.db")
    clean = await anyio.run_process([sys.executable, "-m", "turnlog", "verify", "--store", db], check=False)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    _rewrite(path, lambda body: body.update(written_at="2000-01-01T00:00:00+00:00"))
    done = await anyio.run_process([sys.executable, "-m", "turnlog", "verify", "--store", db], check=False)
    assert done.returncode == 1
    assert f"PROBLEM snapshot file {path}: its digest does not match its content" in done.stdout.decode()


def _legacy_snapshot_file(path: Path, state: BranchState) -> None:
    """Write ``state`` as the snapshot files were written before they carried a digest.

    The format of turnlog before commit 12eebfc (``_snapshot_bytes`` then): the same fields
    as today's file, without ``event_hash`` and without ``digest``.
    """
    body = {
        "format": "turnlog.branch_snapshot",
        "format_version": 1,
        "projection_version": PROJECTION_VERSION,
        "branch_id": state.branch_id,
        "stream": f"branch-{state.branch_id}",
        "version": state.version,
        "written_at": "2026-11-20T10:00:00+00:00",
        "records": [
            {"type": r.type, "version": r.version, "schema": r.schema, "data": dict(r.data)}
            for r in snapshot_records(state, None)
        ],
    }
    path.write_bytes(orjson.dumps(body))


async def test_a_snapshot_file_of_the_format_before_digests_opens_marked_unverified(
    store: EventStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An older file is neither refused nor trusted in silence: it opens, and says it was not checked."""
    branch, path = await _snapshot_file(store, tmp_path)
    assert (
        await Branch.from_snapshot(path, store=store)
    ).snapshot_unverified is None  # today's file: checked
    _legacy_snapshot_file(path, branch.state)
    with caplog.at_level("WARNING", logger="turnlog.kernel"):
        opened = await Branch.from_snapshot(path, store=store)
    assert opened.id == branch.id and opened.state == (await Branch.load(store, branch.id)).state
    assert opened.snapshot_unverified is not None
    assert "before snapshot files carried a digest" in opened.snapshot_unverified
    assert f"{path}: snapshot file unverified" in caplog.text
    # What can be checked still is: the version it stands at must be one the store holds.
    _rewrite(path, lambda body: body.update(version=branch.version + 5))
    with pytest.raises(SnapshotFileError, match="which this store does not hold"):
        await Branch.from_snapshot(path, store=store)
    # A file of today's format stripped of its digest keeps its event_hash: refused, not "older".
    _legacy_snapshot_file(path, branch.state)
    _rewrite(path, lambda body: body.update(event_hash="0" * 64))
    with pytest.raises(SnapshotFileError, match="carries no digest"):
        await Branch.from_snapshot(path, store=store)


async def test_verify_names_an_older_snapshot_file_as_unverified(store: EventStore, tmp_path: Path) -> None:
    """``turnlog verify`` passes a store with an older snapshot file, and names the file as unverified."""
    branch, path = await _snapshot_file(store, tmp_path)
    _legacy_snapshot_file(path, branch.state)
    db = str(tmp_path / "turnlog.db")
    done = await anyio.run_process([sys.executable, "-m", "turnlog", "verify", "--store", db], check=False)
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    assert f"UNVERIFIED snapshot file {path}: written before snapshot files carried a digest" in out
    assert "1 snapshot file unverified" in out.splitlines()[-1]
    done = await anyio.run_process(
        [sys.executable, "-m", "turnlog", "verify", "--store", db, "--json"], check=False
    )
    report = json.loads(done.stdout)
    assert report["ok"] is True
    assert [f["path"] for f in report["unverified_snapshot_files"]] == [str(path)]
    found = await verify_snapshot_files(path.parent, store)
    assert (found.checked, found.problems, [p for p, _ in found.unverified]) == (1, (), [str(path)])
