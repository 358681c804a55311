"""Processes creating one branch name at the same instant: exactly one branch gets it.

Each process checks that the name is free, then waits for the others before it appends, so
every round is a real race between processes (no lock of one process helps). The store
decides: the branch's first event and the name's claim are one conditional append.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import anyio
import pytest

from turnlog.eventstore import open_store
from turnlog.kernel import Branch

pytestmark = pytest.mark.slow
PROCESSES = 4


def _race(url: str, name: str, *, get_or_create: bool) -> list[str]:
    """Run PROCESSES children creating ``name`` on ``url`` at once; their outcomes, sorted."""
    import _name_race_worker  # the children import it by this name (spawn)

    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES)
    results = context.Queue()
    workers = [
        context.Process(target=_name_race_worker.run, args=(url, name, get_or_create, barrier, results))
        for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    try:
        outcomes = [results.get(timeout=90) for _ in range(PROCESSES)]
    finally:
        barrier.abort()  # a worker that died would otherwise leave the others waiting
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
    errors = [o for o in outcomes if o.startswith("error")]
    assert not errors, errors[0]
    return sorted(outcomes)


async def _prepare(url: str) -> None:
    async with open_store(url) as store:  # created here: the race is on the name, not on the file
        await Branch(store=store, name="another").save()


async def _named(url: str, name: str) -> tuple[str, bool]:
    async with open_store(url, create=False) as store:
        assert (await store.verify()).ok
        return (await Branch.load(store, name)).id, True


def _check_one_winner(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    anyio.run(_prepare, url)
    outcomes = _race(url, "race", get_or_create=False)
    created = [o.split()[1] for o in outcomes if o.startswith("created")]
    assert len(created) == 1, outcomes
    assert outcomes.count(f"taken {created[0]}") == PROCESSES - 1, outcomes  # each loser names the winner
    assert anyio.run(_named, url, "race") == (created[0], True)  # loading by the name finds one branch

    outcomes = _race(url, "shared", get_or_create=True)
    ids = {o.split()[1] for o in outcomes}
    assert len(ids) == 1, outcomes  # get-or-create: every process opens the same branch
    assert anyio.run(_named, url, "shared") == (ids.pop(), True)


def test_processes_racing_for_a_name_on_sqlite_make_one_branch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite: of 4 processes creating one name at once, one creates it, 3 get BranchNameTaken."""
    _check_one_winner(f"sqlite:///{tmp_path / 'names.db'}", monkeypatch)


@pytest.mark.postgres
def test_processes_racing_for_a_name_on_postgres_make_one_branch(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: of 4 processes creating one name at once, one creates it, 3 get BranchNameTaken."""
    _check_one_winner(pg_url, monkeypatch)
