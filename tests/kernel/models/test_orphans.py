"""The CLI never outlives the process that runs it: kill -9 that process, the CLI group goes."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from turnlog.kernel.models._orphans import pdeathsig_available

from ..streamkit import Child
from .test_subprocess import live_members

WORKER = Path(__file__).parent.parent / "_stream_workers" / "orphan_child.py"
BOUND_S = 5.0


async def start(mode: str) -> tuple[Child, int]:
    child = await Child.start([sys.executable, str(WORKER), mode])
    pgid = int((await child.readline()).split()[1])
    assert (await child.readline()).strip() == "ready"
    return child, pgid


async def gone_within(bound: float, alive: object) -> bool:
    with anyio.move_on_after(bound):
        while alive():  # type: ignore[operator]  # noqa: ASYNC110 - another process's exit has no event
            await anyio.sleep(0.02)
        return True
    return False


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


@pytest.mark.parametrize("mode", ["both", "watchdog"])
async def test_killing_the_runner_takes_the_whole_cli_group_down(mode: str) -> None:
    child, pgid = await start(mode)
    try:
        assert len(live_members(pgid)) == 2  # the CLI and its grandchild
        await child.kill()
        assert await gone_within(BOUND_S, lambda: live_members(pgid)), live_members(pgid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


@pytest.mark.skipif(not pdeathsig_available(), reason="no parent-death signal on this platform")
async def test_the_parent_death_signal_alone_stops_the_cli_itself() -> None:
    child, pgid = await start("pdeathsig")
    try:
        await child.kill()
        assert await gone_within(BOUND_S, lambda: alive(pgid))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


async def test_a_normal_end_stands_the_watchdog_down() -> None:
    from turnlog.kernel.models import CLIProcess

    async with CLIProcess([sys.executable, "-c", "print('{}')"]) as proc:
        items = [item async for item in proc]
        status = await proc.wait_exit()
        watchdog = proc._watchdog
    assert items == [{}] and not status.failed
    assert watchdog is not None and not alive(watchdog.pid)
