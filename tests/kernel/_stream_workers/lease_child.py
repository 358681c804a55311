"""Child process of the lease tests: hold one run open (no stream_persist buffer) until killed.

Usage: python lease_child.py STORE_URL

The fake CLI and its script come from the environment. Prints ``branch <id>`` once the branch
exists, then ``streaming`` once the run's instruction is recorded, then ``done``.
"""

from __future__ import annotations

import sys

import anyio

from turnlog.eventstore import open_store
from turnlog.kernel import Branch, iModel
from turnlog.projections import catalogue_upcasters


async def main(url: str) -> None:
    async with open_store(url, upcasters=catalogue_upcasters()) as store:
        branch = await Branch(store=store, chat_model=iModel("claude_code/sonnet")).save()
        print(f"branch {branch.id}", flush=True)
        async for message in branch.run("Take your time."):
            if message.kind == "Instruction":
                print("streaming", flush=True)
        print("done", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
