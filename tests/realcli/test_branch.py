"""``Branch.run`` on each real CLI against the fake upstream (steps in ``branchkit``).

Every test runs once per CLI: ``provider`` names the turnlog provider, ``cli`` is the
conftest fixture that installs and configures that CLI (``claude_cli``, ``codex_cli``,
``gemini_cli``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from turnlog.eventstore import EventStore

from . import branchkit as kit

#: The turnlog provider of each real CLI, and the conftest fixture that prepares it.
CLI_FIXTURES = {"claude_code": "claude_cli", "codex": "codex_cli", "gemini": "gemini_cli"}


@pytest.fixture(params=sorted(CLI_FIXTURES))
def provider(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def cli(provider: str, request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(CLI_FIXTURES[provider])


async def test_plain_reply_usage_and_session_binding(
    store: EventStore, cli: Any, upstream: Any, provider: str, tmp_path: Path
) -> None:
    await kit.plain_reply(store, cli, upstream, provider, tmp_path)


async def test_tool_call(store: EventStore, cli: Any, upstream: Any, provider: str) -> None:
    await kit.tool_call(store, cli, upstream, provider)


async def test_resume_sends_the_instruction_as_typed(
    store: EventStore, cli: Any, upstream: Any, provider: str
) -> None:
    await kit.resume(store, cli, upstream, provider)


async def test_kill_of_turnlog_mid_reply_then_recover_then_resume(
    cli: Any, upstream: Any, provider: str, tmp_path: Path
) -> None:
    await kit.crash_recover_resume(cli, upstream, provider, tmp_path)


async def test_kill_of_the_cli_itself(store: EventStore, cli: Any, upstream: Any, provider: str) -> None:
    await kit.kill_the_cli(store, cli, upstream, provider)


@pytest.mark.parametrize(("status", "kind"), [(401, "auth"), (429, "rate_limit"), (400, "bad_request")])
async def test_upstream_errors_are_classified(
    store: EventStore, cli: Any, upstream: Any, provider: str, status: int, kind: str
) -> None:
    await kit.upstream_error(store, cli, upstream, provider, status, kind)
