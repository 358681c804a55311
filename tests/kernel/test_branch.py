"""Branch facade: lazy creation, loading by reference, time travel, forks, other processes."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from turnlog.eventstore import NO_STREAM, EventStore, MemoryEventStore, uuid7
from turnlog.kernel import AmbiguousBranch, Branch, Kernel, UnknownBranch, UsageError
from turnlog.projections import BranchCreated, Instruction, System, new_event, rebuild
from turnlog.testing import ScriptedModel

from .conftest import assert_rebuilds, first_record


async def test_constructor_writes_nothing(store: EventStore) -> None:
    branch = Branch(store=store, name="quiet", system="Be calm.")
    assert await store.head() == 0
    assert branch.version == 0
    assert branch.name == "quiet"
    assert isinstance(branch.system, System) and branch.system.content.system_message == "Be calm."
    assert branch.messages == ()
    await branch.save()
    events = [e async for e in store.read_stream(branch.stream)]
    assert [e.type for e in events] == ["branch.created"]
    assert events[0].data["system"]["content"]["system_message"] == "Be calm."
    await branch.save()
    assert branch.version == 1


async def test_default_store_is_opened_on_first_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNLOG_STORE", str(tmp_path / "default.db"))
    branch = Branch(chat_model=ScriptedModel("hi"))
    assert not (tmp_path / "default.db").exists()
    await branch.chat_and_record("hello")
    try:
        assert (tmp_path / "default.db").exists()
        assert branch.store.url.endswith("default.db")
    finally:
        await branch.store.close()


async def test_first_command_creates_the_stream(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("x"), metadata={"team": "blue"})
    await branch.chat_and_record("hi")
    first = await first_record(store, branch.stream)
    assert first.type == "branch.created"
    assert first.data["chat_model"] == {"provider": "test", "model": "scripted"}
    assert first.data["metadata"] == {"team": "blue"}
    assert first.meta["branch_id"] == branch.id


async def test_load_by_id_prefix_and_name(store: EventStore) -> None:
    branch = await Branch(store=store, name="research").save()
    for ref in (branch.id, branch.id[:20], "research"):
        loaded = await Branch.load(store, ref)
        assert loaded.id == branch.id and loaded.state == branch.state


async def test_load_unknown_lists_close_names(store: EventStore) -> None:
    await Branch(store=store, name="research").save()
    with pytest.raises(UnknownBranch, match="did you mean: research") as info:
        await Branch.load(store, "reserch")
    assert info.value.candidates


async def test_load_ambiguous_lists_candidates(store: EventStore) -> None:
    # Branch() refuses a taken name; a log from before that (or two processes racing) has twins.
    a, b = (str(uuid7()) for _ in range(2))
    for twin in (a, b):
        await store.append(
            f"branch-{twin}", [new_event(BranchCreated(branch_id=twin, name="twin"))], NO_STREAM
        )
    with pytest.raises(AmbiguousBranch) as info:
        await Branch.load(store, "twin")
    assert set(info.value.candidates) == {a, b}
    with pytest.raises(AmbiguousBranch):
        await Branch.load(store, a[:8])  # both ids share their leading timestamp
    with pytest.raises(AmbiguousBranch):
        await Branch.load_or_create(store, name="twin")


async def test_at_gives_a_read_only_view_of_the_past(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("one", "two"))
    await branch.chat_and_record("first")
    version_after_first = branch.version
    await branch.chat_and_record("second")
    past = await branch.at(version_after_first)
    assert len(past.messages) == 2 and len(branch.messages) == 4
    assert past.read_only
    with pytest.raises(UsageError, match="read-only"):
        await past.chat_and_record("third")
    with pytest.raises(UsageError, match="read-only"):
        await past.communicate("third")
    assert len(await past.events()) == version_after_first
    rows = await past.history()
    assert [r.version for r in rows] == list(range(1, version_after_first + 1))
    assert [r.type for r in rows[-3:]] == ["message.added", "model.called", "message.added"]


async def test_views_of_the_past_share_what_the_kernel_already_folded(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel(*[f"a{i}" for i in range(40)]))
    versions = []
    for i in range(40):
        await branch.chat_and_record(f"q{i}")
        versions.append(branch.version)
    late = await branch.at(versions[-2])
    early = await branch.at(versions[3])
    # the earlier view is rebuilt from the cached later one: same messages, no second copy
    assert early.state._log is late.state._log
    assert [m.id for m in early.messages] == [m.id for m in branch.messages][:8]
    assert (
        early.messages == (await rebuild(store, branch.id, at_version=versions[3], snapshots=False)).messages
    )
    assert len(Kernel.for_store(store).states) > 0
    # a kernel without a time-travel cache rebuilds each view on its own, with the same result
    bare = Kernel(store, time_travel_streams=0)
    assert bare.states is None
    assert (await bare.load(branch.id, versions[3])) == early.state


async def test_fork_starts_from_a_past_version_and_diverges(store: EventStore) -> None:
    model = ScriptedModel("one", "two", "fork answer")
    branch = Branch(store=store, system="sys", chat_model=model)
    await branch.chat_and_record("first")
    cut = branch.version
    await branch.chat_and_record("second")
    child = await branch.fork(cut, name="what-if")
    assert child.id != branch.id
    assert [m.id for m in child.messages] == [m.id for m in branch.messages[:2]]
    assert child.system == branch.system
    await child.chat_and_record("alternative")
    assert len(child.messages) == 4 and len(branch.messages) == 4
    assert child.messages[2].content.instruction == "alternative"
    first = await first_record(store, child.stream)
    assert first.type == "branch.forked" and first.data["parent_version"] == cut
    await assert_rebuilds(child)
    await assert_rebuilds(branch)


async def test_two_writers_on_one_branch_catch_up_and_retry(store: EventStore) -> None:
    one = Branch(store=store, chat_model=ScriptedModel("a", "c"))
    await one.chat_and_record("from one")
    two = await Branch.load(store, one.id, chat_model=ScriptedModel("b"))
    await two.chat_and_record("from two")
    await one.chat_and_record("one again")  # one's state is stale: conflict, catch up, retry
    assert [m.content.instruction for m in one.messages if isinstance(m, Instruction)] == [
        "from one",
        "from two",
        "one again",
    ]
    await assert_rebuilds(one)


async def test_order_dependent_commands_surface_conflicts(store: EventStore) -> None:
    from turnlog.eventstore import ConcurrencyError

    one = Branch(store=store, chat_model=ScriptedModel("a", "b"))
    await one.chat_and_record("x")
    two = await Branch.load(store, one.id, chat_model=ScriptedModel("c"))
    await two.chat_and_record("y")
    with pytest.raises(ConcurrencyError):
        await one.clear_messages()
    assert len(one.messages) == 4, "the state caught up; nothing was cleared"
    await one.clear_messages()
    assert one.messages == ()


async def test_verbs_need_a_chat_model(store: EventStore) -> None:
    branch = Branch(store=store)
    with pytest.raises(UsageError, match="no chat model"):
        await branch.chat("hi")
    assert await store.head() == 0


class _ForeignModel(ScriptedModel):
    """A model whose recorded config names something this installation cannot rebuild."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__("hello")
        self._config = config

    def to_config(self) -> dict[str, Any]:
        return dict(self._config)


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({"provider": "acme-unknown", "model": "m1"}, "acme-unknown"),
        # unknown top-level fields are never recorded (an allow-list); a malformed known one is
        ({"provider": "openai", "model": "gpt-x", "timeout": {"colour": 1}}, "colour"),
    ],
)
async def test_load_survives_a_recorded_model_that_cannot_be_rebuilt(
    store: EventStore, config: dict[str, Any], said: str
) -> None:
    branch = Branch(store=store, name="foreign", chat_model=_ForeignModel(config))
    await branch.communicate("hi")
    again = await Branch.load(store, "foreign")
    assert again.chat_model is None and len(again.messages) == 2
    assert said in again.unrestored_models["chat_model"]
    with pytest.raises(UsageError, match="no chat model") as caught:
        await again.communicate("still there?")
    assert said in str(caught.value)
    again.chat_model = ScriptedModel("yes")
    assert again.unrestored_models == {}
    assert await again.communicate("still there?") == "yes"


async def test_set_system_replaces_the_system_message(store: EventStore) -> None:
    model = ScriptedModel("x")
    branch = Branch(store=store, system="old", chat_model=model)
    await branch.set_system("new")
    assert branch.system is not None and branch.system.content.system_message == "new"
    await branch.chat("hi")
    assert "new" in model.calls[0].request.messages[0]["content"]
    await assert_rebuilds(branch)


REOPEN = textwrap.dedent(
    """
    import sys, anyio
    from turnlog.eventstore import open_store
    from turnlog.kernel import Branch
    from turnlog.testing import ScriptedModel
    from turnlog.projections import catalogue_upcasters

    async def main():
        store = open_store(sys.argv[1], upcasters=catalogue_upcasters())
        model = ScriptedModel("second answer")
        branch = await Branch.load(store, "resumable", chat_model=model)
        print(branch.provider_session("claude_code"))
        print(await branch.communicate("second question"))
        print(model.calls[0].request.messages[0]["content"].splitlines()[0])
        await store.close()

    anyio.run(main)
    """
)


async def test_a_new_process_continues_with_system_and_provider_session(
    store: EventStore, store_url: str
) -> None:
    branch = Branch(
        store=store, name="resumable", system="You are the resumed one.", chat_model=ScriptedModel("a")
    )
    await branch.communicate("first question")
    await branch.bind_provider_session("claude_code", "sonnet", "sess-123")
    with anyio.fail_after(60):
        done = await anyio.run_process([sys.executable, "-c", REOPEN, store_url], check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().splitlines() == [
        "sess-123",
        "second answer",
        "Guidance: You are the resumed one.",
    ]
    await branch.refresh()
    assert len(branch.messages) == 4
    await assert_rebuilds(branch)


async def test_snapshots_follow_the_policy_and_never_change_a_result(store: EventStore) -> None:
    from turnlog.kernel import Kernel
    from turnlog.projections import SnapshotPolicy

    Kernel.for_store(store).policy = SnapshotPolicy(every=5)
    branch = Branch(store=store, system="s", chat_model=ScriptedModel(*[f"answer {i}" for i in range(6)]))
    for i in range(6):
        await branch.communicate(f"question {i}")
    snapshot = await store.load_snapshot(branch.stream)
    assert snapshot is not None and snapshot.version >= 5
    with_snapshots = await Branch.load(store, branch.id)
    past = await Branch.load(store, branch.id, at_version=7)
    await store.delete_snapshots()
    assert with_snapshots.state == branch.state == (await Branch.load(store, branch.id)).state
    assert past.state == (await Branch.load(store, branch.id, at_version=7)).state


async def test_the_default_kernel_snapshots_a_short_conversation_every_few_turns(store: EventStore) -> None:
    """A run end after 100 events writes a snapshot, so reading a past turn folds at most ~100 events."""
    branch = Branch(store=store, system="s", chat_model=ScriptedModel(*[f"answer {i}" for i in range(22)]))
    for i in range(22):
        await branch.communicate(f"question {i}")
    snapshot = await store.load_snapshot(branch.stream, type="branch_state")
    assert snapshot is not None and branch.version - snapshot.version < 100
    middle = await Branch.load(store, branch.id, at_version=snapshot.version + 3)
    await store.delete_snapshots()
    assert middle.state == (await Branch.load(store, branch.id, at_version=snapshot.version + 3)).state


@pytest.mark.parametrize("name", ["", "  ", "a\x00b", "line\nbreak", "x" * 201])
def test_names_nobody_can_type_back_are_refused(name: str) -> None:
    from turnlog.kernel import UsageError

    with pytest.raises(UsageError, match="branch name"):
        Branch(name=name)


async def test_a_fork_with_a_blank_name_is_refused_before_anything_is_written(store: EventStore) -> None:
    branch = Branch(store=store, name="main", chat_model=ScriptedModel("A."))
    await branch.chat_and_record("hi")
    streams = await store.list_streams("branch-")
    with pytest.raises(UsageError, match="branch name"):
        await branch.fork(1, name=" \t")
    assert await store.list_streams("branch-") == streams


async def test_from_snapshot_restores_models_as_load_does(store: EventStore, tmp_path: Path) -> None:
    from turnlog.kernel._persist import write_snapshot_file

    branch = Branch(store=store, chat_model=_ForeignModel({"provider": "acme-unknown", "model": "m1"}))
    await branch.communicate("hi")
    path = await write_snapshot_file(tmp_path / "b.json", branch.state, store=store)
    loaded = await Branch.load(store, branch.id)
    restored = await Branch.from_snapshot(path, store=store)
    assert restored.chat_model is None and loaded.chat_model is None
    assert restored.unrestored_models == loaded.unrestored_models
    assert "acme-unknown" in restored.unrestored_models["chat_model"]
    with pytest.raises(UsageError, match="acme-unknown"):
        await restored.communicate("still there?")
    given = ScriptedModel("yes")
    assert (await Branch.from_snapshot(path, store=store, chat_model=given)).chat_model is given


async def test_a_configured_kernel_handed_to_a_branch_is_the_one_used(store: EventStore) -> None:
    from turnlog.projections import SnapshotPolicy

    kernel = Kernel(store, policy=SnapshotPolicy(every=3), time_travel_streams=0)
    seen: list[object] = []
    original = kernel.execute

    async def counting(*args: Any, **kwargs: Any) -> Any:
        seen.append(args[1])
        return await original(*args, **kwargs)

    kernel.execute = counting  # type: ignore[method-assign]
    branch = Branch(kernel=kernel, chat_model=ScriptedModel("a", "b"))
    assert branch.kernel is kernel and branch.store is store
    assert branch.kernel is not Kernel.for_store(store)
    await branch.chat_and_record("q")
    assert len(seen) == 1  # branch.created and the exchange, in one append
    child = await branch.fork()
    view = await branch.at(1)
    again = await Branch.load(store, branch.id, kernel=kernel)
    assert child.kernel is kernel and view.kernel is kernel and again.kernel is kernel
    await again.chat_and_record("r", chat_model=ScriptedModel("c"))
    assert len(seen) == 3  # the fork's branch.forked and the second exchange
    with pytest.raises(UsageError, match="another store"):
        Branch(store=MemoryEventStore(), kernel=kernel)
