"""The CLI never outlives the process that runs it.

Two guards, both set up when a CLI is spawned:

- **Parent-death signal** (Linux): the child asks the kernel, between ``fork`` and ``exec``,
  for SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``). The kernel means the parent
  *thread*: a child forked by a short-lived worker thread would be killed when that thread
  ends. So every CLI is forked by one long-lived spawner thread that lives as long as the
  interpreter. If the parent died between ``fork`` and ``prctl``, the child exits at once.
- **Group watchdog** (every POSIX system, and the only guard where ``prctl`` is missing):
  a tiny separate process holds the read end of a pipe whose write end only this process
  has. When this process dies, the kernel closes the write end, the watchdog reads end of
  file and SIGKILLs the CLI's whole process group, grandchildren (shells, dev servers)
  included, which the parent-death signal of the CLI alone would leave behind. On a normal
  end the watchdog is told (one byte) and exits without killing anything.

``spawn`` returns a ``subprocess.Popen`` whose standard output is a non-blocking pipe.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import anyio

__all__ = ["GroupWatchdog", "pdeathsig_available", "spawn", "wait_process"]

_PR_SET_PDEATHSIG = 1

_WATCHDOG = (
    "import os,sys\n"
    "g=int(sys.argv[1])\n"
    "try:\n d=os.read(0,1)\nexcept OSError:\n d=b''\n"
    "if not d:\n try:\n  os.killpg(g,9)\n except OSError:\n  pass\n"
)

# One long-lived thread forks every CLI: the parent-death signal follows the forking thread.
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="turnlog-cli-spawner")

# Children not reaped yet stay reachable from here, so that the garbage collection of an
# abandoned stream (whose cleanup then runs in a task of its own) never finalizes them early.
_unreaped: set[subprocess.Popen[Any]] = set()


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_prctl = _load_prctl()


def pdeathsig_available() -> bool:
    """True where the parent-death signal can be asked for (Linux)."""
    return _prctl is not None


def _child_setup(parent: int) -> Callable[[], None]:
    prctl = _prctl
    assert prctl is not None

    def setup() -> None:  # runs in the child between fork and exec: no imports, no locks
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(125)  # the parent died before the request took effect

    return setup


@dataclass(frozen=True, slots=True)
class _Spec:
    argv: Sequence[str]
    cwd: str | os.PathLike[str] | None
    env: Mapping[str, str] | None
    stderr_fd: int
    pdeathsig: bool


def _popen(spec: _Spec) -> subprocess.Popen[bytes]:
    kwargs: dict[str, Any] = {}
    if spec.pdeathsig and _prctl is not None:
        kwargs["preexec_fn"] = _child_setup(os.getpid())
    proc = subprocess.Popen(
        list(spec.argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=spec.stderr_fd,
        cwd=spec.cwd,
        env=dict(spec.env) if spec.env is not None else None,
        start_new_session=True,
        **kwargs,
    )
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    _unreaped.add(proc)
    return proc


async def spawn(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None,
    stderr_fd: int,
    pdeathsig: bool = True,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session, forked by the spawner thread (see the module docstring).

    Raises:
        OSError: The executable could not be started (``FileNotFoundError``, ...).
    """
    future = _spawner.submit(_popen, _Spec(argv, cwd, env, stderr_fd, pdeathsig))
    return await anyio.to_thread.run_sync(future.result)


async def wait_process(proc: subprocess.Popen[Any]) -> int:
    """Wait for ``proc`` to exit without blocking the event loop; its return code."""
    if proc.returncode is not None:
        _unreaped.discard(proc)
        return proc.returncode
    pidfd = -1
    with contextlib.suppress(OSError, AttributeError):
        pidfd = os.pidfd_open(proc.pid)  # type: ignore[attr-defined,unused-ignore]
    if pidfd < 0:
        code = await anyio.to_thread.run_sync(proc.wait, abandon_on_cancel=True)
        _unreaped.discard(proc)
        return code
    try:
        while proc.poll() is None:
            await anyio.wait_readable(pidfd)
    finally:
        os.close(pidfd)
    _unreaped.discard(proc)
    return proc.wait()  # at once: poll() reaped it and holds the code


class GroupWatchdog:
    """A separate process that SIGKILLs process group ``pgid`` if this process dies.

    ``release()`` tells it the group ended normally (it then exits without killing) and
    reaps it.
    """

    def __init__(self, proc: subprocess.Popen[bytes], write_fd: int) -> None:
        self._proc = proc
        self._write_fd: int | None = write_fd

    @classmethod
    async def start(cls, pgid: int) -> GroupWatchdog:
        """Start a watchdog for ``pgid``."""
        read_fd, write_fd = os.pipe()  # not inheritable: no other child holds the write end
        try:
            future = _spawner.submit(
                subprocess.Popen,
                [sys.executable, "-S", "-c", _WATCHDOG, str(pgid)],
                stdin=read_fd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
            proc = await anyio.to_thread.run_sync(future.result)
            _unreaped.add(proc)
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        return cls(proc, write_fd)

    @property
    def pid(self) -> int:
        """The watchdog's pid."""
        return self._proc.pid

    async def release(self) -> None:
        """Stand the watchdog down (the group is gone) and reap it."""
        fd, self._write_fd = self._write_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.write(fd, b"x")
            os.close(fd)
        with anyio.move_on_after(5.0):
            await wait_process(self._proc)
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            await wait_process(self._proc)
