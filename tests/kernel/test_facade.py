"""What a newcomer reaches for on the facade: include_branches(a, b), Branch.at_time."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, Session, UnknownBranch, UsageError
from turnlog.kernel.testing import ScriptedModel
from turnlog.projections import InvalidTargetError


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
