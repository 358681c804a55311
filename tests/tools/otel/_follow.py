"""Helpers of the ``--follow`` tests: the command in a child process, and a run recorded meanwhile."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
from queue import Empty, Queue
from typing import Any

from turnlog.eventstore import open_store
from turnlog.projections import Instruction, MessageAdded, ModelCalled, RunEnded, RunStarted, Usage, new_event


class Follower:
    """``turnlog otel export --follow`` in a child process, its output lines in a queue."""

    def __init__(self, store: Path | str, endpoint: str) -> None:
        args = [
            sys.executable,
            "-m",
            "turnlog.tools",
            "otel",
            "export",
            "--follow",
            "--store",
            str(store),
            "--endpoint",
            endpoint,
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: Queue[str] = Queue()
        self.seen: list[str] = []
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def line(self, containing: str) -> str:
        while True:
            try:
                line = self.lines.get(timeout=120)
            except Empty:
                raise AssertionError(f"no line with {containing!r}") from None
            self.seen.append(line)
            if containing in line:
                return line

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        # A safety net, not a timing claim: an export in flight when SIGINT arrives finishes first
        # (up to its 10 s timeout), and a 2-core CI machine under full load is slow to start one.
        status = self.proc.wait(timeout=120)
        self.pump.join(timeout=30)  # the pipe reached its end
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        assert status == 130


async def record_run(store: Path | str, run_id: str) -> None:
    """Record a finished run of one model call on the store's first branch (a path: SQLite)."""
    url = f"sqlite:///{store}" if isinstance(store, Path) else store
    async with open_store(url) as store:
        branch = next(s for s, _ in await store.list_streams("branch-"))
        meta: dict[str, Any] = {"branch_id": branch.removeprefix("branch-"), "run_id": run_id}
        called = ModelCalled(
            call_id=f"call-{run_id}",
            provider="openai",
            model="gpt-4.1-mini",
            endpoint="chat/completions",
            run_id=run_id,
            fingerprint="0" * 64,
            usage=Usage(input_tokens=7, output_tokens=3),
            latency_ms=12.5,
            status="ok",
        )
        await store.append(
            branch,
            [
                new_event(
                    RunStarted(run_id=run_id, verb="chat", provider="openai", model="gpt-4.1-mini"), meta=meta
                ),
                new_event(MessageAdded(message=Instruction.create("hello again"), run_id=run_id), meta=meta),
                new_event(called, meta=meta),
                new_event(
                    RunEnded(run_id=run_id, verb="chat", duration_ms=20.0, usage=called.usage), meta=meta
                ),
            ],
        )
