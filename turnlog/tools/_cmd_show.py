"""``turnlog show BRANCH``: a branch's state now, at a version, or at a time."""

from __future__ import annotations

import argparse

import anyio

from turnlog.projections import BranchState, rebuild

from ._command import Command, UserError, add_store_argument, emit_json
from ._inspect import (
    add_branch_argument,
    branch_id_of,
    check_version,
    message_line,
    opened_store,
    parse_time,
    state_view,
)

__all__ = ["COMMAND"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_branch_argument(parser)
    at = parser.add_mutually_exclusive_group()
    at.add_argument("--at", dest="at_version", type=int, default=None, help="state after this version")
    at.add_argument("--at-time", default=None, help="state as of this ISO 8601 time (UTC if no zone)")
    add_store_argument(parser)


async def _show(args: argparse.Namespace) -> BranchState:
    at_time = parse_time(args.at_time, "--at-time") if args.at_time is not None else None
    if args.at_version is not None and args.at_version < 1:
        raise UserError(f"--at {args.at_version}: versions start at 1")
    async with opened_store(args.store) as store:
        branch_id = await branch_id_of(store, args.branch)
        if args.at_version is not None:
            await check_version(store, branch_id, args.at_version, "--at")
        state = await rebuild(store, branch_id, at_version=args.at_version, at_time=at_time)
        if at_time is not None and state.version == 0:
            raise UserError(f"--at-time {args.at_time}: the branch did not exist yet at that time")
        return state


def print_state(state: BranchState) -> None:
    """Print a branch state for a person."""
    name = f" ({state.name})" if state.name else ""
    print(f"branch {state.branch_id}{name} at version {state.version}, position {state.position}")
    if state.forked_from:
        origin = state.forked_from
        print(f"forked from {origin.parent_branch_id} at version {origin.parent_version}")
    if state.system:
        print(f"  {message_line(state.system)}")
    for i, message in enumerate(state.messages, 1):
        print(f"  {i:>3}. {message_line(message)}")
    for run in state.runs.values():
        extra = f" ({run.reason}: {run.error_type})" if run.status != "ended" and run.reason else ""
        took = f" {run.duration_ms:.0f} ms" if run.duration_ms is not None else ""
        print(f"  run {run.run_id[:13]} {run.verb}: {run.status}{took}{extra}")
    for (provider, model), session in state.provider_sessions.items():
        print(f"  provider session {provider}/{model}: {session}")


def _run(args: argparse.Namespace) -> int:
    state = anyio.run(_show, args)
    if args.json:
        emit_json(state_view(state))
    else:
        print_state(state)
    return 0


COMMAND = Command(
    name="show",
    help="show a branch's state now, --at a version or --at-time a moment",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog show my-branch --at 4",
)
