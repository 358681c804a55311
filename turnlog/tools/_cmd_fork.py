"""``turnlog fork BRANCH --at V``: start a new branch from a past version."""

from __future__ import annotations

import argparse

import anyio

from turnlog.kernel import Branch

from ._command import Command, add_store_argument, emit_json
from ._inspect import add_branch_argument, branch_id_of, check_new_name, check_version, opened_store

__all__ = ["COMMAND"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_branch_argument(parser)
    parser.add_argument("--at", dest="at_version", type=int, required=True, help="fork after this version")
    parser.add_argument("--name", default=None, help="name of the new branch (one no other branch has)")
    add_store_argument(parser)


async def _fork(args: argparse.Namespace) -> tuple[str, str]:
    await check_new_name(None, args.name)
    async with opened_store(args.store) as store:
        parent = await branch_id_of(store, args.branch)
        await check_new_name(store, args.name)
        await check_version(store, parent, args.at_version, "--at")
        # Forks go through the kernel, the only writer of a branch's stream (the name is
        # reserved there too, so two forks racing for one name cannot both take it).
        branch = await Branch.load(store, parent)
        child = await branch.fork(args.at_version, name=args.name)
        return parent, child.id


def _run(args: argparse.Namespace) -> int:
    parent, child = anyio.run(_fork, args)
    if args.json:
        emit_json({"branch_id": child, "parent_branch_id": parent, "parent_version": args.at_version})
    else:
        print(f"forked {parent} at version {args.at_version} -> new branch {child}")
    return 0


COMMAND = Command(
    name="fork",
    help="start a new branch from a branch as it was at a version (the prefix is referenced, not copied)",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog fork my-branch --at 4 --name what-if",
)
