"""A child process of ``test_name_race``: create (or get-or-create) one branch name with the others.

Imported by the child (multiprocessing ``spawn``), not collected by pytest.
"""

from __future__ import annotations

import traceback
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

import anyio

from turnlog.eventstore import EventStore, open_store
from turnlog.kernel import Branch, BranchNameTaken


def _meet_before_the_first_append(store: EventStore, barrier: Barrier) -> None:
    """Make every process pass its own check that the name is free before any of them appends.

    Without this the race is left to the scheduler and most rounds would not race at all.
    """
    met = False

    def wrap(append: Any) -> Any:
        async def meeting(*args: Any, **kwargs: Any) -> Any:
            nonlocal met
            if not met:
                met = True
                barrier.wait(timeout=60)  # blocking is fine: the child does nothing else meanwhile
            return await append(*args, **kwargs)

        return meeting

    for method in ("append", "append_batch"):
        setattr(store, method, wrap(getattr(store, method)))


async def _create(url: str, name: str, get_or_create: bool, barrier: Barrier) -> str:
    async with open_store(url, create=False) as store:
        _meet_before_the_first_append(store, barrier)
        if get_or_create:
            return f"got {(await Branch.load_or_create(store, name=name)).id}"
        try:
            return f"created {(await Branch(store=store, name=name).save()).id}"
        except BranchNameTaken as taken:
            return f"taken {taken.branch_id}"


def run(url: str, name: str, get_or_create: bool, barrier: Barrier, results: Queue[str]) -> None:
    """Create the branch ``name`` once the others are ready to; report what happened."""
    try:
        results.put(anyio.run(_create, url, name, get_or_create, barrier))
    except BaseException:  # the test reports every failure
        results.put("error " + traceback.format_exc())
