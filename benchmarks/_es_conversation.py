# eventsourcing is an optional extra that the type check runs without, so its classes and its
# event decorator are Any there: subclassing and decorating with them is the boundary.
# mypy: disallow-subclassing-any=False, disallow-untyped-decorators=False
"""The eventsourcing peer of ``turnlog bench projections``: replay and time travel of an aggregate.

eventsourcing is the reference Python event-sourcing library. Its peer of a branch is an
aggregate whose events each append one message dict, kept in its SQLite persistence module:

- ``replay``: ``repository.get(id)``, no snapshots: read, decode and apply every event, the
  peer of ``rebuild(..., snapshots=False)``;
- ``time travel``: ``repository.get(id, version=v)`` with eventsourcing's snapshots, which
  hold the whole aggregate, taken every ``size / 10`` versions (each one costs O(v) to write,
  so the kernel's every-1,000 policy is out of reach at 100k). A fresh application is opened
  for each query, so nothing but the snapshots is in memory, as in our "snapshots only".

eventsourcing does not validate the message dicts; turnlog validates every message it folds.
The module imports without eventsourcing (``AVAILABLE`` is then False); the aggregate class is
defined at module level because eventsourcing finds event classes again by their import path.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

__all__ = ["AVAILABLE", "PeerFigures", "measure"]

_SAVE_EVERY = 5_000  # pending events saved per transaction while writing

try:
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event
except ImportError:  # the bench extra is not installed
    AVAILABLE = False
else:
    AVAILABLE = True

    class Conversation(Aggregate):
        """A conversation: the list of its message dicts, one event per message."""

        def __init__(self) -> None:
            self.messages: list[dict[str, Any]] = []

        @event("MessageAdded")
        def add(self, message: dict[str, Any]) -> None:
            """Append one message."""
            self.messages.append(message)


def _app(path: Path, snapshots: bool) -> Any:
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": str(path),
        "IS_SNAPSHOTTING_ENABLED": "y" if snapshots else "n",
    }
    return Application(env=env)


class PeerFigures(dict[str, Any]):
    """The peer's figures: ``write_s``, ``replay_events_per_s``, ``time_travel_ms`` (a list)."""


def measure(messages: list[dict[str, Any]], path: Path, targets: list[int]) -> PeerFigures:
    """Write a conversation of ``len(messages) + 1`` events, then replay it and travel in time.

    ``targets`` are the versions to query (1 is the creation event).

    Raises:
        RuntimeError: eventsourcing is not installed.
    """
    if not AVAILABLE:
        raise RuntimeError("the eventsourcing peer needs eventsourcing: pip install 'turnlog[bench]'")
    figures = PeerFigures()
    size = len(messages) + 1
    app = _app(path, snapshots=True)
    t0 = time.perf_counter()
    conv = Conversation()
    for i, message in enumerate(messages, start=1):
        conv.add(message)
        if i % _SAVE_EVERY == 0:
            app.save(conv)
    app.save(conv)
    figures["write_s"] = time.perf_counter() - t0
    aggregate_id = conv.id
    del conv

    plain = _app(path, snapshots=False)  # kept referenced: an application closes its pool when collected
    t0 = time.perf_counter()
    replayed = plain.repository.get(aggregate_id)
    figures["replay_events_per_s"] = size / (time.perf_counter() - t0)
    assert len(replayed.messages) == size - 1
    del replayed
    plain.close()

    every = max(1, size // 10)
    t0 = time.perf_counter()
    for version in range(every, size + 1, every):
        app.take_snapshot(aggregate_id, version=version)
    figures["snapshot_write_s"] = time.perf_counter() - t0
    figures["snapshot_every"] = every

    spent: list[float] = []
    for version in targets:
        fresh = _app(path, snapshots=True)
        t0 = time.perf_counter()
        then = fresh.repository.get(aggregate_id, version=version)
        spent.append((time.perf_counter() - t0) * 1000)
        assert then.version == version and len(then.messages) == version - 1
        fresh.close()
    figures["time_travel_ms"] = spent
    app.close()
    return figures
