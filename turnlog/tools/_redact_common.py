"""What ``turnlog redact`` and ``turnlog forget`` share: choosing events and redacting them."""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import anyio

from turnlog.analytics import AnalyticsProjection, analytics_database_of, drop_legacy_tables, legacy_tables
from turnlog.eventstore import (
    EventStore,
    RecordedEvent,
    Redaction,
    RedactionError,
    RedactionResult,
    SQLiteEventStore,
    is_redacted,
)
from turnlog.kernel._run_buffer import default_persist_dir, parse_buffer_name
from turnlog.projections import redaction_keep

from ._command import UserError

__all__ = [
    "apply_redactions",
    "describe",
    "drop_folded_snapshots",
    "print_purged",
    "purge_copies",
    "target_of",
]


def target_of(event: RecordedEvent, reason: str, actor: str, include_meta: bool = False) -> Redaction:
    """The redaction of ``event``, keeping what the fold needs of a message."""
    return Redaction(
        event.stream, event.version, reason, actor, include_meta, redaction_keep(event.type, event.data)
    )


async def apply_redactions(
    store: EventStore, events: Sequence[RecordedEvent], reason: str, actor: str, *, dry_run: bool
) -> list[dict[str, Any]]:
    """Redact ``events`` (those not redacted yet) in one transaction; rows describing each.

    Raises:
        UserError: The store refuses a redaction (its ``RedactionError``, as one line).
    """
    todo = [event for event in events if not is_redacted(event.data)]
    rows = [describe(event) for event in todo]
    if todo and not dry_run:
        try:
            results: list[RedactionResult] = await store.redact_many(
                [target_of(e, reason, actor) for e in todo]
            )
        except RedactionError as exc:
            raise UserError(str(exc)) from exc
        erased = {(r.stream, r.version): r.erased_bytes for r in results}
        for row in rows:
            row["erased_bytes"] = erased.get((row["stream"], row["version"]), 0)
    return rows


async def drop_folded_snapshots(store: EventStore, branch_ids: set[str], *, dry_run: bool) -> list[str]:
    """Delete the store's snapshots of ``branch_ids`` (forks whose snapshots fold a forgotten prefix).

    Call it before the redaction: the redaction then compacts the store (``VACUUM`` on
    SQLite, ``VACUUM (FULL)`` on PostgreSQL), so the deleted rows keep no copy.
    """
    done: list[str] = []
    for branch in sorted(branch_ids):
        stream = f"branch-{branch}"
        if dry_run:
            found = await store.load_snapshot(stream)
            deleted = 0 if found is None else 1
        else:
            deleted = await store.delete_snapshots(stream)
        if deleted:
            done.append(f"snapshots of {stream} (they fold the forgotten prefix)")
    return done


async def purge_copies(
    store: EventStore, branch_ids: AbstractSet[str], *, dry_run: bool, folded: AbstractSet[str] = frozenset()
) -> list[str]:
    """Remove the copies a redaction leaves outside the log; say what was (or would be) removed.

    - the run buffers and branch snapshot files of ``branch_ids`` in the store's buffer
      directory (``<store>.runs/``), deleted, and the snapshot files of ``folded`` (forks
      whose snapshots hold the forgotten prefix);
    - the store's default analytics database, rebuilt from the redacted log and compacted so
      that its old pages keep no copy;
    - the analytics tables an older turnlog kept in a SQLite store's own file, dropped, then
      the store compacted.
    """
    done: list[str] = []
    directory = default_persist_dir(store)
    if directory.is_dir():
        for path in sorted(directory.iterdir()):
            if _belongs(path, branch_ids) or (path.suffix == ".json" and path.stem in folded):
                done.append(f"buffer file {path}")
                if not dry_run:
                    path.unlink()
    analytics_db = analytics_database_of(store)
    if analytics_db != ":memory:" and await anyio.Path(analytics_db).is_file():
        done.append(f"analytics tables in {analytics_db} (rebuilt from the redacted log)")
        if not dry_run:
            async with AnalyticsProjection(store) as analytics:
                await analytics.rebuild()
                await analytics.compact()
    store_file = store.local_path
    if isinstance(store, SQLiteEventStore) and store_file is not None and legacy_tables(store_file):
        done.append("analytics tables of an older turnlog in the store's file (dropped)")
        if not dry_run:
            drop_legacy_tables(store_file)
            await store.compact()
    return done


def print_purged(purged: Sequence[str], *, dry_run: bool) -> None:
    """One line per copy of the erased data that was (or would be) removed."""
    for what in purged:
        print(f"{'would purge' if dry_run else 'purged'} {what}")


def _belongs(path: Path, branch_ids: AbstractSet[str]) -> bool:
    named = parse_buffer_name(path)
    if named is not None:
        return named[0] in branch_ids
    return path.suffix == ".json" and path.stem in branch_ids


def describe(event: RecordedEvent) -> dict[str, Any]:
    return {"stream": event.stream, "version": event.version, "type": event.type, "position": event.position}
