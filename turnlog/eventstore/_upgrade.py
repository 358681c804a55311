"""Upgrade events of the legacy chain to the digest chain, after verifying them.

A store written by an older turnlog holds events whose hash commits to their bytes (the
legacy chain); they cannot be redacted. ``upgrade_chain`` first checks the whole log (in the
same transaction) and refuses if anything is wrong, so content nobody verified is never
re-blessed. Then, in each stream holding legacy events, it re-hashes every event from the
first legacy one on by the digest chain, and appends one ``store.chain_upgraded`` record per
stream to ``turnlog.upgrades``: the versions re-hashed and the old and new hash of the
stream's last event, so an old hash kept elsewhere can still be matched.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ._chain import ChainChecker
from ._encoding import digest_event_hash, payload_digest
from ._errors import UpgradeRefused
from ._records import NewEvent
from ._redaction import REDACTIONS_STREAM, RedactionRecords

__all__ = ["UPGRADES_STREAM", "ChainUpgrade", "plan_upgrade"]

UPGRADES_STREAM = "turnlog.upgrades"
"""The reserved stream holding one ``store.chain_upgraded`` record per upgraded stream."""


@dataclass(frozen=True, slots=True)
class ChainUpgrade:
    """What ``plan_upgrade`` found to do.

    Attributes:
        updates: ``(position, prev_hash, hash)`` of every event to re-hash.
        records: One ``store.chain_upgraded`` event per upgraded stream.
        streams: The upgraded streams.
    """

    updates: list[tuple[int, str, str]]
    records: list[NewEvent]
    streams: list[str]


def plan_upgrade(stored: Iterable[Iterable[Any]], actor: str) -> ChainUpgrade:
    """Check every stored row (``RawEvent`` order, by stream then version) and plan the upgrade.

    Raises:
        UpgradeRefused: the log does not verify.
    """
    rows = [tuple(row) for row in stored]
    records = RedactionRecords.from_rows((r[3], r[6], r[1]) for r in rows if r[2] == REDACTIONS_STREAM)
    checker = ChainChecker(records)
    for row in rows:
        checker.add_row(row)
    checker.finish(None)
    report = checker.report()
    if not report.ok:
        raise UpgradeRefused(report.problems)
    updates: list[tuple[int, str, str]] = []
    events: list[NewEvent] = []
    streams: list[str] = []
    stream: str | None = None
    new_prev = ""
    upgrading = False
    first = 0
    old_head = ""
    for row in rows:
        position, eid, name, version, type_, schema, data, meta, recorded_at, prev_hash, hash_ = row
        if name != stream:
            if upgrading and stream is not None:
                events.append(_record(stream, first, old_head, new_prev, actor))
                streams.append(stream)
            stream, new_prev, upgrading = name, "", False
        data_b, meta_b = (
            bytes(data) if not isinstance(data, bytes) else data,
            bytes(meta) if not isinstance(meta, bytes) else meta,
        )
        digests = (payload_digest(data_b), payload_digest(meta_b))
        erased = records.by_event.get((name, version))
        if erased is not None:
            digests = (erased.data_digest or digests[0], erased.meta_digest or digests[1])
        if not upgrading:
            if (
                digest_event_hash(prev_hash, str(eid), name, version, type_, schema, *digests, recorded_at)
                == hash_
            ):
                new_prev = hash_
                continue
            upgrading, first = True, version
        new_hash = digest_event_hash(new_prev, str(eid), name, version, type_, schema, *digests, recorded_at)
        updates.append((position, new_prev, new_hash))
        new_prev, old_head = new_hash, hash_
    if upgrading and stream is not None:
        events.append(_record(stream, first, old_head, new_prev, actor))
        streams.append(stream)
    return ChainUpgrade(updates, events, streams)


def _record(stream: str, first: int, old_head: str, new_head: str, actor: str) -> NewEvent:
    return NewEvent(
        "store.chain_upgraded",
        {
            "stream": stream,
            "from_version": first,
            "old_head_hash": old_head,
            "new_head_hash": new_head,
            "actor": actor,
            "verified": True,
        },
    )
