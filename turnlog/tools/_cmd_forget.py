"""``turnlog forget BRANCH``: erase every message of a branch and the chunks of its runs."""

from __future__ import annotations

import argparse
import getpass
from typing import Any

import anyio

from ._command import Command, add_store_argument, emit_json
from ._inspect import add_branch_argument, branch_id_of, opened_store
from ._redact_common import apply_redactions, print_purged, purge_copies

__all__ = ["COMMAND"]

_ERASED_TYPES = ("branch.created", "message.added", "message.annotated")
"""The branch event types whose payloads ``forget`` erases (the others hold structure)."""


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_branch_argument(parser)
    parser.add_argument("--reason", required=True, help="why (kept in the redaction records)")
    parser.add_argument("--actor", default=None, help="who asks (default: the login name)")
    parser.add_argument(
        "--forks",
        action="store_true",
        help="also the forks' own events (their prefix is the branch's already)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print what would be erased; change nothing")
    add_store_argument(parser)


async def _forks_of(store: Any, branch: str) -> list[str]:
    """Every branch forked from ``branch``, directly or through other forks."""
    children: dict[str, list[str]] = {}
    async for event in store.read_all(types=["branch.forked"], stream_prefix="branch-"):
        parent = event.data.get("parent_branch_id")
        if isinstance(parent, str):
            children.setdefault(parent, []).append(event.stream.removeprefix("branch-"))
    found: list[str] = []
    todo = [branch]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


async def _forget(args: argparse.Namespace) -> tuple[str, list[dict[str, Any]], list[str]]:
    actor = args.actor or getpass.getuser()
    async with opened_store(args.store) as store:
        branch = await branch_id_of(store, args.branch)
        branches = [branch, *(await _forks_of(store, branch) if args.forks else [])]
        events = []
        runs: list[str] = []
        for name in branches:
            async for event in store.read_stream(f"branch-{name}"):
                if event.type in _ERASED_TYPES:
                    events.append(event)
                elif event.type == "run.started" and isinstance(event.data.get("run_id"), str):
                    runs.append(event.data["run_id"])
        for run_id in runs:
            events.extend([e async for e in store.read_stream(f"run-{run_id}") if e.type == "stream.chunk"])
        rows = await apply_redactions(store, events, args.reason, actor, dry_run=args.dry_run)
        purged = await purge_copies(store, set(branches), dry_run=args.dry_run)
        return branch, rows, purged


def _run(args: argparse.Namespace) -> int:
    branch, rows, purged = anyio.run(_forget, args)
    if args.json:
        emit_json({"branch_id": branch, "dry_run": args.dry_run, "redacted": rows, "purged": purged})
        return 0
    verb = "would redact" if args.dry_run else "redacted"
    streams = sorted({row["stream"] for row in rows})
    print(
        f"{verb} {len(rows)} payload(s) of branch {branch} in {len(streams)} stream(s); reason: {args.reason}"
    )
    for name in streams:
        print(f"  {name}: {sum(1 for row in rows if row['stream'] == name)}")
    print_purged(purged, dry_run=args.dry_run)
    return 0


COMMAND = Command(
    name="forget",
    help="erase every message of a branch and the chunks of its runs (the structure stays)",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog forget my-branch --reason 'erasure request 2026-12'",
)
