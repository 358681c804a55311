"""A dedicated worker thread for the blocking jobs of a store (used by the SQLite backend)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar, cast

from ._inline import running_inline

__all__ = ["Worker"]

T = TypeVar("T")


class Worker:
    """One daemon thread running blocking jobs in order; results go back to the event loop.

    Handing a job to a thread that already runs is cheaper than ``anyio.to_thread.run_sync``
    (no limiter, no thread pool), and keeping one thread keeps the jobs of a store in order.
    The thread starts with the first job: a store that only reads inline (``turnlog show``,
    a cold ``rebuild``) never pays for starting and stopping one.
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], Any], Callable[[BaseException | None, Any], None]] | None
        ]
        self._jobs = queue.SimpleQueue()
        self._name = name
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    @property
    def started(self) -> bool:
        """Whether the thread runs (a job started it and it was not ended since)."""
        return self._thread is not None

    def _put(self, job: tuple[Callable[[], Any], Callable[[BaseException | None, Any], None]]) -> None:
        if self._thread is None:
            with self._start_lock:  # submit() may be called from another thread
                if self._thread is None:
                    thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    thread.start()
                    self._thread = thread
        self._jobs.put(job)

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

    async def call(self, fn: Callable[[], T], *, last: bool = False) -> T:
        """Run ``fn`` on the worker thread and return its result (``last``: see ``finish``).

        The wait is shielded: once a job is handed over it runs to its end (a write is then
        either committed or not, never abandoned mid-way); a cancellation is delivered at
        the caller's next checkpoint. Under ``run_inline`` there is no loop to keep free: the
        calling thread waits for the job.
        """
        if running_inline():
            return self._blocking_call(fn, last)
        # imported here: a process that only reads inline never imports asyncio or anyio
        import asyncio

        import anyio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another anyio backend: take the generic path
            import anyio.to_thread

            return await anyio.to_thread.run_sync(self._blocking_call, fn, last)
        future: asyncio.Future[T] = loop.create_future()

        def settle(exc: BaseException | None, result: Any) -> None:
            if not future.done():
                if exc is not None:
                    future.set_exception(exc)
                else:
                    future.set_result(result)

        def done(exc: BaseException | None, result: Any) -> None:
            loop.call_soon_threadsafe(settle, exc, result)

        self._put((fn, done))
        if last:
            self._jobs.put(None)
        with anyio.CancelScope(shield=True):
            try:
                outcome = await future
            finally:
                if last:
                    self._join()
        return outcome

    def submit(self, fn: Callable[[], object]) -> None:
        """Queue ``fn`` without waiting for it (background housekeeping)."""
        self._put((fn, _ignore_result))

    def _blocking_call(self, fn: Callable[[], T], last: bool = False) -> T:
        box: list[Any] = []
        ready = threading.Event()

        def done(exc: BaseException | None, result: Any) -> None:
            box.append((exc, result))
            ready.set()

        self._put((fn, done))
        if last:
            self._jobs.put(None)
        ready.wait()
        if last:
            self._join()
        exc, result = box[0]
        if exc is not None:
            raise exc
        return cast(T, result)

    def stop(self) -> None:
        """Finish the queued jobs, then end the thread (blocks until it has ended)."""
        if self._thread is not None:
            self._jobs.put(None)
            self._join()

    def _join(self) -> None:
        thread = self._thread
        if thread is not None:
            thread.join()
            self._thread = None  # a job queued after this starts a new thread

    async def finish(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` as the last job (after every job queued before it), then end the thread.

        Returns once the thread has ended. The end is queued right behind ``fn``, so when
        ``fn``'s result comes back the thread has nothing left to do but return: joining it
        then waits for no job, and needs no second thread to wait on (as ``stop`` would).
        """
        return await self.call(fn, last=True)


def _ignore_result(exc: BaseException | None, result: Any) -> None:
    """Completion of a background job: a failure only delays the next one (e.g. a checkpoint)."""
