"""parse: a direct parse first, then unrecorded reformat requests to the parse model."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import BaseModel

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, UsageError
from turnlog.testing import ScriptedModel


class Point(BaseModel):
    x: int
    y: int


async def test_direct_parse_needs_no_model(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel())
    text = 'Here you go:\n```json\n{"X": 1, "y": 2, "extra": true}\n```'
    assert await branch.parse(text, response_format=Point) == Point(x=1, y=2)
    assert branch.version == 0, "nothing was recorded"


async def test_reformat_goes_through_the_parse_model_unrecorded(store: EventStore) -> None:
    parse_model = ScriptedModel("still prose", '{"x": 3, "y": 4}')
    branch = Branch(store=store, chat_model=ScriptedModel(), parse_model=parse_model)
    assert await branch.parse("x is three and y is four", response_format=Point) == Point(x=3, y=4)
    assert branch.messages == ()
    calls = [d for e, d in await branch.events() if e.type == "model.called"]
    assert [(c.verb, c.response_format) for c in calls] == [("parse", "Point"), ("parse", "Point")]
    assert "x is three" in parse_model.calls[0].request.messages[0]["content"]
    parse_model.assert_complete()


@pytest.mark.parametrize(("handle", "expected"), [("return_value", "no numbers here"), ("return_none", None)])
async def test_failure_handling_without_raise(store: EventStore, handle: str, expected: object) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("nope", "nope"))
    out = await branch.parse(
        "no numbers here", response_format=Point, handle_validation=handle, max_retries=2
    )  # type: ignore[arg-type]
    assert out == expected


async def test_failure_raises_when_asked(store: EventStore) -> None:
    branch = Branch(store=store, chat_model=ScriptedModel("nope"))
    with pytest.raises(ValueError, match="cannot parse the text into Point"):
        await branch.parse("no numbers", response_format=Point, handle_validation="raise", max_retries=1)


async def test_parse_needs_a_format(store: EventStore) -> None:
    with pytest.raises(UsageError, match="response_format"):
        await Branch(store=store).parse("{}")


def test_importing_branch_loads_no_verb() -> None:
    code = (
        "import sys, turnlog.kernel; "
        "print([m for m in sys.modules if m.startswith('turnlog.kernel.operations.')])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
