"""The fake CLIs behave like the real ones: argv rules, JSON-only stdout, exit codes, sessions, record."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CLAUDE = ["-p", "hello", "--output-format", "stream-json", "--verbose"]
CODEX = ["exec", "--json", "--skip-git-repo-check", "--", "hello"]
GEMINI = ["-p", "hello", "--output-format", "stream-json"]
ARGV = {"claude": CLAUDE, "codex": CODEX, "gemini": GEMINI}

SCRIPT = {
    "steps": [
        {"thinking": "think"},
        {"text": "one two three", "chunks": 3},
        {"tool_use": {"name": "Bash", "input": {"command": "ls"}}},
        {"tool_result": {"output": "a.txt"}},
        {"text": "done"},
    ]
}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    values = dict(os.environ)
    values.update(
        TURNLOG_FAKE_CLI_STATE=str(tmp_path / "state"),
        TURNLOG_FAKE_CLI_RECORD=str(tmp_path / "record.jsonl"),
        GEMINI_CLI_TRUST_WORKSPACE="true",
    )
    values.pop("TURNLOG_FAKE_CLI_SCRIPT", None)
    return values


def fake(cli: str, argv: list[str], env: dict[str, str], script: dict[str, Any] | None = None, **kw: Any):
    run_env = dict(env)
    if script is not None:
        run_env["TURNLOG_FAKE_CLI_SCRIPT"] = json.dumps(script)
    return subprocess.run(
        [sys.executable, "-m", "turnlog.testing._fake_cli", cli, *argv],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=60,
        **kw,
    )


def records(env: dict[str, str]) -> list[dict[str, Any]]:
    path = Path(env["TURNLOG_FAKE_CLI_RECORD"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


@pytest.mark.parametrize("cli", ARGV)
def test_stdout_is_only_json_lines_and_the_record_has_every_line_in_order(
    cli: str, env: dict[str, str]
) -> None:
    done = fake(cli, ARGV[cli], env, SCRIPT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith("\n")
    events = lines(done.stdout)  # raises on any non-JSON line
    assert all(isinstance(e, dict) and "type" in e for e in events)
    recorded = [r for r in records(env) if r["event"] == "stdout"]
    assert [r["line"] for r in recorded] == done.stdout.splitlines()
    stamps = [r["t"] for r in recorded]
    assert stamps == sorted(stamps)
    start = records(env)[0]
    assert start["event"] == "start" and start["argv"] == ARGV[cli] and start["cli"] == cli
    assert records(env)[-1] == {"event": "exit", "code": 0, "t": records(env)[-1]["t"]}


def test_claude_stream_has_the_real_shapes(env: dict[str, str]) -> None:
    events = lines(fake("claude", CLAUDE, env, SCRIPT).stdout)
    # One assistant line per finished content block, never one per streamed part.
    assert [e["type"] for e in events] == ["system", "assistant", "assistant", "assistant", "user",
                                          "assistant", "result"]  # fmt: skip
    init, result = events[0], events[-1]
    assert init["subtype"] == "init" and init["session_id"] == result["session_id"]
    assert all(e["session_id"] == init["session_id"] for e in events)
    thinking = events[1]["message"]["content"][0]
    assert thinking["type"] == "thinking" and thinking["signature"]
    assert events[2]["message"]["content"] == [{"type": "text", "text": "one two three"}]
    tool_use = events[3]["message"]["content"][0]
    tool_result = events[4]["message"]["content"][0]
    assert tool_result == {"tool_use_id": tool_use["id"], "type": "tool_result", "content": "a.txt"}
    # One API message per turn: a new message id after the tool result.
    assert events[1]["message"]["id"] == events[3]["message"]["id"] != events[5]["message"]["id"]
    assert result["subtype"] == "success" and result["is_error"] is False
    assert result["result"] == "done" and result["num_turns"] == 2


def test_claude_partial_messages_stream_the_deltas_of_each_block(env: dict[str, str]) -> None:
    events = lines(fake("claude", [*CLAUDE, "--include-partial-messages"], env, SCRIPT).stdout)
    kinds = [e["event"]["type"] if e["type"] == "stream_event" else e["type"] for e in events]
    assert kinds[:4] == ["system", "system", "message_start", "content_block_start"]
    deltas = [e["event"]["delta"] for e in events if e["type"] == "stream_event" and
              e["event"]["type"] == "content_block_delta"]  # fmt: skip
    text_deltas = [d["text"] for d in deltas if d["type"] == "text_delta"]
    assert text_deltas == ["one t", "wo th", "ree", "done"]
    # The block's assistant line comes after its deltas and before its content_block_stop.
    first_text = next(i for i, e in enumerate(events) if e["type"] == "assistant" and
                      e["message"]["content"][0]["type"] == "text")  # fmt: skip
    assert kinds[first_text - 1] == "content_block_delta" and kinds[first_text + 1] == "content_block_stop"
    assert kinds.count("message_start") == kinds.count("message_stop") == 2
    assert kinds[-3:] == ["message_delta", "message_stop", "result"]


def test_claude_chunk_lines_keeps_the_former_one_line_per_part_framing(env: dict[str, str]) -> None:
    events = lines(fake("claude", CLAUDE, env, {**SCRIPT, "chunk_lines": True}).stdout)
    texts = [e["message"]["content"][0].get("text") for e in events if e["type"] == "assistant"]
    assert texts[1:4] == ["one t", "wo th", "ree"]


def test_codex_stream_has_the_real_shapes(env: dict[str, str]) -> None:
    events = lines(fake("codex", CODEX, env, SCRIPT).stdout)
    assert [e["type"] for e in events] == [
        "thread.started", "turn.started", "item.completed", "item.completed", "item.started",
        "item.completed", "item.completed", "turn.completed",
    ]  # fmt: skip
    assert events[3]["item"] == {"id": "item_1", "type": "agent_message", "text": "one two three"}
    started, completed = events[4]["item"], events[5]["item"]
    assert started == {"id": "item_2", "type": "command_execution", "command": "ls", "aggregated_output": "",
                       "exit_code": None, "status": "in_progress"}  # fmt: skip
    assert completed["id"] == "item_2" and completed["exit_code"] == 0 and completed["status"] == "completed"
    assert set(events[-1]["usage"]) == {"input_tokens", "cached_input_tokens", "cache_write_input_tokens",
                                        "output_tokens", "reasoning_output_tokens"}  # fmt: skip


def test_codex_usage_is_a_running_total_across_resumed_runs(env: dict[str, str]) -> None:
    script = {"usage": {"input_tokens": 100, "output_tokens": 10}}
    first = lines(fake("codex", CODEX, env, script).stdout)
    thread = first[0]["thread_id"]
    resumed = ["exec", "--json", "--skip-git-repo-check", "resume", thread, "--", "again"]
    second = lines(fake("codex", resumed, env, {"usage": {"input_tokens": 30, "output_tokens": 3}}).stdout)
    assert first[-1]["usage"]["input_tokens"] == 100
    assert (second[-1]["usage"]["input_tokens"], second[-1]["usage"]["output_tokens"]) == (130, 13)


def test_gemini_stream_has_the_real_shapes(env: dict[str, str]) -> None:
    events = lines(fake("gemini", GEMINI, env, SCRIPT).stdout)
    assert [e["type"] for e in events] == ["init", "message", "message", "message", "message", "tool_use",
                                          "tool_result", "message", "result"]  # fmt: skip
    assert all(e["timestamp"].endswith("Z") for e in events)
    assert events[1] == {
        "type": "message",
        "timestamp": events[1]["timestamp"],
        "role": "user",
        "content": "hello",
    }
    assert all(e["delta"] is True for e in events[2:5])
    assert "".join(e["content"] for e in events[2:5]) == "one two three"
    assert events[-1]["status"] == "success" and events[-1]["stats"]["tool_calls"] == 1


# ------------------------------------------------------------------------------ argv rules


@pytest.mark.parametrize(
    ("cli", "argv", "code", "message"),
    [
        ("claude", ["-p", "hi", "--output-format", "stream-json"], 1,
         "Error: When using --print, --output-format=stream-json requires --verbose"),
        ("claude", [*CLAUDE, "--bogus-flag"], 1, "error: unknown option '--bogus-flag'"),
        ("claude", ["-p", "hi", "--output-format", "yaml"], 1, "argument 'yaml' is invalid"),
        ("claude", ["-p", "hi", "--include-partial-messages"], 1, "--include-partial-messages requires"),
        ("codex", ["exec", "--json", "--bogus", "hi"], 2, "error: unexpected argument '--bogus' found"),
        ("codex", ["exec", "--json", "-s", "everything", "--skip-git-repo-check", "hi"], 2, "invalid value"),
        ("codex", ["exec", "--json", "hi"], 1, "--skip-git-repo-check was not specified"),
        ("gemini", [*GEMINI, "--bogus"], 1, "Unknown argument: bogus"),
    ],
)  # fmt: skip
def test_argv_is_validated_like_the_real_cli(
    cli: str, argv: list[str], code: int, message: str, env: dict[str, str], tmp_path: Path
) -> None:
    done = fake(cli, argv, env, cwd=tmp_path)
    assert done.returncode == code
    assert done.stdout == ""
    assert message in done.stderr


def test_codex_runs_inside_a_git_repository_without_the_skip_flag(
    env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "sub").mkdir()
    done = fake("codex", ["exec", "--json", "hi"], env, cwd=tmp_path / "sub")
    assert done.returncode == 0, done.stderr


def test_gemini_refuses_an_untrusted_workspace(env: dict[str, str]) -> None:
    env.pop("GEMINI_CLI_TRUST_WORKSPACE")
    done = fake("gemini", GEMINI, env)
    assert (done.returncode, done.stdout) == (55, "")
    assert fake("gemini", [*GEMINI, "--skip-trust"], env).returncode == 0


def test_secrets_in_the_environment_are_recorded_only_as_set(env: dict[str, str]) -> None:
    env["ANTHROPIC_API_KEY"] = "sk-very-secret"
    env["TURNLOG_FAKE_CLI_MARK"] = "visible"
    fake("claude", CLAUDE, env)
    recorded = records(env)[0]["env"]
    assert recorded["ANTHROPIC_API_KEY"] == "<set>" and recorded["TURNLOG_FAKE_CLI_MARK"] == "visible"
    assert "sk-very-secret" not in Path(env["TURNLOG_FAKE_CLI_RECORD"]).read_text()


# ---------------------------------------------------------------------------------- sessions


def test_claude_resume_in_a_later_process(env: dict[str, str]) -> None:
    first = lines(fake("claude", CLAUDE, env).stdout)[0]["session_id"]
    second = lines(fake("claude", [*CLAUDE, "--resume", first], env).stdout)
    assert {e["session_id"] for e in second} == {first}
    forked = lines(fake("claude", [*CLAUDE, "--resume", first, "--fork-session"], env).stdout)
    assert forked[0]["session_id"] != first


def test_claude_unknown_resume_id_fails_like_the_real_cli(env: dict[str, str]) -> None:
    done = fake("claude", [*CLAUDE, "--resume", "4c3f0000-dead-beef-0000-000000000000"], env)
    assert done.returncode == 1
    (result,) = lines(done.stdout)
    assert result["subtype"] == "error_during_execution" and result["is_error"] is True
    assert "result" not in result
    assert result["errors"] == ["No conversation found with session ID: 4c3f0000-dead-beef-0000-000000000000"]
    assert "No conversation found with session ID" in done.stderr


def test_codex_resume_keeps_the_thread_id(env: dict[str, str]) -> None:
    thread = lines(fake("codex", CODEX, env).stdout)[0]["thread_id"]
    again = fake("codex", ["exec", "--json", "--skip-git-repo-check", "resume", thread, "--", "more"], env)
    assert lines(again.stdout)[0] == {"type": "thread.started", "thread_id": thread}
    last = fake("codex", ["exec", "--json", "--skip-git-repo-check", "resume", "--last", "more"], env)
    assert lines(last.stdout)[0]["thread_id"] == thread
    missing = fake("codex", ["exec", "--json", "--skip-git-repo-check", "resume", "nope", "--", "x"], env)
    assert (missing.returncode, missing.stdout) == (1, "")
    assert "No saved session found with ID nope" in missing.stderr


def test_gemini_resume_by_id_latest_and_index(env: dict[str, str]) -> None:
    first = lines(fake("gemini", GEMINI, env).stdout)[0]["session_id"]
    second = lines(fake("gemini", GEMINI, env).stdout)[0]["session_id"]
    assert lines(fake("gemini", [*GEMINI, "--resume", first], env).stdout)[0]["session_id"] == first
    assert lines(fake("gemini", [*GEMINI, "--resume", "latest"], env).stdout)[0]["session_id"] in (
        first,
        second,
    )
    assert lines(fake("gemini", [*GEMINI, "-r", "1"], env).stdout)[0]["session_id"] == first
    missing = fake("gemini", [*GEMINI, "--resume", "nope"], env)
    assert missing.returncode == 42 and 'Invalid session identifier "nope"' in missing.stderr


# ------------------------------------------------------------------------------ failure modes


@pytest.mark.parametrize(
    ("cli", "kind", "code"),
    [("claude", "auth", 1), ("claude", "max_turns", 1), ("codex", "rate_limit", 1), ("codex", "auth", 1),
     ("codex", "invalid_request", 1), ("gemini", "auth", 41), ("gemini", "max_turns", 53),
     ("gemini", "api", 244), ("gemini", "rate_limit", 173), ("gemini", "bad_key", 144),
     ("gemini", "unauthenticated", 145), ("claude", "invalid_request", 1), ("claude", "overloaded", 1)],
)  # fmt: skip
def test_failures_end_with_the_real_terminal_line_and_exit_code(
    cli: str, kind: str, code: int, env: dict[str, str]
) -> None:
    done = fake(cli, ARGV[cli], env, {"steps": [{"text": "so far"}, {"fail": {"kind": kind}}]})
    assert done.returncode == code
    last = lines(done.stdout)[-1]
    if cli == "claude":
        assert last["type"] == "result" and last["is_error"] is True
    elif cli == "codex":
        assert last["type"] == "turn.failed" and last["error"]["message"]
    else:
        assert last["type"] == "result" and last["status"] == "error" and last["error"]["type"]


def test_slow_lines_are_spaced_by_the_delay(env: dict[str, str]) -> None:
    fake("gemini", GEMINI, env, {"delay": 0.05, "steps": [{"text": "abc", "chunks": 3}]})
    stamps = [r["t"] for r in records(env) if r["event"] == "stdout"]
    assert len(stamps) == 6
    assert all(b - a >= 0.04 for a, b in itertools.pairwise(stamps))


def test_sigterm_exits_143_and_is_recorded(env: dict[str, str]) -> None:
    run_env = {**env, "TURNLOG_FAKE_CLI_SCRIPT": json.dumps({"steps": [{"text": "x"}, {"hang": True}]})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "turnlog.testing._fake_cli", "codex", *CODEX],
        env=run_env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for _ in range(3):  # thread.started, turn.started, the agent message: then it hangs
        proc.stdout.readline()
    proc.send_signal(signal.SIGTERM)
    # Wait for its exit itself (the end of its output and the exit status), bounded by 60 s: a
    # loaded CI machine may take many seconds to schedule the child at all.
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert next(r for r in records(env) if r["event"] == "signal")["signal"] == "SIGTERM"


def test_bad_script_is_refused_with_exit_2(env: dict[str, str]) -> None:
    done = fake("claude", CLAUDE, env, {"steps": [{"dance": True}]})
    assert done.returncode == 2 and "step 1 is not a known step" in done.stderr and done.stdout == ""


def test_turnlog_fake_cli_command_runs_the_fake(env: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [{"text": "from a file"}]}))
    done = subprocess.run(
        [sys.executable, "-m", "turnlog.tools", "fake-cli", "claude", "--script", str(script), *CLAUDE],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert lines(done.stdout)[-1]["result"] == "from a file"


def test_claude_continue_resumes_the_latest_session_of_the_directory(
    env: dict[str, str], tmp_path: Path
) -> None:
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    first = lines(fake("claude", CLAUDE, env, cwd=here).stdout)[0]["session_id"]
    fake("claude", CLAUDE, env, cwd=elsewhere)
    again = lines(fake("claude", [*CLAUDE, "--continue"], env, cwd=here).stdout)
    assert again[0]["session_id"] == first


def test_claude_text_and_json_output_formats_print_only_the_result(env: dict[str, str]) -> None:
    script = {"steps": [{"text": "the answer"}]}
    text = fake("claude", ["-p", "q", "--output-format", "text"], env, script)
    assert (text.returncode, text.stdout) == (0, "the answer\n")
    (result,) = lines(fake("claude", ["-p", "q", "--output-format", "json"], env, script).stdout)
    assert result["type"] == "result" and result["result"] == "the answer"


def test_a_vanished_reader_stops_the_fake_and_unsent_lines_are_not_recorded(env: dict[str, str]) -> None:
    script = {"delay": 0.02, "steps": [{"text": "x" * 40, "chunks": 40}]}
    proc = subprocess.Popen(
        [sys.executable, "-m", "turnlog.testing._fake_cli", "gemini", *GEMINI],
        env={**env, "TURNLOG_FAKE_CLI_SCRIPT": json.dumps(script)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader dies mid-stream
    assert proc.wait(timeout=30) == 1
    recorded = records(env)
    broken = next(r for r in recorded if r["event"] == "broken_pipe")
    sent = [r["line"] for r in recorded if r["event"] == "stdout"]
    assert sent[0] + "\n" == first.decode()
    assert broken["unsent"] not in sent[-1:] and len(sent) < 42


def test_stdin_kind_is_recorded(env: dict[str, str]) -> None:
    fake("claude", CLAUDE, env, stdin=subprocess.DEVNULL)
    assert records(env)[0]["stdin"] == os.devnull
