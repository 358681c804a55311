"""``Branch.run`` on the real Gemini CLI against the fake upstream (steps in ``branchkit``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from turnlog.eventstore import EventStore, open_store
from turnlog.projections import catalogue_upcasters

from . import branchkit as kit


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EventStore]:
    opened = open_store(f"sqlite:///{tmp_path / 'turnlog.db'}", upcasters=catalogue_upcasters())
    try:
        yield opened
    finally:
        await opened.close()


PROVIDER = "gemini"


async def test_plain_reply_usage_and_session_binding(
    store: EventStore, gemini_cli: Any, upstream: Any, tmp_path: Path
) -> None:
    await kit.plain_reply(store, gemini_cli, upstream, PROVIDER, tmp_path)


async def test_tool_call(store: EventStore, gemini_cli: Any, upstream: Any) -> None:
    await kit.tool_call(store, gemini_cli, upstream, PROVIDER)


async def test_resume_sends_the_instruction_as_typed(
    store: EventStore, gemini_cli: Any, upstream: Any
) -> None:
    await kit.resume(store, gemini_cli, upstream, PROVIDER)


async def test_kill_of_turnlog_mid_reply_then_recover_then_resume(
    gemini_cli: Any, upstream: Any, tmp_path: Path
) -> None:
    await kit.crash_recover_resume(gemini_cli, upstream, PROVIDER, tmp_path)


async def test_kill_of_the_cli_itself(store: EventStore, gemini_cli: Any, upstream: Any) -> None:
    await kit.kill_the_cli(store, gemini_cli, upstream, PROVIDER)


@pytest.mark.parametrize(("status", "kind"), [(401, "auth"), (429, "rate_limit"), (400, "bad_request")])
async def test_upstream_errors_are_classified(
    store: EventStore, gemini_cli: Any, upstream: Any, status: int, kind: str
) -> None:
    await kit.upstream_error(store, gemini_cli, upstream, PROVIDER, status, kind)
