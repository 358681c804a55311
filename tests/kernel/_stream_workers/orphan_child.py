"""Child process of the orphan tests: runs a CLI-like process group until it is killed.

Usage: python orphan_child.py both|pdeathsig|watchdog

The "CLI" starts a grandchild (a shell-like helper) and prints one JSON line; this process
prints ``pgid N`` once the CLI runs and ``ready`` once its line arrived, then waits.
"""

from __future__ import annotations

import sys

import anyio

from turnlog.kernel.models import CLIProcess

CLI = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print('{\"ready\": true}', flush=True)\n"
    "time.sleep(60)\n"
)


async def main(mode: str) -> None:
    proc = CLIProcess(
        [sys.executable, "-c", CLI],
        pdeathsig=mode in ("both", "pdeathsig"),
        watchdog=mode in ("both", "watchdog"),
    )
    async with proc:
        print(f"pgid {proc.pid}", flush=True)
        async for _ in proc:
            print("ready", flush=True)
            await anyio.sleep(60)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
