"""``turnlog fake-cli`` prints the same line shapes as the real CLIs (transcripts/ holds the real ones).

The transcripts were captured from the pinned real CLIs against the fake upstream APIs
(``TURNLOG_REALCLI_CAPTURE=1 pytest tests/realcli/test_real_cli_wire.py``). For each of them the
fake CLI is run on the equivalent script, and the two outputs must agree on:

- framing: the sequence of line kinds (type, subtype, item type, stream event and delta type...),
  runs of the same kind counted once, so one ``assistant`` line per finished block, the
  ``stream_event`` deltas with partial messages, Codex ``item.*`` events and Gemini deltas;
- fields: every field the fake prints exists on the real line of the same kind (nothing
  invented), and the fields turnlog reads are there;
- the exit status (Gemini: 42, the HTTP status mod 256) and Codex's cumulative usage.

This test needs no node: it runs everywhere, so the fakes stay honest on every machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

TRANSCRIPTS = Path(__file__).parent / "transcripts"
HELLO = "Hello from the fake upstream (user turns seen: {n})."
FILE_TEXT = "hello world file content 12345\n"

CLAUDE = ["-p", "hello", "--output-format", "stream-json", "--verbose"]
CODEX = ["exec", "--json", "--skip-git-repo-check", "--", "hello"]
GEMINI = ["-p", "hello", "--output-format", "stream-json"]

# Fields inside these are data, not shape (tool inputs, per-model maps, tool-specific results).
OPAQUE = {"input", "parameters", "modelUsage", "models", "tool_use_result", "model_usage_since_last_result",
          "memory_paths", "arguments", "changes"}  # fmt: skip
# Line kinds the fake does not print, and why.
IGNORED = {
    "claude": {"system/thinking_tokens"},  # a running estimate while the model thinks
    "codex": {"item.completed/error"},  # "Model metadata for `<model>` not found": a config artifact
    "gemini": set(),
}
# Fields turnlog reads: the fake must print them wherever the real line has them.
READ = {
    "claude": {"type", "subtype", "session_id", "message", "message.id", "message.content", "message.model",
               "message.usage", "event", "event.type", "event.delta", "event.index", "event.content_block",
               "result", "is_error", "usage", "total_cost_usd", "num_turns", "api_error_status",
               "terminal_reason", "error", "duration_ms", "stop_reason", "usage.input_tokens",
               "usage.output_tokens", "usage.cache_read_input_tokens", "message.usage.input_tokens"},
    "codex": {"type", "thread_id", "item", "item.id", "item.type", "item.text", "item.command",
              "item.aggregated_output", "item.exit_code", "item.status", "usage", "error", "error.message",
              "message", "usage.input_tokens", "usage.cached_input_tokens", "usage.output_tokens"},
    "gemini": {"type", "session_id", "model", "role", "content", "delta", "tool_name", "tool_id", "parameters",
               "status", "output", "error", "error.type", "error.message", "stats", "stats.input_tokens",
               "stats.output_tokens", "stats.cached", "stats.duration_ms"},
}  # fmt: skip


def kind(cli: str, line: dict[str, Any]) -> str:
    """The kind of a line: what framing is compared on."""
    name = str(line.get("type"))
    if cli == "claude":
        if name == "stream_event":
            event = line["event"]
            detail = event.get("delta", event.get("content_block", {})).get("type")
            return f"stream_event/{event['type']}" + (f"/{detail}" if detail else "")
        if name in ("assistant", "user"):
            block = line["message"]["content"][0]["type"]
            return f"{name}/{block}" + ("/error" if line.get("error") else "")
        if name == "result":
            return f"result/{line.get('subtype')}" + ("/is_error" if line.get("is_error") else "")
        return f"{name}/{line.get('subtype')}"
    if cli == "codex":
        return name + (f"/{line['item']['type']}" if "item" in line else "")
    if name == "message":
        return f"message/{line['role']}"
    if name in ("result", "tool_result"):
        return f"{name}/{line['status']}"
    return name


def paths(value: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted field paths of a line (list elements as ``[]``; opaque fields not entered)."""
    out = set()
    for key, item in value.items():
        path = f"{prefix}{key}"
        out.add(path)
        if key in OPAQUE:
            continue
        if isinstance(item, dict):
            out |= paths(item, f"{path}.")
        elif isinstance(item, list):
            for element in item:
                if isinstance(element, dict):
                    out |= paths(element, f"{path}[].")
    return out


def parse(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def framing(cli: str, lines: Iterable[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for line in lines:
        k = kind(cli, line)
        if k not in IGNORED[cli] and (not out or out[-1] != k):
            out.append(k)
    return out


def real(cli: str, name: str) -> tuple[list[dict[str, Any]], int]:
    stem = TRANSCRIPTS / f"{cli}.{name}"
    lines = parse(Path(f"{stem}.ndjson").read_text(encoding="utf-8"))
    return lines, int(Path(f"{stem}.exit").read_text().strip())


class FakeCLI:
    def __init__(self, cli: str, tmp: Path) -> None:
        self.cli = cli
        self.env = {
            **os.environ,
            "TURNLOG_FAKE_CLI_STATE": str(tmp / "state"),
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        }
        self.cwd = tmp

    def run(self, argv: list[str], script: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
        done = subprocess.run(
            [sys.executable, "-m", "turnlog.testing._fake_cli", self.cli, *argv],
            env={**self.env, "TURNLOG_FAKE_CLI_SCRIPT": json.dumps(script)},
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return parse(done.stdout), done.returncode


def text(value: str) -> dict[str, Any]:
    return {"text": value, "chunks": 3}


TOOL_REPLY = text("The tool returned: " + FILE_TEXT)
FAIL = {"steps": []}
SCENARIOS: dict[str, tuple[list[str], dict[str, Any]]] = {
    "claude.plain": (CLAUDE, {"steps": [text(HELLO.format(n=1))]}),
    "claude.tool-partial": (
        [*CLAUDE, "--include-partial-messages"],
        {
            "steps": [
                {"thinking": "The user wants the file."},
                text("I will read the file."),
                {"tool_use": {"name": "Read", "input": {"file_path": "/tmp/realcli/hello.txt"}}},
                {"tool_result": {"output": "1\thello world file content 12345\n2\t"}},
                TOOL_REPLY,
            ]
        },
    ),
    "claude.upstream-401": (CLAUDE, {"steps": [{"fail": {"kind": "auth"}}]}),
    "claude.upstream-429": (CLAUDE, {"steps": [{"fail": {"kind": "rate_limit"}}]}),
    "claude.upstream-400": (CLAUDE, {"steps": [{"fail": {"kind": "invalid_request"}}]}),
    "claude.upstream-529": (CLAUDE, {"steps": [{"fail": {"kind": "overloaded"}}]}),
    "codex.plain": (CODEX, {"steps": [text(HELLO.format(n=1))]}),
    "codex.tool": (
        CODEX,
        {
            "steps": [
                {"tool_use": {"name": "exec_command", "input": {"command": "/bin/bash -lc 'cat hello.txt'"}}},
                {"tool_result": {"output": FILE_TEXT}},
                TOOL_REPLY,
            ]
        },
    ),
    "codex.upstream-401": (CODEX, {"steps": [{"fail": {"kind": "auth"}}]}),
    "codex.upstream-429": (CODEX, {"steps": [{"fail": {"kind": "rate_limit"}}]}),
    "codex.upstream-400": (CODEX, {"steps": [{"fail": {"kind": "invalid_request"}}]}),
    "gemini.plain": (GEMINI, {"steps": [text(HELLO.format(n=1))]}),
    "gemini.tool": (
        GEMINI,
        {
            "steps": [
                {"tool_use": {"name": "read_file", "input": {"file_path": "hello.txt"}}},
                {"tool_result": {"output": ""}},
                TOOL_REPLY,
            ]
        },
    ),
    "gemini.upstream-400": (GEMINI, {"steps": [{"fail": {"kind": "bad_key"}}]}),
    "gemini.upstream-401": (GEMINI, {"steps": [{"fail": {"kind": "unauthenticated"}}]}),
    "gemini.upstream-429": (GEMINI, {"steps": [{"fail": {"kind": "rate_limit"}}]}),
}


def compare(cli: str, real_lines: list[dict[str, Any]], fake_lines: list[dict[str, Any]]) -> None:
    assert framing(cli, fake_lines) == framing(cli, real_lines)
    real_fields: dict[str, set[str]] = {}
    for line in real_lines:
        real_fields.setdefault(kind(cli, line), set()).update(paths(line))
    for line in fake_lines:
        k = kind(cli, line)
        have, want = paths(line), real_fields.get(k, set())
        invented = sorted(have - want)
        assert not invented, f"{cli} {k}: fields the real CLI does not print: {invented}"
        missing = sorted((want & READ[cli]) - have)
        assert not missing, f"{cli} {k}: fields turnlog reads that the fake leaves out: {missing}"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fake_cli_prints_the_real_shapes(scenario: str, tmp_path: Path) -> None:
    cli, name = scenario.split(".", 1)
    argv, script = SCENARIOS[scenario]
    real_lines, real_code = real(cli, name)
    fake_lines, fake_code = FakeCLI(cli, tmp_path).run(argv, script)
    assert fake_code == real_code
    compare(cli, real_lines, fake_lines)


@pytest.mark.parametrize(
    ("cli", "first", "resume"),
    [
        ("claude", CLAUDE, lambda sid: ["-p", "again", "--output-format", "stream-json", "--verbose", "--resume", sid]),
        ("codex", CODEX, lambda sid: ["exec", "--json", "--skip-git-repo-check", "resume", sid, "--", "again"]),
        ("gemini", GEMINI, lambda sid: ["-p", "again", "--output-format", "stream-json", "--resume", sid]),
    ],
)  # fmt: skip
def test_fake_cli_resume_has_the_real_shapes(cli: str, first: list[str], resume: Any, tmp_path: Path) -> None:
    fake = FakeCLI(cli, tmp_path)
    opened, _ = fake.run(first, {"steps": [text(HELLO.format(n=1))]})
    sid = opened[0].get("session_id") or opened[0].get("thread_id")
    resumed, code = fake.run(resume(sid), {"steps": [text(HELLO.format(n=2))]})
    real_lines, real_code = real(cli, "resume")
    assert code == real_code == 0
    compare(cli, real_lines, resumed)
    assert (resumed[0].get("session_id") or resumed[0].get("thread_id")) == sid


def test_codex_resumed_usage_is_cumulative_like_the_real_cli(tmp_path: Path) -> None:
    # The real transcripts: a tool run (two requests) then a resumed run (one more request).
    tool, _ = real("codex", "tool")
    resumed, _ = real("codex", "resume")
    first, second = tool[-1]["usage"], resumed[-1]["usage"]
    assert (first["input_tokens"], second["input_tokens"]) == (300, 600)  # 100 + 200, then + 300
    fake = FakeCLI("codex", tmp_path)
    opened, _ = fake.run(CODEX, {"usage": {"input_tokens": 300, "output_tokens": 30}})
    again = ["exec", "--json", "--skip-git-repo-check", "resume", opened[0]["thread_id"], "--", "again"]
    later, _ = fake.run(again, {"usage": {"input_tokens": 300, "output_tokens": 30}})
    assert (opened[-1]["usage"]["input_tokens"], later[-1]["usage"]["input_tokens"]) == (300, 600)


def test_gemini_unknown_session_exits_42_like_the_real_cli(tmp_path: Path) -> None:
    real_lines, real_code = real("gemini", "resume-unknown")
    fake_lines, fake_code = FakeCLI("gemini", tmp_path).run(
        [*GEMINI, "--resume", "00000000-0000-4000-8000-000000000000"], {"steps": []}
    )
    assert (fake_code, fake_lines) == (real_code, real_lines) == (42, [])
