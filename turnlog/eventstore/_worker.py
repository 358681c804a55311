"""A dedicated worker thread for the blocking jobs of a store (used by the SQLite backend)."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

import anyio
import anyio.to_thread

__all__ = ["Worker"]

T = TypeVar("T")


class Worker:
    """One daemon thread running blocking jobs in order; results go back to the event loop.

    Handing a job to a thread that already runs is cheaper than ``anyio.to_thread.run_sync``
    (no limiter, no thread pool), and keeping one thread keeps the jobs of a store in order.
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], Any], Callable[[BaseException | None, Any], None]] | None
        ]
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, done = job
            try:
                result = fn()
            except BaseException as exc:  # handed to the awaiting task, which re-raises it
                outcome: tuple[BaseException | None, Any] = (exc, None)
            else:
                outcome = (None, result)
            try:
                done(*outcome)
            except RuntimeError:
                # The event loop that waited for this job has been closed: nobody is left
                # to tell, and the thread must keep serving the store's other callers.
                continue

    async def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the worker thread and return its result.

        The wait is shielded: once a job is handed over it runs to its end (a write is then
        either committed or not, never abandoned mid-way); a cancellation is delivered at
        the caller's next checkpoint.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another anyio backend: take the generic path
            return await anyio.to_thread.run_sync(self._blocking_call, fn)
        future: asyncio.Future[T] = loop.create_future()

        def settle(exc: BaseException | None, result: Any) -> None:
            if not future.done():
                if exc is not None:
                    future.set_exception(exc)
                else:
                    future.set_result(result)

        def done(exc: BaseException | None, result: Any) -> None:
            loop.call_soon_threadsafe(settle, exc, result)

        self._jobs.put((fn, done))
        with anyio.CancelScope(shield=True):
            outcome = await future
        return outcome

    def submit(self, fn: Callable[[], object]) -> None:
        """Queue ``fn`` without waiting for it (background housekeeping)."""
        self._jobs.put((fn, _ignore_result))

    def _blocking_call(self, fn: Callable[[], T]) -> T:
        box: list[Any] = []
        ready = threading.Event()

        def done(exc: BaseException | None, result: Any) -> None:
            box.append((exc, result))
            ready.set()

        self._jobs.put((fn, done))
        ready.wait()
        exc, result = box[0]
        if exc is not None:
            raise exc
        return cast(T, result)

    def stop(self) -> None:
        """Finish the queued jobs, then end the thread (blocks until it has ended)."""
        self._jobs.put(None)
        self._thread.join()


def _ignore_result(exc: BaseException | None, result: Any) -> None:
    """Completion of a background job: a failure only delays the next one (e.g. a checkpoint)."""
