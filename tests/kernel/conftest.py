"""Fixtures of the kernel tests: a real SQLite store file, and the rebuild check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from turnlog.eventstore import EventStore, RecordedEvent, open_store
from turnlog.kernel import Branch
from turnlog.projections import catalogue_upcasters


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'turnlog.db'}"


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[EventStore]:
    s = open_store(store_url, upcasters=catalogue_upcasters())
    try:
        yield s
    finally:
        await s.close()


async def assert_rebuilds(branch: Branch) -> None:
    """The live state equals the state rebuilt from the log by Branch.load."""
    again = await Branch.load(branch.store, branch.id)
    assert again.state == branch.state
    assert again.version == branch.version


async def first_of(branch: Branch, event_type: str) -> Any:
    """The decoded payload of the first event of ``event_type`` in the branch stream."""
    return next(data for event, data in await branch.events() if event.type == event_type)


async def first_record(store: EventStore, stream: str) -> RecordedEvent:
    """Version 1 of ``stream``."""
    return next(iter([e async for e in store.read_stream(stream, 1, 1)]))
