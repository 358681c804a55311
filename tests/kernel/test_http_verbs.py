"""The verbs over HTTP as users run them: format dicts, tool turns, streaming, costs, errors."""

from __future__ import annotations

from typing import Any

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, iModel
from turnlog.kernel.models import RetryPolicy
from turnlog.tools._fake_openai import FakeOpenAIServer

API_KEY = "sk-test-http-verbs-0123456789"
CITY_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "city",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
            "required": ["name", "population"],
            "additionalProperties": False,
        },
    },
}


def model_for(server: FakeOpenAIServer, **kwargs: Any) -> iModel:
    kwargs.setdefault("retry", RetryPolicy(max_attempts=1))
    return iModel(provider="openai", model="gpt-4o-mini", base_url=server.base_url, api_key=API_KEY, **kwargs)


async def model_calls(branch: Branch) -> list[Any]:
    return [d for e, d in await branch.events() if e.type == "model.called"]


# -- 1. a json_schema dict as the response format ------------------------------------------


async def test_communicate_with_a_json_schema_dict_parses_without_reformat_calls(store: EventStore) -> None:
    script = [{"text": '{"name": "Oslo", "population": 700000}'}]
    async with FakeOpenAIServer(script, api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server))
        value = await branch.communicate("Biggest city of Norway?", response_format=CITY_FORMAT)
        assert value == {"name": "Oslo", "population": 700000}
        assert len(server.requests) == 1
        assert server.requests[0]["body"]["response_format"] == CITY_FORMAT
    assert len(await model_calls(branch)) == 1


async def test_operate_with_a_json_schema_dict_returns_the_object(store: EventStore) -> None:
    script = [{"text": '{"name": "Oslo", "population": 700000}'}]
    async with FakeOpenAIServer(script, api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server))
        value = await branch.operate(instruction="Biggest city of Norway?", response_format=CITY_FORMAT)
    assert value == {"name": "Oslo", "population": 700000}


async def test_an_answer_missing_a_required_property_is_reformatted(store: EventStore) -> None:
    script = [
        {"text": '{"name": "Oslo"}', "match": {"last_user_contains": "Biggest"}},
        {"text": '{"name": "Oslo", "population": 700000}'},
    ]
    async with FakeOpenAIServer(script, api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server))
        value = await branch.communicate("Biggest city of Norway?", response_format=CITY_FORMAT)
    assert value == {"name": "Oslo", "population": 700000}
    assert [c.verb for c in await model_calls(branch)] == ["communicate", "parse"]


# -- 4. costs and models a provider or proxy reports ---------------------------------------


async def test_a_proxy_reported_cost_and_deployment_are_recorded(store: EventStore) -> None:
    script = [
        {
            "text": "hi",
            "model": "my-alias",
            "headers": {
                "x-litellm-response-cost": "0.00042",
                "x-litellm-model-name": "gpt-4o-mini-2024-07-18",
            },
        }
    ]
    async with FakeOpenAIServer(script, api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server))
        await branch.communicate("hello")
    (called,) = await model_calls(branch)
    assert (called.model, called.served_model) == ("gpt-4o-mini", "gpt-4o-mini-2024-07-18")
    assert called.usage.cost_usd == 0.00042


async def test_a_cost_in_the_usage_object_and_a_dated_snapshot_are_recorded(store: EventStore) -> None:
    script = [{"text": "hi", "model": "gpt-4o-mini-2024-07-18", "usage": {"cost": 0.0001}}]
    async with FakeOpenAIServer(script, api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server))
        await branch.communicate("hello")
    (called,) = await model_calls(branch)
    assert (called.model, called.served_model) == ("gpt-4o-mini", "gpt-4o-mini-2024-07-18")
    assert called.usage.cost_usd == 0.0001


async def test_the_served_model_is_not_repeated_when_it_is_the_requested_one(store: EventStore) -> None:
    async with FakeOpenAIServer([{"text": "hi", "model": "gpt-4o-mini"}], api_key=API_KEY) as server:
        branch = Branch(store=store, chat_model=model_for(server))
        await branch.communicate("hello")
    (called,) = await model_calls(branch)
    assert called.served_model is None and called.usage.cost_usd is None
