"""``turnlog branches``: every branch in the store with its name, version and size."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from typing import Any

import anyio

from turnlog.eventstore import RecordedEvent

from ._command import Command, add_store_argument, emit_json
from ._inspect import opened_store
from ._output import print_table

__all__ = ["COMMAND"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_store_argument(parser)


async def _one(events: AsyncIterator[RecordedEvent]) -> RecordedEvent | None:
    async for event in events:
        return event
    return None


async def _branches(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    async with opened_store(args.store) as store:
        for stream, version in await store.list_streams("branch-"):
            first = await _one(store.read_stream(stream, 1, 1))
            last = await _one(store.read_stream(stream, backwards=True, limit=1))
            data = first.data if first else {}
            rows.append(
                {
                    "branch_id": stream.removeprefix("branch-"),
                    "name": data.get("name"),
                    "version": version,
                    "forked_from": (
                        f"{data['parent_branch_id']}@{data['parent_version']}"
                        if first is not None and first.type == "branch.forked"
                        else None
                    ),
                    "created_at": first.recorded_at.isoformat() if first else None,
                    "updated_at": last.recorded_at.isoformat() if last else None,
                }
            )
    rows.sort(key=lambda r: r["created_at"] or "")
    return rows


def _run(args: argparse.Namespace) -> int:
    rows = anyio.run(_branches, args)
    if args.json:
        emit_json(rows)
        return 0
    if not rows:
        print("no branches")
        return 0
    print_table(
        ["branch", "name", "version", "forked from", "updated"],
        [
            [r["branch_id"], r["name"], r["version"], r["forked_from"], (r["updated_at"] or "")[:19]]
            for r in rows
        ],
        keep=("branch", "name"),
    )
    return 0


COMMAND = Command(
    name="branches",
    help="list branches: id, name, version, fork origin, last change",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog branches --store turnlog.db",
)
