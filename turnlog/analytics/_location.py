"""Where the analytics database of a store lives, and the tables older versions left in a store's file.

The fact tables and their checkpoint are derived data kept in a SQLite database of their
own, never in the event store's database:

- a store with a file (``store.local_path``): ``<store file>.analytics`` beside it, so the
  two are found, copied and deleted together, and every process that opens the store
  shares one incremental read model;
- a store that lives in this process only (``memory://``, ``sqlite:///:memory:``): a
  private in-memory database, rebuilt from the log by each projection object. The log it
  reads ends with the process, so a file would only outlive what it describes;
- a server store (PostgreSQL): ``$XDG_CACHE_HOME/turnlog/analytics/<store id>.db``
  (``~/.cache`` without the variable). Such logs are the large ones, and rebuilding
  millions of facts in every process (every ``turnlog stats``) costs what the checkpoint
  exists to save; the store id (``EventStore.store_id``) is kept in the store itself, so
  every URL that reaches the same store finds the same file, and a store dropped and made
  again gets a new one.

``AnalyticsProjection(store, database=...)`` (``--analytics-db``) overrides the default.
Files are made private to their user (0600 in 0700 directories).
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from pathlib import Path

from turnlog.eventstore import EventStore

from ._errors import AnalyticsDatabaseError

__all__ = [
    "CACHE_ENV",
    "IN_MEMORY",
    "LEGACY_TABLES",
    "SUFFIX",
    "analytics_database_of",
    "drop_legacy_tables",
    "legacy_tables",
    "prepare_file",
]

SUFFIX = ".analytics"
"""Appended to a store file's name for the analytics database beside it."""

IN_MEMORY = ":memory:"
"""The analytics database of a store that lives in this process only."""

CACHE_ENV = "XDG_CACHE_HOME"
"""The cache directory's variable (``~/.cache`` without it); server stores keep analytics below it."""

LEGACY_TABLES: tuple[str, ...] = (
    "analytics_model_calls",
    "analytics_tool_calls",
    "analytics_runs",
    "analytics_model_rollup",
    "analytics_tool_rollup",
    "analytics_branches",
    "analytics_meta",
)
"""The tables turnlog 0.1 kept in a SQLite store's own file (plus its row ``analytics`` of ``tracking``)."""

_LEGACY_CONSUMER = "analytics"


def analytics_database_of(store: EventStore) -> str:
    """The default analytics database of ``store``: a file path, or ``":memory:"``.

    See the module's docstring for the three cases. A server store's id must be known
    (it is once the store has been used, e.g. after ``await store.head()``); until then,
    and for a store without an id, the database is in memory.
    """
    path = store.local_path
    if path is not None:
        return str(path) + SUFFIX
    scheme = urllib.parse.urlsplit(store.url).scheme
    if scheme in ("", "memory", "sqlite") or store.store_id is None:
        return IN_MEMORY
    cache = os.environ.get(CACHE_ENV) or str(Path.home() / ".cache")
    return str(Path(cache) / "turnlog" / "analytics" / f"{store.store_id}.db")


def prepare_file(database: str, store: EventStore) -> None:
    """Make the directory and an empty private file for ``database`` unless they exist.

    Raises:
        AnalyticsDatabaseError: ``database`` is the store's own file (analytics never writes
            into the event store's database), or it cannot be created.
    """
    if database == IN_MEMORY:
        return
    target = Path(database).resolve()
    if store.local_path is not None and target == store.local_path:
        raise AnalyticsDatabaseError(
            f"{database} is the event store's own file: analytics keeps its tables in a database of "
            f"its own (by default {store.local_path}{SUFFIX})",
            database=database,
        )
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        flags = (
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        )
        os.close(os.open(target, flags, 0o600))
    except FileExistsError:
        return
    except OSError as exc:
        raise AnalyticsDatabaseError(
            f"cannot create {database}: {exc.strerror or exc}", database=database
        ) from exc


def legacy_tables(store_file: str | os.PathLike[str]) -> list[str]:
    """The analytics tables turnlog 0.1 left in a SQLite store's own file (read only; [] when none)."""
    try:
        conn = sqlite3.connect(f"file:{urllib.parse.quote(os.fspath(store_file))}?mode=ro", uri=True)
    except sqlite3.Error:
        return []
    try:
        present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error:
        return []
    finally:
        conn.close()
    return [name for name in LEGACY_TABLES if name in present]


def drop_legacy_tables(store_file: str | os.PathLike[str]) -> list[str]:
    """Drop the analytics tables turnlog 0.1 kept in a SQLite store's own file; the names dropped.

    The only write analytics ever makes to a store's database, and only when asked
    (``turnlog redact`` and ``turnlog forget`` call it, since those tables hold copies of
    payloads): the tables are ignored otherwise. Run the store's ``compact()`` afterwards
    to erase their freed pages.

    Raises:
        AnalyticsDatabaseError: the file cannot be written (a lock held over 60 s, say).
    """
    path = os.fspath(store_file)
    try:
        conn = sqlite3.connect(
            f"file:{urllib.parse.quote(path)}?mode=rw", uri=True, isolation_level=None, timeout=60
        )
    except sqlite3.Error as exc:
        raise AnalyticsDatabaseError(f"cannot open {path}: {exc}", database=path) from exc
    try:
        conn.execute("BEGIN IMMEDIATE")
        present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        dropped = [name for name in LEGACY_TABLES if name in present]
        for name in dropped:
            conn.execute(f"DROP TABLE {name}")
        if "tracking" in present:  # the store's table: only our row goes
            conn.execute("DELETE FROM tracking WHERE consumer = ?", (_LEGACY_CONSUMER,))
        conn.execute("COMMIT")
        return dropped
    except sqlite3.Error as exc:
        raise AnalyticsDatabaseError(f"{path}: {exc}", database=path) from exc
    finally:
        conn.close()
