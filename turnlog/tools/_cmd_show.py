"""``turnlog show BRANCH``: a branch's state now, at a version, or at a time."""

from __future__ import annotations

import argparse

from turnlog.projections import BranchState, rebuild

from ._command import EXIT_FAILED, EXIT_OK, Command, UserError, add_store_argument, emit_json, run_on_store
from ._inspect import (
    add_branch_argument,
    branch_id_of,
    check_version,
    message_line,
    opened_store,
    parse_time,
    state_view,
)
from ._shown import TAMPERED, Damage, branch_damage, damage_view, warn_damage

__all__ = ["COMMAND"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_branch_argument(parser)
    at = parser.add_mutually_exclusive_group()
    at.add_argument("--at", dest="at_version", type=int, default=None, help="state after this version")
    at.add_argument("--at-time", default=None, help="state as of this ISO 8601 time (UTC if no zone)")
    add_store_argument(parser)


async def _show(args: argparse.Namespace) -> tuple[BranchState, Damage]:
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
        # what is printed is proven first: the events the state stands on must match the chain
        return state, await branch_damage(store, branch_id, state.version)


def print_state(state: BranchState, damage: Damage | None = None) -> None:
    """Print a branch state for a person; lines ``damage`` concerns start with ``TAMPERED``."""
    damage = damage or Damage()

    def mark(message_id: object) -> str:
        return f"{TAMPERED} " if str(message_id) in damage.message_ids else ""

    name = f" ({state.name})" if state.name else ""
    print(f"branch {state.branch_id}{name} at version {state.version}, position {state.position}")
    if state.forked_from:
        origin = state.forked_from
        print(f"forked from {origin.parent_branch_id} at version {origin.parent_version}")
    if state.system:
        print(f"  {mark(state.system.id)}{message_line(state.system)}")
    for i, message in enumerate(state.messages, 1):
        print(f"  {i:>3}. {mark(message.id)}{message_line(message)}")
    for run in state.runs.values():
        extra = f" ({run.reason}: {run.error_type})" if run.status != "ended" and run.reason else ""
        took = f" {run.duration_ms:.0f} ms" if run.duration_ms is not None else ""
        print(f"  run {run.run_id} {run.verb}: {run.status}{took}{extra}")
    for (provider, model), session in state.provider_sessions.items():
        print(f"  provider session {provider}/{model}: {session}")
    for problem in damage.problems:  # also the damaged events that carry no message
        print(f"  {TAMPERED} {problem}")


def _run(args: argparse.Namespace) -> int:
    state, damage = run_on_store(_show, args)
    if args.json:
        view = state_view(state)
        view["tampered"] = [damage_view(p) for p in damage.problems]
        emit_json(view)
    else:
        print_state(state, damage)
    warn_damage("show", damage.problems)
    return EXIT_FAILED if damage else EXIT_OK


COMMAND = Command(
    name="show",
    help="show a branch's state now, --at a version or --at-time a moment",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog show my-branch --at 4",
)
