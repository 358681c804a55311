"""Session: one shared registry of async operations; built-in verbs always win."""

from __future__ import annotations

import sys
import textwrap

import anyio
import pytest

from turnlog.eventstore import EventStore
from turnlog.kernel import (
    AmbiguousSession,
    Branch,
    OperationError,
    Session,
    UnknownSession,
    UsageError,
)
from turnlog.testing import ScriptedModel


async def test_decorator_registers_under_the_function_name_and_returns_it(store: EventStore) -> None:
    session = Session(store=store)

    async def deepen(question: str) -> str:
        return f"deeper: {question}"

    registered = session.operation()(deepen)
    assert registered is deepen
    assert session.operations == {"deepen": deepen}
    await session.include_branches(Branch(store=store))
    assert await session.run_operation("deepen", question="why?") == "deeper: why?"


async def test_decorator_with_a_custom_name(store: EventStore) -> None:
    session = Session(store=store)

    @session.operation("first_op")
    async def anything() -> int:
        return 1

    assert "first_op" in session.operations


async def test_duplicate_name_raises_unless_update(store: EventStore) -> None:
    session = Session(store=store)

    async def one() -> int:
        return 1

    async def two() -> int:
        return 2

    session.register_operation("test_op", one)
    with pytest.raises(ValueError, match="Operation 'test_op' is already registered"):
        session.register_operation("test_op", two)
    session.register_operation("test_op", two, update=True)
    await session.include_branches(Branch(store=store))
    assert await session.run_operation("test_op") == 2


async def test_only_async_callables_are_accepted(store: EventStore) -> None:
    session = Session(store=store)

    def sync_op() -> int:
        return 1

    with pytest.raises(ValueError, match="must be an async function"):
        session.register_operation("sync_op", sync_op)


async def test_included_branches_share_later_registrations(store: EventStore) -> None:
    session = Session(store=store)
    a, b = Branch(store=store), Branch(store=store)
    await session.include_branches([a, b])

    async def late() -> str:
        return "late"

    session.register_operation("late", late)
    assert a.get_operation("late") is late and b.get_operation("late") is late
    assert await session.run_operation("late", branch=b) == "late"


async def test_a_standalone_branch_has_a_private_registry(store: EventStore) -> None:
    session = Session(store=store)

    async def op() -> int:
        return 1

    session.register_operation("op", op)
    alone = Branch(store=store)
    assert alone.get_operation("op") is None


async def test_registered_names_never_shadow_built_in_verbs(store: EventStore) -> None:
    session = Session(store=store)
    branch = Branch(store=store, chat_model=ScriptedModel("real chat"))
    await session.include_branches(branch)

    async def chat(**kwargs: object) -> str:
        return "impostor"

    session.register_operation("chat", chat, update=True)
    assert branch.get_operation("chat") == branch.chat
    assert await session.run_operation("chat", instruction="hi") == "real chat"


async def test_unknown_operation_raises_value_error(store: EventStore) -> None:
    session = Session(store=store)
    await session.include_branches(Branch(store=store))
    with pytest.raises(ValueError, match="Unknown operation: 'nothing'") as info:
        await session.run_operation("nothing")
    assert isinstance(info.value, OperationError)


async def test_run_operation_finds_branches_by_id_and_name(store: EventStore) -> None:
    session = Session(store=store)
    a = Branch(store=store, name="alpha", chat_model=ScriptedModel("from a"))
    b = Branch(store=store, name="beta", chat_model=ScriptedModel("from b"))
    await session.include_branches([a, b])
    assert session.default_branch is a
    assert await session.run_operation("chat", branch="beta", instruction="x") == "from b"
    assert await session.run_operation("chat", branch=a.id, instruction="x") == "from a"


async def test_a_branch_owned_by_another_session_is_refused(store: EventStore) -> None:
    first, second = Session(store=store), Session(store=store)
    shared, fresh = Branch(store=store), Branch(store=store)
    await first.include_branches(shared)
    with pytest.raises(UsageError, match="already owned by session"):
        await second.include_branches([fresh, shared])
    assert second.branches == [] and fresh.session is None, "the whole batch is refused"
    await first.remove_branch(shared)
    await second.include_branches(shared)
    assert shared.session is second


async def test_session_changes_are_events(store: EventStore) -> None:
    session = Session(store=store, name="work")
    a, b = Branch(store=store), Branch(store=store)
    await session.include_branches([a, b])
    await session.include_branches(a)
    await session.change_default_branch(b)
    await session.remove_branch(b)
    events = [e async for e in store.read_stream(session.stream)]
    assert [(e.type, e.data.get("branch_id")) for e in events] == [
        ("session.created", None),
        ("branch.included", a.id),
        ("session.default_branch_set", a.id),
        ("branch.included", b.id),
        ("session.default_branch_set", b.id),
        ("branch.removed", b.id),
        ("session.default_branch_set", a.id),
    ]
    assert session.default_branch is a


async def test_branch_created_in_a_session_records_the_session(store: EventStore) -> None:
    session = Session(store=store)
    branch = await session.new_branch(name="child")
    await branch.save()
    assert branch.state.session_id == session.id


async def test_load_restores_branches_and_default(store: EventStore) -> None:
    session = Session(store=store, name="desk")
    a = Branch(store=store, name="alpha", system="Be alpha.", chat_model=ScriptedModel("a1"))
    b, c = Branch(store=store, name="beta"), Branch(store=store, name="gamma")
    await session.include_branches([a, b, c])
    await a.communicate("hello")
    await session.change_default_branch(c)
    await session.remove_branch(c)  # the default moves back to the first branch left
    await session.change_default_branch(b)
    again = await Session.load(store, "desk", chat_model=ScriptedModel("a2"))
    assert again.id == session.id and again.name == "desk"
    assert [x.name for x in again.branches] == ["alpha", "beta"]
    assert again.default_branch is again.get_branch("beta")
    restored = again.get_branch("alpha")
    assert restored.state == a.state and restored.session is again
    assert await again.run_operation("communicate", branch="alpha", instruction="more") == "a2"
    assert restored.state.session_id == session.id
    await again.change_default_branch("alpha")
    third = await Session.load(store, session.id[:13])
    assert third.default_branch is not None and third.default_branch.name == "alpha"


async def test_load_by_unknown_or_ambiguous_reference(store: EventStore) -> None:
    await Session(store=store, name="twin").save()
    await Session(store=store, name="twin").save()
    with pytest.raises(AmbiguousSession):
        await Session.load(store, "twin")
    with pytest.raises(UnknownSession, match="did you mean") as caught:
        await Session.load(store, "twins")
    assert caught.value.candidates and caught.value.candidates[0].startswith("twin (")


async def test_an_included_branch_is_recorded_before_its_inclusion(store: EventStore) -> None:
    session = Session(store=store)
    branch = Branch(store=store, name="unused", system="Kept.")
    await session.include_branches(branch)
    assert branch.version == 1 and branch.state.session_id == session.id
    again = await Session.load(store, session.id)
    assert again.default_branch is not None and again.default_branch.system == branch.system
    assert again.missing_branches == []


RELOAD = textwrap.dedent(
    """
    import sys, anyio
    from turnlog.eventstore import open_store
    from turnlog.kernel import Session
    from turnlog.testing import ScriptedModel
    from turnlog.projections import catalogue_upcasters

    async def main():
        store = open_store(sys.argv[1], upcasters=catalogue_upcasters())
        session = await Session.load(store, "far", chat_model=ScriptedModel("from the child"))
        print(",".join(b.name for b in session.branches), session.default_branch.name)
        print(await session.run_operation("communicate", instruction="again"))
        print(len(session.default_branch.messages))
        await store.close()

    anyio.run(main)
    """
)


async def test_a_new_process_restores_the_session(store: EventStore, store_url: str) -> None:
    session = Session(store=store, name="far")
    one = Branch(store=store, name="one", chat_model=ScriptedModel("first"))
    await session.include_branches([one, Branch(store=store, name="two")])
    await one.communicate("hello")
    with anyio.fail_after(60):
        done = await anyio.run_process([sys.executable, "-c", RELOAD, store_url], check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines() == ["one,two one", "from the child", "4"]
