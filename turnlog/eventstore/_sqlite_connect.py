"""Opening the SQLite store's connections, and what SQLite's errors mean for the store.

A connection never creates its file (``mode=rw``): the store creates it first, private to its
owner (``create_private``), so that a file that vanished in between is an error, not a new
world-readable store.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import urllib.parse

from ._errors import CorruptStoreError, StoreError, StoreFormatError, StoreNotFound, StoreUnavailable
from ._sqlite_layout import StoreConnection

__all__ = [
    "close_quietly",
    "connect",
    "create_private",
    "damage_or_error",
    "is_busy",
    "lenient_text",
    "parse_target",
    "uri",
]


def parse_target(path: str) -> tuple[str, bool]:
    """Return the sqlite3 target and whether it is a private in-memory database."""
    if path == ":memory:":
        return ":memory:", True
    return os.fspath(path), False


def connect(
    target: str,
    *,
    busy_ms: int,
    in_memory: bool,
    durability: str,
    create: bool = True,
    page_size: int | None = None,
) -> StoreConnection:
    """Open ``target`` (never creating it) in WAL mode with the store's pragmas.

    ``page_size`` is the page size of a database this connection is the first to write (SQLite
    ignores it for one that has pages, and it cannot change once the file is in WAL mode).

    Raises:
        StoreNotFound: ``create`` is false and the database is empty.
        CorruptStoreError, StoreFormatError, StoreUnavailable: the file is damaged, not
            SQLite, or cannot be opened.
    """
    conn: StoreConnection | None = None
    try:
        conn = sqlite3.connect(
            uri(target),
            isolation_level=None,
            check_same_thread=False,
            timeout=0,
            uri=True,
            factory=StoreConnection,
        )
        # A file that is not SQLite only fails on first access.
        conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
        if (
            not create
            and not in_memory
            and not conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        ):
            # before the switch to WAL, which would write a header into an empty file
            raise StoreNotFound(target, "the database is empty")
        if page_size is not None:
            conn.execute(f"PRAGMA page_size = {int(page_size)}")
        if not in_memory:
            mode = _switch_to_wal(conn, busy_ms)
            if mode.lower() != "wal":
                raise StoreError(f"cannot switch {target} to WAL mode (got {mode!r})")
            if durability == "normal":
                # Inline commits must never wait for a checkpoint's fsync: the store
                # checkpoints on its worker thread instead. Under "full" every write runs
                # on the worker anyway, and SQLite's own checkpoint keeps the WAL short
                # (a long WAL makes each fsync'd commit about twice as slow).
                conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute(f"PRAGMA synchronous = {durability.upper()}")
        conn.execute("PRAGMA busy_timeout = 0")
    except StoreNotFound:
        close_quietly(conn)
        raise
    except sqlite3.DatabaseError as exc:
        close_quietly(conn)
        if "malformed" in str(exc):
            raise CorruptStoreError(target, str(exc)) from exc
        if "not a database" in str(exc):
            raise StoreFormatError(f"{target} is not a SQLite database: {exc}") from exc
        raise StoreUnavailable(f"cannot open {target}: {exc}") from exc
    except (UnicodeError, ValueError, TypeError, AttributeError) as exc:  # garbage pragma results
        close_quietly(conn)
        raise CorruptStoreError(target, f"SQLite returned garbage while opening it ({exc!r})") from exc
    return conn


def _switch_to_wal(conn: sqlite3.Connection, busy_ms: int) -> str:
    """``PRAGMA journal_mode = WAL``, retried while another connection holds the file, up to ``busy_ms``.

    SQLite answers "database is locked" at once, without calling the busy handler, when the
    switch would have to wait for a connection that is itself switching or creating the
    schema (a deadlock it cannot rule out). Several processes opening one new file hit
    exactly that, so the wait the busy timeout promises is done here.
    """
    deadline = time.monotonic() + busy_ms / 1000
    pause = 0.001
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def damage_or_error(path: str, exc: sqlite3.DatabaseError) -> StoreError:
    """``CorruptStoreError`` when SQLite says the file is damaged, else a plain ``StoreError``."""
    text = str(exc)
    if "malformed" in text or "Could not decode" in text or isinstance(exc, sqlite3.DataError):
        return CorruptStoreError(path, text)
    return StoreError(f"{path}: {text}")


def lenient_text(raw: bytes) -> str:
    """SQLite text as a str; bytes that are not UTF-8 become lone surrogates, never an error."""
    return raw.decode("utf-8", "surrogateescape")


def uri(target: str) -> str:
    """The ``file:`` URI that opens ``target`` without ever creating it (``mode=rw``)."""
    if target == ":memory:":
        return "file::memory:"
    return "file:" + urllib.parse.quote(os.path.abspath(target)) + "?mode=rw"


def create_private(path: str) -> None:
    """Create ``path`` as an empty file of mode 0600 unless it exists (never through a symlink)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise StoreUnavailable(f"cannot create {path}: {exc.strerror or exc}") from exc
    os.close(fd)


def close_quietly(conn: sqlite3.Connection | None) -> None:
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()


def is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text
