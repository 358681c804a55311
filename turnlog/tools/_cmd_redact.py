"""``turnlog redact``: erase one event's payload, or every payload of a type before a date."""

from __future__ import annotations

import argparse
import getpass
from typing import Any

import anyio

from turnlog.eventstore import RecordedEvent, StoreError
from turnlog.projections import content_fields, holds_content

from ._command import Command, UserError, add_store_argument, emit_json
from ._inspect import add_branch_argument, branch_id_of, opened_store, parse_time
from ._redact_common import apply_redactions, print_purged, purge_copies

__all__ = ["COMMAND"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_branch_argument(parser, optional=True)
    parser.add_argument(
        "--version", type=int, default=None, help="the version of the branch's event to erase"
    )
    parser.add_argument("--type", dest="event_type", default=None, help="erase every event of this type")
    parser.add_argument("--before", default=None, help="with --type: only events recorded before this time")
    parser.add_argument("--reason", default=None, help="why (kept in the redaction record); required")
    parser.add_argument(
        "--upgrade-chain",
        action="store_true",
        help="verify the whole store, then move events of an older turnlog to the digest chain so they "
        "can be redacted (recorded in turnlog.upgrades)",
    )
    parser.add_argument("--actor", default=None, help="who asks (default: the login name)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be erased; change nothing")
    add_store_argument(parser)


async def _chosen(store: Any, args: argparse.Namespace) -> list[RecordedEvent]:
    if args.version is not None:
        if args.branch is None:
            raise UserError("--version needs a BRANCH")
        stream = f"branch-{await branch_id_of(store, args.branch)}"
        found = [e async for e in store.read_stream(stream, args.version, args.version)]
        if not found:
            raise UserError(f"{stream} has no version {args.version}")
        return found
    if args.event_type is None:
        raise UserError("give --version N (with a BRANCH) or --type TYPE [--before DATE]")
    if content_fields(args.event_type) == ():
        raise UserError(
            f"{args.event_type} holds no conversation content (the event catalogue declares none): "
            "nothing to erase; redact one event of it with --version N"
        )
    before = parse_time(args.before) if args.before else None
    prefix = None
    if args.branch is not None:
        prefix = f"branch-{await branch_id_of(store, args.branch)}"
    return [
        e
        async for e in store.read_all(types=[args.event_type], stream_prefix=prefix)
        if (before is None or e.recorded_at < before) and holds_content(e.type, e.data)
    ]


async def _upgrade(args: argparse.Namespace) -> list[str]:
    async with opened_store(args.store) as store:
        try:
            return await store.upgrade_chain(actor=args.actor or getpass.getuser())
        except StoreError as exc:  # UpgradeRefused, or a backend without the upgrade
            raise UserError(str(exc)) from exc


async def _redact(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str]]:
    actor = args.actor or getpass.getuser()
    if not args.reason or not args.reason.strip():
        raise UserError("give --reason TEXT: it is kept in the redaction record")
    async with opened_store(args.store) as store:
        events = await _chosen(store, args)
        rows = await apply_redactions(store, events, args.reason, actor, dry_run=args.dry_run)
        branches = {
            row["stream"].removeprefix("branch-") for row in rows if row["stream"].startswith("branch-")
        }
        purged = await purge_copies(store, branches, dry_run=args.dry_run) if rows else []
        return rows, purged


def _run(args: argparse.Namespace) -> int:
    if args.upgrade_chain:
        streams = anyio.run(_upgrade, args)
        if args.json:
            emit_json({"upgraded": streams})
        else:
            print(f"verified, then upgraded {len(streams)} stream(s) to the digest chain")
            for name in streams:
                print(f"  {name}")
        return 0
    rows, purged = anyio.run(_redact, args)
    if args.json:
        emit_json({"dry_run": args.dry_run, "redacted": rows, "purged": purged})
        return 0
    verb = "would redact" if args.dry_run else "redacted"
    for row in rows:
        size = "" if args.dry_run else f" ({row['erased_bytes']} bytes erased)"
        print(f"{verb} {row['stream']} v{row['version']} {row['type']}{size}")
    print(f"{verb} {len(rows)} event(s); reason: {args.reason}")
    print_purged(purged, dry_run=args.dry_run)
    return 0


COMMAND = Command(
    name="redact",
    help="erase event payloads (bytes gone, chain still provable); see docs/redaction.md",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog redact my-branch --version 3 --reason 'leaked api key'",
)
