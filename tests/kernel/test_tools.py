"""Tools: registration, JSON schemas from type hints and pydantic models, validated calls."""

from __future__ import annotations

import threading
from typing import Literal

import pytest
from pydantic import BaseModel

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, Tool, ToolArgumentsError, ToolRegistry, UnknownTool, UsageError

from .conftest import assert_rebuilds


class Location(BaseModel):
    city: str
    country: str = "NO"


def get_weather(location: Location, unit: Literal["C", "F"] = "C", days: int = 1) -> dict[str, object]:
    """Weather forecast for a place.

    Args:
        location: Where to look.
        unit: Temperature unit, Celsius
            or Fahrenheit.
        days: How many days ahead.
    """
    return {"city": location.city, "unit": unit, "days": days, "thread": threading.get_ident()}


async def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


def test_schema_comes_from_type_hints_and_docstring() -> None:
    tool = Tool.from_callable(get_weather)
    schema = tool.schema
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == "get_weather"
    assert function["description"] == "Weather forecast for a place."
    params = function["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["location"]
    assert params["properties"]["unit"] == {
        "default": "C",
        "description": "Temperature unit, Celsius or Fahrenheit.",
        "enum": ["C", "F"],
        "type": "string",
    }
    assert params["properties"]["days"]["type"] == "integer"
    # the pydantic model parameter is described by its own schema
    ref = params["properties"]["location"]["$ref"].rsplit("/", 1)[-1]
    assert params["$defs"][ref]["required"] == ["city"]
    assert tool.is_async is False
    assert Tool.from_callable(shout).is_async is True


def test_lambdas_need_a_name_and_non_callables_are_refused() -> None:
    with pytest.raises(UsageError, match="explicit tool name"):
        Tool.from_callable(lambda x: x)
    assert Tool.from_callable(lambda x: x, name="echo").name == "echo"
    with pytest.raises(UsageError, match="callable"):
        Tool.from_callable(42)  # type: ignore[arg-type]


async def test_calls_validate_arguments_and_sync_tools_run_off_the_loop() -> None:
    tool = Tool.from_callable(get_weather)
    out = await tool.call({"location": {"city": "Oslo"}, "unit": "F"})
    assert out["city"] == "Oslo" and out["unit"] == "F" and out["days"] == 1
    assert out["thread"] != threading.get_ident()
    with pytest.raises(ToolArgumentsError, match="unit"):
        await tool.call({"location": {"city": "Oslo"}, "unit": "K"})
    with pytest.raises(ToolArgumentsError, match="location"):
        await tool.call({})
    with pytest.raises(ToolArgumentsError, match="colour: Extra inputs"):
        await tool.call({"location": {"city": "Oslo"}, "colour": "red"})
    assert await Tool.from_callable(shout).call({"text": "hi"}) == "HI"


async def test_branch_registers_tools_at_construction_and_later(store: EventStore) -> None:
    branch = Branch(store=store, tools=[get_weather])
    branch.register_tools([shout])
    assert set(branch.tools) == {"get_weather", "shout"}
    with pytest.raises(UsageError, match="registered already"):
        branch.register_tools([shout])
    renamed = Tool.from_callable(shout, name="yell", description="Yell it.")
    branch.register_tools([renamed])
    branch.register_tools({"shout": get_weather}, update=True)
    registry = ToolRegistry.of(branch.tools)
    assert registry["yell"].description == "Yell it."
    assert registry["shout"].func is get_weather
    assert [s["function"]["name"] for s in registry.schemas(["yell"])] == ["yell"]
    (response,) = await branch.act({"function": "yell", "arguments": {"text": "ok"}})
    assert response.output == "OK"
    await assert_rebuilds(branch)


async def test_registry_lookup_names_the_registered_tools(store: EventStore) -> None:
    registry = ToolRegistry([get_weather, shout])
    assert len(registry) == 2 and "shout" in registry
    with pytest.raises(UnknownTool, match="get_weather, shout") as info:
        registry.match("nope")
    assert info.value.available == ("get_weather", "shout")
    with pytest.raises(UnknownTool):
        registry.schemas(["nope"])
    branch = Branch(store=store, tools=registry)
    (response,) = await branch.act({"function": "nope", "arguments": {}})
    assert response.error is not None and "unknown tool 'nope'" in response.error
    await assert_rebuilds(branch)
