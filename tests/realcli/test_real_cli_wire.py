"""The real CLIs, run as turnlog runs them, against the fake upstream APIs: the wire facts turnlog relies on.

Each test runs the pinned CLI (tests/realcli/package-lock.json) with the arguments turnlog's
providers build (kernel/models/_claude_code.py, _codex.py, _gemini.py) and checks what it prints
and sends: a plain reply, a tool call, usage, a resume, and upstream errors.
"""

from __future__ import annotations

from typing import Any

CLAUDE_ARGS = ["--output-format", "stream-json", "--verbose"]


def _claude(prompt: str, *extra: str) -> list[str]:
    return ["-p", prompt, *CLAUDE_ARGS, *extra]


# -- Claude Code -----------------------------------------------------------------------------


def test_claude_plain_reply_is_one_assistant_line_and_a_result(claude_cli: Any, upstream: Any) -> None:
    upstream.set_script([{"text": "Hello from the fake upstream."}])
    run = claude_cli.run(_claude("hello"))
    assert run.returncode == 0, run.stderr
    kinds = [(line["type"], line.get("subtype")) for line in run.lines]
    assert kinds[0] == ("system", "init")
    assert kinds[-1] == ("result", "success")
    assistant = run.of_type("assistant")
    assert [block["text"] for line in assistant for block in line["message"]["content"]] == [
        "Hello from the fake upstream."
    ]
    result = run.of_type("result")[0]
    assert result["is_error"] is False
    assert result["result"] == "Hello from the fake upstream."
    sent = upstream.model_requests("anthropic")
    assert len(sent) == 1 and sent[0]["path"] == "/v1/messages?beta=true"
    assert sent[0]["body"]["stream"] is True
    assert result["usage"]["output_tokens"] > 0
