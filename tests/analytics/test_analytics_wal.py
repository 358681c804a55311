"""The WAL backlog the projection checkpoints by: frames not yet copied, not the file's size."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from turnlog.analytics._database import wal_backlog as _wal_backlog


def test_the_backlog_counts_frames_not_yet_copied_even_after_the_wal_starts_over(tmp_path: Path) -> None:
    path = str(tmp_path / "db.sqlite")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("CREATE TABLE t (x BLOB)")
        conn.executemany("INSERT INTO t VALUES (?)", [(b"x" * 3000,) for _ in range(300)])
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        _, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert frames == copied > 100
        assert _wal_backlog(path) == 0  # all copied: nothing to do, however large the file
        big = Path(path + "-wal").stat().st_size
        conn.execute("INSERT INTO t VALUES (x'00')")  # starts the WAL over: the file keeps its size
        assert Path(path + "-wal").stat().st_size == big
        backlog = _wal_backlog(path)
        assert 0 < backlog <= 4 * (page + 24) < big
        conn.executemany("INSERT INTO t VALUES (?)", [(b"y" * 3000,) for _ in range(20)])
        assert _wal_backlog(path) > backlog
    finally:
        conn.close()


def test_without_a_wal_index_the_file_size_stands_in(tmp_path: Path) -> None:
    path = str(tmp_path / "db.sqlite")
    assert _wal_backlog(path) == 0
    Path(path + "-wal").write_bytes(b"\0" * 1000)
    assert _wal_backlog(path) == 1000
    Path(path + "-shm").write_bytes(b"\1" * 100)  # not a wal-index header
    assert _wal_backlog(path) == 1000
