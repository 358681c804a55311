"""chat_and_record: one atomic append per exchange, never half-recorded, no lifecycle."""

from __future__ import annotations

import pytest

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, MessageRecorded, RunStart
from turnlog.kernel.models import ProviderConnectionError
from turnlog.projections import AssistantResponse, Instruction
from turnlog.testing import ScriptedModel

from .conftest import assert_rebuilds


async def test_records_instruction_call_and_response_in_one_append(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("pong"))
    await branch.save()
    head = await store.head()
    assert await branch.chat_and_record("ping") == "pong"
    events = [e async for e in store.read_all(head + 1)]
    assert [e.type for e in events] == ["message.added", "model.called", "message.added"]
    assert [e.version for e in events] == [2, 3, 4]
    assert [type(m) for m in branch.messages] == [Instruction, AssistantResponse]
    await assert_rebuilds(branch)


async def test_owns_no_lifecycle_but_signals_message_adds(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("pong"))
    seen: list[object] = []
    branch.observe(handler=seen.append)
    await branch.chat_and_record("ping")
    assert [type(s) for s in seen] == [MessageRecorded, MessageRecorded]
    assert not any(isinstance(s, RunStart) for s in seen)


async def test_return_ins_res_message_is_ignored(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("pong"))
    assert await branch.chat_and_record("ping", return_ins_res_message=True) == "pong"


async def test_a_failed_call_records_no_message(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel(ProviderConnectionError("cut")))
    with pytest.raises(ProviderConnectionError):
        await branch.chat_and_record("ping")
    assert branch.messages == ()
    types = [e.type for e, _ in await branch.events()]
    assert types == ["branch.created", "model.called"]
    await assert_rebuilds(branch)
