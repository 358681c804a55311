"""The analytics database's own SQLite chores: transactions, the WAL backlog, re-pricing."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from types import TracebackType

from ._facts import FactTable
from ._pricing import PriceTable

__all__ = ["reprice", "transaction", "wal_backlog"]


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
        price = prices.lookup(model)
        match = '"turnlog.cost_source" IS NOT \'provider\' AND "gen_ai.request.model" IS ?'
        if price is None:
            conn.execute(
                f'UPDATE {table.name} SET "turnlog.cost_usd" = NULL, "turnlog.cost_source" = NULL '
                f"WHERE {match}",
                (model,),
            )
            continue
        # Same arithmetic, in the same order, as Price.cost: a re-price equals a rebuild.
        conn.execute(
            f'UPDATE {table.name} SET "turnlog.cost_usd" = CASE WHEN "gen_ai.usage.input_tokens" IS NULL '
            'OR "gen_ai.usage.output_tokens" IS NULL THEN NULL ELSE '
            '("gen_ai.usage.input_tokens" * ? + "gen_ai.usage.output_tokens" * ?) / 1000000.0 END, '
            '"turnlog.cost_source" = CASE WHEN "gen_ai.usage.input_tokens" IS NULL '
            "OR \"gen_ai.usage.output_tokens\" IS NULL THEN NULL ELSE 'price_table' END "
            f"WHERE {match}",
            (price.input, price.output, model),
        )


_WAL_INDEX_VERSION = 3007000


def wal_backlog(database: str) -> int:
    """Bytes in the WAL of ``database`` not yet copied into it (0 without a WAL).

    The WAL file keeps its largest size after a checkpoint, and another connection (the
    store's) may start it over without cutting it back: its size then calls for a checkpoint
    after every batch, each copying a few MiB and syncing the file. The frames not yet
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
