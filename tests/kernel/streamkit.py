"""Shared helpers of the stream tests: the fake CLIs over real pipes, and an in-process model.

``ChunkModel`` yields pre-built chunks for the shapes no real CLI prints (a benign end of
stream, a stream that raises, a close that fails); everything else goes through the fake
CLIs (``turnlog.testing._fake_cli``) as real child processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from turnlog.kernel.models import StreamChunk

BIN_VARS = {"claude": "TURNLOG_CLAUDE_BIN", "codex": "TURNLOG_CODEX_BIN", "gemini": "TURNLOG_GEMINI_BIN"}


@dataclass
class Fake:
    """The fake CLIs wired in through the TURNLOG_*_BIN variables."""

    record_path: Path
    monkeypatch: pytest.MonkeyPatch

    def script(self, script: Mapping[str, Any]) -> None:
        self.monkeypatch.setenv("TURNLOG_FAKE_CLI_SCRIPT", json.dumps(script))

    def records(self) -> list[dict[str, Any]]:
        if not self.record_path.exists():
            return []
        return [json.loads(line) for line in self.record_path.read_text().splitlines()]

    def starts(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r["event"] == "start"]

    def pids(self, event: str) -> list[int]:
        return [r["pid"] for r in self.records() if r["event"] == event]


def make_fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Fake:
    for cli, var in BIN_VARS.items():
        monkeypatch.setenv(var, f"{sys.executable} -m turnlog.testing._fake_cli {cli}")
    monkeypatch.setenv("TURNLOG_FAKE_CLI_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("TURNLOG_FAKE_CLI_RECORD", str(tmp_path / "record.jsonl"))
    monkeypatch.delenv("TURNLOG_FAKE_CLI_SCRIPT", raising=False)
    return Fake(tmp_path / "record.jsonl", monkeypatch)


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def text(content: str) -> StreamChunk:
    return StreamChunk("text", content=content)


@dataclass
class ChunkModel:
    """A CLI-like streaming model that yields the chunks it was given.

    ``hook(i)`` runs before chunk ``i`` (0-based) is yielded; ``raise_at_end`` is raised
    after the last chunk; ``close_error`` is raised when the stream is closed early.
    """

    chunks: Sequence[StreamChunk]
    provider: str = "claude_code"
    model: str = "fake"
    is_cli: bool = True
    hook: Callable[[int], Any] | None = None
    raise_at_end: BaseException | None = None
    close_error: BaseException | None = None
    delay: float = 0.0
    calls: list[dict[str, Any]] = field(default_factory=list)
    closed: int = 0

    def stream(
        self, prompt: str, *, resume: str | None = None, options: Mapping[str, Any] | None = None
    ) -> AsyncIterator[StreamChunk]:
        self.calls.append({"prompt": prompt, "resume": resume, "options": dict(options or {})})
        return self._gen()

    async def _gen(self) -> AsyncIterator[StreamChunk]:
        finished = False
        try:
            for i, chunk in enumerate(self.chunks):
                if self.hook is not None:
                    self.hook(i)
                if self.delay:
                    await anyio.sleep(self.delay)
                yield chunk
            finished = True
            if self.raise_at_end is not None:
                raise self.raise_at_end
        finally:
            self.closed += 1
            if not finished and self.close_error is not None:
                raise self.close_error


class Child:
    """A child process whose standard output is read line by line (standard error inherited)."""

    def __init__(self, proc: Process) -> None:
        self.proc = proc
        assert proc.stdout is not None
        self._reader = BufferedByteReceiveStream(proc.stdout)

    @classmethod
    async def start(cls, argv: Sequence[str], env: Mapping[str, str] | None = None) -> Child:
        proc = await anyio.open_process(list(argv), stdout=subprocess.PIPE, stderr=None, env=env)
        return cls(proc)

    async def readline(self) -> str:
        """The next line of standard output, without its newline."""
        return (await self._reader.receive_until(b"\n", 65536)).decode()

    async def kill(self) -> None:
        """SIGKILL the child and reap it (idempotent)."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()
        await self.proc.aclose()


def kill_groups(starts: Sequence[Mapping[str, Any]]) -> None:
    """SIGKILL the process groups of fake CLIs orphaned by a killed parent."""
    for start in starts:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(start["pgid"], signal.SIGKILL)
