"""The analytics database: a SQLite file (or memory) of its own, its layout, and every write to it.

``AnalyticsDatabase`` is the synchronous side of the projection: it owns the one
connection, creates (or migrates) the fact tables, rollups and the checkpoint, and writes
each batch of facts together with its checkpoint in ONE transaction, so a crash at any
moment leaves facts and checkpoint agreeing. The projection (``_projection``) calls it
from a worker thread; nothing here reads the event store.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Sequence
from datetime import date, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from ._batch import Batch
from ._errors import AnalyticsDatabaseError
from ._facts import RUN_WIDTH, priced
from ._pricing import Price, PriceTable
from ._rollup import (
    BUILD_INDEXES,
    ROLLUPS,
    RollupSums,
    add_facts_to_rollups,
    create_rank_indexes,
    drop_rank_indexes,
    insert_rollups,
    rebuild_rollups,
    rebuilding,
    register_functions,
)
from ._tables import FACT_TABLES, MODEL_CALLS, RUNS, TOOL_CALLS, FactTable

__all__ = [
    "CONSUMER",
    "SCHEMA_VERSION",
    "AnalyticsDatabase",
    "Stale",
    "reprice",
    "transaction",
    "wal_backlog",
]

CONSUMER = "analytics"
"""The projection's row in the analytics database's ``tracking`` table (its checkpoint)."""

SCHEMA_VERSION = 4
"""Version of the fact tables' layout; a database with another version is rebuilt."""

# A long update lets the WAL grow to this before copying it into the database; a finished
# one leaves at most this much behind. Few large checkpoints cost far less than many small.
WAL_DURING_UPDATE = 256 * 1024 * 1024
WAL_AFTER_UPDATE = 64 * 1024 * 1024
_CACHE_KIB = 64 * 1024
_BRANCHES = "analytics_branches"
_META = "analytics_meta"


class Stale(Exception):
    """The checkpoint moved under us (another process applied the batch first)."""


def bind_plainly() -> None:
    """Let ``sqlite3`` bind ``None`` and ``bool`` without its failed adapter lookups.

    CPython's ``sqlite3`` (3.11) binds an int, float or str directly, but sends every other
    value through its adapter protocol first: with no adapter registered for ``None`` it
    asks the protocol type for ``__adapt__`` and the value for ``__conform__``, and each miss
    formats an ``AttributeError`` and throws it away, about 0.3 µs per NULL. A fact row holds
    several NULLs (unknown costs, cache counts, time to first chunk, a run's closing columns
    at its start): a 200,000-event build binds some 300,000 of them. Registered adapters
    are found by one dict lookup instead, and give what the fallback gave: ``None`` stays
    None (NULL), a ``bool`` binds as the integer it is (0 or 1). An adapter the application
    registered for either type is kept. Process-wide, as ``sqlite3``'s adapters are, and
    without any effect on what is stored.
    """
    if (type(None), sqlite3.PrepareProtocol) not in sqlite3.adapters:
        sqlite3.register_adapter(type(None), _NO_ADAPTATION.get)
    if (bool, sqlite3.PrepareProtocol) not in sqlite3.adapters:
        sqlite3.register_adapter(bool, int)


_NO_ADAPTATION: dict[Any, Any] = {}
"""Its ``get`` is an adapter in C that returns None for None (no Python frame per NULL)."""


def _create_sql(table: FactTable) -> str:
    types = {"int": "INTEGER", "float": "REAL", "text": "TEXT", "bool": "INTEGER"}
    cols = []
    for column in table.columns:
        decl = f"{column.sql} {types[column.kind]}"
        if column.name == table.key:
            decl += " PRIMARY KEY"
        cols.append(decl)
    return f"CREATE TABLE IF NOT EXISTS {table.name} ({', '.join(cols)})"


def _insert_sql(table: FactTable, verb: str = "INSERT") -> str:
    names = ", ".join(c.sql for c in table.columns)
    marks = ", ".join("?" * len(table.columns))
    return f"{verb} INTO {table.name} ({names}) VALUES ({marks})"


_RUN_INDEX = {name: i for i, name in enumerate(RUNS.column_names)}
_RUN_MODEL = _RUN_INDEX["gen_ai.request.model"]
_RUN_RECORDED = _RUN_INDEX["recorded_at"]
_RUN_ENDED = _RUN_INDEX["ended_at"]
_RUN_VERB = _RUN_INDEX["turnlog.verb"]
_RUN_STATUS = _RUN_INDEX["turnlog.status"]
_RUN_COST = _RUN_INDEX["turnlog.cost_usd"]
_RUN_TOKENS_IN = _RUN_INDEX["gen_ai.usage.input_tokens"]
assert RUNS.column_names[_RUN_STATUS:_RUN_COST + 2] == (
    "turnlog.status", "turnlog.reason", "error.type", "gen_ai.client.operation.duration", "turnlog.chunks",
    "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_creation.input_tokens", "turnlog.cost_usd", "turnlog.cost_source",
)  # fmt: skip


class AnalyticsDatabase:
    """The analytics database behind one projection: one connection, used from one thread at a time.

    Args:
        path: The SQLite file, or ``":memory:"``.
        store_id: The id of the store whose facts it keeps (None: unknown). A database that
            holds the facts of another store (a store file replaced by another one, say) is
            emptied when it opens, and rebuilt from the log by the next update.
    """

    def __init__(self, path: str, store_id: str | None) -> None:
        self.path = path
        self.store_id = store_id
        # The committed branch-to-session map, as of checkpoint ``synced_at`` (None: unknown).
        self.sessions: dict[str, str | None] = {}
        self.synced_at: int | None = None
        self.ranks_ready = False
        # The rollups of a build from scratch, summed as its batches commit, while every
        # batch since checkpoint 0 (empty fact tables) was this object's: they are then
        # the rollups of the facts at checkpoint ``_sums_at``. None: finish sums in SQL.
        self._sums: RollupSums | None = None
        self._sums_at = 0
        self._conn: sqlite3.Connection | None = None

    # ----------------------------------------------------------------------------- lifecycle

    def open(self) -> None:
        """Connect, set the connection up and create (or migrate) the tables."""
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=60)
        except sqlite3.Error as exc:
            raise AnalyticsDatabaseError(f"cannot open {self.path!r}: {exc}", database=self.path) from exc
        try:
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode=WAL")
            # A lost tail after a power cut loses facts AND their checkpoint together.
            conn.execute("PRAGMA synchronous=NORMAL")
            # No automatic checkpoint inside our commits (each one syncs the whole file and
            # stalls the batch); checkpoint_wal runs one, passively, when the WAL grows large.
            conn.execute("PRAGMA wal_autocheckpoint=0")
            # The WAL file keeps its largest size after a checkpoint; when this connection
            # starts it over, cut it back rather than leave hundreds of MiB on disk.
            conn.execute(f"PRAGMA journal_size_limit={WAL_AFTER_UPDATE}")
            # The rollups and rank indexes take writes all over their pages; SQLite's default
            # 2 MiB cache would read most pages back from the OS in every batch. The cache
            # grows only as pages are used, and only this connection's.
            conn.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
            register_functions(conn)
            bind_plainly()
            self._conn = conn
            self._migrate()
            present = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
            self.ranks_ready = all(name in present for name in BUILD_INDEXES)
        except BaseException:
            self._conn = None
            conn.close()
            raise

    @property
    def is_open(self) -> bool:
        """Whether the connection is open."""
        return self._conn is not None

    def close(self) -> None:
        """Close the connection. Idempotent."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def conn(self) -> sqlite3.Connection:
        """The open connection (for the queries)."""
        if self._conn is None:
            raise AnalyticsDatabaseError("the analytics projection is not open", database=self.path)
        return self._conn

    def _migrate(self) -> None:
        conn = self.conn()
        with transaction(conn):
            conn.execute(f"CREATE TABLE IF NOT EXISTS {_META} (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS tracking (consumer TEXT PRIMARY KEY, position INTEGER NOT NULL)"
            )
            meta = dict(conn.execute(f"SELECT key, value FROM {_META}").fetchall())
            version, owner = meta.get("schema_version"), meta.get("store_id")
            other_store = owner is not None and self.store_id is not None and owner != self.store_id
            if (version is not None and int(version) != SCHEMA_VERSION) or other_store:
                # Read models are disposable: an old layout (or another store's facts) is
                # dropped, and rebuilt from the log.
                for name in [*(t.name for t in FACT_TABLES), *(r.name for r in ROLLUPS), _BRANCHES]:
                    conn.execute(f"DROP TABLE IF EXISTS {name}")
                conn.execute("DELETE FROM tracking WHERE consumer = ?", (CONSUMER,))
                conn.execute(f"DELETE FROM {_META} WHERE key = 'prices'")
            for table in FACT_TABLES:
                conn.execute(_create_sql(table))
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {_BRANCHES} (branch_id TEXT PRIMARY KEY, session_id TEXT)"
            )
            for rollup in ROLLUPS:
                conn.execute(rollup.create_sql())
            # The indexes of the fact tables come with the end of the first build (finish).
            conn.execute(
                f"INSERT OR REPLACE INTO {_META} (key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            if self.store_id is not None:
                conn.execute(
                    f"INSERT OR REPLACE INTO {_META} (key, value) VALUES ('store_id', ?)", (self.store_id,)
                )

    # ------------------------------------------------------------------------------ checkpoint

    def checkpoint(self) -> int:
        """The last global position applied (0 before the first update)."""
        row = self.conn().execute("SELECT position FROM tracking WHERE consumer = ?", (CONSUMER,)).fetchone()
        return 0 if row is None else int(row[0])

    def sync(self) -> int:
        """The checkpoint, with the branch-to-session map as of that checkpoint.

        Another process may have applied batches (and learnt branches) since this one last
        committed; facts taken after its checkpoint must see its branches. Both are read in
        one read transaction, so the map is never older than the checkpoint it goes with.
        The map is updated in place: a batch holds it while it takes its facts.
        """
        conn = self.conn()
        conn.execute("BEGIN")
        try:
            position = self.checkpoint()
            if position != self.synced_at:
                rows = conn.execute(f"SELECT branch_id, session_id FROM {_BRANCHES}").fetchall()
                self.sessions.clear()
                self.sessions.update(rows)
                self.synced_at = position
        finally:
            conn.execute("COMMIT")
        return position

    # ---------------------------------------------------------------------------------- writes

    def apply_batch(
        self, batch: Batch, prices: PriceTable, expected: int, last: int, wal_limit: int | None = None
    ) -> tuple[int, int, int, int]:
        """Write ``batch``'s facts and the checkpoint ``last`` in one transaction; the counts written.

        Raises:
            Stale: the checkpoint is no longer ``expected`` (another process moved it).
        """
        conn = self.conn()
        try:
            with transaction(conn):
                # The batch's facts were taken with the session map as of ``expected``.
                if self.checkpoint() != expected or self.synced_at != expected:
                    raise Stale
                counts = self._write_facts(conn, batch, prices, expected)
                conn.execute(
                    "INSERT INTO tracking (consumer, position) VALUES (?, ?) "
                    "ON CONFLICT (consumer) DO UPDATE SET position = excluded.position",
                    (CONSUMER, last),
                )
        except BaseException:
            # Another process may have applied batches (and their branches) meanwhile:
            # the next sync reads the map again with the checkpoint. The batch may be
            # in the sums already, and is not in the facts: finish sums in SQL.
            self.synced_at = None
            self._sums = None
            raise
        # Only a committed batch's branches join the session map.
        self.sessions.update(batch.branches)
        self.synced_at = last
        if self._sums is not None:
            self._sums_at = last
        if wal_limit is not None:
            self.checkpoint_wal(wal_limit)
        return (batch.events, *counts)

    def _write_facts(
        self, conn: sqlite3.Connection, batch: Batch, prices: PriceTable, expected: int
    ) -> tuple[int, int, int]:
        # Rows stay tuples: a closed run is a new tuple. Lists would be kept for the whole
        # batch, and the collector never untracks a list, so it would walk them again and
        # again while the batch is written.
        runs: dict[str, tuple[Any, ...]] = {}
        for item in batch.runs:
            if len(item) == RUN_WIDTH:  # a start; an end has its reported cost after the row
                runs[item[0]] = item
            else:
                _close_run(conn, runs, item, prices)
        model_rows, tool_rows, branches = batch.model_rows, batch.tool_rows, batch.branches
        if model_rows:
            conn.executemany(_insert_sql(MODEL_CALLS), model_rows)
        if tool_rows:
            conn.executemany(_insert_sql(TOOL_CALLS), tool_rows)
        if runs:
            conn.executemany(_insert_sql(RUNS, "INSERT OR REPLACE"), runs.values())
        if branches:
            conn.executemany(f"INSERT OR REPLACE INTO {_BRANCHES} VALUES (?, ?)", branches.items())
        # During a build from scratch the rollups are summed once, in SQL, by finish: one
        # GROUP BY over all the facts costs about half of summing each batch in Python and
        # upserting its keys. Asked inside the transaction: another process may finish (or
        # start) a rebuild between two batches.
        if not rebuilding(conn):
            add_facts_to_rollups(conn, model_rows, tool_rows)
        else:
            if expected == 0:
                self._sums, self._sums_at = RollupSums(), 0  # checkpoint 0: no fact yet
            if self._sums is not None and self._sums_at == expected:
                self._sums.add(model_rows, tool_rows)
            else:
                self._sums = None  # another process wrote facts of this build
        return len(model_rows), len(tool_rows), len(runs)

    def clear(self, prices: PriceTable) -> None:
        """Drop every fact and the checkpoint (``rebuild``); the fact tables' indexes come back at the end."""
        conn = self.conn()
        with transaction(conn):
            for name in [*(t.name for t in FACT_TABLES), *(r.name for r in ROLLUPS)]:
                conn.execute(f"DELETE FROM {name}")
            conn.execute(f"DELETE FROM {_BRANCHES}")
            # Built again in one sort each when the rebuild is done (see finish): until then a
            # batch inserts into the tables and their keys only.
            drop_rank_indexes(conn)
            conn.execute("DELETE FROM tracking WHERE consumer = ?", (CONSUMER,))
            conn.execute(
                f"INSERT OR REPLACE INTO {_META} (key, value) VALUES ('prices', ?)", (prices.fingerprint(),)
            )
        self.sessions.clear()
        self.synced_at = None
        self.ranks_ready = False

    def finish(self) -> None:
        """End a build from scratch: sum the rollups from the facts and create the indexes (``BUILD_INDEXES``).

        Both in one transaction, so the rank indexes exist exactly when the rollups follow
        the facts (see ``rebuilding``); a process that finds them already created (another
        one finished the rebuild) leaves the rollups alone.
        """
        if self.ranks_ready:
            return
        conn = self.conn()
        sums, self._sums = self._sums, None
        with transaction(conn):
            if rebuilding(conn):
                if sums is not None and self._sums_at == self.checkpoint():
                    insert_rollups(conn, sums)
                else:
                    rebuild_rollups(conn)
            create_rank_indexes(conn)  # only the missing ones
        self.ranks_ready = True

    def reprice_if_needed(self, prices: PriceTable) -> None:
        """Re-price the facts and recompute the rollups when ``prices`` differs from the table used."""
        conn = self.conn()
        fingerprint = prices.fingerprint()
        row = conn.execute(f"SELECT value FROM {_META} WHERE key = 'prices'").fetchone()
        if row is not None and row[0] == fingerprint:
            return
        self._sums = None  # priced with the old table
        with transaction(conn):
            for table in (MODEL_CALLS, RUNS):
                reprice(conn, table, prices)
            rebuild_rollups(conn)
            conn.execute(f"INSERT OR REPLACE INTO {_META} (key, value) VALUES ('prices', ?)", (fingerprint,))

    def checkpoint_wal(self, limit: int) -> None:
        """Copy the WAL into the database (PASSIVE: never waits for readers) once its backlog passes ``limit`` bytes."""
        if self.path == ":memory:":
            return
        if wal_backlog(self.path) > limit:
            self.conn().execute("PRAGMA wal_checkpoint(PASSIVE)")

    def compact(self) -> None:
        """Rewrite the file so that no freed page (and no WAL frame) keeps a copy of dropped facts.

        Raises:
            AnalyticsDatabaseError: another connection kept the WAL from being truncated.
        """
        if self.path == ":memory:":
            return
        conn = self.conn()
        for step in ("checkpoint", "VACUUM", "checkpoint"):
            if step == "VACUUM":
                conn.execute("VACUUM")
                continue
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy:
                raise AnalyticsDatabaseError(
                    f"{self.path}: another connection kept the write-ahead log from being truncated, so "
                    "it may still hold old facts; close it and compact again",
                    database=self.path,
                )

    def read(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of a SQL query."""
        return self.conn().execute(query, params).fetchall()


def _close_run(
    conn: sqlite3.Connection, runs: dict[str, tuple[Any, ...]], closing: tuple[Any, ...], prices: PriceTable
) -> None:
    # ``closing`` is a run_end_fact: a RUNS row, then the cost its usage reported.
    run_id = closing[0]
    row = runs.get(run_id)
    if row is None:
        found = conn.execute(
            f"SELECT * FROM {RUNS.name} WHERE {RUNS.columns[0].sql} = ?", (run_id,)
        ).fetchone()
        row = tuple(found) if found is not None else closing[:RUN_WIDTH]
    model = row[_RUN_MODEL]
    tokens_in, tokens_out, read, write = closing[_RUN_TOKENS_IN : _RUN_TOKENS_IN + 4]
    # Priced at the price in force when the run started (its recorded_at, ISO 8601 UTC): the
    # day matters only to a model whose price changed, so only then is it parsed.
    started = row[_RUN_RECORDED]
    at = datetime.fromisoformat(started) if started and len(prices.history(model)) > 1 else None
    cost = priced(prices, model, tokens_in, tokens_out, closing[RUN_WIDTH], at, cache=(read, write))
    # The closing facts (status .. output tokens) sit side by side in RUNS.
    runs[run_id] = (
        *row[:_RUN_ENDED], closing[_RUN_ENDED], row[_RUN_VERB] or closing[_RUN_VERB],
        *row[_RUN_VERB + 1 : _RUN_STATUS], *closing[_RUN_STATUS:_RUN_COST], *cost,
    )  # fmt: skip


# ------------------------------------------------------------------------------ SQLite chores


def reprice(conn: sqlite3.Connection, table: FactTable, prices: PriceTable) -> None:
    """Re-price the facts of ``table`` that were not priced by the provider, after the price table changed."""
    models = [
        r[0]
        for r in conn.execute(
            f'SELECT DISTINCT "gen_ai.request.model" FROM {table.name} '
            "WHERE \"turnlog.cost_source\" IS NOT 'provider'"
        )
    ]
    for model in models:
        history = prices.history(model)
        match = '"turnlog.cost_source" IS NOT \'provider\' AND "gen_ai.request.model" IS ?'
        if not history:
            conn.execute(
                f'UPDATE {table.name} SET "turnlog.cost_usd" = NULL, "turnlog.cost_source" = NULL '
                f"WHERE {match}",
                (model,),
            )
            continue
        # Each price of the model's history re-prices the facts recorded while it was in force:
        # from its day (the first price: from the start) to the next price's day. recorded_at is
        # ISO 8601 UTC text, so a day compares with it as text.
        for i, price in enumerate(history):
            start = None if i == 0 else history[i].since
            end = history[i + 1].since if i + 1 < len(history) else None
            _reprice_period(conn, table, match, model, price, start, end)


def _reprice_period(
    conn: sqlite3.Connection,
    table: FactTable,
    match: str,
    model: str,
    price: Price,
    start: date | None,
    end: date | None,
) -> None:
    period = ""
    bounds: list[str] = []
    if start is not None:
        period += " AND recorded_at >= ?"
        bounds.append(start.isoformat())
    if end is not None:
        period += " AND recorded_at < ?"
        bounds.append(end.isoformat())
    # Same arithmetic, in the same order, as Price.cost: a re-price equals a rebuild. A cache
    # price the model does not have is its input price.
    read = price.input if price.cache_read is None else price.cache_read
    write = price.input if price.cache_write is None else price.cache_write
    tokens_in, tokens_out = '"gen_ai.usage.input_tokens"', '"gen_ai.usage.output_tokens"'
    cached_read = 'COALESCE("gen_ai.usage.cache_read.input_tokens", 0)'
    cached_write = 'COALESCE("gen_ai.usage.cache_creation.input_tokens", 0)'
    conn.execute(
        f'UPDATE {table.name} SET "turnlog.cost_usd" = CASE WHEN {tokens_in} IS NULL '
        f"OR {tokens_out} IS NULL THEN NULL "
        f"WHEN {cached_read} = 0 AND {cached_write} = 0 THEN "
        f"({tokens_in} * ? + {tokens_out} * ?) / 1000000.0 ELSE "
        f"(MAX({tokens_in} - {cached_read} - {cached_write}, 0) * ? + {cached_read} * ? "
        f"+ {cached_write} * ? + {tokens_out} * ?) / 1000000.0 END, "
        f'"turnlog.cost_source" = CASE WHEN {tokens_in} IS NULL '
        f"OR {tokens_out} IS NULL THEN NULL ELSE 'price_table' END "
        f"WHERE {match}{period}",
        (price.input, price.output, price.input, read, write, price.output, model, *bounds),
    )


_WAL_INDEX_VERSION = 3007000


def wal_backlog(database: str) -> int:
    """Bytes in the WAL of ``database`` not yet copied into it (0 without a WAL).

    The WAL file keeps its largest size after a checkpoint, and another connection (a
    projection in another process) may start it over without cutting it back: its size then
    calls for a checkpoint after every batch, each copying a few MiB and syncing the file. The frames not yet
    copied are read from the wal-index header instead (the ``-shm`` file, whose layout is
    part of SQLite's documented WAL format): ``mxFrame``, the last committed frame, at offset
    16 (a second copy at 64), and ``nBackfill``, the frames already copied, at offset 96.
    Without a readable wal-index the file's size stands in, as before.
    """
    try:
        with open(database + "-shm", "rb") as shm:
            header = shm.read(100)
    except OSError:
        header = b""
    if len(header) == 100:
        version, frames, again, copied = (
            int.from_bytes(header[at : at + 4], sys.byteorder) for at in (0, 16, 64, 96)
        )
        page = int.from_bytes(header[14:16], sys.byteorder)
        if version == _WAL_INDEX_VERSION and header[12] == 1 and frames == again and copied <= frames:
            return (frames - copied) * ((page if page > 1 else 65536) + 24)
    try:
        return Path(database + "-wal").stat().st_size
    except FileNotFoundError:
        return 0


class transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any exception (cancellation included)."""

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.conn.execute("COMMIT")
        else:
            self.conn.execute("ROLLBACK")
