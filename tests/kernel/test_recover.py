"""recover: leftover buffers imported with their ids, open runs closed as crashed, idempotent."""

from __future__ import annotations

import json
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog.eventstore import EventStore, NewEvent, open_store, uuid7
from turnlog.kernel import Branch, PersistOptions, StartRun, iModel, recover
from turnlog.kernel._run_buffer import BufferHeader, store_location
from turnlog.kernel.models import StreamChunk
from turnlog.kernel.operations.run import StreamAssembler
from turnlog.projections import (
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    Instruction,
    catalogue_upcasters,
)

from .conftest import assert_rebuilds
from .streamkit import Child, ChunkModel, Fake, kill_groups, make_fake

CHILD = Path(__file__).parent / "_stream_workers" / "stream_child.py"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Fake:
    return make_fake(monkeypatch, tmp_path)


def chunk_line(run_id: str, branch_id: str, seq: int, chunk: StreamChunk) -> dict[str, Any]:
    data = {**chunk.to_dict(), "seq": seq}
    return {
        "id": str(uuid7()),
        "stream": f"run-{run_id}",
        "version": seq,
        "type": "stream.chunk",
        "schema": 1,
        "data": data,
        "meta": {"branch_id": branch_id, "run_id": run_id},
        "recorded_at": datetime.now(UTC).isoformat(),
    }


def buffer_text(store: EventStore, branch_id: str, run_id: str, lines: list[str]) -> str:
    """A buffer file's text: the header naming ``store``, then ``lines``."""
    header = BufferHeader(store.store_id, store_location(store), branch_id, run_id).encode().decode()
    return header + "\n".join(lines)


async def open_run(store: EventStore) -> tuple[Branch, str]:
    branch = await Branch(store=store).save()
    run_id = str(uuid7())
    await branch.add_message(Instruction.create("go"), run_id=run_id)
    await branch.execute(StartRun(run_id, "run", None, "claude_code", "fake"), run_id=run_id)
    return branch, run_id


async def test_buffer_is_imported_and_the_run_closed(store: EventStore, tmp_path: Path) -> None:
    branch, run_id = await open_run(store)
    chunks = [
        StreamChunk("system", metadata={"session_id": "sess-1"}),
        StreamChunk("text", content="hel"),
        StreamChunk("text", content="lo"),
        StreamChunk("tool_use", tool_name="Bash", tool_id="t1", tool_input={"command": "ls"}),
        StreamChunk("text", content="tail"),
    ]
    lines = [chunk_line(run_id, branch.id, i, c) for i, c in enumerate(chunks, start=1)]
    # the first two were committed by the run before it died; the buffer still has them
    await store.append(
        f"run-{run_id}",
        [
            NewEvent(ln["type"], ln["data"], ln["meta"], id=__import__("uuid").UUID(ln["id"]))
            for ln in lines[:2]
        ],
        0,
    )
    raw = [json.dumps(ln) for ln in lines]
    raw.insert(3, "@@@ not a chunk @@@")
    path = tmp_path / f"{branch.id}.{run_id}.jsonl"
    path.write_text(
        buffer_text(store, branch.id, run_id, [*raw, json.dumps(lines[0])[:25]])
    )  # torn last line

    report = await recover(store, tmp_path)
    assert report.imported == 3, report
    assert [(p.line_number, "not JSON" in p.what) for p in report.problems] == [(5, True)]
    assert report.torn == (str(path),)
    assert report.kept == (str(path) + ".corrupt",) and not path.exists()
    [done] = report.runs
    assert (done.chunks, done.closed, done.closed_tools, done.session_id) == (5, True, 1, "sess-1")

    again = await Branch.load(store, branch.id)
    kinds = [type(m) for m in again.messages]
    # the text that arrived after the call first, then the call closed by recovery
    assert kinds == [Instruction, AssistantResponse, ActionRequest, AssistantResponse, ActionResponse]
    hello, request, tail, closed = again.messages[1:]
    assert isinstance(hello, AssistantResponse) and hello.response == "hello"
    assert (
        isinstance(closed, ActionResponse) and closed.error and again.state.response_for(request.id) == closed
    )
    assert (
        isinstance(tail, AssistantResponse)
        and tail.response == "tail"
        and tail.metadata["interrupted"] is True
    )
    assert tail.metadata["chunk_range"] == [5, 5]
    run = again.state.runs[run_id]
    assert (run.status, run.reason) == ("failed", "crashed")
    assert run.recovered is not None and run.recovered["imported"] == 3
    assert again.provider_session("claude_code", "fake") == "sess-1"

    head = await store.head()
    second = await recover(store, tmp_path)
    assert not second.changed and await store.head() == head


async def test_run_without_buffer_is_materialized_from_committed_chunks(
    store: EventStore, tmp_path: Path
) -> None:
    branch, run_id = await open_run(store)
    lines = [chunk_line(run_id, branch.id, 1, StreamChunk("text", content="only in the store"))]
    await store.append(f"run-{run_id}", [NewEvent("stream.chunk", lines[0]["data"], lines[0]["meta"])], 0)
    report = await recover(store, tmp_path / "none")
    assert report.imported == 0 and report.runs[0].interrupted_text == len("only in the store")
    loaded = await Branch.load(store, branch.id)
    assert loaded.messages[-1].response == "only in the store"  # type: ignore[union-attr]


async def test_nothing_to_do_is_a_no_op(store: EventStore, tmp_path: Path) -> None:
    branch = Branch(store=store)
    [m async for m in branch.run("go", chat_model=ChunkModel([StreamChunk("text", content="a")]))]
    head = await store.head()
    report = await recover(store, tmp_path)
    assert not report.changed and report.runs == () and await store.head() == head


_chunk = st.one_of(
    st.builds(lambda s: StreamChunk("text", content=s), st.text(min_size=0, max_size=5)),
    st.builds(lambda s: StreamChunk("thinking", content=s), st.text(min_size=1, max_size=5)),
    st.builds(
        lambda i: StreamChunk("tool_use", tool_name="f", tool_id=f"t{i}", tool_input={"i": i}),
        st.integers(0, 3),
    ),
    st.builds(
        lambda i, e: StreamChunk("tool_result", tool_id=f"t{i}", tool_output=f"o{i}", is_error=e),
        st.integers(0, 4),
        st.booleans(),
    ),
    st.just(StreamChunk("result", metadata={"usage": {"input_tokens": 1, "output_tokens": 2}})),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunks=st.lists(_chunk, max_size=12))
def test_replaying_a_finished_run_adds_nothing(chunks: list[StreamChunk]) -> None:
    """The recovery replay of the chunk rules agrees with what the live run recorded."""

    async def main() -> None:
        async with open_store("memory://", upcasters=catalogue_upcasters()) as store:
            branch = Branch(store=store)
            got = [m async for m in branch.run("go", chat_model=ChunkModel(chunks))]
            run_id = next(iter(branch.state.runs))
            existing = {
                (m.kind, *m.metadata["chunk_range"]): m for m in got[1:] if "chunk_range" in m.metadata
            }
            replay = StreamAssembler(branch_id=branch.id, user=branch.user, run_id=run_id, existing=existing)
            made = []
            async for event in store.read_stream(f"run-{run_id}"):
                made += replay.feed(event.data["seq"], StreamChunk.from_dict(event.data))
            made += replay.flush()
            assert made == [m for m in got[1:]]
            texts = "".join(m.response for m in got if isinstance(m, AssistantResponse))
            assert texts == "".join(c.content for c in chunks if c.type == "text")
            await assert_rebuilds(branch)

    anyio.run(main)


async def test_killed_child_is_recovered_and_the_session_resumes(
    store_url: str, fake: Fake, tmp_path: Path
) -> None:
    fake.script(
        {
            "chunk_lines": True,  # the fake's former framing: one assistant line per text part
            "steps": [
                {"thinking": "plan"},
                {"text": ["a", "b", "c"]},
                {"tool_use": {"name": "Bash", "input": {"command": "ls"}}},
                {"text": ["t", "ail"]},
                {"hang": True},
            ],
        }
    )
    persist = tmp_path / "runs"
    child = await Child.start([sys.executable, str(CHILD), store_url, str(persist)])
    try:
        branch_id = (await child.readline()).split()[1]
        # the child is killed once all 8 chunks (system .. "ail") are in its buffer, after its header
        with anyio.fail_after(20):
            while sum(len(p.read_text().splitlines()) for p in persist.glob("*.jsonl")) < 9:  # noqa: ASYNC110
                await anyio.sleep(0.02)
    finally:
        await child.kill()
        kill_groups(fake.starts())
    async with open_store(store_url, upcasters=catalogue_upcasters()) as store:
        report = await recover(store, persist)
        [run] = report.runs
        assert run.closed and run.chunks == 8 and run.closed_tools == 1
        branch = await Branch.load(store, branch_id, chat_model=iModel("claude_code/sonnet"))
        texts = [m.response for m in branch.messages if isinstance(m, AssistantResponse)]
        assert texts == ["abc", "tail"]
        assert branch.messages[-1].metadata["interrupted"] is True
        session = branch.provider_session("claude_code", "sonnet")
        assert session is not None and session == run.session_id
        assert not (await recover(store, persist)).changed
        fake.script({"steps": [{"text": "resumed"}]})
        assert await branch.run_and_collect("continue") == "resumed"
        argv = fake.starts()[-1]["argv"]
        assert argv[argv.index("--resume") + 1] == session
        await assert_rebuilds(branch)


def test_recover_command_reports_and_is_idempotent(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from turnlog.tools._cli import main

    async def crashed() -> str:
        async with open_store(store_url, upcasters=catalogue_upcasters()) as store:
            branch, run_id = await open_run(store)
            line = chunk_line(run_id, branch.id, 1, StreamChunk("text", content="half"))
            (tmp_path / "runs").mkdir()
            text = buffer_text(store, branch.id, run_id, [json.dumps(line), ""])
            (tmp_path / "runs" / f"{branch.id}.{run_id}.jsonl").write_text(text)
            return run_id

    run_id = anyio.run(crashed)
    args = ["recover", "--store", store_url, "--persist-dir", str(tmp_path / "runs")]
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["imported"] == 1 and report["runs"][0]["run_id"] == run_id and report["runs"][0]["closed"]
    assert main(args) == 0
    assert "nothing to recover" in capsys.readouterr().out


def _image(source: Path, image: Path) -> None:
    """Copy the store files and buffers as they are now: what a kill -9 at this point leaves."""
    image.mkdir()
    for name in ("live.db", "live.db-wal"):
        if (source / name).exists():
            shutil.copyfile(source / name, image / name)
    if (source / "live.db.runs").exists():
        shutil.copytree(source / "live.db.runs", image / "live.db.runs")


def _restore(image: Path, target: Path) -> None:
    """Put the image back in the store's place, as if the process had died when it was taken."""
    for name in ("live.db", "live.db-wal", "live.db-shm"):
        (target / name).unlink(missing_ok=True)
    shutil.rmtree(target / "live.db.runs", ignore_errors=True)
    for path in image.iterdir():
        (shutil.copytree if path.is_dir() else shutil.copyfile)(path, target / path.name)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), chunks=st.lists(_chunk, min_size=1, max_size=10), batch=st.integers(1, 4))
def test_recovery_from_any_crash_point(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, chunks: list[StreamChunk], batch: int
) -> None:
    """Whatever chunk a crash lands on: nothing received is lost, no text twice, every call answered."""
    cut = data.draw(st.integers(0, len(chunks) - 1), label="cut")
    live = tmp_path_factory.mktemp("live")
    image = live / "image"

    async def main() -> None:
        def hook(i: int) -> None:
            if i == cut:
                _image(live, image)

        async with open_store(f"sqlite:///{live / 'live.db'}", upcasters=catalogue_upcasters()) as store:
            branch = await Branch(store=store).save()
            options = PersistOptions(batch_chunks=batch, batch_ms=60_000)
            model = ChunkModel(chunks, hook=hook)
            [
                m
                async for m in branch.run(
                    "go", chat_model=model, stream_persist=True, persist_options=options
                )
            ]
        _restore(image, live)
        received = [
            json.loads(line)
            for p in (live / "live.db.runs").glob("*.jsonl")
            for line in p.read_bytes().split(b"\n")[1:]  # not splitlines(): "\x85" is text, not a newline
            if line.strip()
        ]
        async with open_store(f"sqlite:///{live / 'live.db'}", upcasters=catalogue_upcasters()) as store:
            report = await recover(store)
            [run] = report.runs
            stored = [e async for e in store.read_stream(f"run-{run.run_id}")]
            assert {line["id"] for line in received} <= {str(e.id) for e in stored}
            assert [e.data["seq"] for e in stored] == list(range(1, cut + 1))
            again = await Branch.load(store, branch.id)
            assert (again.state.runs[run.run_id].status, again.state.runs[run.run_id].reason) == (
                "failed",
                "crashed",
            )
            mine = [m for m in again.messages if m.metadata.get("run_id") == run.run_id]
            texts = "".join(m.response for m in mine if isinstance(m, AssistantResponse))
            assert texts == "".join(e.data["content"] for e in stored if e.data["type"] == "text")
            for request in (m for m in mine if isinstance(m, ActionRequest)):
                assert again.state.response_for(request.id) is not None
            assert not (await recover(store)).changed
            await assert_rebuilds(again)

    anyio.run(main)
