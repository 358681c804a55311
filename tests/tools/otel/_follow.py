"""Helpers of the ``--follow`` tests: the command in a child process, and a run recorded meanwhile."""

from __future__ import annotations

import os
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

    def __init__(self, store: Path | str, endpoint: str, env: dict[str, str] | None = None) -> None:
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
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
        )
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

    def stop(self, sig: signal.Signals = signal.SIGINT) -> str:
        """Signal the follower; return its last line, once it has exited with 128 + ``sig``."""
        self.proc.send_signal(sig)
        # Its own word that it stopped (a line, waited for as the others), then its exit: a send
        # in flight is abandoned, and the exporter's timeout bounds the thread it leaves.
        stopped = self.line("stopped;")
        status = self.proc.wait(timeout=60)
        self.pump.join(timeout=30)  # the pipe reached its end
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        assert status == 128 + sig
        return stopped


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
