"""Redaction on PostgreSQL: after ``VACUUM (FULL)`` the table files and a dump hold no erased byte."""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

import anyio
import pytest

from turnlog.eventstore import NewEvent, NewSnapshot, Redaction, open_store

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")

SMALL = "Qv-Personal-7781 bob@example.net"
LARGE = "Wk-Personal-5521 " + secrets.token_hex(6000)


async def _relation_files(dsn: str, schema: str) -> list[Path]:
    """The files of the events and snapshots tables, their TOAST tables and indexes (None when unreadable)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("CHECKPOINT")
        datadir = (await (await conn.execute("SHOW data_directory")).fetchone())[0]
        rows = await (
            await conn.execute(
                """SELECT pg_relation_filepath(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = %s
                   UNION SELECT pg_relation_filepath(c.reltoastrelid) FROM pg_class c
                   JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.reltoastrelid <> 0""",
                (schema, schema),
            )
        ).fetchall()
    files = []
    for (relative,) in rows:
        if relative is None:
            continue
        base = Path(datadir) / relative
        files.extend(p for p in base.parent.glob(base.name + "*") if p.is_file())
    return files


# Alone: a snapshot that any other session of the server holds while VACUUM (FULL) rewrites the
# table makes it copy the erased row version into the new files (docs/redaction.md).
@pytest.mark.serial
async def test_redaction_leaves_no_copy_in_the_table_files_or_a_dump(
    pg_dsn: str, pg_schema: str, pg_url: str
) -> None:
    schema, url = pg_schema, pg_url
    async with open_store(url) as store:
        await store.append("branch-p", [NewEvent("m.a", {"c": SMALL}), NewEvent("m.a", {"c": LARGE})])
        await store.append("branch-p", [NewEvent("m.a", {"c": "stays"})])
        await store.save_snapshot(NewSnapshot("branch-p", 2, "s.t", {"copy": SMALL}))
        files = await _relation_files(pg_dsn, schema)
        readable = bool(files) and all(os.access(p, os.R_OK) for p in files)
        if readable:
            assert any(SMALL.encode() in p.read_bytes() for p in files)
        results = await store.redact_many(
            [Redaction("branch-p", 1, "gdpr"), Redaction("branch-p", 2, "gdpr")]
        )
        assert [r.changed for r in results] == [True, True]
        report = await store.verify()
        assert report.ok and report.redacted == 2, report.problems
        if readable:
            for path in await _relation_files(pg_dsn, schema):
                data = path.read_bytes()
                assert SMALL.encode() not in data, path
                assert LARGE[:40].encode() not in data, path
    if shutil.which("pg_dump"):
        dump = (await anyio.run_process(["pg_dump", "--schema", schema, pg_dsn])).stdout.decode()
        assert b"stays".hex() in dump or "stays" in dump
        assert SMALL not in dump and SMALL.encode().hex() not in dump
        assert LARGE[:40].encode().hex() not in dump
