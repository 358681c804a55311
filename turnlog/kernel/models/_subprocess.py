"""Running a CLI agent as a child process and reading its NDJSON output.

A ``CLIProcess`` spawns the executable in its own session (so in its own process group,
which it leads), reads standard output as newline-delimited JSON, captures standard error
in a background thread with a cap (the tail is kept), and on every way out of its
``async with`` block terminates the whole process group: SIGTERM, a short grace period,
then SIGKILL. Grandchildren the agent started (shells, dev servers) go with it. The CLI
never outlives this process either: it is spawned with a parent-death signal and watched
by a group watchdog (``_orphans``), so a kill -9 of this process takes the whole group down.

Framing is line-based and tolerant: a read may end in the middle of a line, a line that is
not a JSON object becomes a ``Diagnostic`` (it never blocks the lines after it), and a last
line cut off at end of file is reported as a torn ``Diagnostic``, not an exception.

Example::

    async with CLIProcess(["claude", "-p", "hi", "--output-format", "stream-json", "--verbose"]) as proc:
        async for item in proc:
            ...  # dict (one JSON object) or Diagnostic
        status = await proc.wait_exit()
    if status.failed:
        raise cli_failure(status, proc.stderr, texts=[], provider="claude_code", model="")
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import orjson

from turnlog._errors import UsageError

from ._cli_errors import ExitStatus, classify_cli_failure, cli_failure
from ._cli_sessions import cli_home
from ._errors import CLIError, CLINotFound
from ._orphans import GroupWatchdog, spawn, wait_process
from ._secrets import Scrubber
from ._types import StreamChunk

__all__ = [
    "CLIAgentModel",
    "CLIEventParser",
    "CLIProcess",
    "Diagnostic",
    "ExitStatus",
    "NDJSONFramer",
    "classify_cli_failure",
    "cli_failure",
    "resolve_executable",
    "usage_dict",
]

_READ_SIZE = 65536
_PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """A stdout line that is not a JSON object.

    Attributes:
        line: The text of the line (undecodable bytes replaced), without its newline.
        line_number: 1-based number of the line in the process's standard output.
        reason: ``not_json``, ``not_object``, ``torn`` (cut off at end of file) or ``too_long``.
    """

    line: str
    line_number: int
    reason: str


def resolve_executable(
    env_var: str,
    default: str,
    *,
    provider: str,
    override: str | Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """Find the command line that starts a CLI.

    Args:
        env_var: Environment variable that may name the executable, e.g. ``TURNLOG_CLAUDE_BIN``.
            Its value is split like a shell would (``"python -m turnlog.tools._fake_cli claude"``).
        default: The executable name looked up on PATH when neither override nor variable is set.
        provider: Provider name for the error.
        override: An explicit command (a string split like a shell would, or an argv list).
        environ: The environment to read (default ``os.environ``).

    Returns:
        The argv prefix, its first element resolved to an absolute path.

    Raises:
        CLINotFound: The executable does not exist or is not executable.
    """
    env = os.environ if environ is None else environ
    if override is not None:
        parts = shlex.split(override) if isinstance(override, str) else list(override)
        source = "the configured executable"
    elif env.get(env_var):
        parts = shlex.split(env[env_var])
        source = f"${env_var}"
    else:
        parts = [default]
        source = "PATH"
    if not parts:
        raise CLINotFound(f"{source} is empty", provider=provider, kind="not_found")
    found = shutil.which(parts[0], path=env.get("PATH"))
    if found is None:
        raise CLINotFound(
            f"{provider}: executable {parts[0]!r} not found (looked up from {source}); install the CLI "
            f"or set {env_var} to its path or to a command line",
            provider=provider,
            kind="not_found",
        )
    return [found, *parts[1:]]


class NDJSONFramer:
    """Splits a byte stream into JSON objects and ``Diagnostic`` items; pure, no I/O.

    Bytes may arrive in any pieces: ``feed`` returns the items of every line completed so
    far and keeps the rest; ``end`` reports what is left at end of file (a torn line).

    Args:
        max_line_bytes: A line longer than this is dropped and reported as ``too_long``.
    """

    def __init__(self, max_line_bytes: int = 16 * 1024 * 1024) -> None:
        self._max = max_line_bytes
        self._buffer = bytearray()
        self._skipping = False  # inside an oversized line: drop bytes up to its newline
        self._line_number = 0

    def feed(self, data: bytes) -> list[dict[str, Any] | Diagnostic]:
        """Add bytes; return the items of the lines they complete."""
        buf = self._buffer
        buf += data
        items: list[dict[str, Any] | Diagnostic] = []
        start = 0
        while (newline := buf.find(b"\n", start)) >= 0:
            raw = bytes(buf[start:newline])
            start = newline + 1
            if self._skipping:
                self._skipping = False
                continue
            item = self._decode(raw, torn=False)
            if item is not None:
                items.append(item)
        del buf[:start]
        if self._skipping:
            buf.clear()
        elif len(buf) > self._max:
            self._line_number += 1
            items.append(Diagnostic(f"[{len(buf)}+ bytes without a newline]", self._line_number, "too_long"))
            buf.clear()
            self._skipping = True
        return items

    def end(self) -> list[dict[str, Any] | Diagnostic]:
        """End of file: the unterminated last line, if any (an object, or a ``torn`` diagnostic)."""
        raw = bytes(self._buffer)
        self._buffer.clear()
        if self._skipping or not raw:
            return []
        item = self._decode(raw, torn=True)
        return [item] if item is not None else []

    def _decode(self, raw: bytes, *, torn: bool) -> dict[str, Any] | Diagnostic | None:
        stripped = raw.strip()
        if not stripped:
            return None
        self._line_number += 1
        try:
            value = orjson.loads(stripped)
        except orjson.JSONDecodeError:
            text = stripped.decode("utf-8", errors="replace")
            return Diagnostic(text, self._line_number, "torn" if torn else "not_json")
        if not isinstance(value, dict):
            return Diagnostic(stripped.decode("utf-8", errors="replace"), self._line_number, "not_object")
        return value


class _StderrTail:
    """Drains a pipe in a thread, keeping at most ``cap`` bytes (the tail).

    A thread, not a task: the reader must keep running while the consumer of the stream
    is suspended, and it must be joinable from whichever task finally closes the stream
    (an abandoned async generator is closed by a different task).
    """

    def __init__(self, fd: int, cap: int) -> None:
        self._fd = fd
        self._cap = cap
        self._buf = bytearray()
        self.total = 0
        self._thread = threading.Thread(target=self._run, name="turnlog-cli-stderr", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while chunk := os.read(self._fd, _READ_SIZE):
                self.total += len(chunk)
                self._buf += chunk
                if len(self._buf) > self._cap:
                    del self._buf[: len(self._buf) - self._cap]
        except OSError:
            pass  # the fd was closed under us at shutdown: what was read is kept
        finally:
            os.close(self._fd)

    async def join(self, wait_s: float) -> None:
        await anyio.to_thread.run_sync(self._thread.join, wait_s, abandon_on_cancel=True)

    def text(self) -> str:
        tail = bytes(self._buf).decode("utf-8", errors="replace")
        if self.total > len(self._buf):
            dropped = self.total - len(self._buf)
            return f"[stderr truncated: first {dropped} of {self.total} bytes dropped]\n{tail}"
        return tail


class CLIProcess:
    """A CLI child process whose standard output is read as NDJSON.

    Use it as an async context manager and iterate it: each item is a ``dict`` (one JSON
    object line) or a ``Diagnostic``. Leaving the block by any path (end of output, an
    exception, cancellation, a timeout, or an abandoned generator being closed) terminates
    the whole process group and reaps the child.

    Args:
        argv: The full command line.
        env: The complete environment of the child (default: inherit).
        cwd: Working directory of the child.
        stderr_cap: Bytes of standard error kept (the tail).
        terminate_grace: Seconds between SIGTERM and SIGKILL.
        exit_timeout: Seconds to wait for the child to exit after it closed its output.
        max_line_bytes: Longer stdout lines are dropped and reported as a ``too_long`` diagnostic.
        provider: Provider name used in errors.
        pdeathsig: Ask for SIGKILL of the child when this process dies (Linux).
        watchdog: Start a watchdog process that kills the child's whole process group when
            this process dies (see ``_orphans``).
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stderr_cap: int = 65536,
        terminate_grace: float = 2.0,
        exit_timeout: float = 10.0,
        max_line_bytes: int = 16 * 1024 * 1024,
        provider: str = "",
        pdeathsig: bool = True,
        watchdog: bool = True,
    ) -> None:
        self.argv = list(argv)
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._stderr_cap = stderr_cap
        self._grace = terminate_grace
        self._exit_timeout = exit_timeout
        self._provider = provider
        self._pdeathsig = pdeathsig
        self._watchdog_on = watchdog
        self._watchdog: GroupWatchdog | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: _StderrTail | None = None
        self._framer = NDJSONFramer(max_line_bytes)
        self._pending: deque[dict[str, Any] | Diagnostic] = deque()
        self._eof = False
        self._terminated_by_us = False
        self._status: ExitStatus | None = None

    @property
    def pid(self) -> int:
        """The child's pid (also its process group id)."""
        if self._proc is None:
            raise RuntimeError("the process has not been started")
        return self._proc.pid

    @property
    def stderr(self) -> str:
        """The captured standard error (the tail, at most ``stderr_cap`` bytes plus a note)."""
        return self._stderr.text() if self._stderr is not None else ""

    async def __aenter__(self) -> CLIProcess:
        read_fd, write_fd = os.pipe()
        try:
            self._proc = await spawn(
                self.argv, cwd=self._cwd, env=self._env, stderr_fd=write_fd, pdeathsig=self._pdeathsig
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            os.close(read_fd)
            raise CLINotFound(
                f"{self._provider}: cannot start {self.argv[0]!r}: {exc}",
                provider=self._provider,
                kind="not_found",
            ) from exc
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        self._stderr = _StderrTail(read_fd, self._stderr_cap)
        if self._watchdog_on:
            try:
                self._watchdog = await GroupWatchdog.start(self._proc.pid)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._shutdown()
                raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # Shielded: cleanup must finish even when the block is left by cancellation.
        with anyio.CancelScope(shield=True):
            await self._shutdown()

    def __aiter__(self) -> CLIProcess:
        return self

    async def __anext__(self) -> dict[str, Any] | Diagnostic:
        item = await self._next_item()
        if item is None:
            raise StopAsyncIteration
        return item

    async def _next_item(self) -> dict[str, Any] | Diagnostic | None:
        while not self._pending:
            if self._eof:
                return None
            data = await self._read()
            if not data:
                self._eof = True
                self._pending.extend(self._framer.end())
                continue
            self._pending.extend(self._framer.feed(data))
        return self._pending.popleft()

    async def _read(self) -> bytes:
        """The next bytes of standard output (b"" at end of file)."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while True:
            try:
                return os.read(fd, _READ_SIZE)
            except BlockingIOError:
                await anyio.wait_readable(fd)
            except OSError:
                return b""

    async def wait_exit(self) -> ExitStatus:
        """Wait (at most ``exit_timeout`` seconds) for the child to exit after its output ended.

        A child that keeps running with its output closed is terminated; the status then says
        ``terminated_by_us``.
        """
        assert self._proc is not None
        with anyio.move_on_after(self._exit_timeout):
            await wait_process(self._proc)
        if self._proc.returncode is None:
            self._terminated_by_us = True
            with anyio.CancelScope(shield=True):
                await self._shutdown()
        return self._exit_status()

    def _exit_status(self) -> ExitStatus:
        assert self._proc is not None
        code = self._proc.returncode
        if code is not None and code < 0:
            return ExitStatus(None, -code, self._terminated_by_us)
        return ExitStatus(code, None, self._terminated_by_us)

    async def _shutdown(self) -> None:
        proc = self._proc
        if proc is None or self._status is not None:
            return
        pgid = proc.pid
        _signal_group(pgid, signal.SIGTERM)
        with anyio.move_on_after(self._grace):
            await wait_process(proc)
            # Grandchildren are not our children, so nothing can be awaited: poll the group.
            while _group_alive(pgid):  # noqa: ASYNC110
                await anyio.sleep(0.02)
        if proc.returncode is None or _group_alive(pgid):
            _signal_group(pgid, signal.SIGKILL)
            # SIGKILL is not instant: wait until the members are really gone (bounded).
            with anyio.move_on_after(max(self._grace, 1.0)):
                while _group_alive(pgid):  # noqa: ASYNC110
                    await anyio.sleep(0.01)
        await wait_process(proc)
        if proc.stdout is not None:
            proc.stdout.close()
        if self._watchdog is not None:
            await self._watchdog.release()
        if self._stderr is not None:
            await self._stderr.join(2.0)
        self._status = self._exit_status()


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """True while some process of the group is alive (zombies awaiting a reaper do not count)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if not _PROC.is_dir():
        return True
    return bool(_live_group_members(pgid))


def _live_group_members(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes in process group ``pgid``, read from /proc."""
    members: list[int] = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may contain spaces and parentheses: the fields start after the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        state, group = fields[0], int(fields[2])
        if group == pgid and state not in ("Z", "X"):
            members.append(int(entry.name))
    return members


class CLIEventParser:
    """Turns one CLI's NDJSON events into ``StreamChunk`` objects (one parser per run).

    Subclasses implement ``feed``; they record the provider session id, the error texts
    seen (used to classify a failed exit) and whether the terminal event arrived.

    Attributes:
        provider: The provider name.
        started: ``time.monotonic()`` when the process was started.
        session_id: The provider session id once the stream announced it.
        error_texts: Error messages of the stream, oldest first.
        http_status: An upstream HTTP error status the CLI reported, if any.
        finished: True once the CLI's terminal event (result / turn end) arrived.
    """

    def __init__(self, provider: str, started: float) -> None:
        self.provider = provider
        self.started = started
        self.session_id: str | None = None
        self.error_texts: list[str] = []
        self.http_status: int | None = None
        self.finished = False

    def feed(self, event: dict[str, Any]) -> list[StreamChunk]:
        """The chunks one JSON event becomes (often one, sometimes none or two)."""
        raise NotImplementedError

    def elapsed_ms(self) -> float:
        """Milliseconds since the process was started."""
        return round((time.monotonic() - self.started) * 1000.0, 3)

    def error_chunk(self, text: str, **metadata: Any) -> StreamChunk:
        """An ``error`` chunk for ``text``, its ``kind`` classified, the text remembered."""
        self.error_texts.append(text)
        kind = classify_cli_failure(
            [text, *(str(v) for v in metadata.values() if v)],
            provider=self.provider,
            http_status=self.http_status,
        )
        return StreamChunk("error", content=text, is_error=True, metadata={"kind": kind, **metadata})


def usage_dict(input_tokens: Any, output_tokens: Any, cost_usd: Any) -> dict[str, Any]:
    """The ``{input_tokens, output_tokens, cost_usd}`` object of a result chunk (None when unknown)."""
    return {
        "input_tokens": input_tokens if isinstance(input_tokens, int) else None,
        "output_tokens": output_tokens if isinstance(output_tokens, int) else None,
        "cost_usd": float(cost_usd) if isinstance(cost_usd, int | float) else None,
    }


def _absolute(path: str | os.PathLike[str] | None) -> str:
    """``path`` made absolute (default: the current directory); nothing is looked up on disk."""
    return os.path.abspath(path if path is not None else os.getcwd())


_COMMON_OPTIONS = frozenset({"cwd", "env", "extra_args", "model"})


class CLIAgentModel:
    """Base of the CLI agent providers: argv building, spawning, chunk normalization, errors.

    A subclass sets ``provider``, ``env_var`` and ``default_executable`` and implements
    ``build_args`` and ``new_parser``.

    Args:
        model: The model to ask for (``--model``); "" leaves the CLI's default.
        executable: The command to run (a path, or a command line split like a shell would);
            default: the environment variable ``env_var``, else ``default_executable`` on PATH.
        cwd: Working directory of the agent (default: the current directory).
        env: Extra environment variables for the agent.
        extra_args: Extra CLI arguments, placed before the prompt and resume arguments.
        stderr_cap: Bytes of standard error kept for errors (the tail).
        terminate_grace: Seconds between SIGTERM and SIGKILL when the process group is stopped.
        exit_timeout: Seconds to wait for the CLI to exit after it closed its output.

    Per-call ``options`` (the ``options`` argument of ``stream``) accept ``cwd``, ``env``,
    ``extra_args`` and ``model`` plus the provider's own keys (``option_keys``); unknown keys
    are refused with ``ValueError``.
    """

    provider: str = ""
    env_var: str = ""
    default_executable: str = ""
    option_keys: frozenset[str] = _COMMON_OPTIONS
    system_prompt_option: str | None = None
    """The per-call option that adds to the CLI's own system prompt (None: the CLI has none)."""

    def __init__(
        self,
        model: str = "",
        *,
        executable: str | Sequence[str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        stderr_cap: int = 65536,
        terminate_grace: float = 2.0,
        exit_timeout: float = 10.0,
    ) -> None:
        self.model = model
        self.executable = executable
        self.cwd = cwd
        self.env = dict(env or {})
        self.extra_args = list(extra_args)
        self.stderr_cap = stderr_cap
        self.terminate_grace = terminate_grace
        self.exit_timeout = exit_timeout

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"

    def build_args(
        self, prompt: str, *, resume: str | None, model: str, options: Mapping[str, Any]
    ) -> list[str]:
        """The CLI arguments after the executable."""
        raise NotImplementedError

    def new_parser(self, started: float) -> CLIEventParser:
        """A fresh parser for one run."""
        raise NotImplementedError

    def default_env(self) -> dict[str, str]:
        """Variables the provider sets unless the caller did (none by default)."""
        return {}

    async def before_spawn(self, parser: CLIEventParser, *, resume: str | None, home: str | None) -> None:
        """Prepare ``parser`` before the CLI starts (Codex reads its usage baseline here)."""

    def command(
        self, prompt: str, *, resume: str | None = None, options: Mapping[str, Any] | None = None
    ) -> list[str]:
        """The full argv ``stream`` would run (the executable resolved).

        Raises:
            ValueError: Empty prompt, empty resume id or unknown option keys.
            CLINotFound: The executable is missing.
        """
        opts = self._check(prompt, resume, options)
        exe = resolve_executable(
            self.env_var, self.default_executable, provider=self.provider, override=self.executable
        )
        model = str(opts.get("model") or self.model)
        extra = [*self.extra_args, *[str(a) for a in opts.get("extra_args", ())]]
        return [
            *exe,
            *self.build_args(prompt, resume=resume, model=model, options={**opts, "extra_args": extra}),
        ]

    def _check(self, prompt: str, resume: str | None, options: Mapping[str, Any] | None) -> dict[str, Any]:
        if not isinstance(prompt, str) or not prompt.strip():
            raise UsageError(f"{self.provider}: the prompt must be a non-empty string, got {prompt!r}")
        if resume is not None and (not isinstance(resume, str) or not resume.strip()):
            raise UsageError(f"{self.provider}: resume must be a non-empty session id, got {resume!r}")
        opts = dict(options or {})
        unknown = sorted(set(opts) - self.option_keys)
        if unknown:
            raise UsageError(
                f"{self.provider}: unknown option(s) {unknown}; accepted: {sorted(self.option_keys)}"
            )
        return opts

    def _child_env(self, opts: Mapping[str, Any]) -> dict[str, str]:
        env = dict(os.environ)
        for key, value in self.default_env().items():
            env.setdefault(key, value)
        env.update(self.env)
        env.update({str(k): str(v) for k, v in (opts.get("env") or {}).items()})
        return env

    async def stream(
        self, prompt: str, *, resume: str | None = None, options: Mapping[str, Any] | None = None
    ) -> AsyncIterator[StreamChunk]:
        """Run the CLI on ``prompt`` (resuming provider session ``resume``) and yield its chunks.

        Chunks arrive as the CLI prints them. A stdout line that is not a JSON object is
        yielded as a ``system`` chunk with ``metadata["diagnostic"]`` (the line),
        ``metadata["line_number"]`` and ``metadata["reason"]`` (``not_json``, ``not_object``,
        ``torn``, ``too_long``); it never stops the stream.

        Raises:
            ValueError: Bad arguments (before anything is started).
            CLINotFound: The executable is missing.
            CLIError: After the chunks that arrived: the CLI exited non-zero or was killed
                (``kind`` classified), or it exited 0 without its terminal event (``kind="stream"``).
        """
        opts = self._check(prompt, resume, options)
        argv = self.command(prompt, resume=resume, options=opts)
        model = str(opts.get("model") or self.model)
        env = self._child_env(opts)
        # The CLI's environment holds its credentials (ANTHROPIC_API_KEY, ...): a CLI that echoes
        # one in its output or an error must not put it into the append-only log.
        scrub = Scrubber(value for name, value in env.items() if _env_secret(name, value))
        cwd = _absolute(opts.get("cwd") or self.cwd)
        home = cli_home(self.provider, env)
        started = time.monotonic()
        parser = self.new_parser(started)
        await self.before_spawn(parser, resume=resume, home=home)
        diagnostics: list[str] = []
        announced = False
        proc = CLIProcess(
            argv,
            env=env,
            cwd=cwd,
            stderr_cap=self.stderr_cap,
            terminate_grace=self.terminate_grace,
            exit_timeout=self.exit_timeout,
            provider=self.provider,
        )
        async with proc:
            async for item in proc:
                if isinstance(item, Diagnostic):
                    line = scrub(item.line)
                    diagnostics.append(line)
                    yield StreamChunk(
                        "system",
                        metadata={
                            "diagnostic": line,
                            "line_number": item.line_number,
                            "reason": item.reason,
                        },
                    )
                    continue
                for chunk in parser.feed(item):
                    if not announced and chunk.type == "system" and chunk.metadata.get("session_id"):
                        # Where the CLI keeps this session: what recover reconciles with.
                        announced = True
                        chunk.metadata.setdefault("cwd", cwd)
                        chunk.metadata["cli_home"] = home
                    yield _scrub_chunk(chunk, scrub)
            status = await proc.wait_exit()
        if status.failed:
            raise cli_failure(
                status,
                scrub(proc.stderr),
                texts=[*diagnostics, *(scrub(t) for t in parser.error_texts)],
                provider=self.provider,
                model=model,
                http_status=parser.http_status,
            )
        if not parser.finished:
            raise CLIError(
                f"{self.provider} CLI exited 0 without its final event (output cut short)",
                exit_code=0,
                stderr=scrub(proc.stderr),
                kind="stream",
                provider=self.provider,
                model=model,
            )


_ENV_SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials", "auth"}
)


def _env_secret(name: str, value: str) -> bool:
    """True for an environment variable that holds a credential (``ANTHROPIC_API_KEY``, ...).

    Stricter than ``is_secret_name``: ``PWD`` is the working directory here, and a value
    that is a path (``SSH_AUTH_SOCK``, ``GOOGLE_APPLICATION_CREDENTIALS``) names where a
    secret is, not the secret.
    """
    words = set(re.split(r"[-_.]+", name.lower()))
    return bool(words & _ENV_SECRET_WORDS) and not value.startswith(("/", "~", "."))


def _scrub_chunk(chunk: StreamChunk, scrub: Scrubber) -> StreamChunk:
    """``chunk`` with every secret value of ``scrub`` replaced (the same object when none is in it)."""
    if not scrub.secrets:
        return chunk
    changed = {
        name: scrub(value)
        for name in ("content", "tool_input", "tool_output", "metadata")
        if (value := getattr(chunk, name)) is not None
    }
    changed = {name: value for name, value in changed.items() if value != getattr(chunk, name)}
    return replace(chunk, **changed) if changed else chunk
