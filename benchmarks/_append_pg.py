"""The PostgreSQL side of ``turnlog bench append``: scratch schemas and the raw async psycopg peer.

The peer is the floor the PostgreSQL targets name: one connection in autocommit, one statement
per append that inserts the same row as our store (same table, made by our store in a scratch
schema; the same canonical JSON bytes and SHA-256 chain, computed by the same functions) and
notifies the schema's channel, ``WITH ins AS (INSERT ... RETURNING position) SELECT pg_notify(...)``.
It keeps the stream heads in memory, as our store object does, and checks nothing on the server.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from turnlog.eventstore import open_store, uuid7
from turnlog.eventstore._encoding import encode_json, event_hash
from turnlog.eventstore._postgres_sql import EVENT_COLUMNS, Sql
from turnlog.eventstore._url import parse_postgres_url

__all__ = ["drop_schema", "make_schema", "raw_psycopg_single", "scratch_url"]


def scratch_url(url: str, tag: str) -> str:
    """``url`` with its ``schema`` parameter replaced by a scratch schema named after it and ``tag``."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["schema"] = f"{query.get('schema', 'public')}_bench_{tag}"
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))


async def make_schema(url: str) -> None:
    """Create our store's tables in the URL's schema (the raw peer writes into the same layout)."""
    async with open_store(url):
        pass


async def drop_schema(url: str) -> None:
    """Drop the URL's (scratch) schema and everything in it."""
    import psycopg

    conninfo, schema, _ = parse_postgres_url(url)
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def raw_psycopg_single(
    url: str, n: int, streams: list[str], payload: Any, meta: dict[str, str]
) -> tuple[float, float]:
    """``n`` single-event appends over ``streams``; (wall seconds, process CPU seconds)."""
    import psycopg

    conninfo, schema, _ = parse_postgres_url(url)
    sql = Sql(schema)
    query = f"""
        WITH ins AS (
            INSERT INTO {sql.events} ({EVENT_COLUMNS})
            VALUES (nextval('{sql.sequence}'), %s, %s, %s::uuid, %s, %s, %s, %s, %s, %s, %s)
            RETURNING position
        )
        SELECT pg_notify('{sql.channel}', position::text) FROM ins"""
    heads = {stream: (0, "") for stream in streams}
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(n):
            stream = streams[i % len(streams)]
            version, prev = heads[stream]
            version += 1
            event_id = str(uuid7())
            now = time.time_ns() // 1000
            data = encode_json(payload(i))
            meta_bytes = encode_json(meta)
            digest = event_hash(prev, event_id, stream, version, "message.added", 1, data, meta_bytes, now)
            row = [stream, version, event_id, "message.added", 1, data, meta_bytes, now, prev, digest]
            await (await conn.execute(query, row)).fetchone()
            heads[stream] = (version, digest)
        return time.perf_counter() - start, time.process_time() - cpu
