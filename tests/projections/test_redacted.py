"""The fold reads redacted events: a redacted message keeps its id, role, place and links."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog.eventstore import MemoryEventStore
from turnlog.projections import (
    REDACTED_KEY,
    ActionRequest,
    ActionResponse,
    Instruction,
    MessageAdded,
    rebuild,
    redaction_keep,
)

from .helpers import Script, append, new_branch, op_lists


async def _redact(store: MemoryEventStore, stream: str, version: int, reason: str) -> None:
    found = [e async for e in store.read_stream(stream, version, version)]
    event = found[0]
    await store.redact(stream, version, reason=reason, keep=redaction_keep(event.type, event.data))


async def test_a_redacted_tool_call_keeps_its_name_links_and_place() -> None:
    async with MemoryEventStore() as store:
        await new_branch(store, "b")
        req = ActionRequest.create("lookup_user", {"email": "alice@example.com"})
        resp = ActionResponse.create(req, output={"name": "Alice"})
        await append(store, "b", [MessageAdded(message=Instruction.create("who is alice@example.com?"))])
        await append(store, "b", [MessageAdded(message=req), MessageAdded(message=resp)])
        before = await rebuild(store, "b")
        for version in (2, 3, 4):
            await _redact(store, "branch-b", version, "gdpr")
        after = await rebuild(store, "b", snapshots=False)
        assert [(m.id, m.role, type(m)) for m in after.messages] == [
            (m.id, m.role, type(m)) for m in before.messages
        ]
        assert all(m.metadata[REDACTED_KEY]["reason"] == "gdpr" for m in after.messages)
        call = after.messages[1]
        assert isinstance(call, ActionRequest) and call.content.function == "lookup_user"
        assert call.content.arguments == {}
        assert after.response_for(req.id) is not None and after.response_for(req.id).id == resp.id
        assert "alice" not in repr(after.messages)
        assert (await store.verify()).ok


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op_list=op_lists, data=st.data())
def test_random_logs_and_redactions_rebuild_and_verify(op_list, data) -> None:
    import anyio

    async def main() -> None:
        async with MemoryEventStore() as store:
            await new_branch(store, "b")
            events = await append(store, "b", Script().events(op_list))
            before = await rebuild(store, "b")
            added = [e for e in events if e.type == "message.added"]
            chosen = data.draw(
                st.lists(st.sampled_from(added), unique_by=lambda e: e.version) if added else st.just([])
            )
            for event in chosen:
                await _redact(store, "branch-b", event.version, f"r{event.version % 3}")
            after = await rebuild(store, "b", snapshots=False)
            assert [(m.id, m.role, type(m)) for m in after.messages] == [
                (m.id, m.role, type(m)) for m in before.messages
            ]
            redacted_ids = {e.data["message"]["id"] for e in chosen}
            for old, new in zip(before.messages, after.messages, strict=True):
                if new.id in redacted_ids and REDACTED_KEY in new.metadata:
                    continue
                if old.id not in redacted_ids:
                    assert old == new
            assert set(after.action_links) == set(before.action_links)
            report = await store.verify()
            assert report.ok, report.problems
            assert report.redacted == len(chosen)

    anyio.run(main)


async def test_the_catalogue_decodes_a_redacted_event_or_says_why_not() -> None:
    import pytest

    from turnlog.eventstore import NewEvent
    from turnlog.projections import EventDecodeError, decode_event

    async with MemoryEventStore() as store:
        await new_branch(store, "b")
        await append(store, "b", [MessageAdded(message=Instruction.create("secret words"))])
        await store.append("branch-b", [NewEvent("model.called", {"call_id": "c"})])
        for version in (2, 3):
            await _redact(store, "branch-b", version, "why")
        added, called = [e async for e in store.read_stream("branch-b", 2)]
        decoded = decode_event(added)
        assert isinstance(decoded, MessageAdded)
        assert decoded.message.metadata[REDACTED_KEY]["reason"] == "why"
        with pytest.raises(EventDecodeError, match="redacted"):
            decode_event(called)
