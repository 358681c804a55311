"""Child process of the crash tests: stream one run with stream_persist until killed.

Usage: python stream_child.py STORE_URL PERSIST_DIR [BRANCH_ID]

The fake CLI and its script come from the environment (TURNLOG_CLAUDE_BIN,
TURNLOG_FAKE_CLI_SCRIPT, ...). Prints ``branch <id>`` once the branch exists, then
``streaming`` once the instruction is recorded, then ``done`` if it gets to the end.
"""

from __future__ import annotations

import sys

import anyio

from turnlog.eventstore import open_store
from turnlog.kernel import Branch, PersistOptions, iModel
from turnlog.projections import catalogue_upcasters


async def main(url: str, persist_dir: str, branch_id: str | None) -> None:
    async with open_store(url, upcasters=catalogue_upcasters()) as store:
        if branch_id:
            branch = await Branch.load(store, branch_id, chat_model=iModel("claude_code/sonnet"))
        else:
            branch = await Branch(store=store, chat_model=iModel("claude_code/sonnet")).save()
        print(f"branch {branch.id}", flush=True)
        options = PersistOptions(batch_chunks=16, batch_ms=20.0)
        async for message in branch.run(
            "Count slowly.", stream_persist=True, persist_dir=persist_dir, persist_options=options
        ):
            if message.kind == "Instruction":
                print("streaming", flush=True)
        print("done", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
