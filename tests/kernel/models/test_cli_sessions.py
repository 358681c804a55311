"""Readers of the CLIs' own session records, on files shaped like the real CLIs write them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from turnlog.kernel.models._cli_sessions import cli_home, codex_usage_total, read_session


def write_lines(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"torn": ')
    return path


def test_claude_record_is_found_by_directory_and_read_from_a_point_in_time(tmp_path: Path) -> None:
    home = tmp_path / ".claude"
    write_lines(
        home / "projects" / "-work-my-project" / "s1.jsonl",
        [
            {"type": "user", "timestamp": "2026-01-01T00:00:00Z", "message": {"role": "user", "content": "old"}},
            {"type": "assistant", "timestamp": "2026-01-01T00:00:01Z",
             "message": {"role": "assistant", "content": [{"type": "text", "text": "before the run"}]}},
            {"type": "assistant", "timestamp": "2026-01-02T00:00:01Z",
             "message": {"role": "assistant", "content": [{"type": "text", "text": "in the run"}]}},
            {"type": "assistant", "timestamp": "2026-01-02T00:00:02Z",
             "message": {"role": "assistant",
                         "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]}},
            {"type": "user", "timestamp": "2026-01-02T00:00:03Z",
             "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}]}},
            {"type": "assistant", "timestamp": "2026-01-02T00:00:04Z", "error": "rate_limit",
             "message": {"role": "assistant", "content": [{"type": "text", "text": "API Error: 429"}]}},
        ],
    )  # fmt: skip
    since = datetime(2026, 1, 2, tzinfo=UTC)
    record = read_session("claude_code", str(home), "s1", cwd="/work/my_project", since=since)
    assert record is not None
    assert [(i.kind, i.text or i.tool_id) for i in record.items] == [
        ("text", "in the run"),
        ("tool_use", "t1"),
        ("tool_result", "t1"),
    ]
    assert read_session("claude_code", str(home), "missing") is None


def test_codex_rollout_items_and_the_running_usage_total(tmp_path: Path) -> None:
    home = tmp_path / ".codex"
    total = {"input_tokens": 3588, "cached_input_tokens": 0, "output_tokens": 2, "total_tokens": 3590}
    write_lines(
        home / "sessions" / "2026" / "12" / "03" / "rollout-2026-12-03T09-32-49-thread-1.jsonl",
        [
            {"timestamp": "2026-12-03T09:32:49Z", "type": "session_meta", "payload": {"id": "thread-1"}},
            {"timestamp": "2026-12-03T09:32:50Z", "type": "response_item",
             "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}},
            {"timestamp": "2026-12-03T09:32:51Z", "type": "response_item",
             "payload": {"type": "function_call", "name": "exec_command", "arguments": "{\"cmd\": \"ls\"}",
                         "call_id": "c1"}},
            {"timestamp": "2026-12-03T09:32:52Z", "type": "response_item",
             "payload": {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}},
            {"timestamp": "2026-12-03T09:32:52Z", "type": "event_msg",
             "payload": {"type": "token_count", "info": {"total_token_usage": total, "last_token_usage": total}}},
        ],
    )  # fmt: skip
    record = read_session("codex", str(home), "thread-1")
    assert record is not None
    assert [(i.kind, i.text or i.tool_name) for i in record.items] == [
        ("tool_use", "exec_command"),
        ("text", "done"),
    ]
    assert record.items[0].tool_input == {"cmd": "ls"}
    assert codex_usage_total(str(home), "thread-1") == total
    assert codex_usage_total(str(home), "other") is None


def test_gemini_json_lines_chat_with_updates_and_patches(tmp_path: Path) -> None:
    home = tmp_path / ".gemini"
    write_lines(
        home / "tmp" / "work" / "chats" / "session-2026-12-03T09-33-5e34fa29.jsonl",
        [
            {"sessionId": "5e34fa29-full", "projectHash": "x", "kind": "main"},
            {"$set": {"messages": [{"id": "u0", "type": "user", "content": [{"text": "context"}]}]}},
            {"id": "u1", "timestamp": "2026-12-03T09:33:05Z", "type": "user", "content": [{"text": "hello"}]},
            {"id": "g1", "timestamp": "2026-12-03T09:33:06Z", "type": "gemini", "content": "Hel"},
            {"id": "g1", "timestamp": "2026-12-03T09:33:06Z", "type": "gemini", "content": "Hello there.",
             "toolCalls": [{"id": "r1", "name": "read_file", "args": {"file_path": "a"}, "status": "success",
                            "resultDisplay": "a's text"}]},
            {"$set": {"lastUpdated": "2026-12-03T09:33:07Z"}},
        ],
    )  # fmt: skip
    record = read_session("gemini", str(home), "5e34fa29-full")
    assert record is not None
    assert [(i.kind, i.text or i.tool_output or i.tool_name) for i in record.items] == [
        ("tool_use", "read_file"),
        ("tool_result", "a's text"),
        ("text", "Hello there."),
    ]


def test_where_each_cli_keeps_its_sessions() -> None:
    assert cli_home("claude_code", {"HOME": "/h"}) == "/h/.claude"
    assert cli_home("claude_code", {"HOME": "/h", "CLAUDE_CONFIG_DIR": "/c"}) == "/c"
    assert cli_home("codex", {"HOME": "/h", "CODEX_HOME": "/x"}) == "/x"
    assert cli_home("gemini", {"HOME": "/h"}) == "/h/.gemini"
    assert cli_home("openai", {"HOME": "/h"}) is None
