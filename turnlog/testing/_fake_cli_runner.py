"""The shared runner of the fake CLIs: output and its record, sessions, script steps, argv parsing.

Each CLI module (``_fake_cli_claude``, ``_fake_cli_codex``, ``_fake_cli_gemini``) parses its real
argv with ``parse_argv`` and renders script steps in its own format through a ``Renderer``;
everything the three share lives here.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

__all__ = [
    "DEFAULT_MODELS",
    "ArgvError",
    "CLIExit",
    "Out",
    "Renderer",
    "Run",
    "Sessions",
    "load_script",
    "now_iso",
    "own_options",
    "parse_argv",
    "random_token",
    "selected_env",
    "stdin_kind",
    "uuid7_text",
]

_SCRIPT_KEYS = frozenset(
    {
        "model",
        "session_id",
        "delay",
        "usage",
        "cost_usd",
        "ignore_sigterm",
        "steps",
        "exit_code",
        "chunk_lines",
    }
)
_STEP_KEYS = frozenset(
    {
        "thinking", "text", "chunks", "tool_use", "tool_result", "warning", "stderr", "stderr_bytes",
        "raw", "torn", "sleep", "hang", "spawn_grandchild", "fail", "crash",
    }
)  # fmt: skip
_ENV_PREFIXES = ("TURNLOG_FAKE_CLI_", "GEMINI_CLI_", "CLAUDE_", "CODEX_", "ANTHROPIC_", "GEMINI_", "OPENAI_")
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
DEFAULT_MODELS = {"claude": "claude-sonnet-4-5-20250929", "codex": "gpt-5-codex", "gemini": "gemini-2.5-pro"}
_GRANDCHILDREN: list[subprocess.Popen[bytes]] = []  # kept referenced: they outlive nothing by design


class CLIExit(Exception):
    """Ends the run with the exit status the real CLI would return."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def now_iso() -> str:
    """The current UTC time as the CLIs print it (milliseconds, ``Z``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def uuid7_text() -> str:
    """A UUIDv7 as text (the id format of Codex threads)."""
    ms = time.time_ns() // 1_000_000
    value = (ms << 80) | (0x7 << 76) | (random.getrandbits(12) << 64) | (0b10 << 62) | random.getrandbits(62)
    return str(uuid.UUID(int=value))


def random_token(n: int) -> str:
    """``n`` random letters and digits (the tail of message and tool ids)."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(random.choice(alphabet) for _ in range(n))


class Out:
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


class Sessions:
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


class Renderer:
    """What one CLI prints for each script step; subclasses speak one CLI's format."""

    def __init__(self, ctx: Run) -> None:
        self.ctx = ctx
        self.out = ctx.out
        self.pending: list[dict[str, Any]] = []

    def start(self) -> None: ...
    def thinking(self, text: str) -> None: ...
    def text(self, part: str) -> None: ...

    def text_block(self, parts: list[str]) -> None:
        """One text step (a content block streamed in ``parts``); by default each part is printed."""
        for part in parts:
            self.text(part)

    def tool_use(self, name: str, tool_input: dict[str, Any], tool_id: str | None) -> None: ...
    def tool_result(self, call: dict[str, Any], output: Any, is_error: bool) -> None: ...
    def warning(self, message: str) -> None: ...

    def fail(self, kind: str, message: str | None) -> NoReturn:
        """Print the CLI's error for a failed run and exit (each CLI has its own)."""
        raise NotImplementedError

    def finish(self) -> int:
        """Print the end of a run; the exit code (each CLI has its own)."""
        raise NotImplementedError

    def take_pending(self, tool_id: str | None) -> dict[str, Any]:
        for i, call in enumerate(self.pending):
            if tool_id is None or call["id"] == tool_id:
                return self.pending.pop(i)
        return {"id": tool_id or "unknown", "name": "unknown", "input": {}}


class Run:
    """One fake CLI invocation: parsed argv, script, output, session."""

    def __init__(self, cli: str, script: dict[str, Any], out: Out, sessions: Sessions) -> None:
        self.cli = cli
        self.script = script
        self.out = out
        self.sessions = sessions
        self.started = time.monotonic()
        self.prompt = ""
        self.model = str(script.get("model") or DEFAULT_MODELS[cli])
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

    def play(self, renderer: Renderer) -> int:
        if not self.input_tokens:
            self.input_tokens = max(1, len(self.prompt) // 4)
        renderer.start()
        for step in self.script["steps"]:
            self._step(renderer, step)
        if not self.output_tokens:
            self.output_tokens = 1
        return renderer.finish()

    def _step(self, r: Renderer, step: dict[str, Any]) -> None:
        if "thinking" in step:
            r.thinking(str(step["thinking"]))
        elif "text" in step:
            parts = _split(step["text"], step.get("chunks"))
            for part in parts:
                self.output_tokens += max(1, len(part) // 4) if not self.script.get("usage") else 0
            r.text_block(parts)
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


def _generic_step(run: Run, step: dict[str, Any]) -> None:
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


def _die(out: Out, sig: signal.Signals) -> NoReturn:
    out.record(event="signal", signal=sig.name, self_inflicted=True)
    if sig != signal.SIGKILL:
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    while True:  # pragma: no cover - the signal ends the process
        time.sleep(1)


class ArgvError(Exception):
    """Argv the real CLI refuses: its message goes to stderr and ``code`` is the exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def parse_argv(
    argv: Sequence[str],
    *,
    flags: dict[str, str],
    values: dict[str, str],
    optional: dict[str, str] = {},  # noqa: B006 - read only
    unknown: Callable[[str], ArgvError],
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
                raise ArgvError(f"error: option '{name} <value>' argument missing", 1)
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


def load_script(value: str | None, cli: str) -> dict[str, Any]:
    """The script from a path or inline JSON (a default greeting when None); ``ValueError`` if invalid."""
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


def selected_env() -> dict[str, str]:
    """The provider-related environment variables, secrets reduced to ``<set>``, for the record."""
    selected = {}
    for key, value in os.environ.items():
        if key.startswith(_ENV_PREFIXES):
            secret = any(m in key for m in _SECRET_MARKERS) and not key.startswith("TURNLOG_FAKE_CLI_")
            selected[key] = "<set>" if secret else value
    return selected


def stdin_kind() -> str:
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


def own_options(args: list[str]) -> dict[str, str]:
    """Take the fake's own options off the front of ``args``."""
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
