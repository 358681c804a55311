"""A branch whose messages were redacted still loads, time-travels, forks and takes new messages."""

from __future__ import annotations

from turnlog.eventstore import MemoryEventStore
from turnlog.kernel import Branch
from turnlog.projections import Instruction, redaction_keep, redaction_of


async def test_a_redacted_branch_loads_travels_forks_and_continues() -> None:
    async with MemoryEventStore() as store:
        branch = Branch(store=store, name="b")
        await branch.add_message(Instruction.create("my phone is 555-0100"))
        await branch.add_message(Instruction.create("second"))
        stream = f"branch-{branch.id}"
        events = [e async for e in store.read_stream(stream) if e.type == "message.added"]
        first = events[0]
        await store.redact(stream, first.version, reason="phone", keep=redaction_keep(first.type, first.data))
        loaded = await Branch.load(store, "b")
        messages = loaded.messages
        assert len(messages) == 2
        assert redaction_of(messages[0]) is not None and redaction_of(messages[0])["reason"] == "phone"
        assert "555-0100" not in repr(messages)
        past = await loaded.at(first.version)
        assert [m.id for m in past.messages] == [messages[0].id]
        child = await loaded.fork(name="child")
        assert [m.id for m in child.messages] == [m.id for m in messages]
        await child.add_message(Instruction.create("third"))
        assert len((await Branch.load(store, "child")).messages) == 3
        assert (await store.verify()).ok


async def test_replay_reports_redactions_and_execute_stops_at_a_redacted_input() -> None:
    from turnlog.kernel import audit_replay, execute_replay
    from turnlog.testing import ScriptedModel

    async with MemoryEventStore() as store:
        branch = Branch(store=store, name="b", system="Be terse.", chat_model=ScriptedModel("Hi!", "Paris."))
        await branch.chat_and_record("hi")
        await branch.communicate("capital of France? I live at 12 Elm St")
        assert (await execute_replay(store, branch.id)).ok
        stream = f"branch-{branch.id}"
        added = [e async for e in store.read_stream(stream) if e.type == "message.added"]
        target = next(e for e in added if "Elm" in str(e.data))
        await store.redact(
            stream, target.version, reason="address", keep=redaction_keep(target.type, target.data)
        )
        audit = await audit_replay(store, branch.id)
        assert audit.ok and audit.redacted == 1 and audit.redaction_reasons == ("address",)
        executed = await execute_replay(store, branch.id)
        assert not executed.ok
        assert executed.stopped_at_redaction is not None
        assert f"version {target.version}" in executed.stopped_at_redaction
        assert "address" in executed.stopped_at_redaction
        assert executed.calls_replayed >= 1  # the exchange before it still re-ran
