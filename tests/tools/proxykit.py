"""``turnlog proxy`` as a real subprocess for the tests, and readers of what it recorded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

from turnlog.eventstore import open_store
from turnlog.kernel import Branch

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Proxy:
    url: str
    process: Process
    store: Path

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)


@asynccontextmanager
async def running_proxy(store: Path, *upstreams: str, extra: tuple[str, ...] = ()) -> AsyncIterator[Proxy]:
    """``turnlog proxy --port 0`` in front of ``upstreams``; its URL from its first line of output."""
    argv = [sys.executable, "-m", "turnlog", "proxy", "--store", str(store), "--port", "0"]
    for upstream in upstreams:
        argv += ["--upstream", upstream]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = await anyio.open_process(
        [*argv, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        assert process.stdout is not None
        line = b""
        with anyio.fail_after(30):
            while not line.endswith(b"\n"):
                line += await process.stdout.receive(1)
        text = line.decode().strip()
        assert text.startswith("turnlog proxy listening on http://127.0.0.1:"), text
        yield Proxy(text.rsplit(" ", 1)[1], process, store)
    finally:
        if process.returncode is None:
            process.terminate()
        with anyio.fail_after(30):
            await process.wait()
        await process.aclose()


@dataclass
class Recorded:
    branch: Branch
    events: list[Any]

    @property
    def state(self) -> Any:
        return self.branch.state

    @property
    def messages(self) -> Any:
        return self.branch.messages

    def calls(self) -> list[Any]:
        return [e for e in self.events if e.event_type == "model.called"]


async def recorded(store: Path) -> list[Recorded]:
    """Every branch of the store, oldest first, with the events of its own stream."""
    async with open_store(f"sqlite:///{store}") as opened:
        ids = [e.data["branch_id"] async for e in opened.read_all(types=["branch.created", "branch.forked"])]
        out = []
        for i in ids:
            branch = await Branch.load(opened, i)
            out.append(Recorded(branch, [e for _, e in await branch.events()]))
        return out


async def events_of(store: Path, stream: str) -> list[Any]:
    async with open_store(f"sqlite:///{store}") as opened:
        return [e async for e in opened.read_stream(stream)]


def transcript(branch: Branch | Recorded) -> list[tuple[str, str]]:
    """(kind, text) of each message in the branch's view."""
    out = []
    for m in branch.messages:
        content: Any = m.content
        text = (
            getattr(content, "text", None)
            or getattr(content, "instruction", None)
            or getattr(content, "system_message", None)
            or getattr(content, "function", None)
        )
        out.append((m.kind, str(text)))
    return out


async def await_event(store: Path, event_type: str) -> Any:
    """The first ``event_type`` event of the store, waiting for another process to write it."""
    async with open_store(f"sqlite:///{store}") as opened:
        with anyio.fail_after(30):
            async for event in opened.subscribe(types=[event_type]):
                return event
    raise AssertionError("unreachable")
