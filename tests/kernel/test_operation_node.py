"""Operation nodes: resolution like run_operation, total invoke, cancellation, once only."""

from __future__ import annotations

import json

import anyio
import pytest
from pydantic import BaseModel

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, ExecutionError, Operation, OperationError, Session, UsageError
from turnlog.testing import ScriptedModel

from .conftest import assert_rebuilds


class Ask(BaseModel):
    instruction: str


async def test_a_builtin_verb_runs_and_completes(store: EventStore) -> None:
    model = ScriptedModel("Hi!")
    branch = Branch(store=store, chat_model=model)
    node = Operation("communicate", {"instruction": "Say hi"}, branch=branch)
    assert node.status == "pending" and node.request == {"instruction": "Say hi"}
    await node.invoke()
    assert (node.status, node.response, node.error) == ("completed", "Hi!", None)
    assert node.metadata["branch_id"] == branch.id and node.duration_ms is not None
    await node.invoke()  # a second invoke does nothing
    assert len(model.calls) == 1 and len(branch.messages) == 2
    await assert_rebuilds(branch)


async def test_parameters_may_be_a_pydantic_model(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("ok"))
    node = Operation("chat_and_record", Ask(instruction="x"))
    await node.invoke(branch)
    assert node.status == "completed" and node.response == "ok"
    await assert_rebuilds(branch)


async def test_names_resolve_exactly_like_run_operation(store: EventStore) -> None:
    session = Session(store=store)
    branch = await session.new_branch(chat_model=ScriptedModel("from the verb"))
    calls: list[str] = []

    @session.operation()
    async def shout(text: str) -> str:
        calls.append(text)
        return text.upper()

    # a registered name never shadows a built-in verb
    session.register_operation("communicate", shout)
    node = Operation("shout", {"text": "hey"}, branch=branch)
    await node.invoke()
    assert node.response == "HEY" == await session.run_operation("shout", text="hey")
    verb = Operation("communicate", {"instruction": "x"}, branch=branch)
    await verb.invoke()
    assert verb.response == "from the verb" and calls == ["hey", "hey"]
    await assert_rebuilds(branch)


async def test_an_unknown_name_fails_the_node_without_raising(store: EventStore) -> None:
    branch = Branch(store=store)
    node = Operation("no_such_op", branch=branch)
    await node.invoke()
    assert node.status == "failed" and node.response is None
    assert isinstance(node.error, OperationError) and isinstance(node.error, ValueError)
    assert "Unsupported operation type: 'no_such_op'" in str(node.error)
    assert node.error.operation == "no_such_op"
    assert branch.version == 0  # nothing was written
    orphan = Operation("communicate")
    await orphan.invoke()
    assert orphan.status == "failed" and isinstance(orphan.error, ExecutionError)


async def test_an_error_fails_the_node_and_is_kept(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel(RuntimeError("model down")))
    node = Operation("communicate", {"instruction": "x"}, branch=branch)
    await node.invoke()
    assert node.status == "failed" and isinstance(node.error, RuntimeError) and node.response is None
    (run,) = branch.state.runs.values()
    assert run.status == "failed"
    await assert_rebuilds(branch)


async def test_cancellation_ends_the_node_cancelled_and_propagates(store: EventStore) -> None:
    session = Session(store=store)
    branch = await (await session.new_branch()).save()
    entered = anyio.Event()

    @session.operation()
    async def wait_forever() -> None:
        entered.set()
        await anyio.sleep_forever()

    node = Operation("wait_forever", branch=branch)
    cancelled = False
    async with anyio.create_task_group() as group:

        async def run() -> None:
            nonlocal cancelled
            try:
                await node.invoke()
            except anyio.get_cancelled_exc_class():
                cancelled = True
                raise

        group.start_soon(run)
        await entered.wait()
        group.cancel_scope.cancel()
    assert cancelled and node.status == "cancelled"
    await assert_rebuilds(branch)


async def test_react_stream_is_drained_into_a_list(store: EventStore) -> None:
    analysis = json.dumps({"analysis": "easy", "extension_needed": False})
    branch = Branch(store=store, chat_model=ScriptedModel(analysis, json.dumps({"answer": "4"})))
    node = Operation("ReActStream", {"instruction": "2+2"}, branch=branch)
    await node.invoke()
    assert node.status == "completed" and isinstance(node.response, list)
    assert node.response[-1].answer == "4" and len(node.response) == 2
    await assert_rebuilds(branch)


async def test_concurrent_invocations_of_separate_nodes(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("a", "b", "c"))
    nodes = [Operation("communicate", {"instruction": f"q{i}"}, branch=branch) for i in range(3)]
    async with anyio.create_task_group() as group:
        for node in nodes:
            group.start_soon(node.invoke)
    assert sorted(n.response for n in nodes) == ["a", "b", "c"]
    assert len(branch.state.runs) == 3 and len(branch.messages) == 6
    await assert_rebuilds(branch)


def test_bad_nodes_are_refused() -> None:
    with pytest.raises(UsageError):
        Operation("")
    with pytest.raises(UsageError):
        Operation("chat", parameters=["not", "a", "dict"])  # type: ignore[arg-type]
