"""Faithful fake Claude Code, Codex and Gemini CLIs for tests and demos.

Run as ``python -m turnlog.tools._fake_cli claude|codex|gemini [FAKE OPTIONS] REAL ARGV...``
or ``turnlog fake-cli ...``. The fake validates the real CLI's argv the way the real one
does, prints only what the real CLI prints (NDJSON on stdout, messages on stderr), exits
with the real exit statuses, and keeps sessions in a state directory so that a resume in a
later process finds them (an unknown id fails like the real CLI).

Fake options (before the real argv) and environment variables:

- ``--script FILE`` / ``TURNLOG_FAKE_CLI_SCRIPT`` (a path, or inline JSON starting with
  ``{``): what the agent does (see ``docs/providers.md`` for the format).
- ``--record FILE`` / ``TURNLOG_FAKE_CLI_RECORD``: append a JSON-lines record of the run:
  ``start`` (argv, cwd, pid, pgid, selected environment), every ``stdout`` line as it was
  flushed (with a timestamp), ``stderr`` text, ``grandchild`` pids, ``signal`` and ``exit``.
- ``--state-dir DIR`` / ``TURNLOG_FAKE_CLI_STATE``: where sessions are kept (default: a
  directory under the system temp dir).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["CLIS", "RECORD_ENV", "SCRIPT_ENV", "STATE_ENV", "main"]

SCRIPT_ENV = "TURNLOG_FAKE_CLI_SCRIPT"
RECORD_ENV = "TURNLOG_FAKE_CLI_RECORD"
STATE_ENV = "TURNLOG_FAKE_CLI_STATE"
CLIS = ("claude", "codex", "gemini")

_SCRIPT_KEYS = frozenset(
    {"model", "session_id", "delay", "usage", "cost_usd", "ignore_sigterm", "steps", "exit_code"}
)
_STEP_KEYS = frozenset(
    {
        "thinking", "text", "chunks", "tool_use", "tool_result", "warning", "stderr", "stderr_bytes",
        "raw", "torn", "sleep", "hang", "spawn_grandchild", "fail", "crash",
    }
)  # fmt: skip
_ENV_PREFIXES = ("TURNLOG_FAKE_CLI_", "GEMINI_CLI_", "CLAUDE_", "CODEX_", "ANTHROPIC_", "GEMINI_", "OPENAI_")
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
_DEFAULT_MODELS = {"claude": "claude-sonnet-4-5-20250929", "codex": "gpt-5-codex", "gemini": "gemini-2.5-pro"}
_GRANDCHILDREN: list[subprocess.Popen[bytes]] = []  # kept referenced: they outlive nothing by design


class _Exit(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _uuid7() -> str:
    ms = time.time_ns() // 1_000_000
    value = (ms << 80) | (0x7 << 76) | (random.getrandbits(12) << 64) | (0b10 << 62) | random.getrandbits(62)
    return str(uuid.UUID(int=value))


def _rand(n: int) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(random.choice(alphabet) for _ in range(n))


class _Out:
    """Writes stdout/stderr like the real CLI and appends each write to the record."""

    def __init__(self, record: str | None, delay: float) -> None:
        self.delay = delay
        self._fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if record else None

    def record(self, **entry: Any) -> None:
        if self._fd is None:
            return
        entry["t"] = time.time()
        # One write call per line (O_APPEND): lines of concurrent fakes never interleave.
        os.write(self._fd, (json.dumps(entry, ensure_ascii=False) + "\n").encode())

    def json(self, obj: dict[str, Any]) -> None:
        self.raw(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))

    def raw(self, text: str, *, newline: bool = True) -> None:
        if self.delay > 0:
            time.sleep(self.delay)
        try:
            sys.stdout.write(text + ("\n" if newline else ""))
            sys.stdout.flush()
        except BrokenPipeError:
            self._reader_gone(text)
        # Recorded only once the line has reached the pipe.
        self.record(event="stdout", line=text, **({} if newline else {"torn": True}))

    def err(self, text: str) -> None:
        try:
            sys.stderr.write(text if text.endswith("\n") else text + "\n")
            sys.stderr.flush()
        except BrokenPipeError:
            self._reader_gone(None)
        self.record(event="stderr", text=text)

    def _reader_gone(self, unsent: str | None) -> NoReturn:
        # Like the real CLIs: whoever read our output is gone, so stop (never linger).
        self.record(event="broken_pipe", unsent=unsent)
        os._exit(1)


class _Sessions:
    """Sessions of one CLI, one JSON file each, in the state directory."""

    def __init__(self, root: Path, cli: str) -> None:
        self.dir = root / cli
        self.dir.mkdir(parents=True, exist_ok=True)

    def _path(self, sid: str) -> Path:
        return self.dir / f"{sid.replace('/', '_')}.json"

    def get(self, sid: str) -> dict[str, Any] | None:
        path = self._path(sid)
        return json.loads(path.read_text()) if path.is_file() else None

    def save(self, data: dict[str, Any]) -> None:
        tmp = self._path(data["id"]).with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self._path(data["id"]))

    def all(self) -> list[dict[str, Any]]:
        items = [json.loads(p.read_text()) for p in self.dir.glob("*.json")]
        return sorted(items, key=lambda d: d["created"])


class _Renderer:
    """What one CLI prints for each script step; subclasses speak one CLI's format."""

    def __init__(self, ctx: _Run) -> None:
        self.ctx = ctx
        self.out = ctx.out
        self.pending: list[dict[str, Any]] = []

    def start(self) -> None: ...
    def thinking(self, text: str) -> None: ...
    def text(self, part: str) -> None: ...
    def tool_use(self, name: str, tool_input: dict[str, Any], tool_id: str | None) -> None: ...
    def tool_result(self, call: dict[str, Any], output: Any, is_error: bool) -> None: ...
    def warning(self, message: str) -> None: ...
    def fail(self, kind: str, message: str | None) -> NoReturn: ...
    def finish(self) -> int: ...

    def take_pending(self, tool_id: str | None) -> dict[str, Any]:
        for i, call in enumerate(self.pending):
            if tool_id is None or call["id"] == tool_id:
                return self.pending.pop(i)
        return {"id": tool_id or "unknown", "name": "unknown", "input": {}}


class _Run:
    """One fake CLI invocation: parsed argv, script, output, session."""

    def __init__(self, cli: str, script: dict[str, Any], out: _Out, sessions: _Sessions) -> None:
        self.cli = cli
        self.script = script
        self.out = out
        self.sessions = sessions
        self.started = time.monotonic()
        self.prompt = ""
        self.model = str(script.get("model") or _DEFAULT_MODELS[cli])
        self.session: dict[str, Any] = {}
        usage = script.get("usage") or {}
        self.input_tokens = int(usage.get("input_tokens", 0))
        self.output_tokens = int(usage.get("output_tokens", 0))
        self.tool_calls = 0

    def elapsed_ms(self) -> int:
        return int((time.monotonic() - self.started) * 1000)

    def open_session(self, sid: str, *, resumed: bool) -> None:
        existing = self.sessions.get(sid) if resumed else None
        self.session = existing or {"id": sid, "created": time.time(), "turns": 0, "prompts": []}
        self.session["prompts"].append(self.prompt)
        self.session["turns"] += 1
        self.session["cwd"] = os.getcwd()
        self.sessions.save(self.session)

    def play(self, renderer: _Renderer) -> int:
        if not self.input_tokens:
            self.input_tokens = max(1, len(self.prompt) // 4)
        renderer.start()
        for step in self.script["steps"]:
            self._step(renderer, step)
        if not self.output_tokens:
            self.output_tokens = 1
        return renderer.finish()

    def _step(self, r: _Renderer, step: dict[str, Any]) -> None:
        if "thinking" in step:
            r.thinking(str(step["thinking"]))
        elif "text" in step:
            for part in _split(step["text"], step.get("chunks")):
                self.output_tokens += max(1, len(part) // 4) if not self.script.get("usage") else 0
                r.text(part)
        elif "tool_use" in step:
            spec = step["tool_use"]
            self.tool_calls += 1
            r.tool_use(str(spec.get("name", "tool")), dict(spec.get("input") or {}), spec.get("id"))
        elif "tool_result" in step:
            spec = step["tool_result"]
            call = r.take_pending(spec.get("id"))
            r.tool_result(call, spec.get("output", ""), bool(spec.get("is_error", False)))
        elif "warning" in step:
            r.warning(str(step["warning"]))
        elif "fail" in step:
            spec = step["fail"]
            r.fail(str(spec.get("kind", "api")), spec.get("message"))
        else:
            _generic_step(self, step)


def _split(text: Any, chunks: Any) -> list[str]:
    if isinstance(text, list):
        return [str(t) for t in text]
    text = str(text)
    n = max(1, int(chunks or 1))
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _generic_step(run: _Run, step: dict[str, Any]) -> None:
    out = run.out
    if "stderr" in step:
        out.err(str(step["stderr"]))
    elif "stderr_bytes" in step:
        n = int(step["stderr_bytes"])
        block = ("x" * 1023 + "\n") * (n // 1024) + "y" * (n % 1024)
        sys.stderr.write(block + "\nEND-OF-STDERR\n")
        sys.stderr.flush()
        out.record(event="stderr", bytes=n)
    elif "raw" in step:
        out.raw(str(step["raw"]))
    elif "torn" in step:
        out.raw(str(step["torn"]), newline=False)
        _die(out, signal.SIGKILL)
    elif "sleep" in step:
        time.sleep(float(step["sleep"]))
    elif "hang" in step:
        out.record(event="hang")
        while True:
            time.sleep(3600)
    elif "spawn_grandchild" in step:
        spec = step["spawn_grandchild"] if isinstance(step["spawn_grandchild"], dict) else {}
        ignore = "signal.signal(signal.SIGTERM, signal.SIG_IGN); " if spec.get("ignore_sigterm") else ""
        code = f"import signal, time; {ignore}time.sleep(3600)"
        child = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _GRANDCHILDREN.append(child)
        out.record(event="grandchild", pid=child.pid)
    elif "crash" in step:
        spec = step["crash"]
        if isinstance(spec, dict) and "exit" in spec:
            out.record(event="exit", code=int(spec["exit"]))
            os._exit(int(spec["exit"]))
        name = spec.get("signal", "SIGKILL") if isinstance(spec, dict) else str(spec or "SIGKILL")
        _die(out, signal.Signals[name.upper()])


def _die(out: _Out, sig: signal.Signals) -> NoReturn:
    out.record(event="signal", signal=sig.name, self_inflicted=True)
    if sig != signal.SIGKILL:
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    while True:  # pragma: no cover - the signal ends the process
        time.sleep(1)


class _ArgvError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _parse(
    argv: Sequence[str],
    *,
    flags: dict[str, str],
    values: dict[str, str],
    optional: dict[str, str] = {},  # noqa: B006 - read only
    unknown: Callable[[str], _ArgvError],
) -> tuple[dict[str, Any], list[str]]:
    """A small commander/clap/yargs-like parser: options by alias, ``--x=v``, ``--``, positionals."""
    opts: dict[str, Any] = {}
    positional: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if tok == "--":
            positional += argv[i:]
            break
        if not tok.startswith("-") or tok == "-":
            positional.append(tok)
            continue
        name, eq, inline = tok.partition("=")
        if name in flags and not eq:
            opts[flags[name]] = True
        elif name in values:
            if eq:
                value = inline
            elif i < len(argv):
                value, i = argv[i], i + 1
            else:
                raise _ArgvError(f"error: option '{name} <value>' argument missing", 1)
            key = values[name]
            opts[key] = [*opts[key], value] if isinstance(opts.get(key), list) else value
            if key in ("config", "image"):
                opts[key] = opts[key] if isinstance(opts[key], list) else [opts[key]]
        elif name in optional:
            if eq:
                opts[optional[name]] = inline
            elif i < len(argv) and not argv[i].startswith("-"):
                opts[optional[name]], i = argv[i], i + 1
            else:
                opts[optional[name]] = True
        else:
            raise unknown(name)
    return opts, positional


# --------------------------------------------------------------------------------------- claude


class _Claude(_Renderer):
    def __init__(self, ctx: _Run, sid: str, fmt: str) -> None:
        super().__init__(ctx)
        self.sid = sid
        self.fmt = fmt
        self.msg_id = "msg_01" + _rand(22)
        self.turns = 1
        self.last_texts: list[str] = []

    def emit(self, obj: dict[str, Any]) -> None:
        if self.fmt == "stream-json":
            self.out.json(obj)
        elif obj["type"] == "result":
            if self.fmt == "json":
                self.out.json(obj)
            else:
                self.out.raw(str(obj.get("result", "")))

    def _usage(self) -> dict[str, Any]:
        return {
            "input_tokens": self.ctx.input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": self.ctx.output_tokens,
            "service_tier": "standard",
        }

    def _assistant(self, block: dict[str, Any]) -> None:
        message = {
            "model": self.ctx.model,
            "id": self.msg_id,
            "type": "message",
            "role": "assistant",
            "content": [block],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self._usage(),
        }
        self.emit(
            {
                "type": "assistant",
                "message": message,
                "parent_tool_use_id": None,
                "session_id": self.sid,
                "uuid": str(uuid.uuid4()),
            }
        )

    def start(self) -> None:
        self.emit(
            {
                "type": "system",
                "subtype": "init",
                "cwd": os.getcwd(),
                "session_id": self.sid,
                "tools": ["Task", "Bash", "Glob", "Grep", "Read", "Edit", "Write", "TodoWrite"],
                "mcp_servers": [],
                "model": self.ctx.model,
                "permissionMode": self.ctx.script.get("_permission_mode", "default"),
                "slash_commands": ["compact", "context", "cost", "init", "review"],
                "apiKeySource": "none",
                "claude_code_version": "2.1.109",
                "output_style": "default",
                "agents": ["general-purpose", "Explore", "Plan"],
                "skills": [],
                "plugins": [],
                "uuid": str(uuid.uuid4()),
            }
        )

    def thinking(self, text: str) -> None:
        self._assistant({"type": "thinking", "thinking": text, "signature": "Eq" + _rand(30)})

    def text(self, part: str) -> None:
        self.last_texts.append(part)
        self._assistant({"type": "text", "text": part})

    def tool_use(self, name: str, tool_input: dict[str, Any], tool_id: str | None) -> None:
        call = {"id": tool_id or "toolu_01" + _rand(22), "name": name, "input": tool_input}
        self.pending.append(call)
        self._assistant({"type": "tool_use", **call})

    def tool_result(self, call: dict[str, Any], output: Any, is_error: bool) -> None:
        block = {"tool_use_id": call["id"], "type": "tool_result", "content": output, "is_error": is_error}
        raw: Any = (
            {"stdout": output, "stderr": "", "interrupted": False, "isImage": False}
            if isinstance(output, str) and not is_error
            else (f"Error: {output}" if is_error else output)
        )
        self.emit(
            {
                "type": "user",
                "message": {"role": "user", "content": [block]},
                "parent_tool_use_id": None,
                "session_id": self.sid,
                "uuid": str(uuid.uuid4()),
                "timestamp": _now_iso(),
                "tool_use_result": raw,
            }
        )
        # The next assistant line answers a new API call: new message id, one more turn.
        self.turns += 1
        self.msg_id = "msg_01" + _rand(22)
        self.last_texts = []

    def warning(self, message: str) -> None:
        self.out.err(message)

    def _result(self, **fields: Any) -> dict[str, Any]:
        elapsed = self.ctx.elapsed_ms()
        cost = self.ctx.script.get("cost_usd")
        if cost is None:
            cost = round(self.ctx.input_tokens * 3e-6 + self.ctx.output_tokens * 15e-6, 7)
        base: dict[str, Any] = {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "duration_ms": elapsed,
            "duration_api_ms": int(elapsed * 0.9),
            "num_turns": self.turns,
            "result": "".join(self.last_texts),
            "stop_reason": "end_turn",
            "session_id": self.sid,
            "total_cost_usd": cost,
            "usage": {
                **self._usage(),
                "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
            },
            "modelUsage": {
                self.ctx.model: {
                    "inputTokens": self.ctx.input_tokens,
                    "outputTokens": self.ctx.output_tokens,
                    "cacheReadInputTokens": 0,
                    "cacheCreationInputTokens": 0,
                    "webSearchRequests": 0,
                    "costUSD": cost,
                    "contextWindow": 200000,
                    "maxOutputTokens": 64000,
                }
            },
            "permission_denials": [],
            "terminal_reason": "completed",
            "uuid": str(uuid.uuid4()),
        }
        base.update(fields)
        return {k: v for k, v in base.items() if v is not _DROP}

    def fail(self, kind: str, message: str | None) -> NoReturn:
        if kind == "max_turns":
            self.emit(
                self._result(
                    subtype="error_max_turns",
                    is_error=True,
                    result=_DROP,
                    stop_reason="tool_use",
                    terminal_reason="max_turns",
                    errors=[message or f"Reached maximum number of turns ({self.turns})"],
                )
            )
            raise _Exit(1)
        code, status, default = {
            "auth": ("authentication_failed", 401, "Not logged in · Please run /login"),
            "rate_limit": ("rate_limit", 429, "API Error: Rate limit reached"),
        }.get(kind, ("server_error", 500, "API Error: 500 Internal server error"))
        text = message or default
        self.emit(
            {
                "type": "assistant",
                "message": {
                    "id": str(uuid.uuid4()),
                    "model": "<synthetic>",
                    "role": "assistant",
                    "stop_reason": "stop_sequence",
                    "stop_sequence": "",
                    "type": "message",
                    "usage": {"input_tokens": 0, "output_tokens": 0},
                    "content": [{"type": "text", "text": text}],
                },
                "parent_tool_use_id": None,
                "session_id": self.sid,
                "uuid": str(uuid.uuid4()),
                "error": code,
            }
        )
        self.emit(
            self._result(
                is_error=True,
                result=text,
                stop_reason="stop_sequence",
                total_cost_usd=0,
                api_error_status=status,
                terminal_reason="api_error",
            )
        )
        raise _Exit(1)

    def finish(self) -> int:
        self.emit(self._result())
        return int(self.ctx.script.get("exit_code", 0))


_DROP = object()

_CLAUDE_FLAGS = {
    "-p": "print", "--print": "print", "--verbose": "verbose", "-c": "continue", "--continue": "continue",
    "--fork-session": "fork_session", "--include-partial-messages": "partial",
    "--dangerously-skip-permissions": "skip_permissions", "--replay-user-messages": "replay", "-d": "debug",
    "--debug": "debug",
}  # fmt: skip
_CLAUDE_VALUES = {
    "--output-format": "output_format", "--input-format": "input_format", "--model": "model",
    "--session-id": "session_id", "--max-turns": "max_turns", "--permission-mode": "permission_mode",
    "--append-system-prompt": "append_system_prompt", "--system-prompt": "system_prompt",
    "--allowedTools": "allowed_tools", "--disallowedTools": "disallowed_tools", "--max-budget-usd": "budget",
    "--add-dir": "add_dir", "--mcp-config": "mcp_config", "--settings": "settings", "--effort": "effort",
}  # fmt: skip


def _run_claude(argv: Sequence[str], run: _Run) -> int:
    out = run.out
    opts, positional = _parse(
        argv,
        flags=_CLAUDE_FLAGS,
        values=_CLAUDE_VALUES,
        optional={"-r": "resume", "--resume": "resume"},
        unknown=lambda name: _ArgvError(f"error: unknown option '{name}'", 1),
    )
    fmt = opts.get("output_format", "text")
    if not opts.get("print"):
        raise _ArgvError("fake claude: only print mode (-p) is supported", 1)
    if fmt not in ("text", "json", "stream-json"):
        raise _ArgvError(
            f"error: option '--output-format <format>' argument '{fmt}' is invalid. "
            "Allowed choices are text, json, stream-json.",
            1,
        )
    if fmt == "stream-json" and not opts.get("verbose"):
        raise _ArgvError("Error: When using --print, --output-format=stream-json requires --verbose", 1)
    if opts.get("partial") and fmt != "stream-json":
        raise _ArgvError(
            "Error: --include-partial-messages requires --print and --output-format=stream-json.", 1
        )
    if len(positional) > 1:
        raise _ArgvError(f"error: too many arguments. Expected 1 argument but got {len(positional)}.", 1)
    if not positional or not positional[0].strip():
        raise _ArgvError(
            "Error: Input must be provided either through stdin or as a prompt argument when using --print", 1
        )
    if opts.get("resume") is True:
        raise _ArgvError("Error: --resume requires a session id when used with --print", 1)
    run.prompt = positional[0]
    if opts.get("model"):
        run.model = str(opts["model"])
    if opts.get("permission_mode"):
        run.script["_permission_mode"] = opts["permission_mode"]
    resume = opts.get("resume")
    if resume is None and opts.get("continue"):
        # --continue picks the most recent conversation of the current directory.
        here = [d for d in run.sessions.all() if d.get("cwd") == os.getcwd()]
        resume = here[-1]["id"] if here else None
    if resume is not None and run.sessions.get(str(resume)) is None:
        missing = f"No conversation found with session ID: {resume}"
        if fmt != "text":
            out.json(
                {
                    "type": "result",
                    "subtype": "error_during_execution",
                    "duration_ms": 0,
                    "duration_api_ms": 0,
                    "is_error": True,
                    "num_turns": 0,
                    "session_id": resume,
                    "total_cost_usd": 0,
                    "usage": {"input_tokens": 0, "output_tokens": 0},
                    "modelUsage": {},
                    "permission_denials": [],
                    "uuid": str(uuid.uuid4()),
                    "errors": [missing],
                }
            )
        out.err(missing)
        return 1
    if resume is not None and not opts.get("fork_session"):
        sid = str(resume)
    else:
        sid = str(opts.get("session_id") or run.script.get("session_id") or uuid.uuid4())
    run.open_session(sid, resumed=resume is not None and not opts.get("fork_session"))
    return run.play(_Claude(run, sid, fmt))


# ---------------------------------------------------------------------------------------- codex


class _Codex(_Renderer):
    def __init__(self, ctx: _Run, thread_id: str, json_mode: bool) -> None:
        super().__init__(ctx)
        self.thread_id = thread_id
        self.json_mode = json_mode
        self.items = 0
        self.last_message = ""

    def emit(self, obj: dict[str, Any]) -> None:
        if self.json_mode:
            self.out.json(obj)

    def _item_id(self) -> str:
        self.items += 1
        return f"item_{self.items - 1}"

    def start(self) -> None:
        self.emit({"type": "thread.started", "thread_id": self.thread_id})
        self.emit({"type": "turn.started"})

    def thinking(self, text: str) -> None:
        self.emit(
            {"type": "item.completed", "item": {"id": self._item_id(), "type": "reasoning", "text": text}}
        )

    def text(self, part: str) -> None:
        self.last_message = part
        self.emit(
            {"type": "item.completed", "item": {"id": self._item_id(), "type": "agent_message", "text": part}}
        )

    def tool_use(self, name: str, tool_input: dict[str, Any], tool_id: str | None) -> None:
        if "changes" in tool_input:
            # file_change items are announced only when they complete.
            self.pending.append(
                {"id": self._item_id(), "type": "file_change", "changes": tool_input["changes"]}
            )
            return
        if "command" in tool_input:
            item: dict[str, Any] = {
                "id": self._item_id(),
                "type": "command_execution",
                "command": tool_input["command"],
                "aggregated_output": "",
                "exit_code": None,
                "status": "in_progress",
            }
        else:
            item = {
                "id": self._item_id(),
                "type": "mcp_tool_call",
                "server": str(tool_input.pop("server", "tools")),
                "tool": name,
                "arguments": tool_input,
                "result": None,
                "error": None,
                "status": "in_progress",
            }
        self.pending.append(item)
        self.emit({"type": "item.started", "item": item})

    def take_pending(self, tool_id: str | None) -> dict[str, Any]:
        return self.pending.pop(0) if self.pending else {"id": self._item_id(), "type": "mcp_tool_call"}

    def tool_result(self, call: dict[str, Any], output: Any, is_error: bool) -> None:
        item = dict(call)
        if item["type"] == "command_execution":
            item.update(aggregated_output=str(output), exit_code=1 if is_error else 0)
        elif item["type"] == "mcp_tool_call":
            if is_error:
                item.update(error={"message": str(output)})
            else:
                item.update(
                    result={"content": [{"type": "text", "text": str(output)}], "structured_content": None}
                )
        item["status"] = "failed" if is_error else "completed"
        self.emit({"type": "item.completed", "item": item})

    def warning(self, message: str) -> None:
        self.emit({"type": "error", "message": message})

    def fail(self, kind: str, message: str | None) -> NoReturn:
        if kind == "rate_limit":
            text = message or (
                "You've hit your usage limit. "
                "Visit https://chatgpt.com/codex/settings/usage to purchase more credits."
            )
            self.emit({"type": "error", "message": text})
        elif kind == "auth":
            text = (
                message
                or "unexpected status 401 Unauthorized: Missing bearer or basic authentication in header"
            )
        else:
            text = message or "stream disconnected before completion: Internal server error"
        self.emit({"type": "turn.failed", "error": {"message": text}})
        if not self.json_mode:
            self.out.err(f"ERROR: {text}")
        raise _Exit(1)

    def finish(self) -> int:
        self.emit(
            {
                "type": "turn.completed",
                "usage": {
                    "input_tokens": self.ctx.input_tokens,
                    "cached_input_tokens": 0,
                    "output_tokens": self.ctx.output_tokens,
                },
            }
        )
        if not self.json_mode:
            self.out.raw(self.last_message)
        return int(self.ctx.script.get("exit_code", 0))


_CODEX_FLAGS = {
    "--json": "json", "--experimental-json": "json", "--skip-git-repo-check": "skip_git",
    "--ephemeral": "ephemeral", "--full-auto": "full_auto", "--oss": "oss", "--last": "last",
    "--dangerously-bypass-approvals-and-sandbox": "bypass",
}  # fmt: skip
_CODEX_VALUES = {
    "-m": "model", "--model": "model", "-s": "sandbox", "--sandbox": "sandbox", "-C": "cd", "--cd": "cd",
    "-c": "config", "--config": "config", "-p": "profile", "--profile": "profile", "-i": "image",
    "--image": "image", "-o": "output_last_message", "--output-last-message": "output_last_message",
    "--output-schema": "output_schema", "--color": "color", "--enable": "enable", "--disable": "disable",
}  # fmt: skip


def _clap_unknown(name: str) -> _ArgvError:
    return _ArgvError(
        f"error: unexpected argument '{name}' found\n\n"
        f"  tip: to pass '{name}' as a value, use '-- {name}'\n\n"
        "Usage: codex exec [OPTIONS] [PROMPT]\n\nFor more information, try '--help'.",
        2,
    )


def _in_git_repo(path: Path) -> bool:
    return any((p / ".git").exists() for p in [path, *path.parents])


def _run_codex(argv: Sequence[str], run: _Run) -> int:
    if not argv or argv[0] not in ("exec", "e"):
        raise _ArgvError("fake codex: only the exec subcommand is supported", 2)
    opts, positional = _parse(argv[1:], flags=_CODEX_FLAGS, values=_CODEX_VALUES, unknown=_clap_unknown)
    if opts.get("sandbox") not in (None, "read-only", "workspace-write", "danger-full-access"):
        raise _ArgvError(
            f"error: invalid value '{opts['sandbox']}' for '--sandbox <SANDBOX_MODE>'\n"
            "  [possible values: read-only, workspace-write, danger-full-access]",
            2,
        )
    if opts.get("full_auto"):
        run.out.err("warning: `--full-auto` is deprecated; use `--sandbox workspace-write` instead.")
    resume: str | None = None
    if positional and positional[0] == "resume":
        positional = positional[1:]
        if not opts.get("last"):
            if not positional:
                raise _ArgvError(
                    "error: the following required arguments were not provided:\n  <SESSION_ID>", 2
                )
            resume, positional = positional[0], positional[1:]
    if len(positional) > 1:
        raise _clap_unknown(positional[1])
    if not positional or positional[0] in ("", "-"):
        raise _ArgvError(
            "No prompt provided. Either specify one as an argument or pipe the prompt into stdin.", 1
        )
    cwd = Path(opts.get("cd") or os.getcwd())
    if not opts.get("skip_git") and not _in_git_repo(cwd.resolve()):
        raise _ArgvError("Not inside a trusted directory and --skip-git-repo-check was not specified.", 1)
    run.prompt = positional[0]
    if opts.get("model"):
        run.model = str(opts["model"])
    if opts.get("last"):
        latest = run.sessions.all()
        if not latest:
            raise _ArgvError("ERROR: No saved session found. Run `codex` to start a new session.", 1)
        resume = latest[-1]["id"]
    if resume is not None and run.sessions.get(resume) is None:
        raise _ArgvError(
            f"ERROR: No saved session found with ID {resume}. "
            "Run `codex resume` without an ID to choose from existing sessions.",
            1,
        )
    thread_id = resume or str(run.script.get("session_id") or _uuid7())
    run.open_session(thread_id, resumed=resume is not None)
    return run.play(_Codex(run, thread_id, bool(opts.get("json"))))


# --------------------------------------------------------------------------------------- gemini


class _Gemini(_Renderer):
    def __init__(self, ctx: _Run, sid: str, fmt: str) -> None:
        super().__init__(ctx)
        self.sid = sid
        self.fmt = fmt
        self.texts: list[str] = []

    def emit(self, obj: dict[str, Any]) -> None:
        if self.fmt == "stream-json":
            self.out.json({"type": obj.pop("type"), "timestamp": _now_iso(), **obj})

    def _stats(self, *, zero: bool = False) -> dict[str, Any]:
        i, o = (0, 0) if zero else (self.ctx.input_tokens, self.ctx.output_tokens)
        per_model = {"total_tokens": i + o, "input_tokens": i, "output_tokens": o, "cached": 0, "input": i}
        return {
            **per_model,
            "duration_ms": 0 if zero else self.ctx.elapsed_ms(),
            "tool_calls": 0 if zero else self.ctx.tool_calls,
            "models": {} if zero else {self.ctx.model: per_model},
        }

    def start(self) -> None:
        self.emit({"type": "init", "session_id": self.sid, "model": self.ctx.model})
        self.emit({"type": "message", "role": "user", "content": self.ctx.prompt})

    def text(self, part: str) -> None:
        self.texts.append(part)
        self.emit({"type": "message", "role": "assistant", "content": part, "delta": True})

    def tool_use(self, name: str, tool_input: dict[str, Any], tool_id: str | None) -> None:
        call = {"id": tool_id or f"{name}-{int(time.time() * 1000)}-{_rand(12)}", "name": name}
        self.pending.append(call)
        self.emit({"type": "tool_use", "tool_name": name, "tool_id": call["id"], "parameters": tool_input})

    def tool_result(self, call: dict[str, Any], output: Any, is_error: bool) -> None:
        if is_error:
            self.emit(
                {
                    "type": "tool_result",
                    "tool_id": call["id"],
                    "status": "error",
                    "error": {"type": "tool_execution_error", "message": str(output)},
                }
            )
        else:
            self.emit(
                {"type": "tool_result", "tool_id": call["id"], "status": "success", "output": str(output)}
            )

    def warning(self, message: str) -> None:
        self.emit({"type": "error", "severity": "warning", "message": message})

    def fail(self, kind: str, message: str | None) -> NoReturn:
        error_type, code, default = {
            "auth": (
                "FatalAuthenticationError",
                41,
                "Failed to login. Message: Request had invalid authentication",
            ),
            "max_turns": (
                "FatalTurnLimitedError",
                53,
                "Reached max session turns for this session. Increase the number of turns by specifying "
                "maxSessionTurns in settings.json.",
            ),
            "rate_limit": ("Error", 1, "[API Error: Quota exceeded for quota metric (status 429)]"),
        }.get(kind, ("Error", 1, "[API Error: 500 Internal error encountered.]"))
        text = message or default
        self.emit(
            {
                "type": "result",
                "status": "error",
                "error": {"type": error_type, "message": text},
                "stats": self._stats(zero=True),
            }
        )
        if self.fmt != "stream-json":
            self.out.err(text)
        raise _Exit(code)

    def finish(self) -> int:
        self.emit({"type": "result", "status": "success", "stats": self._stats()})
        if self.fmt == "json":
            self.out.json({"session_id": self.sid, "response": "".join(self.texts), "stats": self._stats()})
        elif self.fmt == "text":
            self.out.raw("".join(self.texts))
        return int(self.ctx.script.get("exit_code", 0))


_GEMINI_FLAGS = {
    "-y": "yolo", "--yolo": "yolo", "-d": "debug", "--debug": "debug", "--skip-trust": "skip_trust",
    "-s": "sandbox", "--sandbox": "sandbox", "--screen-reader": "screen_reader",
}  # fmt: skip
_GEMINI_VALUES = {
    "-p": "prompt", "--prompt": "prompt", "-m": "model", "--model": "model", "-o": "output_format",
    "--output-format": "output_format", "-r": "resume", "--resume": "resume",
    "--approval-mode": "approval_mode",
    "--include-directories": "include_directories", "-e": "extensions", "--extensions": "extensions",
}  # fmt: skip


def _run_gemini(argv: Sequence[str], run: _Run) -> int:
    opts, positional = _parse(
        argv,
        flags=_GEMINI_FLAGS,
        values=_GEMINI_VALUES,
        unknown=lambda name: _ArgvError(f"Unknown argument: {name.lstrip('-')}", 1),
    )
    fmt = opts.get("output_format", "text")
    if fmt not in ("text", "json", "stream-json"):
        raise _ArgvError(
            f'Invalid values:\n  Argument: output-format, Given: "{fmt}", '
            'Choices: "text", "json", "stream-json"',
            1,
        )
    if opts.get("approval_mode") not in (None, "default", "auto_edit", "yolo", "plan"):
        raise _ArgvError(f'Invalid values:\n  Argument: approval-mode, Given: "{opts["approval_mode"]}"', 1)
    prompt = opts.get("prompt") or " ".join(positional)
    if not prompt.strip():
        raise _ArgvError("fake gemini: interactive mode is not supported; pass -p PROMPT", 42)
    trusted = os.environ.get("GEMINI_CLI_TRUST_WORKSPACE") == "true" or opts.get("skip_trust")
    if not trusted:
        raise _ArgvError(
            "Gemini CLI is not running in a trusted directory. To proceed, either use `--skip-trust`, "
            "set the `GEMINI_CLI_TRUST_WORKSPACE=true` environment variable, or trust this directory "
            "in interactive mode.",
            55,
        )
    run.prompt = prompt
    if opts.get("model"):
        run.model = str(opts["model"])
    resume = opts.get("resume")
    found: dict[str, Any] | None = None
    if resume is not None:
        sessions = run.sessions.all()
        if resume == "latest":
            found = sessions[-1] if sessions else None
        elif str(resume).isdigit():
            index = int(resume)
            found = sessions[index - 1] if 1 <= index <= len(sessions) else None
        else:
            found = run.sessions.get(str(resume))
        if found is None:
            raise _ArgvError(
                f'Error resuming session: Invalid session identifier "{resume}". '
                "Use --list-sessions to see available sessions.",
                1,
            )
    sid = found["id"] if found else str(run.script.get("session_id") or uuid.uuid4())
    run.open_session(sid, resumed=found is not None)
    return run.play(_Gemini(run, sid, fmt))


# ----------------------------------------------------------------------------------------- main


def _load_script(value: str | None, cli: str) -> dict[str, Any]:
    if not value:
        return {"steps": [{"text": f"Hello from the fake {cli} CLI."}]}
    text = value if value.lstrip().startswith("{") else Path(value).read_text()
    script = json.loads(text)
    if not isinstance(script, dict):
        raise ValueError("the script must be a JSON object")
    unknown = sorted(set(script) - _SCRIPT_KEYS)
    if unknown:
        raise ValueError(f"unknown script keys {unknown}; known: {sorted(_SCRIPT_KEYS)}")
    steps = script.setdefault("steps", [{"text": f"Hello from the fake {cli} CLI."}])
    for n, step in enumerate(steps, 1):
        if not isinstance(step, dict) or not step or not set(step) <= _STEP_KEYS:
            raise ValueError(f"step {n} is not a known step: {step!r}; step keys: {sorted(_STEP_KEYS)}")
    return script


def _selected_env() -> dict[str, str]:
    selected = {}
    for key, value in os.environ.items():
        if key.startswith(_ENV_PREFIXES):
            secret = any(m in key for m in _SECRET_MARKERS) and not key.startswith("TURNLOG_FAKE_CLI_")
            selected[key] = "<set>" if secret else value
    return selected


def _stdin_kind() -> str:
    """What standard input is: ``/dev/null``, ``pipe``, ``tty``, ``file`` or ``closed``."""
    try:
        target = os.readlink("/proc/self/fd/0")
    except OSError:
        target = ""
    if target == os.devnull:
        return os.devnull
    if target.startswith("pipe:"):
        return "pipe"
    try:
        return "tty" if os.isatty(0) else ("file" if target else "unknown")
    except OSError:
        return "closed"


def _own_options(args: list[str]) -> dict[str, str]:
    own: dict[str, str] = {}
    names = {"--script": "script", "--record": "record", "--state-dir": "state_dir"}
    while args:
        name, eq, value = args[0].partition("=")
        if name not in names:
            break
        args.pop(0)
        if not eq:
            if not args:
                raise ValueError(f"{name} needs a value")
            value = args.pop(0)
        own[names[name]] = value
    return own


def main(argv: Sequence[str] | None = None) -> int:
    """Run a fake CLI: ``claude|codex|gemini [--script F] [--record F] [--state-dir D] REAL ARGV...``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in CLIS:
        sys.stderr.write(f"usage: fake-cli {{{','.join(CLIS)}}} [--script FILE] [--record FILE] ARGV...\n")
        return 2
    cli = args.pop(0)
    try:
        own = _own_options(args)
        script = _load_script(own.get("script") or os.environ.get(SCRIPT_ENV), cli)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"fake-cli: invalid script or options: {exc}\n")
        return 2
    out = _Out(own.get("record") or os.environ.get(RECORD_ENV), float(script.get("delay", 0.0)))
    out.record(
        event="start",
        cli=cli,
        argv=args,
        cwd=os.getcwd(),
        pid=os.getpid(),
        pgid=os.getpgid(0),
        env=_selected_env(),
        stdin=_stdin_kind(),
    )

    def on_term(signum: int, frame: object) -> None:
        out.record(event="signal", signal="SIGTERM")
        os._exit(143)

    signal.signal(signal.SIGTERM, signal.SIG_IGN if script.get("ignore_sigterm") else on_term)
    state = Path(
        own.get("state_dir") or os.environ.get(STATE_ENV) or Path(tempfile.gettempdir()) / "turnlog-fake-cli"
    )
    run = _Run(cli, script, out, _Sessions(state, cli))
    runner = {"claude": _run_claude, "codex": _run_codex, "gemini": _run_gemini}[cli]
    try:
        code = runner(args, run)
    except _ArgvError as exc:
        out.err(str(exc))
        code = exc.code
    except _Exit as exc:
        code = exc.code
    out.record(event="exit", code=code)
    return code


if __name__ == "__main__":
    sys.exit(main())
