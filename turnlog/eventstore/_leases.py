"""Liveness leases: a process holds a named lease while it owns something; others ask if it is held.

A lease is held by a *process*, never recorded in the log: it disappears with the process,
whatever way the process ends (``SIGKILL`` included), and nothing has to expire or be cleaned
up for a reader to see that the holder is gone. The kernel keys one lease per open run
(``run-<run_id>``), so ``recover`` closes only runs whose writer is gone.

Where the lease lives depends on who can see the store:

- a store file (SQLite): an exclusive ``flock`` on ``<store file>.leases/<key>.lock`` (a 0700
  directory beside the store, files 0600). The directory is made by the first lease and kept
  while the store stays open (its close removes it when empty): made and removed per lease,
  it cost a ``mkdir`` and an ``rmdir`` per kernel run, the ``rmdir`` alone up to 1.2 ms on
  ext4. Only processes on the same machine can write a SQLite store, and they all see the lock;
- PostgreSQL: a session-level advisory lock (``pg_advisory_lock``) keyed by a 64-bit digest of
  the store's schema and the key, taken on one connection per process and store that stays
  open while the process holds any lease. Every host that reaches the server sees it; the
  server drops it when that connection ends (the process died, or its host is unreachable:
  TCP keepalive, typically within a few minutes);
- an in-memory store: a set in the store object (only its own process can write it).

``held_leases`` takes the lease for an instant from another file descriptor or connection, so
it also sees leases its own process holds.

Example::

    lease = await acquire_lease(store, f"run-{run_id}")
    try:
        ...                     # held_leases(store, [key]) == {key}, in any process
    finally:
        await lease.release()
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ._base import EventStore
from ._errors import StoreError, StoreUnavailable

# anyio is imported where it is used: the store's read path (``turnlog show``) imports this
# module (``remove_lease_dir``) and starts no event loop, so it never needs anyio.

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: file leases are never seen as held
    fcntl = None  # type: ignore[assignment]

__all__ = ["Lease", "acquire_lease", "held_leases", "remove_lease_dir"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def _check_key(key: str) -> str:
    # Keys name files: only characters that cannot leave the lease directory.
    if not key or not set(key) <= _SAFE or key.startswith("."):
        raise StoreError(f"a lease key is letters, digits, '-', '_' and '.', not {key!r}")
    return key


class Lease:
    """A lease this process holds until ``release`` (idempotent)."""

    def __init__(self, key: str, release: Any) -> None:
        self.key = key
        self._release = release

    async def release(self) -> None:
        """Give the lease up; other processes then see it as not held."""
        release, self._release = self._release, None
        if release is not None:
            await release()


async def acquire_lease(store: EventStore, key: str) -> Lease:
    """Take the lease ``key`` of ``store`` for this process.

    Raises:
        StoreUnavailable: the lease cannot be taken (the lease directory cannot be written,
            or PostgreSQL cannot be reached).
        StoreError: ``key`` is not a safe name, or another process holds it.
    """
    _check_key(key)
    postgres = _postgres(store)
    if postgres is not None:
        return await _PgLeases.of(postgres).acquire(key)
    path = store.local_path
    if path is None:
        return _memory_acquire(store, key)
    # Inline, not on a thread: an open and a non-blocking flock on the store's own (local)
    # file system, as the release's unlink and close, while a hop to a worker thread and back
    # costs about 100 µs of CPU, once per run of the kernel.
    directory = _lease_dir(path)
    fd = _file_acquire(directory, key)
    lease_path = directory / f"{key}.lock"

    async def release() -> None:
        # Unlinked before it is unlocked: no reader finds the file unlocked while the run lives.
        # The directory stays for the store's next lease (``remove_lease_dir`` at its close).
        with contextlib.suppress(FileNotFoundError):
            lease_path.unlink()
        os.close(fd)

    return Lease(key, release)


async def held_leases(store: EventStore, keys: Iterable[str]) -> frozenset[str]:
    """The ``keys`` whose lease some process (this one included) holds now.

    A lease file left by a process that is gone is removed on the way.

    Raises:
        StoreUnavailable: PostgreSQL cannot be reached.
        StoreError: a key is not a safe name.
    """
    wanted = [_check_key(key) for key in keys]
    if not wanted:
        return frozenset()
    postgres = _postgres(store)
    if postgres is not None:
        return await _pg_held(postgres, wanted)
    path = store.local_path
    if path is None:
        held = _MEMORY.get(store, set())
        return frozenset(key for key in wanted if key in held)
    import anyio.to_thread

    directory = _lease_dir(path)
    return frozenset(
        [key for key in wanted if await anyio.to_thread.run_sync(_file_held, directory / f"{key}.lock")]
    )


# ----------------------------------------------------------------------------------------- files


def _lease_dir(store_path: Path) -> Path:
    return Path(f"{store_path}.leases")


def remove_lease_dir(store_path: Path) -> None:
    """Remove the lease directory of the store file at ``store_path`` if it is empty (at its close)."""
    _remove_if_empty(_lease_dir(store_path))


def _file_acquire(directory: Path, key: str) -> int:
    # The directory is usually there already (kept while its store is open); a store closing
    # elsewhere, or recover's cleanup, may remove it at any moment: then it is made again.
    lock_file = directory / f"{key}.lock"
    for attempt in range(8):
        try:
            if attempt:
                with contextlib.suppress(FileExistsError):
                    directory.mkdir(mode=0o700)
            fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o600)
            break
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StoreUnavailable(
                f"cannot take the lease {key} in {directory}: {exc.strerror or exc}"
            ) from exc
    else:
        raise StoreUnavailable(f"cannot take the lease {key}: {directory} keeps disappearing")
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreError(f"the lease {key} is held by another process") from None
    return fd


def _remove_if_empty(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not empty (another lease), or gone already
        directory.rmdir()


def _file_held(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        if fcntl is None:  # pragma: no cover - not POSIX
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        # Ours now: its holder is gone, and the key (a run id) is never taken again.
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        _remove_if_empty(path.parent)
        return False
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------- memory

_MEMORY: weakref.WeakKeyDictionary[EventStore, set[str]] = weakref.WeakKeyDictionary()


def _memory_acquire(store: EventStore, key: str) -> Lease:
    held = _MEMORY.setdefault(store, set())
    if key in held:
        raise StoreError(f"the lease {key} is held already")
    held.add(key)

    async def release() -> None:
        held.discard(key)

    return Lease(key, release)


# ------------------------------------------------------------------------------------ PostgreSQL


def _postgres(store: EventStore) -> Any:
    """The store when it is a PostgreSQL store, or a view passing its attributes through to one.

    Views such as the demo's (``__getattr__`` forwarding to the store) must reach the same
    advisory locks, so the connection settings are looked up, not the class alone.
    """
    # Not imported here: the backend needs the optional driver, and a PostgreSQL store exists
    # only once its module was loaded.
    module = sys.modules.get(f"{__package__}._postgres")
    cls = getattr(module, "PostgresEventStore", None)
    if cls is None:
        return None
    if isinstance(store, cls) or getattr(store, "_conninfo", None) is not None:
        return store
    return None


def _pg_key(store: Any, key: str) -> int:
    """A signed 64-bit advisory lock key for ``key`` in the store's schema."""
    digest = hashlib.sha256(f"turnlog.lease:{store.schema}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class _PgLeases:
    """The one lease connection of a process for one PostgreSQL store, open while a lease is held."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.conn: Any = None
        self.held: set[int] = set()
        import anyio

        self.lock = anyio.Lock()

    @classmethod
    def of(cls, store: Any) -> _PgLeases:
        leases = _PG_LEASES.get(store)
        if leases is None:
            leases = _PG_LEASES[store] = cls(store)
        return leases

    async def acquire(self, key: str) -> Lease:
        number = _pg_key(self.store, key)
        store = self.store
        async with self.lock:
            with store._db.errors(f"taking the lease {key}"):
                if self.conn is None or self.conn.closed:
                    self.conn = await store._db.pg.AsyncConnection.connect(
                        store._db.conninfo, autocommit=True
                    )
                    self.held.clear()
                cursor = await self.conn.execute("SELECT pg_try_advisory_lock(%s)", (number,))
                row = await cursor.fetchone()
            if not row or not row[0]:
                raise StoreError(f"the lease {key} is held by another process")
            self.held.add(number)

        async def release() -> None:
            import anyio

            with anyio.CancelScope(shield=True):
                await self.release(number)

        return Lease(key, release)

    async def release(self, number: int) -> None:
        async with self.lock:
            self.held.discard(number)
            conn = self.conn
            if conn is None:
                return
            if not self.held:
                # The last lease: closing the connection drops its locks, and no idle
                # connection is left open behind the store's back.
                self.conn = None
                with contextlib.suppress(Exception):
                    await conn.close()
                return
            with contextlib.suppress(Exception):  # a lost connection has dropped it already
                await conn.execute("SELECT pg_advisory_unlock(%s)", (number,))


_PG_LEASES: weakref.WeakKeyDictionary[Any, _PgLeases] = weakref.WeakKeyDictionary()


async def _pg_held(store: Any, keys: list[str]) -> frozenset[str]:
    held: set[str] = set()
    with store._db.errors("checking run leases"):
        # A connection of its own: on a holder's session the lock would be re-entered.
        conn = await store._db.pg.AsyncConnection.connect(store._db.conninfo, autocommit=True)
        try:
            for key in keys:
                cursor = await conn.execute("SELECT pg_try_advisory_lock(%s)", (_pg_key(store, key),))
                row = await cursor.fetchone()
                if not (row and row[0]):
                    held.add(key)
        finally:
            await conn.close()  # drops the locks it took
    return frozenset(held)
