"""``turnlog diff BRANCH A B``: what changed in a branch between two versions."""

from __future__ import annotations

import argparse

from turnlog.projections import AnyMessage, BranchDiff, StateCache, diff, rebuild

from ._command import EXIT_FAILED, EXIT_OK, Command, UserError, add_store_argument, emit_json, run_on_store
from ._inspect import (
    add_branch_argument,
    branch_id_of,
    check_version,
    message_line,
    message_view,
    opened_store,
    run_view,
)
from ._shown import TAMPERED, Damage, branch_damage, damage_view, warn_damage

__all__ = ["COMMAND"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_branch_argument(parser)
    parser.add_argument("a", type=int, help="the earlier version")
    parser.add_argument("b", type=int, help="the later version")
    add_store_argument(parser)


async def _diff(args: argparse.Namespace) -> tuple[BranchDiff, Damage]:
    if args.a < 1 or args.b < 1:
        raise UserError(f"versions start at 1, not {min(args.a, args.b)}")
    async with opened_store(args.store) as store:
        branch_id = await branch_id_of(store, args.branch)
        await check_version(store, branch_id, args.a, "version")
        await check_version(store, branch_id, args.b, "version")
        # the later state first: the earlier one then borrows its messages from the cache
        # (see StateCache) instead of reading and validating them a second time
        cache = StateCache(store)
        states = {
            v: await rebuild(store, branch_id, at_version=v, cache=cache)
            for v in sorted({args.a, args.b}, reverse=True)
        }
        # both states stand on the events up to the later version: those are proven
        damage = await branch_damage(store, branch_id, max(args.a, args.b))
    return diff(states[args.a], states[args.b]), damage


def _run(args: argparse.Namespace) -> int:
    d, damage = run_on_store(_diff, args)
    status = EXIT_FAILED if damage else EXIT_OK

    def mark(message: AnyMessage) -> str:
        return f"{TAMPERED} " if message.id in damage.message_ids else ""

    if args.json:
        emit_json(
            {
                "added": [message_view(m) for m in d.added],
                "removed": [message_view(m) for m in d.removed],
                "changed": [[message_view(x), message_view(y)] for x, y in d.changed],
                "runs": {
                    rid: [run_view(x) if x else None, run_view(y) if y else None]
                    for rid, (x, y) in d.runs.items()
                },
                "provider_sessions": [
                    {"provider": p, "model": m, "before": x, "after": y}
                    for (p, m), (x, y) in d.provider_sessions.items()
                ],
                "tampered": [damage_view(p) for p in damage.problems],
            }
        )
        warn_damage("diff", damage.problems)
        return status
    if not d:
        print(f"no difference between versions {args.a} and {args.b}")
    for m in d.removed:
        print(f"- {mark(m)}{message_line(m)}")
    for m in d.added:
        print(f"+ {mark(m)}{message_line(m)}")
    for before, after in d.changed:
        print(f"~ {mark(after)}{message_line(after)} (metadata {before.metadata} -> {after.metadata})")
    if d.system:
        print(f"~ system: {d.system[1].rendered if d.system[1] else None}")
    for rid, (x, y) in d.runs.items():
        print(f"~ run {rid}: {x.status if x else 'absent'} -> {y.status if y else 'absent'}")
    for (provider, model), (before_sid, after_sid) in d.provider_sessions.items():
        print(f"~ provider session {provider}/{model}: {before_sid} -> {after_sid}")
    for problem in damage.problems:
        print(f"{TAMPERED} {problem}")
    warn_damage("diff", damage.problems)
    return status


COMMAND = Command(
    name="diff",
    help="show messages added/removed, runs and provider sessions changed between two versions",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog diff my-branch 3 9",
)
