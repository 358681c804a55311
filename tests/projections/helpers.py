"""Building branch logs for tests: turn compact operations into events and append them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from turnlog.eventstore import NO_STREAM, EventStore, RecordedEvent, uuid7
from turnlog.projections import (
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    BranchCreated,
    BranchForked,
    EventData,
    Instruction,
    MessageAdded,
    MessageAnnotated,
    MessagesCleared,
    ModelCalled,
    ProviderSessionBound,
    RunEnded,
    RunFailed,
    RunStarted,
    System,
    Usage,
    new_event,
)

words = st.text(alphabet="abcxyz ", max_size=12)
small = st.integers(0, 50)

ops = st.one_of(
    st.tuples(st.just("ins"), words),
    st.tuples(st.just("asst"), words),
    st.tuples(st.just("sys"), words),
    st.tuples(st.just("req"), words),
    st.tuples(st.just("resp"), small, st.booleans()),
    st.tuples(st.just("upsert"), small, words),
    st.tuples(st.just("annot"), small, words),
    st.tuples(st.just("clear")),
    st.tuples(st.just("bind"), st.sampled_from(["claude_code", "codex"]), words),
    st.tuples(st.just("call")),
    st.tuples(st.just("run_start"), st.integers(0, 3)),
    st.tuples(st.just("run_end"), st.integers(0, 3)),
    st.tuples(st.just("run_fail"), st.integers(0, 3)),
)
op_lists = st.lists(ops, max_size=40)


class Script:
    """Turns operations into branch event payloads, remembering ids to refer back to."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.requests: list[ActionRequest] = []

    def event(self, op: Sequence[Any]) -> EventData:
        kind = op[0]
        if kind == "ins":
            return self._add(Instruction.create(op[1]))
        if kind == "asst":
            return self._add(AssistantResponse.create(op[1], metadata={"n": len(self.ids)}))
        if kind == "sys":
            return self._add(System.create(op[1]))
        if kind == "req":
            req = ActionRequest.create("tool_" + op[1].strip(), {"q": op[1]})
            self.requests.append(req)
            return self._add(req)
        if kind == "resp":
            if not self.requests:
                return self._add(ActionResponse.create(function="orphan", output=None))
            req = self.requests[op[1] % len(self.requests)]
            error = "denied" if op[2] else None
            return self._add(ActionResponse.create(req, output=None if op[2] else {"ok": 1}, error=error))
        if kind == "upsert":
            if not self.ids:
                return self._add(AssistantResponse.create(op[2]))
            return MessageAdded(message=AssistantResponse.create(op[2], id=self.ids[op[1] % len(self.ids)]))
        if kind == "annot":
            target = self.ids[op[1] % len(self.ids)] if self.ids else "missing"
            return MessageAnnotated(message_id=target, metadata={"note": op[2]}, reason="test")
        if kind == "clear":
            return MessagesCleared()
        if kind == "bind":
            return ProviderSessionBound(provider=op[1], model="m", session_id="s-" + op[2])
        if kind == "call":
            return ModelCalled(
                call_id=str(len(self.ids)),
                provider="p",
                model="m",
                endpoint="e",
                fingerprint="f",
                latency_ms=1.0,
                status="ok",
            )
        run_id = f"run-{op[1]}"
        if kind == "run_start":
            return RunStarted(run_id=run_id, verb="chat")
        usage = Usage(input_tokens=3, output_tokens=4)
        if kind == "run_end":
            return RunEnded(run_id=run_id, verb="chat", duration_ms=2.0, usage=usage)
        return RunFailed(
            run_id=run_id,
            verb="chat",
            duration_ms=2.0,
            usage=usage,
            error_type="E",
            error_message="m",
            reason="error",
        )

    def _add(self, msg: Any) -> MessageAdded:
        self.ids.append(msg.id)
        return MessageAdded(message=msg)

    def events(self, op_list: Sequence[Sequence[Any]]) -> list[EventData]:
        return [self.event(op) for op in op_list]


async def append(store: EventStore, branch_id: str, datas: Sequence[EventData]) -> list[RecordedEvent]:
    """Append payloads to the branch stream and return them as recorded."""
    stream = f"branch-{branch_id}"
    before = await store.stream_version(stream)
    if datas:
        await store.append(stream, [new_event(d) for d in datas])
    return [e async for e in store.read_stream(stream, before + 1)]


async def new_branch(store: EventStore, branch_id: str, **fields: Any) -> list[RecordedEvent]:
    """Append branch.created."""
    return await append(store, branch_id, [BranchCreated(branch_id=branch_id, **fields)])


async def fork(store: EventStore, branch_id: str, at_version: int, name: str | None = None) -> str:
    """Append ``branch.forked`` to a fresh stream, as ``Branch.fork`` does; return the new id.

    The projections only read forks; the kernel writes them (``Branch.fork``, with its checks).
    These tests write the event by hand, like every other event of their logs.
    """
    new_id = str(uuid7())
    data = BranchForked(
        branch_id=new_id,
        parent_branch_id=branch_id,
        parent_stream=f"branch-{branch_id}",
        parent_version=at_version,
        name=name,
    )
    await store.append(
        f"branch-{new_id}", [new_event(data, meta={"branch_id": new_id})], expected_version=NO_STREAM
    )
    return new_id


def assert_same_view(state: Any, expected: Any) -> None:
    """``state == expected``, and every lookup by id answers the same in both.

    Equality compares what the states show; the lookups (``message``, ``response_for``) go
    through the id index, which equality does not see.
    """
    assert state == expected
    ids = [m.id for m in expected.messages]
    if expected.system is not None:
        ids.append(expected.system.id)
    for mid in ids:
        assert state.message(mid) == expected.message(mid), mid
    for request_id in expected.action_links:
        assert state.response_for(request_id) == expected.response_for(request_id), request_id
