"""Running a store's coroutines to their end without an event loop, for one-shot commands.

A SQLite store runs its reads inline (see ``_sqlite``): a read awaits nothing that waits for
another task, so a coroutine that only reads one comes to its end when it is stepped, and
needs no event loop. ``run_inline`` steps it so, sparing a short command (``turnlog show``)
the import of asyncio and anyio and the start of a loop, about a quarter of its start-up.

While ``run_inline`` runs, the store code asks ``running_inline()`` and does what would
otherwise need a loop in a plain blocking way: a job for the worker thread is waited for on
the calling thread (there is no loop to keep free), and ``checkpoint()`` gives no turn (there
is no other task). Anything else that needs a loop (a PostgreSQL store, a ``follow``, a task
group) cannot run inline, and ``run_inline`` says so with a ``UsageError``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any, TypeVar

from turnlog._errors import UsageError

__all__ = ["checkpoint", "run_inline", "running_inline"]

T = TypeVar("T")

_INLINE: ContextVar[bool] = ContextVar("turnlog_eventstore_inline", default=False)


def running_inline() -> bool:
    """Whether the caller runs under ``run_inline`` (no event loop: block rather than await)."""
    return _INLINE.get()


async def checkpoint() -> None:
    """Give other tasks a turn (``anyio.lowlevel.checkpoint``); under ``run_inline``, nothing.

    anyio is imported here, on first use, so that a process that never starts a loop never
    imports it.
    """
    if _INLINE.get():
        return
    import anyio.lowlevel

    await anyio.lowlevel.checkpoint()


def run_inline(fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """Run ``fn(*args)`` to its end on this thread, without an event loop, and return its result.

    For a coroutine that awaits only a SQLite store's reads (and what ``running_inline``
    turns into blocking calls). A bare yield to the loop (``asyncio.sleep(0)``) is resumed at
    once; any other await that needs a loop closes the coroutine (its ``finally`` blocks run)
    and raises ``UsageError``: run such a coroutine with ``anyio.run``.

    Example:
        >>> async def answer() -> int:
        ...     await checkpoint()
        ...     return 42
        >>> run_inline(answer)
        42
    """
    token = _INLINE.set(True)
    try:
        coro = fn(*args)
        try:
            while True:
                awaited = coro.send(None)
                if awaited is not None:
                    coro.close()
                    raise UsageError(
                        f"{getattr(fn, '__qualname__', fn)!r} awaited {type(awaited).__name__}, "
                        "which needs an event loop: run it with anyio.run"
                    )
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
    finally:
        _INLINE.reset(token)
