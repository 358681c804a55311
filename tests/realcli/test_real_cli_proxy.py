"""The real Claude Code, Codex and Gemini CLIs pointed at ``turnlog proxy`` by their environment.

Each CLI runs a tool-using session against the fake upstream through the proxy: every upstream
model call is recorded, and the session's calls are threaded into one branch.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from turnlog.eventstore import open_store
from turnlog.kernel import Branch

from .conftest import RealCLI, write_codex_config

ROOT = Path(__file__).resolve().parents[2]
TOOL_RESULT_REPLY = {
    "match": {"after_tool_result": True},
    "text": "The tool returned: {tool_result}",
    "template": True,
}
FILE_TEXT = "hello world file content 12345\n"


@dataclass
class Proxied:
    url: str
    store: Path


@pytest.fixture
def proxy(upstream: Any, tmp_path: Path) -> Iterator[Proxied]:
    """``turnlog proxy`` in front of the fake upstream, recording into a fresh store."""
    store = tmp_path / "wire.db"
    argv = [sys.executable, "-m", "turnlog", "proxy", "--store", str(store), "--port", "0"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [*argv, "--upstream", upstream.base_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as process:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("turnlog proxy listening on http://127.0.0.1:"), process.stderr.read()
        try:
            yield Proxied(line.rsplit(" ", 1)[1], store)
        finally:
            process.terminate()
            process.wait(timeout=30)


def branches(store: Path) -> list[tuple[Branch, list[Any]]]:
    async def read() -> list[tuple[Branch, list[Any]]]:
        async with open_store(f"sqlite:///{store}") as opened:
            ids = [
                e.data["branch_id"] async for e in opened.read_all(types=["branch.created", "branch.forked"])
            ]
            out = []
            for i in ids:
                branch = await Branch.load(opened, i)
                out.append((branch, [e for _, e in await branch.events() if e.event_type == "model.called"]))
            return out

    return anyio.run(read)


def kinds(branch: Branch) -> list[str]:
    return [m.kind for m in branch.messages]


def test_claude_code_through_the_proxy(claude_cli: RealCLI, upstream: Any, proxy: Proxied) -> None:
    (claude_cli.workdir / "hello.txt").write_text(FILE_TEXT)
    path = str(claude_cli.workdir / "hello.txt")
    upstream.set_script(
        [{"tool_calls": [{"name": "Read", "arguments": {"file_path": path}}]}, TOOL_RESULT_REPLY]
    )
    claude_cli.env["ANTHROPIC_BASE_URL"] = proxy.url
    run = claude_cli.run(["-p", "read hello.txt", "--output-format", "stream-json", "--verbose"])
    assert run.returncode == 0, run.stderr
    sent = [
        r
        for r in upstream.requests
        if r["path"].startswith("/v1/messages") and "count_tokens" not in r["path"]
    ]
    recorded = branches(proxy.store)
    # every call Claude Code made is recorded; it sends the tool result again without the thinking
    # block a few times (the strict fake refuses those with 400, as the API does), also directly
    assert sum(len(calls) for _, calls in recorded) == len(sent) >= 2
    ((branch, calls),) = recorded  # one session, one branch
    seen = kinds(branch)  # Claude Code sends a reminder beside the tool result: an Instruction too
    assert seen.index("ActionRequest") < seen.index("ActionResponse") and seen[-1] == "AssistantResponse"
    assert [c.status for c in calls].count("ok") == 2
    assert all(c.params["_upstream"]["status"] == 400 for c in calls if c.status == "error")
    assert "hello world file content 12345" in branch.messages[-1].content.text
    action = next(m for m in branch.messages if m.kind == "ActionResponse")
    assert "hello world file content 12345" in str(action.content.output)


def test_codex_through_the_proxy(codex_cli: RealCLI, upstream: Any, proxy: Proxied) -> None:
    (codex_cli.workdir / "hello.txt").write_text(FILE_TEXT)
    upstream.set_script(
        [{"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "cat hello.txt"}}]}, TOOL_RESULT_REPLY]
    )
    write_codex_config(Path(codex_cli.env["CODEX_HOME"]), f"{proxy.url}/v1")
    run = codex_cli.run(["exec", "--json", "--skip-git-repo-check", "--", "read hello.txt"])
    assert run.returncode == 0, run.stderr
    sent = upstream.model_requests("responses")
    recorded = branches(proxy.store)
    assert sum(len(calls) for _, calls in recorded) == len(sent) == 2
    ((branch, calls),) = recorded
    assert [(c.endpoint, c.stream, c.status) for c in calls] == [("responses", True, "ok")] * 2
    assert "hello world file content 12345" in branch.messages[-1].content.text


def test_gemini_cli_through_the_proxy(gemini_cli: RealCLI, upstream: Any, proxy: Proxied) -> None:
    (gemini_cli.workdir / "hello.txt").write_text(FILE_TEXT)
    upstream.set_script(
        [{"tool_calls": [{"name": "read_file", "arguments": {"file_path": "hello.txt"}}]}, TOOL_RESULT_REPLY]
    )
    gemini_cli.env["GOOGLE_GEMINI_BASE_URL"] = proxy.url
    run = gemini_cli.run(["-p", "read hello.txt", "--output-format", "stream-json"])
    assert run.returncode == 0, run.stderr
    recorded = branches(proxy.store)
    assert sum(len(calls) for _, calls in recorded) == len(upstream.requests) - sum(
        1
        for r in upstream.requests
        if not r["path"].startswith("/v1beta/models/") or ":countTokens" in r["path"]
    )
    streamed = [(b, calls) for b, calls in recorded if any(c.stream for c in calls)]
    ((branch, calls),) = streamed  # the session: one branch; the model router's questions are their own
    assert [c.status for c in calls] == ["ok", "ok"]
    # the file's text, which the CLI's stream-json leaves out, is recorded from the request it sent back
    action = next(m for m in branch.messages if m.kind == "ActionResponse")
    assert "hello world file content 12345" in str(action.content.output)
