"""Operations and the lifecycle need nothing of a branch but the ``BranchPort``.

``PortOnly`` hands an operation a branch with every other member hidden: a verb that reached
past the port (a private attribute, a facade-only method) fails here with AttributeError.
"""

from __future__ import annotations

import contextlib
from typing import Any

from pydantic import BaseModel

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, BranchPort, ChatParam, ModelChoice, ParseParam, RunParam, observed_run
from turnlog.projections import ActionRequest
from turnlog.testing import ScriptedModel

from .streamkit import ChunkModel, text

PORT = frozenset(name for name in vars(BranchPort) if not name.startswith("_"))


class PortOnly:
    """A branch seen through the port only (what an operation may use of it)."""

    def __init__(self, branch: Branch) -> None:
        self._branch = branch

    def __getattr__(self, name: str) -> Any:
        if name not in PORT:
            raise AttributeError(f"{name!r} is not part of the branch port")
        return getattr(self._branch, name)


class Answer(BaseModel):
    value: int


def test_the_port_names_what_operations_use() -> None:
    """The port is eleven members: facts of the branch come from ``state``, model choice is one object."""
    assert PORT == {
        "id",
        "store",
        "state",
        "session",
        "models",
        "tools",
        "prompt_cache",
        "require_writable",
        "poll_control",
        "gather_context",
        "execute",
    }
    assert len(PORT) == 11
    assert {"chat", "parse", "require_chat", "parse_or", "use_chat"} == {
        name for name in vars(ModelChoice) if not name.startswith("_")
    }


async def test_api_operations_run_on_the_port_alone(store: EventStore) -> None:
    """chat, communicate (with parsing), act and the lifecycle work through the port."""
    from turnlog.kernel.operations.act import act
    from turnlog.kernel.operations.chat import chat
    from turnlog.kernel.operations.communicate import communicate

    def add(a: int, b: int) -> int:
        return a + b

    branch = Branch(store=store, system="s", tools=[add], chat_model=ScriptedModel("hi", '{"value": 3}'))
    port = PortOnly(branch)
    assert await chat(port, "hello", ChatParam()) == "hi"
    async with observed_run.using(port, "communicate") as run:
        run.result = await communicate(
            port,
            "three?",
            ChatParam(response_format=Answer),
            ParseParam(response_format=Answer),
            clear_messages=True,
        )
    assert run.result == Answer(value=3)
    request = ActionRequest.create("add", {"a": 1, "b": 2}, sender=branch.id, recipient="add")
    (response,) = await act(port, request)
    assert response.content.output == 3
    types = [r.type for r in await branch.history()]
    assert types.count("run.started") == 1 and types.count("run.ended") == 1
    assert "messages.cleared" in types and "message.added" in types


async def test_run_streams_on_the_port_alone(store: EventStore) -> None:
    """The CLI stream verb records through the port too."""
    from turnlog.kernel.operations.run import run

    branch = Branch(store=store)
    port = PortOnly(branch)
    param = RunParam(imodel=ChunkModel([text("a "), text("b")]))
    async with contextlib.aclosing(run(port, "go", param)) as stream:
        messages = [m async for m in stream]
    assert [type(m).__name__ for m in messages] == ["Instruction", "AssistantResponse"]
    assert branch.messages[-1].response == "a b"
