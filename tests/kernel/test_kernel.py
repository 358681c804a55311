"""Kernel properties: after any sequence of commands the live state equals the rebuild."""

from __future__ import annotations

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnlog.eventstore import ConcurrencyError, open_store
from turnlog.kernel import Branch, Kernel
from turnlog.kernel.models import ServerError
from turnlog.projections import AssistantResponse, Instruction, catalogue_upcasters
from turnlog.testing import FunctionModel

OPS = st.sampled_from(
    [
        "communicate",
        "chat_and_record",
        "chat",
        "fail",
        "clear",
        "annotate",
        "system",
        "bind",
        "append",
        "refork",
    ]
)


def answer(request: object) -> str:
    text = str(getattr(request, "messages", ""))
    if "FAIL" in text.rsplit("'role': 'user'", 1)[-1]:
        raise ServerError("scripted failure", status_code=500)
    return "answer"


async def scenario(ops: list[str]) -> None:
    async with open_store("sqlite:///:memory:", upcasters=catalogue_upcasters()) as store:
        branch = await Branch(store=store, system="start", chat_model=FunctionModel(answer)).save()
        for step, op in enumerate(ops):
            try:
                if op == "communicate":
                    await branch.communicate(f"q{step}")
                elif op == "chat_and_record":
                    await branch.chat_and_record(f"q{step}")
                elif op == "chat":
                    await branch.chat(f"q{step}")
                elif op == "fail":
                    await branch.communicate(f"FAIL {step}")
                elif op == "clear":
                    await branch.clear_messages()
                elif op == "annotate" and branch.messages:
                    await branch.annotate(branch.messages[-1].id, {"step": step}, reason="test")
                elif op == "system":
                    await branch.set_system(f"system {step}")
                elif op == "bind":
                    await branch.bind_provider_session("cli", "m", f"s{step}")
                elif op == "append":
                    await branch.add_messages(
                        [Instruction.create(f"i{step}"), AssistantResponse.create(f"r{step}")]
                    )
                elif op == "refork" and branch.version > 1:
                    branch = await branch.fork(max(1, branch.version - 1))
            except ServerError:
                pass
            except ValueError as exc:  # a history that does not start with an Instruction
                assert "First message" in str(exc)
            rebuilt = await Branch.load(store, branch.id)
            assert rebuilt.state == branch.state, f"after {ops[: step + 1]}"
            if branch.state.forked_from is None:  # a fork may cut a run in the middle
                assert all(r.status != "running" for r in branch.state.runs.values())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=1, max_size=12))
def test_live_state_always_equals_the_rebuild(ops: list[str]) -> None:
    anyio.run(scenario, ops)


async def test_one_kernel_per_store_serves_many_branches() -> None:
    async with open_store("sqlite:///:memory:", upcasters=catalogue_upcasters()) as store:
        a, b = Branch(store=store), Branch(store=store)
        assert a.kernel is b.kernel is Kernel.for_store(store)


async def test_reorderable_retries_are_bounded() -> None:
    async with open_store("sqlite:///:memory:", upcasters=catalogue_upcasters()) as store:
        branch = await Branch(store=store).save()
        kernel = Kernel.for_store(store)
        kernel.max_retries = 0
        other = await Branch.load(store, branch.id)
        await other.add_message(Instruction.create("first"))
        try:
            await branch.add_message(Instruction.create("second"))
        except ConcurrencyError:
            pass
        else:
            raise AssertionError("a conflict with no retry left must surface")
        assert len(branch.messages) == 1, "the state caught up with the other writer"


async def test_a_new_branch_and_its_first_messages_are_one_append() -> None:
    """One commit for a new branch and a whole run; ``branch.created`` belongs to no run."""
    from turnlog.kernel import AddMessages
    from turnlog.projections import MessageAdded, RunEnded, RunStarted

    async with open_store("sqlite:///:memory:") as store:
        appends: list[str] = []
        append = store.append

        async def counted(stream: str, *args: object, **kwargs: object) -> object:
            appends.append(stream)
            return await append(stream, *args, **kwargs)  # type: ignore[arg-type]

        store.append = counted  # type: ignore[method-assign]
        branch = Branch(store=store)
        items = (
            RunStarted(run_id="r1", verb="proxy", provider="p", model="m"),
            MessageAdded(message=Instruction(content={"instruction": "hi"}), run_id="r1"),
            RunEnded(run_id="r1", verb="proxy", duration_ms=1.0),
        )
        recorded = await branch.execute(AddMessages(items), run_id="r1", terminal=True)
        assert appends == [f"branch-{branch.id}"]
        assert [e.type for e in recorded] == ["run.started", "message.added", "run.ended"]
        events = [e async for e in store.read_stream(f"branch-{branch.id}")]
        assert [e.type for e in events] == ["branch.created", "run.started", "message.added", "run.ended"]
        assert "run_id" not in events[0].meta and all(e.meta["run_id"] == "r1" for e in events[1:])
        assert branch.state.runs["r1"].status == "ended"
        reloaded = await Branch.load(store, branch.id)
        assert reloaded.state == branch.state
