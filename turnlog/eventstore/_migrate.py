"""Copy a store to another backend unchanged: ``migrate(source, target)``.

Events are copied as stored bytes, so every id, version, position, time and hash survives and
``verify`` passes on the copy; snapshots are copied too. The target must be empty or hold an
exact prefix of the source (an earlier, interrupted or completed run of the same migration):
the copy then resumes after the target's head, and running it again copies nothing. Any other
non-empty target is refused before anything is written.

Both stores must declare the ``"raw_copy"`` capability (see ``_raw``): SQLite files and
PostgreSQL, in either direction. The copy uses only that API, never a backend's tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from ._base import EventStore
from ._errors import MigrationError
from ._raw import RawCopy
from ._records import VerifyReport

__all__ = ["MigrateReport", "migrate"]

Progress = Callable[[int, int], None]
"""Called as ``progress(events_done, events_total)`` after each copied chunk."""

_CHUNK = 1000


@dataclass(frozen=True, slots=True)
class MigrateReport:
    """What ``migrate`` did.

    Attributes:
        events_copied: Events written to the target by this run.
        events_present: Events the target already held (a resumed or repeated migration).
        snapshots_copied: Snapshots written (or rewritten) in the target.
        head: The target's highest position afterwards.
        verify: ``verify()`` of the whole target after the copy.
    """

    events_copied: int
    events_present: int
    snapshots_copied: int
    head: int
    verify: VerifyReport

    @property
    def ok(self) -> bool:
        """True when the copy verifies."""
        return self.verify.ok


async def migrate(
    source: EventStore, target: EventStore, *, progress: Progress | None = None
) -> MigrateReport:
    """Copy every event and snapshot of ``source`` into ``target``, unchanged.

    The source is verified first; a source with problems is not copied. The target must be
    empty or hold a prefix of the source, in which case the copy resumes after it.

    Example::

        async with open_store("sqlite:///turnlog.db") as src, open_store(pg_url) as dst:
            report = await migrate(src, dst)
            assert report.ok

    Args:
        source: The store to read.
        target: The store to write.
        progress: Called as ``progress(done, total)`` after each chunk of events.

    Raises:
        MigrationError: the source does not verify, the target holds other events, or a
            backend cannot take part in a migration.
    """
    src, dst = _raw_access(source), _raw_access(target)
    checked = await source.verify()
    if not checked.ok:
        first = checked.problems[0]
        raise MigrationError(
            f"the source does not verify ({len(checked.problems)} problems, first: {first}); "
            "nothing was copied",
            position=first.position,
        )
    present = await _check_prefix(src, dst, await target.head())
    after, copied = present[1], 0
    while batch := await src.raw_events(after, _CHUNK):
        await dst.import_raw(batch)
        copied += len(batch)
        after = batch[-1].position
        if progress is not None:
            progress(present[0] + copied, checked.events)
    snapshots = await src.raw_snapshots()
    for start in range(0, len(snapshots), _CHUNK):
        await dst.import_raw([], snapshots[start : start + _CHUNK])
    return MigrateReport(copied, present[0], len(snapshots), await target.head(), await target.verify())


async def _check_prefix(src: RawCopy, dst: RawCopy, target_head: int) -> tuple[int, int]:
    """Count the target's events after checking they are the source's first ones.

    Returns (events present, last position present).
    """
    count, after = 0, 0
    while after < target_head:
        theirs = await dst.raw_events(after, _CHUNK)
        if not theirs:
            break
        ours = await src.raw_events(after, len(theirs))
        for index, event in enumerate(theirs):
            mine = ours[index] if index < len(ours) else None
            if mine is None or (mine.position, mine.id, mine.hash) != (event.position, event.id, event.hash):
                raise MigrationError(
                    "the target is not empty and is not a copy of this source (its event "
                    f"{event.id} in stream {event.stream!r} differs); use an empty target",
                    position=event.position,
                )
        count += len(theirs)
        after = theirs[-1].position
    return count, after


def _raw_access(store: EventStore) -> RawCopy:
    if "raw_copy" in store.capabilities:
        return cast(RawCopy, store)
    raise MigrationError(
        f"{store!r} cannot take part in a migration: it does not offer raw copy "
        "(SQLite files and PostgreSQL do; in-memory stores do not, as they end with their process)"
    )
