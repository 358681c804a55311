"""A process streaming an HTTP answer is SIGKILLed mid-stream; ``recover`` keeps the partial text."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio

from turnlog.eventstore import open_store
from turnlog.kernel import Branch, recover
from turnlog.projections import AssistantResponse, catalogue_upcasters
from turnlog.testing import FakeOpenAIServer

from .conftest import assert_rebuilds
from .streamkit import Child

CHILD = Path(__file__).parent / "_stream_workers" / "http_stream_child.py"
WORDS = [f"w{i}" for i in range(400)]


def buffered(persist: Path) -> list[dict[str, Any]]:
    """The complete chunk lines of the buffers (a torn last line is not a received chunk)."""
    lines: list[dict[str, Any]] = []
    for path in persist.glob("*.jsonl"):
        raw = path.read_bytes()
        complete = raw[: raw.rfind(b"\n") + 1]
        lines += [json.loads(line) for line in complete.splitlines()[1:] if line.strip()]
    return lines


async def test_sigkill_mid_stream_then_recover_records_the_partial_text(tmp_path: Path) -> None:
    database = tmp_path / "crash.db"
    url = f"sqlite:///{database}"
    persist = Path(f"{database}.runs")
    script = [{"text": " ".join(WORDS), "chunk_delay_ms": 5}]
    async with FakeOpenAIServer(script) as server:
        child = await Child.start([sys.executable, str(CHILD), url, server.base_url])
        try:
            branch_id = (await child.readline()).split()[1]
            with anyio.fail_after(30):
                # Another process writes the buffer: there is no event to await, only its lines.
                while len(buffered(persist)) < 20:  # noqa: ASYNC110 - well into the stream, far from its end
                    await anyio.sleep(0.01)
        finally:
            await child.kill()
    received = buffered(persist)
    assert 20 <= len(received) < len(WORDS)
    [buffer] = persist.glob("*.jsonl")
    call_id = buffer.name.split(".")[1]  # <branch_id>.<call_id>.jsonl: the call's chunk stream
    async with open_store(url, upcasters=catalogue_upcasters()) as store:
        report = await recover(store)
        branch = await Branch.load(store, branch_id)
        # the call never finished: no model.called, the run is closed as crashed
        assert [e for e, _ in await branch.events() if e.type == "model.called"] == []
        [run] = branch.state.runs.values()
        assert (run.verb, run.status, run.reason) == ("communicate", "failed", "crashed")
        assert call_id in {r.run_id for r in report.runs}
        stored = [e async for e in store.read_stream(f"run-{call_id}")]
        assert {line["id"] for line in received} <= {str(e.id) for e in stored}
        texts = [e.data["content"] for e in stored if e.data["type"] == "text"]
        assert "".join(texts) == " ".join(WORDS)[: len("".join(texts))]
        [partial] = [m for m in branch.messages if isinstance(m, AssistantResponse)]
        assert partial.metadata.get("interrupted") is True
        assert partial.response == "".join(texts)
        assert not (await recover(store)).changed
        await assert_rebuilds(branch)
