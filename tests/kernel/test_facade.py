"""What a newcomer reaches for on the facade: unique names, load_or_create, include_branches(a, b), at_time."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, BranchNameTaken, Session, UnknownBranch, UsageError
from turnlog.projections import InvalidTargetError
from turnlog.testing import ScriptedModel


async def test_include_branches_takes_several_branches_or_a_list(store: EventStore) -> None:
    """Varargs and the seed's list both include every branch given, in order."""
    a, b, c = (Branch(store=store, name=n) for n in ("a", "b", "c"))
    session = Session(store=store)
    await session.include_branches(a, b)
    await session.include_branches([c])
    assert [br.id for br in session.branches] == [a.id, b.id, c.id]
    assert session.default_branch is a
    with pytest.raises(UsageError, match="not a str"):
        await session.include_branches(a, "b")  # type: ignore[arg-type]


async def test_at_time_is_the_branch_as_it_was_then(store: EventStore) -> None:
    """at_time(t) holds exactly the events recorded at or before t, read-only."""
    branch = Branch(store=store, chat_model=ScriptedModel("one", "two"))
    await branch.communicate("first")
    rows = await branch.history()
    first_end = rows[-1]
    await branch.communicate("second")
    rows = await branch.history()
    # the last event stamped at or before that moment (two events may share a clock tick)
    then = max(r.version for r in rows if r.recorded_at <= first_end.recorded_at)
    view = await branch.at_time(first_end.recorded_at)
    assert view.version == then and view.read_only
    assert view.state == (await branch.at(then)).state
    assert len(branch.messages) == 4 and len(view.messages) < 4
    later = await branch.at_time(rows[-1].recorded_at + timedelta(days=1))
    assert later.version == branch.version
    with pytest.raises(UsageError):
        await view.communicate("no")
    with pytest.raises(UnknownBranch):
        await branch.at_time(rows[0].recorded_at - timedelta(seconds=1))
    with pytest.raises(InvalidTargetError, match="aware"):
        await branch.at_time(datetime(2026, 1, 1))


# ------------------------------------------------------------------- names are unique


async def test_a_taken_name_is_refused_by_branch_and_fork_and_nothing_is_written(store: EventStore) -> None:
    """Branch(name=...) and fork(name=...) refuse a name another branch has, naming that branch."""
    geo = await Branch(store=store, name="geo", chat_model=ScriptedModel("a")).save()
    other = await Branch(store=store, name="other").save()
    head = await store.head()
    with pytest.raises(BranchNameTaken) as caught:
        await Branch(store=store, name="geo").save()
    assert (caught.value.name, caught.value.branch_id) == ("geo", geo.id)
    assert geo.id in str(caught.value) and "load_or_create" in str(caught.value)
    twin = Branch(store=store, name="geo", chat_model=ScriptedModel("never"))
    with pytest.raises(BranchNameTaken):
        await twin.communicate("q")  # the first command records the branch: refused before the call
    with pytest.raises(BranchNameTaken, match="'other'") as forked:
        await geo.fork(1, name="other")
    assert forked.value.branch_id == other.id
    assert await store.head() == head  # nothing of the refused branches was written
    assert (await Branch.load(store, "geo")).id == geo.id  # loading by name still finds one
    assert isinstance(caught.value, UsageError)
    await geo.fork(1, name="geo-2")  # a free name is fine


def _yield_in_scans(store: EventStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Let other tasks run inside every stream listing, as a networked store does, so races show."""
    listing = store.list_streams

    async def list_streams(*args: Any, **kwargs: Any) -> Any:
        found = await listing(*args, **kwargs)
        await anyio.lowlevel.checkpoint()  # after the read: what was read may be stale now
        return found

    monkeypatch.setattr(store, "list_streams", list_streams)


async def test_racing_creators_of_one_name_in_a_process_make_one_branch(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tasks creating the same name at once: one wins, the others are refused."""
    _yield_in_scans(store, monkeypatch)
    outcomes: list[str] = []

    async def create() -> None:
        try:
            outcomes.append((await Branch(store=store, name="race").save()).id)
        except BranchNameTaken:
            outcomes.append("refused")

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(create)
    assert sorted(outcomes).count("refused") == 3
    assert (await Branch.load(store, "race")).id in outcomes


async def test_load_or_create_creates_once_then_opens(store: EventStore) -> None:
    """A script that reruns load_or_create continues the same branch."""
    first = await Branch.load_or_create(
        store, name="notes", system="Be brief.", chat_model=ScriptedModel("a")
    )
    assert first.version == 1 and first.system is not None
    await first.communicate("q")
    again = await Branch.load_or_create(store, name="notes", system="ignored", chat_model=ScriptedModel("b"))
    assert again.id == first.id and again.state == first.state
    assert await again.communicate("q2") == "b"
    with pytest.raises(UsageError, match="colour"):
        await Branch.load_or_create(store, name="x", colour="red")
    with pytest.raises(UsageError, match="needs a name"):
        await Branch.load_or_create(store, name=None)  # type: ignore[arg-type]
    assert [s for s, _ in await store.list_streams("branch-")] == [first.stream]


async def test_concurrent_load_or_create_returns_one_branch(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tasks asking load_or_create for one name at once all get the same branch."""
    _yield_in_scans(store, monkeypatch)
    ids: list[str] = []

    async def get() -> None:
        ids.append((await Branch.load_or_create(store, name="shared")).id)

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(get)
    assert len(set(ids)) == 1 and len(ids) == 3
