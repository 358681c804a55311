"""``turnlog forget BRANCH``: erase every copy of a branch's conversation content."""

from __future__ import annotations

import argparse
import getpass
from collections.abc import Sequence
from typing import Any

import anyio

from turnlog.eventstore import RecordedEvent, SQLiteEventStore, is_redacted
from turnlog.projections import holds_content

from ._command import Command, add_store_argument, emit_json
from ._inspect import add_branch_argument, branch_id_of, opened_store
from ._redact_common import apply_redactions, drop_folded_snapshots, print_purged, purge_copies

__all__ = ["COMMAND"]


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


async def _content_of(store: Any, branches: Sequence[str]) -> list[RecordedEvent]:
    """Every event that holds content of ``branches``, as the event catalogue declares it.

    The branches' own events, the chunks of their runs (``run-<id>``) and of their CLIs' calls
    recorded at the wire (``run-<id>-wire-<n>``), and the graph nodes that ran on them
    (``graph-<id>``): whatever type holds content there, not a fixed list, so a model call's
    raw response or a run's error message is found like a message.
    """
    events: list[RecordedEvent] = []
    runs: list[str] = []
    for name in branches:
        async for event in store.read_stream(f"branch-{name}"):
            if event.type == "run.started" and isinstance(event.data.get("run_id"), str):
                runs.append(event.data["run_id"])
            if _erasable(event):
                events.append(event)
    for run_id in runs:
        # the run's chunks, and those of its CLI's upstream calls recorded at the wire
        wire = [stream for stream, _ in await store.list_streams(f"run-{run_id}-wire-")]
        for stream in (f"run-{run_id}", *wire):
            events.extend([e async for e in store.read_stream(stream) if _erasable(e)])
    events.extend(await _graph_content(store, set(branches)))
    return events


async def _graph_content(store: Any, branches: set[str]) -> list[RecordedEvent]:
    """The events of graph nodes that ran on ``branches`` and hold content."""
    nodes: set[tuple[str, str]] = set()
    held: list[RecordedEvent] = []
    async for event in store.read_all(stream_prefix="graph-"):
        node = event.data.get("node_id")
        if event.data.get("branch_id") in branches and isinstance(node, str):
            nodes.add((event.stream, node))
        if _erasable(event):
            held.append(event)
    return [e for e in held if (e.stream, e.data.get("node_id")) in nodes]


def _erasable(event: RecordedEvent) -> bool:
    return not is_redacted(event.data) and holds_content(event.type, event.data)


async def _forget(args: argparse.Namespace) -> tuple[str, list[dict[str, Any]], list[str]]:
    actor = args.actor or getpass.getuser()
    async with opened_store(args.store) as store:
        branch = await branch_id_of(store, args.branch)
        forks = await _forks_of(store, branch)
        branches = [branch, *(forks if args.forks else [])]
        events = await _content_of(store, branches)
        # A fork's snapshots fold the parent's prefix: those of every fork go, forgotten or
        # not, before the redaction compacts the store.
        dropped = await drop_folded_snapshots(store, set(forks), dry_run=args.dry_run)
        rows = await apply_redactions(store, events, args.reason, actor, dry_run=args.dry_run)
        if dropped and not rows and not args.dry_run and isinstance(store, SQLiteEventStore):
            await store.compact()  # nothing redacted, so nothing compacted the deleted rows yet
        purged = await purge_copies(store, set(branches), dry_run=args.dry_run, folded=set(forks))
        return branch, rows, dropped + purged


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
    help="erase all conversation content of a branch: messages, model calls, errors, chunks (the structure stays)",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog forget my-branch --reason 'erasure request 2026-12'",
)
