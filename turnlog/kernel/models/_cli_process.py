"""A CLI agent as a child process: its NDJSON output read, its process group stopped.

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
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import orjson

from ._cli_errors import ExitStatus
from ._errors import CLINotFound
from ._orphans import GroupWatchdog, spawn, wait_process

__all__ = ["CLIProcess", "Diagnostic", "NDJSONFramer"]

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
