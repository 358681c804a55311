"""Step 4 of ``turnlog demo``: a CLI stream killed mid-way, recovered, and resumed.

A child process (``turnlog.tools._demo_child``) runs ``branch.run(..., stream_persist=True)``
against the slow fake Claude CLI. Once the live chunk buffer shows text chunks arriving, the
child gets SIGKILL. ``recover`` then imports the chunks that reached it, materializes the
partial text as an interrupted response and closes the run with ``run.failed`` (reason
``crashed``). Finally ``branch.run`` continues: the provider session bound by the killed
run is resumed (the fake CLI receives ``--resume <session id>``).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import anyio
import orjson

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch
from turnlog.kernel.models import ClaudeCodeModel
from turnlog.projections import AssistantResponse


class Demo(Protocol):
    """What this step needs of ``_demo.Demo``; named here so that the two modules are no circle."""

    store: EventStore
    workdir: Path
    store_url: str

    async def open_branch(self) -> Branch:
        """The demo branch, rebuilt from the log."""
        ...


__all__ = ["CHUNKS_BEFORE_KILL", "OneBranchView", "claude_command", "crash_recover_resume"]

CHUNKS_BEFORE_KILL = 6
"""Text chunks that must be in the live buffer before the child is killed."""

_PROMPT = "Look at the project files and explain, step by step, what turnlog records."
_RESUME = "continue"
# Many small parts: the kill comes after a few, long before the stream could end by itself.
_WORDS = (
    "turnlog records every message, every model call, every run start and end, and every streamed "
    "chunk as an event in an append-only, hash-chained log; a branch is a fold of its events, so "
    "nothing that reached the process is lost when it dies, and a crashed run is closed honestly."
).split(" ")
_PARTS = [word + " " for word in _WORDS[:-1]] + _WORDS[-1:]
_SLOW_SCRIPT: dict[str, Any] = {
    "chunk_lines": True,  # one assistant line per word (real Claude Code prints whole blocks)
    "delay": 0.1,
    "usage": {"input_tokens": 1200, "output_tokens": 160},
    "cost_usd": 0.0061,
    "steps": [
        {"thinking": "The user wants a summary of what the project records."},
        {"tool_use": {"name": "Bash", "input": {"command": "ls"}}},
        {"tool_result": {"output": "README.md\ndocs\neventstore\nkernel\nprojections\ntools"}},
        {"text": _PARTS},
    ],
}
_RESUME_SCRIPT: dict[str, Any] = {
    "usage": {"input_tokens": 1500, "output_tokens": 40},
    "cost_usd": 0.0019,
    "steps": [{"text": "Picking up where I was cut off: a branch is a fold of its events."}],
}
_CHILD_START = 30.0  # seconds for the child to start and stream its first chunks
_STEP_LIMIT = 45.0


def claude_command(workdir: Path, script: Path) -> str:
    """The value of ``TURNLOG_CLAUDE_BIN`` that runs the fake Claude CLI with ``script``."""
    return shlex.join(
        [
            sys.executable,
            "-m",
            "turnlog.testing._fake_cli",
            "claude",
            "--script",
            str(script),
            "--state-dir",
            str(workdir / "claude-state"),
            "--record",
            str(workdir / "claude-record.jsonl"),
        ]
    )


def _text_chunks(persist_dir: Path) -> int:
    """Text chunks in the live buffers (a torn last line is not counted)."""
    count = 0
    for path in persist_dir.glob("*.jsonl"):
        for line in path.read_bytes().split(b"\n"):
            with contextlib.suppress(orjson.JSONDecodeError):
                event = orjson.loads(line)
                if isinstance(event, dict) and (event.get("data") or {}).get("type") == "text":
                    count += 1
    return count


def _resume_argv(record: Path) -> list[str]:
    """The argv of the latest fake CLI start in the record."""
    argv: list[str] = []
    for line in record.read_bytes().splitlines():
        entry = orjson.loads(line)
        if entry.get("event") == "start":
            argv = list(entry["argv"])
    return argv


async def _kill_mid_stream(demo: Demo, branch: Branch, persist_dir: Path, slow: Path) -> None:
    env = {**os.environ, "TURNLOG_CLAUDE_BIN": claude_command(demo.workdir, slow)}
    log = demo.workdir / "child.log"
    argv = [
        sys.executable,
        "-m",
        "turnlog.tools._demo_child",
        "--store",
        demo.store_url,
        "--branch",
        branch.id,
        "--persist-dir",
        str(persist_dir),
        # Commits lag the buffer by up to a second, as under load: the kill leaves chunks that
        # only the buffer holds, and recovery imports them.
        "--batch-ms",
        "1000",
        _PROMPT,
    ]
    with log.open("wb") as out:
        process = await anyio.open_process(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        print(f"   child pid {process.pid}: branch.run(..., stream_persist=True) on the slow fake Claude CLI")
        with anyio.fail_after(_CHILD_START):
            # The buffer is written before a chunk is processed: it is the evidence to wait for.
            while (seen := await anyio.to_thread.run_sync(_text_chunks, persist_dir)) < CHUNKS_BEFORE_KILL:
                if process.returncode is not None:
                    raise RuntimeError(
                        f"the child exited ({process.returncode}) before streaming: {log.read_text()[-400:]}"
                    )
                await anyio.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()
        await process.aclose()
    print(f"   {seen} text chunks had reached the live buffer: SIGKILL sent, the child died (exit {code})")


class OneBranchView:
    """A store as ``recover`` should see it in the demo: the demo's branch, none of the others.

    ``recover`` closes every run the log shows open. In a store the demo shares with other
    work (``turnlog demo --store EXISTING``), another process may be streaming a run right
    now; the demo must not close it. Through this view the lifecycle scan (``read_all``)
    and the branch listing see only the demo's own branch stream; every other call goes to
    the store unchanged.

    Args:
        store: The store.
        branch_id: The demo's branch.
    """

    def __init__(self, store: Any, branch_id: str) -> None:
        self._store = store
        self._stream = f"branch-{branch_id}"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _mine(self, stream: str) -> bool:
        return not stream.startswith("branch-") or stream == self._stream

    async def read_all(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """The store's ``read_all`` without the events of other branches."""
        async with contextlib.aclosing(self._store.read_all(*args, **kwargs)) as events:
            async for event in events:
                if self._mine(event.stream):
                    yield event

    async def list_streams(self, prefix: str | None = None) -> list[tuple[str, int]]:
        """The store's ``list_streams`` without other branches."""
        return [(s, v) for s, v in await self._store.list_streams(prefix) if self._mine(s)]


def _open_runs(branch: Branch) -> list[Any]:
    return [r for r in branch.state.runs.values() if r.verb == "run" and r.status == "running"]


async def crash_recover_resume(demo: Demo) -> str | None:
    """Run step 4; return a reason when it is skipped."""
    import turnlog.kernel as kernel

    recover = getattr(kernel, "recover", None)
    if not callable(getattr(Branch, "run", None)):
        return "run not available in this build"
    if recover is None:
        return "recover not available in this build"
    if demo.store_url.startswith("memory:") or demo.store_url.endswith(":memory:"):
        return "an in-memory store cannot be shared with the child process (give a file or PostgreSQL store)"
    with anyio.fail_after(_STEP_LIMIT):
        branch = await demo.open_branch()
        slow = demo.workdir / "claude-slow.json"
        fast = demo.workdir / "claude-resume.json"
        slow.write_bytes(orjson.dumps(_SLOW_SCRIPT))
        fast.write_bytes(orjson.dumps(_RESUME_SCRIPT))
        persist_dir = demo.workdir / "runs"
        await _kill_mid_stream(demo, branch, persist_dir, slow)

        branch = await demo.open_branch()
        open_runs = _open_runs(branch)
        if not open_runs:
            raise AssertionError("the killed run is not open in the log")
        run_id = open_runs[-1].run_id
        committed = sum([1 async for _ in demo.store.read_stream(f"run-{run_id}")])
        buffered = len(list(persist_dir.glob("*.jsonl")))
        print(
            f"   in the store before recovery: run {run_id[:13]}... still 'running', {committed} chunks "
            f"committed; {buffered} live buffer file left behind"
        )

        # only the demo's branch: a store shared with other work keeps its other runs as they are
        report = await recover(OneBranchView(demo.store, branch.id), persist_dir)
        runs = [r for r in report.runs if r.run_id == run_id]
        if not runs or not runs[0].closed:
            raise AssertionError(f"recover did not close run {run_id}: {report.to_dict()}")
        done = runs[0]
        print(
            f"   recover: {done.imported} chunks imported from the buffer ({done.chunks} in the run stream), "
            f"{done.interrupted_text} characters of partial text materialized as an interrupted response, "
            f"{done.messages} message(s) recorded, run.failed reason=crashed"
        )
        if done.note:
            print(f"   note: {done.note}")  # what the report says before a resume, indented like the rest
        branch = await demo.open_branch()
        partial = [
            m
            for m in branch.messages
            if isinstance(m, AssistantResponse)
            and m.metadata.get("interrupted")
            and m.metadata.get("run_id") == run_id
        ]
        for message in partial:
            chunk_range = message.metadata.get("chunk_range")
            print(f"   partial answer (chunks {chunk_range}): {message.response!r}")
        session = branch.provider_session("claude_code")
        print(f"   provider session bound by the killed run: {session}")

        claude = ClaudeCodeModel("sonnet", executable=claude_command(demo.workdir, fast))
        async with contextlib.aclosing(branch.run(_RESUME, chat_model=claude)) as messages:
            answers = [m async for m in messages if isinstance(m, AssistantResponse)]
        argv = _resume_argv(demo.workdir / "claude-record.jsonl")
        resumed = argv[argv.index("--resume") + 1] if "--resume" in argv else None
        if session is None or resumed != session:
            raise AssertionError(f"the resumed run did not resume session {session}: argv {argv}")
        print(f"   resumed run: the fake CLI got --resume {resumed}")
        for answer in answers:
            print(f"   answer: {answer.response!r}")
        ended = [r for r in branch.state.runs.values() if r.verb == "run" and r.status == "ended"]
        if not ended:
            raise AssertionError("the resumed run did not end")
        print(f"   run {ended[-1].run_id[:13]}... ended")
    return None
