"""Claude Code, Codex and Gemini CLI providers over real pipes, against the faithful fake CLIs."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path

import anyio
import pytest

from turnlog.kernel.models import (
    ClaudeCodeModel,
    CLIAgentModel,
    CLIError,
    CLINotFound,
    CodexModel,
    GeminiModel,
    StreamChunk,
    StreamingModel,
)

from ..streamkit import BIN_VARS, Fake, alive, make_fake

MODELS: dict[str, type[CLIAgentModel]] = {
    "claude": ClaudeCodeModel,
    "codex": CodexModel,
    "gemini": GeminiModel,
}

TOOL_SCRIPT = {
    "usage": {"input_tokens": 21, "output_tokens": 13},
    "cost_usd": 0.0042,
    "steps": [
        {"thinking": "plan the listing"},
        {"text": "Listing ", "chunks": 1},
        {"text": "files."},
        {"tool_use": {"name": "Bash", "input": {"command": "ls"}}},
        {"tool_result": {"output": "README.md\nsrc"}},
        {"tool_use": {"name": "read", "input": {"path": "missing.txt"}}},
        {"tool_result": {"output": "no such file", "is_error": True}},
        {"text": "done"},
    ],
}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Fake:
    made = make_fake(monkeypatch, tmp_path)
    monkeypatch.delenv("GEMINI_CLI_TRUST_WORKSPACE", raising=False)
    return made


def group_alive(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] not in "ZX":
                found.append(int(entry.name))
    return found


def assert_no_survivors(fake: Fake) -> None:
    starts = fake.starts()
    assert starts, "the fake never started"
    for start in starts:
        assert group_alive(start["pgid"]) == [], f"process group {start['pgid']} survived"
    for pid in fake.pids("grandchild"):
        assert not alive(pid), f"grandchild {pid} survived"


async def collect(stream: AsyncIterator[StreamChunk]) -> list[StreamChunk]:
    return [chunk async for chunk in stream]


async def collect_until_error(stream: AsyncIterator[StreamChunk]) -> tuple[list[StreamChunk], CLIError]:
    chunks: list[StreamChunk] = []
    with pytest.raises(CLIError) as info:
        async for chunk in stream:
            chunks.append(chunk)
    return chunks, info.value


def kinds(chunks: list[StreamChunk]) -> list[str]:
    return [c.type for c in chunks]


# ------------------------------------------------------------------------------- normalization


@pytest.mark.parametrize("cli", MODELS)
def test_models_satisfy_the_streaming_protocol(cli: str) -> None:
    model = MODELS[cli]("some-model")
    assert isinstance(model, StreamingModel)
    assert model.provider == {"claude": "claude_code", "codex": "codex", "gemini": "gemini"}[cli]
    assert model.model == "some-model"


async def test_claude_chunks(fake: Fake) -> None:
    fake.script(TOOL_SCRIPT)
    chunks = await collect(ClaudeCodeModel("sonnet").stream("List the files"))
    assert kinds(chunks) == [
        "system", "thinking", "text", "text", "tool_use", "tool_result",
        "tool_use", "tool_result", "text", "result",
    ]  # fmt: skip
    system, thinking, text1, text2, use1, res1, use2, res2, text3, result = chunks
    session = system.metadata["session_id"]
    assert session and system.metadata["model"] == "sonnet"
    # With partial messages the thinking arrives as a delta; its final block adds nothing new.
    assert thinking.content == "plan the listing" and thinking.is_delta
    assert (text1.content, text2.content, text3.content) == ("Listing ", "files.", "done")
    assert (use1.tool_name, use1.tool_input) == ("Bash", {"command": "ls"})
    assert use1.tool_id.startswith("toolu_") and res1.tool_id == use1.tool_id
    assert (res1.tool_output, res1.is_error) == ("README.md\nsrc", False)
    assert (use2.tool_name, res2.tool_id, res2.tool_output, res2.is_error) == (
        "read",
        use2.tool_id,
        "no such file",
        True,
    )
    assert result.content == "done" and not result.is_error
    meta = result.metadata
    assert meta["session_id"] == session
    assert meta["usage"] == {
        "input_tokens": 21,
        "output_tokens": 13,
        "cost_usd": 0.0042,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    }
    assert meta["num_turns"] == 3 and isinstance(meta["duration_ms"], int)
    assert fake.starts()[0]["argv"] == [
        "-p", "List the files", "--output-format", "stream-json", "--verbose", "--include-partial-messages",
        "--model", "sonnet",
    ]  # fmt: skip
    assert fake.starts()[0]["stdin"] == os.devnull


async def test_codex_chunks(fake: Fake) -> None:
    fake.script(TOOL_SCRIPT)
    chunks = await collect(CodexModel().stream("List the files"))
    assert kinds(chunks) == [
        "system", "thinking", "text", "text", "tool_use", "tool_result",
        "tool_use", "tool_result", "text", "result",
    ]  # fmt: skip
    system, thinking, _, _, use1, res1, use2, res2, _, result = chunks
    thread = system.metadata["session_id"]
    assert thread == system.metadata["thread_id"]
    assert thinking.content == "plan the listing"
    assert (use1.tool_name, use1.tool_input, res1.tool_id) == ("shell", {"command": "ls"}, use1.tool_id)
    assert (res1.tool_output, res1.is_error, res1.metadata["exit_code"]) == ("README.md\nsrc", False, 0)
    assert (use2.tool_name, use2.tool_input, use2.metadata["server"]) == (
        "read",
        {"path": "missing.txt"},
        "tools",
    )
    assert (res2.tool_id, res2.tool_output, res2.is_error) == (use2.tool_id, "no such file", True)
    assert result.content == "done"
    assert result.metadata["session_id"] == thread
    assert result.metadata["usage"] == {
        "input_tokens": 21,
        "output_tokens": 13,
        "cost_usd": None,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
    }
    assert result.metadata["num_turns"] == 1 and result.metadata["duration_ms"] > 0
    argv = fake.starts()[0]["argv"]
    assert argv[:2] == ["exec", "--json"] and argv[-2:] == ["--", "List the files"]


async def test_gemini_chunks(fake: Fake) -> None:
    fake.script(TOOL_SCRIPT)
    chunks = await collect(GeminiModel("gemini-2.5-pro").stream("List the files"))
    # Gemini's stream-json has no thinking events; the user prompt echo is skipped.
    assert kinds(chunks) == [
        "system", "text", "text", "tool_use", "tool_result", "tool_use", "tool_result", "text", "result",
    ]  # fmt: skip
    system, text1, _, use1, res1, use2, res2, _, result = chunks
    assert system.metadata == {
        "session_id": system.metadata["session_id"],
        "model": "gemini-2.5-pro",
        "cwd": os.getcwd(),
        "cli_home": "~/.gemini",  # the log records no home-directory path
    }
    assert text1.is_delta and text1.content == "Listing "
    assert (use1.tool_name, use1.tool_input, res1.tool_id, res1.tool_output) == (
        "Bash",
        {"command": "ls"},
        use1.tool_id,
        "README.md\nsrc",
    )
    assert (res2.tool_id, res2.tool_output, res2.is_error) == (use2.tool_id, "no such file", True)
    assert result.content == "done"  # the text after the last tool call
    assert result.metadata["session_id"] == system.metadata["session_id"]
    assert result.metadata["usage"] == {
        "input_tokens": 21,
        "output_tokens": 13,
        "cost_usd": None,
        "cache_read_tokens": 0,
    }
    assert result.metadata["tool_calls"] == 2
    assert fake.starts()[0]["env"]["GEMINI_CLI_TRUST_WORKSPACE"] == "true"


async def test_codex_transient_error_events_are_notices_not_failures(fake: Fake) -> None:
    fake.script({"steps": [{"warning": "Reconnecting... 1/5"}, {"text": "fine"}]})
    chunks = await collect(CodexModel().stream("hi"))
    assert kinds(chunks) == ["system", "system", "text", "result"]
    assert chunks[1].metadata["notice"] == "Reconnecting... 1/5"
    assert "session_id" not in chunks[1].metadata


# ------------------------------------------------------------------------------------ resume


@pytest.mark.parametrize("cli", MODELS)
async def test_resume_passes_the_session_id_and_continues_the_same_session(fake: Fake, cli: str) -> None:
    model = MODELS[cli]()
    first = await collect(model.stream("first"))
    session = first[0].metadata["session_id"]
    assert first[-1].metadata["session_id"] == session
    second = await collect(model.stream("second", resume=session))
    assert second[0].metadata["session_id"] == session
    assert second[-1].metadata["session_id"] == session
    argv = fake.starts()[1]["argv"]
    if cli == "codex":
        assert argv[-4:] == ["resume", session, "--", "second"]
    else:
        assert argv[argv.index("--resume") + 1] == session


@pytest.mark.parametrize("cli", MODELS)
async def test_unknown_resume_id_is_session_not_found(fake: Fake, cli: str) -> None:
    chunks, err = await collect_until_error(MODELS[cli]().stream("again", resume="no-such-session"))
    assert err.kind == "session_not_found"
    assert err.exit_code == (42 if cli == "gemini" else 1)  # gemini: FatalInputError
    assert "no-such-session" in err.stderr
    if cli == "claude":  # claude also prints an error result on stdout
        assert kinds(chunks) == ["result", "error"] and chunks[1].metadata["kind"] == "session_not_found"


# ------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("cli", MODELS)
@pytest.mark.parametrize(("fail_kind", "kind"), [("auth", "auth"), ("rate_limit", "rate_limit")])
async def test_mid_stream_failure_delivers_earlier_chunks_then_raises(
    fake: Fake, cli: str, fail_kind: str, kind: str
) -> None:
    fake.script({"steps": [{"text": "partial answer"}, {"fail": {"kind": fail_kind}}]})
    chunks, err = await collect_until_error(MODELS[cli]().stream("hi"))
    assert chunks[0].type == "system"
    assert chunks[1].type == "text" and chunks[1].content == "partial answer"
    errors = [c for c in chunks if c.type == "error"]
    assert len(errors) == 1 and errors[0].metadata["kind"] == kind and errors[0].is_error
    assert chunks[-1] is errors[0]
    assert err.kind == kind
    # gemini: 41 for a login failure, the HTTP status mod 256 for an API error (429 -> 173)
    gemini_code = 41 if fail_kind == "auth" else 429 % 256
    assert err.exit_code == (gemini_code if cli == "gemini" else 1)
    assert err.provider == MODELS[cli].provider


async def test_claude_error_result_keeps_usage_before_the_error_chunk(fake: Fake) -> None:
    fake.script({"steps": [{"text": "working"}, {"fail": {"kind": "max_turns"}}]})
    chunks, err = await collect_until_error(ClaudeCodeModel().stream("hi"))
    result, error = chunks[-2:]
    assert result.type == "result" and result.is_error
    assert result.metadata["subtype"] == "error_max_turns" and result.metadata["usage"]["input_tokens"]
    assert error.type == "error" and "maximum number of turns" in error.content
    assert err.exit_code == 1


@pytest.mark.parametrize("cli", MODELS)
async def test_crash_after_chunks_is_a_crash_error(fake: Fake, cli: str) -> None:
    fake.script({"steps": [{"text": "half"}, {"crash": "SIGKILL"}]})
    chunks, err = await collect_until_error(MODELS[cli]().stream("hi"))
    assert [c.content for c in chunks if c.type == "text"] == ["half"]
    assert err.kind == "crash" and err.exit_code is None
    assert "SIGKILL" in str(err)


async def test_nonzero_exit_without_a_known_message_keeps_exit_code_and_stderr(fake: Fake) -> None:
    fake.script({"steps": [{"text": "x"}, {"stderr": "segfault in module foo"}, {"crash": {"exit": 3}}]})
    _, err = await collect_until_error(CodexModel().stream("hi"))
    assert (err.kind, err.exit_code) == ("unknown", 3)
    assert "segfault in module foo" in err.stderr and "segfault in module foo" in str(err)


async def test_exit_zero_without_the_final_event_is_a_stream_error(fake: Fake) -> None:
    fake.script({"steps": [{"text": "cut"}, {"crash": {"exit": 0}}]})
    chunks, err = await collect_until_error(ClaudeCodeModel().stream("hi"))
    assert kinds(chunks) == ["system", "text"]
    assert (err.kind, err.exit_code) == ("stream", 0)


async def test_argv_rejected_by_the_cli_is_a_usage_error(fake: Fake) -> None:
    _, err = await collect_until_error(ClaudeCodeModel(extra_args=["--bogus-flag"]).stream("hi"))
    assert err.kind == "usage" and err.exit_code == 1
    assert "unknown option '--bogus-flag'" in err.stderr


async def test_untrusted_gemini_workspace_is_a_usage_error(fake: Fake) -> None:
    model = GeminiModel(env={"GEMINI_CLI_TRUST_WORKSPACE": "false"})
    _, err = await collect_until_error(model.stream("hi"))
    assert (err.kind, err.exit_code) == ("usage", 55)


# --------------------------------------------------------------------------------- framing


async def test_a_non_json_stdout_line_is_a_diagnostic_and_later_events_still_arrive(fake: Fake) -> None:
    fake.script({"steps": [{"text": "a"}, {"raw": "Debugger attached."}, {"text": "b"}]})
    chunks = await collect(ClaudeCodeModel().stream("hi"))
    assert kinds(chunks) == ["system", "text", "system", "text", "result"]
    assert chunks[2].metadata["diagnostic"] == "Debugger attached."
    assert chunks[2].metadata["reason"] == "not_json" and chunks[2].metadata["line_number"] > 1
    assert chunks[-1].content == "ab"  # both blocks belong to the last assistant message


async def test_a_torn_last_line_is_a_diagnostic_followed_by_the_crash_error(fake: Fake) -> None:
    fake.script({"steps": [{"text": "a"}, {"torn": '{"type":"assistant","mess'}]})
    chunks, err = await collect_until_error(GeminiModel().stream("hi"))
    assert chunks[-1].type == "system"
    assert chunks[-1].metadata["reason"] == "torn"
    assert chunks[-1].metadata["diagnostic"] == '{"type":"assistant","mess'
    assert err.kind == "crash"


async def test_stderr_is_capped_to_its_tail(fake: Fake) -> None:
    fake.script({"steps": [{"stderr_bytes": 300_000}, {"fail": {"kind": "api"}}]})
    _, err = await collect_until_error(ClaudeCodeModel(stderr_cap=4096).stream("hi"))
    assert len(err.stderr) < 4096 + 100
    assert err.stderr.startswith("[stderr truncated") and err.stderr.endswith("END-OF-STDERR\n")


# ---------------------------------------------------------------------------- no survivors

HANG = {
    "ignore_sigterm": True,
    "steps": [{"spawn_grandchild": {"ignore_sigterm": True}}, {"text": "first"}, {"hang": True}],
}


@pytest.mark.parametrize("cli", MODELS)
async def test_cancellation_leaves_no_process_behind(fake: Fake, cli: str) -> None:
    fake.script(HANG)
    seen = []
    with anyio.CancelScope() as scope:
        async for chunk in MODELS[cli](terminate_grace=0.3).stream("hi"):
            seen.append(chunk.type)
            if chunk.type == "text":
                scope.cancel()
    assert scope.cancelled_caught and seen[-1] == "text"
    assert len(fake.pids("grandchild")) == 1
    assert_no_survivors(fake)


async def test_timeout_leaves_no_process_behind(fake: Fake) -> None:
    fake.script(HANG)
    with pytest.raises(TimeoutError):
        with anyio.fail_after(1.0):
            await collect(CodexModel(terminate_grace=0.3).stream("hi"))
    assert_no_survivors(fake)


async def test_breaking_out_early_leaves_no_process_behind(fake: Fake) -> None:
    fake.script(HANG)
    async with aclosing(ClaudeCodeModel(terminate_grace=0.3).stream("hi")) as stream:
        async for chunk in stream:
            if chunk.type == "text":
                break
    assert_no_survivors(fake)


async def test_an_abandoned_stream_is_cleaned_up_when_collected(fake: Fake) -> None:
    fake.script(HANG)
    stream = GeminiModel(terminate_grace=0.3).stream("hi")
    while (await anext(stream)).type != "text":
        pass
    pgid = fake.starts()[0]["pgid"]
    assert group_alive(pgid)
    del stream
    gc.collect()
    # The event loop closes the abandoned generator in a task of its own; give it time.
    with anyio.fail_after(10):
        while group_alive(pgid):  # noqa: ASYNC110 - no event exists for another process's exit
            await anyio.sleep(0.05)
    assert_no_survivors(fake)


async def test_failure_leaves_no_process_behind(fake: Fake) -> None:
    fake.script({"steps": [{"spawn_grandchild": {}}, {"text": "x"}, {"fail": {"kind": "api"}}]})
    await collect_until_error(CodexModel(terminate_grace=0.3).stream("hi"))
    assert_no_survivors(fake)


async def test_normal_end_still_stops_a_lingering_grandchild(fake: Fake) -> None:
    fake.script({"steps": [{"spawn_grandchild": {}}, {"text": "x"}]})
    chunks = await collect(ClaudeCodeModel(terminate_grace=0.3).stream("hi"))
    assert chunks[-1].type == "result"
    assert_no_survivors(fake)


# ---------------------------------------------------------------------------- argv and setup


@pytest.mark.parametrize("cli", MODELS)
async def test_missing_executable_is_cli_not_found(
    fake: Fake, cli: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(BIN_VARS[cli])
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CLINotFound, match=BIN_VARS[cli]):
        await collect(MODELS[cli]().stream("hi"))
    monkeypatch.setenv(BIN_VARS[cli], str(tmp_path / "not-here"))
    with pytest.raises(CLINotFound):
        await collect(MODELS[cli]().stream("hi"))


def test_command_lines(fake: Fake) -> None:
    exe = [sys.executable, "-m", "turnlog.testing._fake_cli"]
    assert ClaudeCodeModel("opus").command("hi", resume="s1", options={"max_turns": 3}) == [
        *exe, "claude", "-p", "hi", "--output-format", "stream-json", "--verbose", "--include-partial-messages",
        "--model", "opus", "--resume", "s1", "--max-turns", "3",
    ]  # fmt: skip
    assert CodexModel("gpt-5-codex").command("hi", resume="t1", options={"sandbox": "read-only"}) == [
        *exe, "codex", "exec", "--json", "-m", "gpt-5-codex", "--skip-git-repo-check", "-s", "read-only",
        "resume", "t1", "--", "hi",
    ]  # fmt: skip
    assert GeminiModel().command("hi", resume="g1") == [
        *exe, "gemini", "-p", "hi", "--output-format", "stream-json", "--resume", "g1",
    ]  # fmt: skip


@pytest.mark.parametrize("cli", MODELS)
async def test_a_prompt_starting_with_a_dash_reaches_the_cli_as_the_prompt(fake: Fake, cli: str) -> None:
    fake.script({"steps": [{"text": "ok"}]})
    chunks = await collect(MODELS[cli]().stream("-v is not a flag here"))
    assert chunks[-1].type == "result"
    if cli == "gemini":
        assert "--prompt=-v is not a flag here" in fake.starts()[0]["argv"]
    else:
        assert fake.starts()[0]["argv"][-2:] == ["--", "-v is not a flag here"]


async def test_bad_arguments_are_refused_before_anything_starts(fake: Fake) -> None:
    model = ClaudeCodeModel()
    with pytest.raises(ValueError, match="unknown option"):
        await collect(model.stream("hi", options={"temperature": 0.2}))
    with pytest.raises(ValueError, match="non-empty"):
        await collect(model.stream("  "))
    with pytest.raises(ValueError, match="resume"):
        await collect(model.stream("hi", resume=""))
    assert fake.records() == []


async def test_per_call_options_set_cwd_env_and_model(fake: Fake, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    options = {"cwd": str(work), "env": {"TURNLOG_FAKE_CLI_MARK": "42"}, "model": "haiku"}
    chunks = await collect(ClaudeCodeModel("sonnet").stream("hi", options=options))
    start = fake.starts()[0]
    assert start["cwd"] == str(work) and start["env"]["TURNLOG_FAKE_CLI_MARK"] == "42"
    assert chunks[0].metadata["model"] == "haiku"
    assert os.getcwd() != str(work)
