"""The crash proof: a streaming process is SIGKILLed at random points; recovery loses nothing.

"Received" is defined by the child's live buffer: a chunk's line is written there before the
chunk is processed, so a chunk is received when its line is in the buffer at the moment of
the kill. After ``recover``:

- every received chunk is in the store (same event id): zero lost;
- the chunks in the store are, in order, a prefix of what the agent prints and agree with the
  lines the fake CLI recorded as flushed (nothing invented, nothing reordered);
- the run is ``run.failed`` with reason ``crashed``, every text chunk's content is in the
  run's assistant responses exactly once (the partial text is recorded, marked interrupted);
- the CLI's process group is gone within 5 s of the kill, without anyone killing it (it
  must not finish the reply behind the log's back);
- a new run resumes the same provider session (the fake receives ``--resume ID``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from turnlog.eventstore import EventStore, open_store
from turnlog.kernel import Branch, iModel, recover
from turnlog.projections import AssistantResponse, catalogue_upcasters

from .conftest import assert_rebuilds
from .models.test_subprocess import live_members
from .streamkit import Child, make_fake

CHILD = Path(__file__).parent / "_stream_workers" / "stream_child.py"
KILLS = 10
SCRIPT = {
    # The fake's former framing (one assistant line per text part); real Claude Code prints a
    # block only when it is finished, and streams deltas only with --include-partial-messages.
    "chunk_lines": True,
    "delay": 0.004,
    "steps": [
        {"text": [f"a{i} " for i in range(60)]},
        {"tool_use": {"name": "Bash", "input": {"command": "ls"}}},
        {"sleep": 0.15},
        {"tool_result": {"output": "README.md"}},
        {"text": [f"b{i} " for i in range(150)]},
    ],
}


PLANNED = [part for step in SCRIPT["steps"] for part in step.get("text", [])]


def read_buffer(persist: Path) -> list[dict[str, Any]]:
    """The complete lines of the buffer (a torn last line is not a received chunk)."""
    lines: list[dict[str, Any]] = []
    for path in persist.glob("*.jsonl"):
        raw = path.read_bytes()
        complete = raw[: raw.rfind(b"\n") + 1]
        # The first line is the header naming the store and the run, not a chunk.
        lines += [json.loads(line) for line in complete.splitlines()[1:] if line.strip()]
    return lines


def flushed_texts(record: Path) -> list[str]:
    """The text blocks of the assistant lines the fake CLI flushed, in order."""
    texts: list[str] = []
    if not record.exists():
        return texts
    for entry in (json.loads(line) for line in record.read_text().splitlines()):
        if entry["event"] != "stdout" or entry.get("torn"):
            continue
        obj = json.loads(entry["line"])
        if obj.get("type") == "assistant":
            texts += [b["text"] for b in obj["message"]["content"] if b.get("type") == "text"]
    return texts


def groups_of(record: Path) -> list[int]:
    return [
        entry["pgid"]
        for entry in (json.loads(line) for line in record.read_text().splitlines())
        if entry["event"] == "start"
    ]


async def assert_cli_dies_with_its_runner(record: Path) -> None:
    """The fake CLI's process group is gone within a bounded time after the kill -9."""
    pgids = groups_of(record)
    with anyio.move_on_after(5.0):
        while any(live_members(g) for g in pgids):  # noqa: ASYNC110 - no event for another process's exit
            await anyio.sleep(0.02)
    survivors = [pid for g in pgids for pid in live_members(g)]
    for g in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(g, signal.SIGKILL)
    assert survivors == [], f"the CLI outlived the killed process: {survivors}"


async def first_chunk(persist: Path) -> None:
    """Return once the child's buffer holds a received chunk."""
    with anyio.fail_after(60):
        while not read_buffer(persist):  # noqa: ASYNC110 - no event for another process's file
            await anyio.sleep(0.005)


async def crash_once(
    url: str, persist: Path, record: Path, rng: random.Random
) -> tuple[str, list[dict[str, Any]]]:
    env = {**os.environ, "TURNLOG_FAKE_CLI_RECORD": str(record)}
    child = await Child.start([sys.executable, str(CHILD), url, str(persist)], env=env)
    try:
        branch_id = (await child.readline()).split()[1]
        assert (await child.readline()).strip() == "streaming"
        # The random kill point. One kill in five falls before the first chunk; the others
        # count from the first received chunk rather than from the start, so a loaded machine
        # (a slow start of the CLI) still kills mid-stream as often as an idle one.
        if rng.random() < 0.2:
            await anyio.sleep(rng.uniform(0.0, 0.1))
        else:
            await first_chunk(persist)
            await anyio.sleep(rng.uniform(0.0, 0.9))
    finally:
        await child.kill()
    received = read_buffer(persist)
    if record.exists():
        await assert_cli_dies_with_its_runner(record)
    return branch_id, received


async def check_recovered(
    store: EventStore, branch_id: str, received: list[dict[str, Any]], record: Path
) -> str | None:
    branch = await Branch.load(store, branch_id, chat_model=iModel("claude_code/sonnet"))
    [run] = branch.state.runs.values()
    stored = [e async for e in store.read_stream(f"run-{run.run_id}")]
    stored_ids = {str(e.id) for e in stored}
    lost = [line["data"]["seq"] for line in received if line["id"] not in stored_ids]
    assert lost == [], f"chunks received but not in the store: {lost}"
    assert [e.data["seq"] for e in stored] == list(range(1, len(stored) + 1))
    texts = [e.data["content"] for e in stored if e.data["type"] == "text"]
    assert texts == PLANNED[: len(texts)]  # in order, nothing invented
    flushed = flushed_texts(record)
    # The fake notes a line right after flushing it, so a kill can fall between the two: the
    # child may hold one line more than the record shows, never one the agent did not print.
    assert texts[: len(flushed)] == flushed[: len(texts)] and len(texts) <= len(flushed) + 1
    assert (run.status, run.reason) == ("failed", "crashed")
    responses = [m for m in branch.messages if isinstance(m, AssistantResponse)]
    assert "".join(m.response for m in responses) == "".join(texts)
    interrupted = [m for m in responses if m.metadata.get("interrupted")]
    assert interrupted in ([], responses[-1:])
    if stored and stored[-1].data["type"] == "text":
        assert interrupted == responses[-1:]  # the text after the last flush is recorded
    session = branch.provider_session("claude_code", "sonnet")
    if stored:
        assert session is not None and session == stored[0].data["metadata"]["session_id"]
    await assert_rebuilds(branch)
    return session


@pytest.mark.slow
async def test_sigkill_at_random_points_loses_no_received_chunk(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = make_fake(monkeypatch, tmp_path)
    fake.script(SCRIPT)
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    rng = random.Random(int(os.environ.get("TURNLOG_CRASH_SEED", "20261202")))
    crashes = 0
    mid_stream = 0  # kills that found chunks in the buffer
    last: tuple[str, str] | None = None
    for attempt in range(KILLS + 4):
        if crashes == KILLS:
            break
        persist = tmp_path / f"runs-{attempt}"
        record = tmp_path / f"record-{attempt}.jsonl"
        branch_id, received = await crash_once(url, persist, record, rng)
        async with open_store(url, upcasters=catalogue_upcasters()) as store:
            report = await recover(store, persist)
            if not report.runs:
                continue  # the child finished before the kill: nothing crashed
            crashes += 1
            mid_stream += bool(received)
            session = await check_recovered(store, branch_id, received, record)
            assert not (await recover(store, persist)).changed
            if session is not None:
                last = (branch_id, session)
    assert crashes == KILLS
    assert mid_stream >= KILLS // 2, f"only {mid_stream} kills happened mid-stream"
    assert last is not None
    branch_id, session = last
    fake.monkeypatch.setenv("TURNLOG_FAKE_CLI_RECORD", str(tmp_path / "resume.jsonl"))
    fake.script({"steps": [{"text": "resumed"}]})
    async with open_store(url, upcasters=catalogue_upcasters()) as store:
        branch = await Branch.load(store, branch_id, chat_model=iModel("claude_code/sonnet"))
        assert await branch.run_and_collect("continue") == "resumed"
    start = json.loads((tmp_path / "resume.jsonl").read_text().splitlines()[0])
    assert start["argv"][start["argv"].index("--resume") + 1] == session
