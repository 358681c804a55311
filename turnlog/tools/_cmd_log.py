"""``turnlog log BRANCH``: the timeline of a branch, one line per event."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from turnlog.eventstore import Problem, check_stream
from turnlog.projections import HistoryRow, history

from ._command import EXIT_FAILED, EXIT_OK, Command, UserError, add_store_argument, emit_json, run_on_store
from ._inspect import add_branch_argument, branch_id_of, check_version, opened_store
from ._output import print_table
from ._shown import TAMPERED, damage_view, warn_damage

__all__ = ["COMMAND"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_branch_argument(parser)
    parser.add_argument("--from", dest="from_version", type=int, default=1, help="first version")
    parser.add_argument("--to", dest="to_version", type=int, default=None, help="last version")
    parser.add_argument("--type", action="append", dest="types", help="only this event type (repeatable)")
    add_store_argument(parser)


async def _log(args: argparse.Namespace) -> tuple[str, list[HistoryRow], list[Problem]]:
    if args.from_version < 1:
        raise UserError(f"--from {args.from_version}: versions start at 1")
    if args.to_version is not None and args.to_version < args.from_version:
        raise UserError(f"--to {args.to_version} is before --from {args.from_version}: nothing to show")
    async with opened_store(args.store) as store:
        branch_id = await branch_id_of(store, args.branch)
        await check_version(store, branch_id, args.from_version, "--from")
        rows = await history(store, branch_id, from_version=args.from_version, to_version=args.to_version)
        if args.types:
            rows = [r for r in rows if r.type in args.types]
        # every listed event is proven against the chain before it is printed
        shown = {r.version for r in rows}
        checked = await check_stream(store, f"branch-{branch_id}", args.from_version, args.to_version)
    return branch_id, rows, [p for p in checked if p.version in shown]


def _stamp(moment: datetime) -> str:
    """Date, time to the millisecond and zone: ``2026-12-02 12:19:36.071Z`` (UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def _run(args: argparse.Namespace) -> int:
    branch_id, rows, damaged = run_on_store(_log, args)
    marks = {p.version: p.what for p in damaged}
    if args.json:
        emit_json(
            {
                "branch_id": branch_id,
                "events": [
                    {
                        "version": r.version,
                        "position": r.position,
                        "recorded_at": r.recorded_at.isoformat(),
                        "type": r.type,
                        "summary": r.summary,
                        "tampered": marks.get(r.version),
                    }
                    for r in rows
                ],
                "tampered": [damage_view(p) for p in damaged],
            }
        )
    else:
        print_table(
            ["v", "pos", "time", "type", "what"],
            [
                [r.version, r.position, _stamp(r.recorded_at), r.type, _what(r, marks.get(r.version))]
                for r in rows
            ],
            title=f"branch {branch_id}",
            keep=["v", "pos", "time", "type"],
        )
        if not rows:
            print(
                f"(no event of type {', '.join(args.types)} in these versions)"
                if args.types
                else "(no event)"
            )
    warn_damage("log", damaged)
    return EXIT_FAILED if damaged else EXIT_OK


def _what(row: HistoryRow, damage: str | None) -> str:
    # the mark only: what is wrong is on stderr (and in --json), the line stays readable
    return row.summary if damage is None else f"{TAMPERED} {row.summary}"


COMMAND = Command(
    name="log",
    help="show a branch's timeline: version, position, time, type, summary",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog log my-branch --from 3 --type message.added",
)
