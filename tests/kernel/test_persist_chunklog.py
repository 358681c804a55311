"""ChunkLog: each chunk encoded once, the same bytes in the buffer line and in the store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog.eventstore import EventStore, EventTooLarge, MemoryEventStore, encode_json
from turnlog.kernel._persist import CHUNK_TYPE, ChunkLog, PersistOptions, RunBuffer
from turnlog.kernel.models import StreamChunk


async def test_buffer_lines_hold_the_bytes_the_store_gets(store: EventStore, tmp_path: Path) -> None:
    """Every line's id and canonical data are those of the stored event, version = seq."""
    buffer = RunBuffer(tmp_path / "run.jsonl")
    log = ChunkLog(store, "r1", {"branch_id": "b", "run_id": "r1", "session_id": None}, buffer=buffer)
    chunks = [StreamChunk("text", content="100% sure"), StreamChunk("tool_use", tool_name="t", tool_id="c")]
    made = [log.add(chunk) for chunk in chunks]
    header, *lines = [orjson.loads(line) for line in (tmp_path / "run.jsonl").read_bytes().splitlines()]
    assert (header["store_id"], header["branch_id"], header["run_id"]) == (store.store_id, "b", "r1")
    assert await log.finish() and not buffer.path.exists()
    stored = [e async for e in store.read_stream("run-r1")]
    assert [line["id"] for line in lines] == [e.id for e in made] == [str(e.id) for e in stored]
    assert [encode_json(line["data"]) for line in lines] == [e.data for e in made]
    assert [encode_json(e.data) for e in stored] == [e.data for e in made]
    assert [(e.version, e.type, e.meta) for e in stored] == [
        (n, CHUNK_TYPE, {"branch_id": "b", "run_id": "r1"}) for n in (1, 2)
    ]
    assert [line["data"]["seq"] for line in lines] == [1, 2]


async def test_an_oversized_chunk_is_refused_before_its_line_is_written(tmp_path: Path) -> None:
    """A chunk over the store's limit raises EventTooLarge; nothing is buffered or numbered."""
    store = MemoryEventStore(max_event_bytes=200)
    buffer = RunBuffer(tmp_path / "run.jsonl")
    log = ChunkLog(store, "r1", {"run_id": "r1"}, buffer=buffer)
    log.add(StreamChunk("text", content="fits"))
    with pytest.raises(EventTooLarge):
        log.add(StreamChunk("text", content="x" * 300))
    log.add(StreamChunk("text", content="fits too"))
    assert buffer.lines == 3 and log.seq == 2  # the header and two chunks
    assert await log.finish()
    assert [e.data["seq"] async for e in store.read_stream("run-r1")] == [1, 2]


_chunks = st.lists(
    st.builds(
        StreamChunk,
        st.sampled_from(["text", "thinking", "tool_use", "tool_result", "system"]),
        content=st.text(max_size=20),
        tool_name=st.none() | st.text(max_size=5),
        is_error=st.booleans(),
        metadata=st.dictionaries(
            st.text(max_size=4), st.integers(-(2**53), 2**53) | st.text(max_size=4), max_size=2
        ),
    ),
    max_size=8,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunks=_chunks)
def test_the_reader_reads_back_what_the_writer_wrote(
    tmp_path_factory: pytest.TempPathFactory, chunks: Any
) -> None:
    """One codec: every line the writer makes decodes to the id, seq and data the store got."""
    from turnlog.kernel._run_buffer import BufferHeader, ChunkLine

    async def main() -> None:
        store = MemoryEventStore()
        path = tmp_path_factory.mktemp("codec") / "run.jsonl"
        meta = {"branch_id": "b", "run_id": "r1", "session_id": "s%"}
        log = ChunkLog(store, "r1", meta, buffer=RunBuffer(path), options=PersistOptions(batch_chunks=10**6))
        made = [log.add(chunk) for chunk in chunks]
        header, *lines = path.read_bytes().split(b"\n")[:-1]
        assert BufferHeader.decode(header) == BufferHeader(store.store_id, None, "b", "r1")
        codec = ChunkLine("r1")
        read = [codec.decode(line, n) for n, line in enumerate(lines, start=2)]
        assert [(c.id, c.seq, encode_json(c.data), c.meta) for c in read] == [
            (e.id, n, e.data, meta) for n, e in enumerate(made, start=1)
        ]

    anyio.run(main)


def test_a_header_with_an_opening_is_format_2_and_reads_back() -> None:
    """The opening a proxy journals before its first chunk survives the header; a bad one is refused."""
    from turnlog.kernel._run_buffer import BufferHeader

    opening = ({"type": "run.started", "data": {"run_id": "r1", "verb": "proxy"}},)
    header = BufferHeader("s", None, "b", "r1", opening=opening)
    line = header.encode()
    assert b'"format_version":2' in line and BufferHeader.decode(line) == BufferHeader(
        "s", None, "b", "r1", 2, opening
    )
    assert b'"opening"' not in BufferHeader("s", None, "b", "r1").encode()  # still format 1
    bad = line.replace(b'"type":"run.started"', b'"type":7')
    with pytest.raises(ValueError, match="opening"):
        BufferHeader.decode(bad)


class _LostReply(MemoryEventStore):
    """Stores the first batch, then fails as if the reply to the append was lost."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    async def append_encoded(self, stream: str, events: Any, expected_version: Any = None) -> Any:
        result = await super().append_encoded(stream, events, expected_version)
        if not self.failed:
            self.failed = True
            raise ConnectionError("the reply to the append was lost")
        return result


async def test_a_commit_whose_outcome_is_unknown_is_checked_before_the_next() -> None:
    """A failed append may have stored its batch: the next commit sends only what is missing."""
    store = _LostReply()
    log = ChunkLog(store, "r1", {"run_id": "r1"})
    log.add(StreamChunk("text", content="a"))
    log.add(StreamChunk("text", content="b"))
    with pytest.raises(ConnectionError):
        await log.commit()
    assert log.pending == 2  # not known to be stored: still waiting
    log.add(StreamChunk("text", content="c"))
    assert await log.finish()
    stored = [e async for e in store.read_stream("run-r1")]
    assert [(e.version, e.data["content"]) for e in stored] == [(1, "a"), (2, "b"), (3, "c")]
    assert (log.committed, log.pending) == (3, 0)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 400), min_size=1, max_size=6))
def test_a_batch_is_journaled_and_queued_as_one_chunk_after_another(tmp_path: Path, sizes: list[int]) -> None:
    """``add_many`` (one write per batch) leaves the buffer, the queue and the errors ``add_data`` would."""

    def payloads(start: int) -> list[dict[str, Any]]:
        return [
            {"seq": start + i, "type": "text", "content": "x" * n, "metadata": {}}
            for i, n in enumerate(sizes)
        ]

    def outcome(batched: bool, name: str) -> tuple[Any, ...]:
        store = MemoryEventStore(max_event_bytes=300)  # the longest payloads are refused
        path = tmp_path / name
        path.unlink(missing_ok=True)
        buffer = RunBuffer(path)
        log = ChunkLog(store, "r1", {"run_id": "r1"}, buffer=buffer)
        error = None
        try:
            if batched:
                log.add_many(payloads(1))
            else:
                for data in payloads(1):
                    log.add_data(data)
        except EventTooLarge as exc:
            error = type(exc)
        lines = [orjson.loads(line) for line in path.read_bytes().splitlines()[1:]]
        kept = [(line["data"], line["version"]) for line in lines]
        buffer.close()
        return error, kept, buffer.lines, log.seq, log.pending

    assert outcome(True, "batched.jsonl") == outcome(False, "one-by-one.jsonl")
