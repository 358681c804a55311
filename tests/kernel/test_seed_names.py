"""The lifecycle signals carry the seed's names (ADR-0021 D4, lionagi): RunStart, RunEnd, RunFailed, MessageAdded."""

from __future__ import annotations

import pytest

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch
from turnlog.testing import ScriptedModel


async def test_signals_import_as_in_the_seed_and_reach_observers(store: EventStore) -> None:
    """Code written to the seed's contract imports and observes the four signals by their names."""
    from turnlog.kernel.signals import MessageAdded, RunEnd, RunFailed, RunStart

    branch = Branch(store=store, chat_model=ScriptedModel("a", ValueError("down")))
    seen: list[str] = []
    branch.observe(RunStart, RunEnd, RunFailed, MessageAdded, handler=lambda s: seen.append(type(s).__name__))
    assert await branch.communicate("q") == "a"
    with pytest.raises(ValueError, match="down"):
        await branch.communicate("again")
    assert seen == ["RunStart", "MessageAdded", "MessageAdded", "RunEnd", "RunStart", "RunFailed"]


async def test_the_older_names_are_the_same_classes(store: EventStore) -> None:
    """RunFailure and MessageRecorded stay importable, as aliases an observer filter treats alike."""
    from turnlog.kernel import MessageAdded, MessageRecorded, RunFailed, RunFailure

    branch = Branch(store=store, chat_model=ScriptedModel("a"))
    old: list[object] = []
    branch.observe(MessageRecorded, RunFailure, handler=old.append)
    await branch.communicate("q")
    assert len(old) == 2 and all(isinstance(s, MessageAdded) for s in old)
    assert RunFailure is RunFailed
