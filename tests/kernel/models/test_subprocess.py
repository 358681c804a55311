"""CLIProcess over real pipes: NDJSON framing, stderr capture, exit status and group cleanup."""

from __future__ import annotations

import itertools
import os
import sys
import textwrap
from pathlib import Path

import anyio
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnlog.kernel.models import CLINotFound, CLIProcess, Diagnostic, ExitStatus, NDJSONFramer
from turnlog.kernel.models._cli_errors import classify_cli_failure, cli_failure
from turnlog.kernel.models._subprocess import resolve_executable


def live_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def py(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


async def collect(proc: CLIProcess) -> list[dict | Diagnostic]:
    return [item async for item in proc]


async def test_lines_split_across_reads_are_reassembled() -> None:
    code = """
        import sys, time
        w = sys.stdout.write
        w('{"a": '); sys.stdout.flush(); time.sleep(0.05)
        w('1}\\n{"b"'); sys.stdout.flush(); time.sleep(0.05)
        w(': "\\u00e9"}\\n'); sys.stdout.flush()
    """
    async with CLIProcess(py(code)) as proc:
        items = await collect(proc)
        status = await proc.wait_exit()
    assert items == [{"a": 1}, {"b": "é"}]
    assert status == ExitStatus(0) and not status.failed


async def test_non_json_lines_become_diagnostics_and_do_not_block_later_objects() -> None:
    code = """
        print('{"n": 1}')
        print('Warning: something printed to stdout')
        print('')
        print('[1, 2]')
        print('{"n": 2}')
    """
    async with CLIProcess(py(code)) as proc:
        items = await collect(proc)
    assert items == [
        {"n": 1},
        Diagnostic("Warning: something printed to stdout", 2, "not_json"),
        Diagnostic("[1, 2]", 3, "not_object"),
        {"n": 2},
    ]


async def test_torn_last_line_is_a_diagnostic_and_a_complete_last_object_is_kept() -> None:
    torn = py("""import sys; print('{"n": 1}'); sys.stdout.write('{"type": "assis')""")
    async with CLIProcess(torn) as proc:
        items = await collect(proc)
    assert items == [{"n": 1}, Diagnostic('{"type": "assis', 2, "torn")]

    unterminated = py("""import sys; sys.stdout.write('{"n": 1}')""")
    async with CLIProcess(unterminated) as proc:
        assert await collect(proc) == [{"n": 1}]


async def test_oversized_line_is_dropped_and_reading_continues() -> None:
    code = """
        import sys
        sys.stdout.write('{"big": "' + 'x' * 300000 + '"}\\n')
        print('{"after": true}')
    """
    async with CLIProcess(py(code), max_line_bytes=1000) as proc:
        items = await collect(proc)
    assert len(items) == 2
    assert isinstance(items[0], Diagnostic) and items[0].reason == "too_long"
    assert items[1] == {"after": True}


async def test_stderr_is_drained_concurrently_and_capped_to_its_tail() -> None:
    # 1 MiB on stderr before any stdout: without a concurrent drain the child blocks forever.
    code = """
        import sys
        sys.stderr.write('x' * (1024 * 1024) + 'THE-END')
        sys.stderr.flush()
        print('{"ok": true}')
        sys.exit(3)
    """
    with anyio.fail_after(20):
        async with CLIProcess(py(code), stderr_cap=4096) as proc:
            items = await collect(proc)
            status = await proc.wait_exit()
    assert items == [{"ok": True}]
    assert status == ExitStatus(3) and status.failed
    assert proc.stderr.endswith("THE-END")
    assert proc.stderr.startswith("[stderr truncated: first ")
    assert len(proc.stderr) < 4096 + 100


async def test_exit_by_signal_is_reported_without_an_exit_code() -> None:
    code = "import os, signal; print('{}', flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    async with CLIProcess(py(code)) as proc:
        await collect(proc)
        status = await proc.wait_exit()
    assert status.returncode is None and status.signal == 9
    assert status.describe() == "killed by SIGKILL"


async def test_child_that_closes_stdout_but_keeps_running_is_terminated() -> None:
    code = "import os, time; print('{}', flush=True); os.close(1); time.sleep(60)"
    async with CLIProcess(py(code), exit_timeout=0.3, terminate_grace=0.3) as proc:
        await collect(proc)
        status = await proc.wait_exit()
        pgid = proc.pid
    assert status.terminated_by_us and status.failed
    assert live_members(pgid) == []


GROUP_CODE = """
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen(
        [sys.executable, "-c", "import signal as s, time; s.signal(s.SIGTERM, s.SIG_IGN); time.sleep(60)"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    print('{"grandchild": %d}' % child.pid, flush=True)
    time.sleep(60)
"""


async def test_cancellation_kills_the_whole_group_even_when_it_ignores_sigterm() -> None:
    with anyio.CancelScope() as scope:
        async with CLIProcess(py(GROUP_CODE), terminate_grace=0.3) as proc:
            pgid = proc.pid
            async for item in proc:
                assert isinstance(item, dict)
                grandchild = item["grandchild"]
                assert grandchild in live_members(pgid)
                scope.cancel()
    assert scope.cancelled_caught
    assert live_members(pgid) == []


async def test_an_exception_in_the_consumer_kills_the_group() -> None:
    with pytest.raises(RuntimeError, match="consumer failed"):
        async with CLIProcess(py(GROUP_CODE), terminate_grace=0.3) as proc:
            pgid = proc.pid
            async for _ in proc:
                raise RuntimeError("consumer failed")
    assert live_members(pgid) == []


async def test_missing_executable_at_spawn_is_cli_not_found(tmp_path: Path) -> None:
    with pytest.raises(CLINotFound):
        async with CLIProcess([str(tmp_path / "nope")], provider="claude_code"):
            pass


def test_resolve_executable_splits_a_command_line_from_the_environment() -> None:
    env = {"TURNLOG_X_BIN": f"{sys.executable} -m some.module --flag 'two words'", "PATH": os.environ["PATH"]}
    argv = resolve_executable("TURNLOG_X_BIN", "x-cli", provider="x", environ=env)
    assert argv == [sys.executable, "-m", "some.module", "--flag", "two words"]


def test_resolve_executable_names_the_variable_when_the_cli_is_missing(tmp_path: Path) -> None:
    with pytest.raises(CLINotFound, match="TURNLOG_X_BIN") as info:
        resolve_executable(
            "TURNLOG_X_BIN", "x-cli-not-installed", provider="x", environ={"PATH": str(tmp_path)}
        )
    assert info.value.provider == "x"


@pytest.mark.parametrize(
    ("texts", "status", "provider", "kind"),
    [
        (["No conversation found with session ID: abc"], ExitStatus(1), "claude_code", "session_not_found"),
        (["ERROR: No saved session found with ID abc."], ExitStatus(1), "codex", "session_not_found"),
        (
            ['Error resuming session: Invalid session identifier "x".'],
            ExitStatus(1),
            "gemini",
            "session_not_found",
        ),
        (["Not logged in · Please run /login"], ExitStatus(1), "claude_code", "auth"),
        (["unexpected status 401 Unauthorized: Missing bearer"], ExitStatus(1), "codex", "auth"),
        (["You've hit your usage limit. Visit ..."], ExitStatus(1), "codex", "rate_limit"),
        (["API Error: Rate limit reached"], ExitStatus(1), "claude_code", "rate_limit"),
        (["error: unknown option '--bogus'"], ExitStatus(1), "claude_code", "usage"),
        ([""], ExitStatus(2), "codex", "usage"),
        ([""], ExitStatus(41), "gemini", "auth"),
        ([""], ExitStatus(None, 9), "claude_code", "crash"),
        ([""], ExitStatus(143), "codex", "unknown"),  # a value >= 128 is not a signal
        ([""], ExitStatus(144), "gemini", "bad_request"),  # HTTP 400 mod 256
        ([""], ExitStatus(173), "gemini", "rate_limit"),  # HTTP 429 mod 256
        ([""], ExitStatus(145), "gemini", "auth"),  # HTTP 401 mod 256
        ([""], ExitStatus(42), "gemini", "usage"),
        ([""], ExitStatus(53), "gemini", "turn_limit"),
        (['{"error":{"code":400,"message":"API key not valid."}}'], ExitStatus(144), "gemini", "auth"),
        (["Invalid API key · Fix external API key"], ExitStatus(1), "claude_code", "auth"),
        (["exceeded retry limit, last status: 429 Too Many Requests"], ExitStatus(1), "codex", "rate_limit"),
        (["something odd"], ExitStatus(1), "claude_code", "unknown"),
    ],
)
def test_failures_are_classified(texts: list[str], status: ExitStatus, provider: str, kind: str) -> None:
    assert classify_cli_failure(texts, status, provider=provider) == kind


def test_cli_failure_carries_exit_code_stderr_kind_and_the_error_text() -> None:
    err = cli_failure(
        ExitStatus(1),
        "boom on stderr\n",
        texts=["No conversation found with session ID: s1"],
        provider="p",
        model="m",
    )
    assert (err.exit_code, err.stderr, err.kind, err.provider, err.model) == (
        1,
        "boom on stderr\n",
        "session_not_found",
        "p",
        "m",
    )
    assert "exit status 1" in str(err) and "No conversation found" in str(err)


def test_error_messages_come_from_the_stream_and_stderr_noise_is_only_a_fallback() -> None:
    noise = "WARNING: proceeding, even though ...\nReading additional input from stdin...\n"
    err = cli_failure(ExitStatus(1), noise, texts=["turn failed: boom"], provider="codex", model="m")
    assert str(err).endswith(": turn failed: boom")
    err = cli_failure(
        ExitStatus(1), noise + "the real reason\n[STARTUP] Phase x\n", provider="codex", model="m"
    )
    assert str(err).endswith(": the real reason")
    assert "Reading additional input" not in str(
        cli_failure(ExitStatus(1), noise, provider="codex", model="m")
    )


def test_an_http_status_the_cli_reported_classifies_when_the_text_does_not() -> None:
    assert classify_cli_failure(["something"], ExitStatus(1), provider="claude_code", http_status=429) == (
        "rate_limit"
    )
    assert classify_cli_failure(["odd"], ExitStatus(1), provider="claude_code", http_status=500) == "server"


texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
objects = st.dictionaries(texts, json_values, max_size=4)
# Text that is never JSON: no value can start with these characters (and no whitespace).
garbage = st.text(
    alphabet=st.characters(categories=["L", "N", "P", "S"], exclude_characters='{["-0123456789tfn'),
    min_size=1,
    max_size=20,
)


@given(
    lines=st.lists(st.one_of(objects, garbage), max_size=12),
    torn=st.one_of(st.none(), garbage),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=8),
)
def test_framing_is_independent_of_how_the_bytes_are_split(
    lines: list[dict | str], torn: str | None, cuts: list[int]
) -> None:
    wire = b"".join((orjson.dumps(x) if isinstance(x, dict) else x.encode()) + b"\n" for x in lines)
    if torn is not None:
        wire += torn.encode()
    expected: list[dict | Diagnostic] = [
        x if isinstance(x, dict) else Diagnostic(x.strip(), n, "not_json")
        for n, x in enumerate((x for x in lines if not isinstance(x, str) or x.strip()), 1)
    ]
    if torn is not None and torn.strip():
        expected.append(Diagnostic(torn.strip(), len(expected) + 1, "torn"))
    framer = NDJSONFramer()
    items: list[dict | Diagnostic] = []
    edges = sorted({0, len(wire), *(c % (len(wire) + 1) for c in cuts)})
    for a, b in itertools.pairwise(edges):
        items += framer.feed(wire[a:b])
    items += framer.end()
    assert items == expected
