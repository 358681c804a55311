"""Context providers: injected into the request, never recorded, listed in model.called."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, ContextProviderRegistry
from turnlog.testing import ScriptedModel


def provider(text: str | None) -> Any:
    async def provide(branch: Branch, instruction: Any) -> str | None:
        return text

    return provide


async def called_events(branch: Branch) -> list[Any]:
    return [d for e, d in await branch.events() if e.type == "model.called"]


async def test_provider_text_reaches_the_request_but_is_never_recorded(store: EventStore) -> None:
    model = ScriptedModel("ok")
    branch = Branch(store=store, system="sys", chat_model=model)
    branch.providers.register(provider("SECRET-CONTEXT-42"), name="facts")
    await branch.communicate("hi")
    assert "SECRET-CONTEXT-42" in model.calls[0].request.messages[0]["content"]
    assert all("SECRET-CONTEXT-42" not in str(m.to_dict()) for m in branch.messages)
    recorded = [str(e.data) async for e in store.read_all()]
    assert recorded and all("SECRET-CONTEXT-42" not in data for data in recorded)
    (called,) = await called_events(branch)
    assert called.context_providers == ["facts"]


async def test_lowest_priority_is_dropped_over_budget() -> None:
    registry = ContextProviderRegistry(budget=10)
    registry.register(provider("a" * 24), priority=5, name="important")
    registry.register(provider("b" * 24), priority=1, name="minor")
    registry.register(provider("c" * 8), priority=3, name="small")
    report = await registry.gather(None, None)  # type: ignore[arg-type]
    assert report.fired_names == ["important", "small"]
    assert report.skipped == ("minor",)
    assert [f["tokens"] for f in report.fired] == [6, 2]


async def test_a_provider_over_its_own_limit_is_skipped() -> None:
    registry = ContextProviderRegistry()
    registry.register(provider("x" * 40), max_tokens=5, name="wordy")
    report = await registry.gather(None, None)  # type: ignore[arg-type]
    assert report.blocks == () and report.skipped == ("wordy",)


async def test_empty_results_are_ignored_and_failures_contained(caplog: pytest.LogCaptureFixture) -> None:
    async def broken(branch: Branch, instruction: Any) -> str:
        raise RuntimeError("provider down")

    registry = ContextProviderRegistry()
    registry.register(provider(None), name="none")
    registry.register(broken)
    registry.register(provider("kept"), name="kept")
    with caplog.at_level(logging.ERROR, logger="turnlog.kernel"):
        report = await registry.gather(None, None)  # type: ignore[arg-type]
    assert report.blocks == ("kept",)
    assert report.failed == ("broken",)
    assert "provider down" in caplog.text


async def test_provider_objects_are_accepted_and_names_must_be_unique() -> None:
    class Clock:
        async def provide(self, branch: Branch, instruction: Any) -> str:
            return "It is noon."

    registry = ContextProviderRegistry()
    registry.register(Clock())
    with pytest.raises(ValueError, match="registered already"):
        registry.register(Clock())
    assert registry.names == ["Clock"]


async def test_a_branch_without_system_skips_providers(store: EventStore) -> None:
    model = ScriptedModel("ok")
    branch = Branch(store=store, chat_model=model)
    branch.providers.register(provider("INJECTED"), name="facts")
    await branch.chat("hi")
    assert "INJECTED" not in str(model.calls[0].request.messages)
    (called,) = await called_events(branch)
    assert called.context_providers == []


async def test_providers_cost_nothing_when_unused(store: EventStore) -> None:
    branch = Branch(store=store, system="sys", chat_model=ScriptedModel("ok"))
    await branch.chat("hi")
    assert branch._providers is None
