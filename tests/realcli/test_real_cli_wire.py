"""The real CLIs, run with turnlog's arguments against the fake upstream APIs: the facts turnlog relies on.

Each test runs a pinned CLI (tests/realcli/package-lock.json) with the arguments turnlog's
providers build (kernel/models/_claude_code.py, _codex.py, _gemini.py) and checks what it prints,
what it sends upstream and how it exits: a plain reply, a tool call, usage, a resume, and the
upstream errors 401 / 429 / 400. With ``TURNLOG_REALCLI_CAPTURE=1`` the runs are kept as
``transcripts/*.ndjson`` (the fixtures ``tests/tools/test_fake_cli_shapes.py`` holds the fake
CLIs to).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

HELLO = {"text": "Hello from the fake upstream (user turns seen: {user_turns}).", "template": True}
TOOL_RESULT_REPLY = {
    "match": {"after_tool_result": True},
    "text": "The tool returned: {tool_result}",
    "template": True,
}
FILE_TEXT = "hello world file content 12345\n"


def _claude(prompt: str, *extra: str) -> list[str]:
    # As ClaudeCodeModel.build_args: -p PROMPT --output-format stream-json --verbose [...]
    return ["-p", prompt, "--output-format", "stream-json", "--verbose", *extra]


def _codex(prompt: str, *, resume: str | None = None) -> list[str]:
    # As CodexModel.build_args: exec --json --skip-git-repo-check [resume ID] -- PROMPT
    return ["exec", "--json", "--skip-git-repo-check", *(["resume", resume] if resume else []), "--", prompt]


def _gemini(prompt: str, *, resume: str | None = None) -> list[str]:
    # As GeminiModel.build_args: -p PROMPT --output-format stream-json [--resume ID]
    return ["-p", prompt, "--output-format", "stream-json", *(["--resume", resume] if resume else [])]


def _texts(run: Any) -> list[str]:
    return [
        b["text"]
        for line in run.of_type("assistant")
        for b in line["message"]["content"]
        if b["type"] == "text"
    ]


# -- Claude Code -----------------------------------------------------------------------------


def test_claude_plain_reply_is_one_assistant_line_then_the_result(claude_cli: Any, upstream: Any) -> None:
    upstream.set_script([HELLO])
    run = claude_cli.run(_claude("hello"))
    claude_cli.capture("plain", run)
    assert run.returncode == 0, run.stderr
    kinds = [(line["type"], line.get("subtype")) for line in run.lines]
    assert kinds == [("system", "init"), ("assistant", None), ("result", "success")]
    assert _texts(run) == ["Hello from the fake upstream (user turns seen: 1)."]
    result = run.of_type("result")[0]
    assert (result["is_error"], result["result"]) == (False, _texts(run)[0])
    assert result["usage"]["output_tokens"] > 0 and result["usage"]["input_tokens"] > 0
    sent = upstream.model_requests("anthropic")
    assert [r["path"] for r in sent] == ["/v1/messages?beta=true"]
    assert sent[0]["body"]["stream"] is True


def test_claude_partial_messages_stream_deltas_and_one_assistant_line_per_block(
    claude_cli: Any, upstream: Any
) -> None:
    (claude_cli.workdir / "hello.txt").write_text(FILE_TEXT)
    path = str(claude_cli.workdir / "hello.txt")
    upstream.set_script(
        [
            {"thinking": "The user wants the file.", "text": "I will read the file.",
             "tool_calls": [{"name": "Read", "arguments": {"file_path": path}}]},
            TOOL_RESULT_REPLY,
        ]
    )  # fmt: skip
    run = claude_cli.run(_claude("read hello.txt", "--include-partial-messages"))
    claude_cli.capture("tool-partial", run)
    assert run.returncode == 0, run.stderr
    events = [line["event"]["type"] for line in run.of_type("stream_event")]
    assert events.count("message_start") == 2 and events.count("message_stop") == 2
    deltas = [
        line["event"]["delta"]
        for line in run.of_type("stream_event")
        if line["event"]["type"] == "content_block_delta"
    ]
    kinds = {d["type"] for d in deltas}
    assert {"text_delta", "thinking_delta", "input_json_delta"} <= kinds
    # Each finished content block is one assistant line, printed after its deltas.
    blocks = [line["message"]["content"] for line in run.of_type("assistant")]
    assert [len(b) for b in blocks] == [1, 1, 1, 1]
    assert [b[0]["type"] for b in blocks] == ["thinking", "text", "tool_use", "text"]
    streamed = "".join(d["text"] for d in deltas if d["type"] == "text_delta")
    assert streamed == "".join(_texts(run))
    tool_result = run.of_type("user")[0]["message"]["content"][0]
    assert tool_result["type"] == "tool_result" and "hello world file content 12345" in tool_result["content"]
    assert "hello world file content 12345" in run.of_type("result")[0]["result"]


def test_claude_resume_continues_the_session_in_the_same_directory(claude_cli: Any, upstream: Any) -> None:
    upstream.set_script([HELLO, {**HELLO, "text": "Again (user turns seen: {user_turns})."}])
    first = claude_cli.run(_claude("hello"))
    session = first.of_type("system", "init")[0]["session_id"]
    second = claude_cli.run(_claude("again", "--resume", session))
    claude_cli.capture("resume", second)
    assert second.returncode == 0, second.stderr
    assert second.of_type("result")[0]["session_id"] == session
    assert _texts(second) == ["Again (user turns seen: 2)."]
    # The session lives under the config directory, per working directory.
    assert list((claude_cli.home / ".claude" / "projects").glob(f"*/{session}.jsonl"))


def test_claude_resume_from_another_directory_finds_the_session(
    claude_cli: Any, upstream: Any, tmp_path: Any
) -> None:
    upstream.set_script([{**HELLO, "times": 2}])
    session = claude_cli.run(_claude("hello")).of_type("system", "init")[0]["session_id"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = claude_cli.run(_claude("again", "--resume", session), cwd=elsewhere)
    claude_cli.capture("resume-other-cwd", run)
    # The pinned version finds a session stored under another directory's project folder
    # (older 2.1 builds answered "No conversation found" here).
    assert run.returncode == 0, run.stderr
    assert run.of_type("result")[0]["session_id"] == session
    assert _texts(run) == ["Hello from the fake upstream (user turns seen: 2)."]


BASH_SCRIPT = [
    {
        "tool_calls": [
            {
                "name": "Bash",
                "arguments": {"command": "echo ran > out.txt; cat out.txt", "description": "echo"},
            }
        ]
    },
    TOOL_RESULT_REPLY,
]


@pytest.mark.parametrize(
    ("flags", "runs"),
    [
        ([], False),
        (["--allowedTools", "Bash"], True),
        (["--permission-mode", "acceptEdits"], True),
    ],
)
def test_claude_runs_bash_unattended_only_when_allowed(
    claude_cli: Any, upstream: Any, flags: list[str], runs: bool
) -> None:
    upstream.set_script(BASH_SCRIPT)
    run = claude_cli.run(_claude("run it", *flags))
    assert run.returncode == 0, run.stderr
    result = run.of_type("result")[0]
    assert (claude_cli.workdir / "out.txt").exists() is runs
    assert ("ran" in result["result"]) is runs
    assert bool(result["permission_denials"]) is not runs


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal concerns root only")
def test_claude_refuses_bypass_permissions_as_root_unless_sandboxed(claude_cli: Any, upstream: Any) -> None:
    upstream.set_script(BASH_SCRIPT)
    refused = claude_cli.run(_claude("run it", "--permission-mode", "bypassPermissions"))
    assert refused.returncode == 1 and refused.stdout == ""
    assert "cannot be used with root/sudo privileges" in refused.stderr
    allowed = claude_cli.run(
        _claude("run it", "--permission-mode", "bypassPermissions"), env={"IS_SANDBOX": "1"}
    )
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.of_type("system", "init")[0]["permissionMode"] == "bypassPermissions"
    assert "ran" in allowed.of_type("result")[0]["result"]


@pytest.mark.parametrize(
    ("status", "error", "text"),
    [
        (401, "authentication_failed", "Invalid API key"),
        (429, "rate_limit", "429"),
        (400, "unknown", "400"),
        (529, "server_error", "529"),
    ],
)
def test_claude_upstream_error_is_an_is_error_result_and_exit_1(
    claude_cli: Any, upstream: Any, status: int, error: str, text: str
) -> None:
    upstream.set_script([{"status": status, "retry_after": 1, "times": None}])
    run = claude_cli.run(_claude("hello"))
    claude_cli.capture(f"upstream-{status}", run)
    assert run.returncode == 1
    synthetic = run.of_type("assistant")[-1]
    assert synthetic["error"] == error and synthetic["message"]["model"] == "<synthetic>"
    result = run.of_type("result")[0]
    # The API error arrives as subtype "success" with is_error set.
    assert (result["subtype"], result["is_error"], result["api_error_status"]) == ("success", True, status)
    assert text in result["result"]
    assert result["terminal_reason"] == "api_error"


# -- Codex -----------------------------------------------------------------------------------


def test_codex_plain_reply_is_one_agent_message_item(codex_cli: Any, upstream: Any) -> None:
    upstream.set_script([HELLO])
    run = codex_cli.run(_codex("hello"))
    codex_cli.capture("plain", run)
    assert run.returncode == 0, run.stderr
    kinds = [line["type"] for line in run.lines]
    assert kinds[0] == "thread.started" and kinds[-1] == "turn.completed"
    messages = [
        line["item"] for line in run.of_type("item.completed") if line["item"]["type"] == "agent_message"
    ]
    assert [m["text"] for m in messages] == ["Hello from the fake upstream (user turns seen: 1)."]
    # No text deltas: the message arrives whole when the item completes.
    assert not [line for line in run.of_type("item.updated") if line["item"]["type"] == "agent_message"]
    usage = run.of_type("turn.completed")[0]["usage"]
    assert set(usage) >= {"input_tokens", "cached_input_tokens", "output_tokens"}
    sent = upstream.model_requests("responses")
    assert len(sent) == 1 and sent[0]["body"]["stream"] is True


def test_codex_tool_call_runs_exec_command_and_usage_is_cumulative_on_resume(
    codex_cli: Any, upstream: Any
) -> None:
    (codex_cli.workdir / "hello.txt").write_text(FILE_TEXT)
    upstream.set_script(
        [
            {"tool_calls": [{"name": "exec_command", "arguments": {"cmd": "cat hello.txt"}}], "usage": {"input_tokens": 100, "output_tokens": 10}},
            {**TOOL_RESULT_REPLY, "usage": {"input_tokens": 200, "output_tokens": 20}},
            {**HELLO, "usage": {"input_tokens": 300, "output_tokens": 30}},
        ]
    )  # fmt: skip
    first = codex_cli.run(_codex("read hello.txt"))
    codex_cli.capture("tool", first)
    assert first.returncode == 0, first.stderr
    commands = [
        line["item"] for line in first.lines if line.get("item", {}).get("type") == "command_execution"
    ]
    assert [c["status"] for c in commands] == ["in_progress", "completed"]
    assert commands[-1]["aggregated_output"] == FILE_TEXT and commands[-1]["exit_code"] == 0
    assert first.of_type("turn.completed")[0]["usage"]["input_tokens"] == 300
    thread = first.of_type("thread.started")[0]["thread_id"]
    second = codex_cli.run(_codex("again", resume=thread))
    codex_cli.capture("resume", second)
    assert second.returncode == 0, second.stderr
    assert second.of_type("thread.started")[0]["thread_id"] == thread
    # turn.completed usage is a running total for the session: 100 + 200 + 300.
    usage = second.of_type("turn.completed")[0]["usage"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (600, 60)


def test_codex_reasoning_is_a_completed_reasoning_item_before_the_message(
    codex_cli: Any, upstream: Any
) -> None:
    upstream.set_script([{"thinking": "Plan the answer.", "text": "Done."}])
    run = codex_cli.run(_codex("hello"))
    assert run.returncode == 0, run.stderr
    items = [line["item"] for line in run.of_type("item.completed")]
    assert [(i["type"], i["text"]) for i in items] == [
        ("reasoning", "Plan the answer."),
        ("agent_message", "Done."),
    ]


@pytest.mark.parametrize(
    ("status", "text"), [(401, "401 Unauthorized"), (429, "429"), (400, "Invalid request")]
)
def test_codex_upstream_error_is_turn_failed_and_exit_1(
    codex_cli: Any, upstream: Any, status: int, text: str
) -> None:
    upstream.set_script([{"status": status, "times": None}])
    run = codex_cli.run(_codex("hello"))
    codex_cli.capture(f"upstream-{status}", run)
    assert run.returncode == 1
    assert text in run.of_type("error")[0]["message"]
    assert text in run.of_type("turn.failed")[0]["error"]["message"]


# -- Gemini ----------------------------------------------------------------------------------


def test_gemini_streams_text_deltas_and_answers_the_router(gemini_cli: Any, upstream: Any) -> None:
    upstream.set_script([HELLO])
    run = gemini_cli.run(_gemini("hello"))
    gemini_cli.capture("plain", run)
    assert run.returncode == 0, run.stderr
    assert [line["type"] for line in run.lines][:2] == ["init", "message"]
    deltas = [line for line in run.of_type("message") if line["role"] == "assistant"]
    assert len(deltas) > 1 and all(d["delta"] is True for d in deltas)
    assert "".join(d["content"] for d in deltas) == "Hello from the fake upstream (user turns seen: 1)."
    result = run.of_type("result")[0]
    assert result["status"] == "success" and result["stats"]["output_tokens"] > 0
    # The default model asks a router first; the fake answers it without using the script.
    routed = [r for r in upstream.requests if r["builtin"] == "routing"]
    assert routed and ":generateContent" in routed[0]["path"]
    assert ":streamGenerateContent" in upstream.model_requests("gemini")[0]["path"]


def test_gemini_tool_call_and_resume(gemini_cli: Any, upstream: Any) -> None:
    (gemini_cli.workdir / "hello.txt").write_text(FILE_TEXT)
    upstream.set_script(
        [
            {"tool_calls": [{"name": "read_file", "arguments": {"file_path": "hello.txt"}}]},
            TOOL_RESULT_REPLY,
            HELLO,
        ]
    )
    first = gemini_cli.run(_gemini("read hello.txt"))
    gemini_cli.capture("tool", first)
    assert first.returncode == 0, first.stderr
    use = first.of_type("tool_use")[0]
    assert (use["tool_name"], use["parameters"]) == ("read_file", {"file_path": "hello.txt"})
    result = first.of_type("tool_result")[0]
    # The stream carries an empty output for read_file; the model got the file's text.
    assert (result["tool_id"], result["status"], result.get("output")) == (use["tool_id"], "success", "")
    assert "hello world file content 12345" in "".join(m["content"] for m in first.of_type("message")[1:])
    session = first.of_type("init")[0]["session_id"]
    second = gemini_cli.run(_gemini("again", resume=session))
    gemini_cli.capture("resume", second)
    assert second.returncode == 0, second.stderr
    assert second.of_type("init")[0]["session_id"] == session
    assert "".join(m["content"] for m in second.of_type("message")[1:]) == (
        "Hello from the fake upstream (user turns seen: 2)."
    )


@pytest.mark.parametrize(
    ("status", "entry", "code", "text"),
    [
        (400, {"error": {"message": "API key not valid. Please pass a valid API key.", "type": "INVALID_ARGUMENT", "reason": "API_KEY_INVALID"}}, 144, "API_KEY_INVALID"),
        (429, {"retry_after": 1}, 173, "Resource has been exhausted"),
        (401, {}, 145, "UNAUTHENTICATED"),
    ],
)  # fmt: skip
def test_gemini_upstream_error_exits_with_the_status_mod_256(
    gemini_cli: Any, upstream: Any, status: int, entry: dict[str, Any], code: int, text: str
) -> None:
    upstream.set_script([{"status": status, "times": None, **entry}])
    run = gemini_cli.run(_gemini("hello"))
    gemini_cli.capture(f"upstream-{status}", run)
    assert run.returncode == code == status % 256
    result = run.of_type("result")[-1]
    assert result["status"] == "error" and text in result["error"]["message"]


def test_gemini_resume_of_an_unknown_session_exits_42(gemini_cli: Any, upstream: Any) -> None:
    run = gemini_cli.run(_gemini("again", resume="00000000-0000-4000-8000-000000000000"))
    gemini_cli.capture("resume-unknown", run)
    assert run.returncode == 42
    assert upstream.model_requests() == []


# -- when text reaches stdout (what a crash of the reader can lose) ---------------------------

SLOW = {"text": "one two three four five six seven eight", "chunk_delay_ms": 200}


def _spread(times: list[float]) -> float:
    return max(times) - min(times) if times else 0.0


def test_claude_prints_text_only_when_the_block_ends_unless_partial_messages(
    claude_cli: Any, upstream: Any
) -> None:
    upstream.set_script([SLOW, SLOW])
    whole, code = claude_cli.timed_lines(_claude("hello"))
    assert code == 0
    assistant = [t for t, line in whole if line["type"] == "assistant"]
    assert len(assistant) == 1  # 1.4 s of streaming upstream, one line at the end
    partial, code = claude_cli.timed_lines(_claude("hello", "--include-partial-messages"))
    assert code == 0
    deltas = [
        t
        for t, line in partial
        if line["type"] == "stream_event" and line["event"]["type"] == "content_block_delta"
    ]
    block = next(t for t, line in partial if line["type"] == "assistant")
    assert len(deltas) == 8 and _spread(deltas) >= 1.0
    assert block - deltas[0] >= 1.0  # the first words were on stdout a second before the block


def test_codex_prints_the_agent_message_only_when_the_item_completes(codex_cli: Any, upstream: Any) -> None:
    upstream.set_script([SLOW])
    lines, code = codex_cli.timed_lines(_codex("hello"))
    assert code == 0
    messages = [line for _, line in lines if line.get("item", {}).get("type") == "agent_message"]
    assert [m["type"] for m in messages] == ["item.completed"]
    assert messages[0]["item"]["text"] == SLOW["text"]


def test_gemini_prints_each_delta_as_it_arrives(gemini_cli: Any, upstream: Any) -> None:
    upstream.set_script([SLOW])
    lines, code = gemini_cli.timed_lines(_gemini("hello"))
    assert code == 0
    deltas = [t for t, line in lines if line["type"] == "message" and line["role"] == "assistant"]
    assert len(deltas) == 8 and _spread(deltas) >= 1.0
