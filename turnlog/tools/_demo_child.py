"""The process that ``turnlog demo`` kills: one CLI ``run`` with ``stream_persist=True``.

Usage::

    python -m turnlog.tools._demo_child --store URL --branch ID --persist-dir DIR [--batch-ms MS] PROMPT

It opens the store, loads the branch, and streams one turn of the Claude Code agent named by
``$TURNLOG_CLAUDE_BIN`` (the demo points it at the slow fake CLI) into the branch, with a
live chunk buffer in ``DIR`` and the chunks committed to the store every ``MS`` milliseconds. Every recorded message is printed as one line on stdout
(``message <Type>``), so the parent can follow along. The parent kills it with SIGKILL
mid-stream; whatever reached it is in the buffer for ``recover``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence

import anyio

from turnlog.eventstore import open_store
from turnlog.kernel import Branch, PersistOptions
from turnlog.kernel.models import ClaudeCodeModel

__all__ = ["main"]


async def _stream(url: str, branch_ref: str, persist_dir: str, prompt: str, batch_ms: float) -> None:
    async with open_store(url) as store:
        branch = await Branch.load(store, branch_ref)
        print(f"loaded branch {branch.id} at version {branch.version}", flush=True)
        run = branch.run(
            prompt,
            chat_model=ClaudeCodeModel("sonnet"),
            stream_persist=True,
            persist_dir=persist_dir,
            persist_options=PersistOptions(batch_ms=batch_ms),
        )
        async with contextlib.aclosing(run) as messages:
            async for message in messages:
                print(f"message {type(message).__name__}", flush=True)
        print("run ended", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the child; return its exit status."""
    parser = argparse.ArgumentParser(prog="python -m turnlog.tools._demo_child")
    parser.add_argument("--store", required=True, help="store URL")
    parser.add_argument("--branch", required=True, help="branch id")
    parser.add_argument("--persist-dir", required=True, help="where the live chunk buffer goes")
    parser.add_argument(
        "--batch-ms", type=float, default=50.0, help="commit the chunks to the store this often (ms)"
    )
    parser.add_argument("prompt", help="the instruction of the run")
    args = parser.parse_args(argv)
    anyio.run(_stream, args.store, args.branch, args.persist_dir, args.prompt, args.batch_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
