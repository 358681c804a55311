"""The PostgreSQL store's settings and statements: URL parsing, the driver import, every SQL text.

Tables (in the schema named by ``?schema=``, default ``public``): ``turnlog_meta`` (the format
version), ``events``, ``snapshots`` and ``tracking``; ``Sql.create`` spells them out.
"""

from __future__ import annotations

import hashlib
import re
from types import ModuleType
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ._errors import StoreError, UnsupportedStoreURL

__all__ = [
    "EVENT_COLUMNS",
    "FORMAT_VERSION",
    "LOCK_TIMEOUT",
    "ROW_COLUMNS",
    "SNAPSHOT_COLUMNS",
    "Sql",
    "advisory_key",
    "import_psycopg",
    "masked",
    "parse_url",
]

FORMAT_VERSION = 1
"""The newest table layout this code reads and writes."""

_SCHEMA_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")
_OUR_PARAMS = ("schema", "pool_size")
LOCK_TIMEOUT = "30s"
"""How long a writer waits for the append lock before giving up with ``StoreUnavailable``."""
EVENT_COLUMNS = "position, stream, version, event_id, type, schema, data, meta, recorded_at, prev_hash, hash"
"""The columns in table order (inserts and the idempotency lookup)."""
ROW_COLUMNS = "position, event_id, stream, version, type, schema, data, meta, recorded_at, prev_hash, hash"
"""The columns in ``RawEvent`` order (reads, ``verify`` and raw copies)."""
SNAPSHOT_COLUMNS = "stream, type, version, schema, data, meta, recorded_at"
"""The columns of a snapshot in ``RawSnapshot`` order."""


def import_psycopg() -> tuple[ModuleType, ModuleType]:
    """The ``psycopg`` and ``psycopg_pool`` modules, or a ``StoreError`` naming the extra to install."""
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise StoreError(
            "the PostgreSQL backend needs psycopg 3 and psycopg-pool: pip install 'turnlog[postgres]'"
        ) from exc
    return psycopg, psycopg_pool


def parse_url(url: str) -> tuple[str, str, int]:
    """Split a store URL into the libpq conninfo, the schema name and the pool size."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise UnsupportedStoreURL(f"not a PostgreSQL URL: scheme {parts.scheme!r}")
    params = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in params if k in _OUR_PARAMS}
    rest = [(k, v) for k, v in params if k not in _OUR_PARAMS]
    schema = ours.get("schema", "public")
    if not _SCHEMA_RE.match(schema):
        raise UnsupportedStoreURL(
            f"schema={schema!r} in the store URL: use letters, digits and '_' (at most 63 characters)"
        )
    try:
        pool_size = int(ours.get("pool_size", "10"))
    except ValueError:
        pool_size = 0
    if pool_size < 1:
        raise UnsupportedStoreURL(f"pool_size={ours['pool_size']!r} in the store URL must be an int >= 1")
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(rest), parts.fragment))
    return conninfo, schema, pool_size


def masked(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and reprs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class Sql:
    """Every statement, with the schema name filled in once."""

    def __init__(self, schema: str) -> None:
        s = f'"{schema}"'
        self.schema = schema
        self.events = f"{s}.events"
        self.snapshots = f"{s}.snapshots"
        self.channel = "turnlog_" + hashlib.sha256(schema.encode()).hexdigest()[:24]
        self.create = [
            f"CREATE SCHEMA IF NOT EXISTS {s}",
            f"CREATE TABLE IF NOT EXISTS {s}.turnlog_meta (key text PRIMARY KEY, value text NOT NULL)",
            f"""CREATE TABLE IF NOT EXISTS {s}.events (
                position bigint PRIMARY KEY,
                stream text NOT NULL,
                version bigint NOT NULL,
                event_id uuid NOT NULL UNIQUE,
                type text NOT NULL,
                schema integer NOT NULL,
                data bytea NOT NULL,
                meta bytea NOT NULL,
                recorded_at bigint NOT NULL,
                prev_hash text NOT NULL,
                hash text NOT NULL,
                UNIQUE (stream, version)
            ) WITH (autovacuum_vacuum_threshold = 100000000, autovacuum_analyze_scale_factor = 0.01)""",
            f"CREATE INDEX IF NOT EXISTS events_type_position ON {s}.events (type, position)",
            f"""CREATE TABLE IF NOT EXISTS {s}.snapshots (
                stream text NOT NULL,
                type text NOT NULL,
                version bigint NOT NULL,
                schema integer NOT NULL,
                data bytea NOT NULL,
                meta bytea NOT NULL,
                recorded_at bigint NOT NULL,
                PRIMARY KEY (stream, type, version)
            )""",
            f"""CREATE TABLE IF NOT EXISTS {s}.tracking (
                consumer text PRIMARY KEY,
                position bigint NOT NULL
            )""",
            f"INSERT INTO {s}.turnlog_meta (key, value) VALUES ('format_version', '{FORMAT_VERSION}') "
            "ON CONFLICT (key) DO NOTHING",
        ]
        self.format = f"SELECT value FROM {s}.turnlog_meta WHERE key = 'format_version'"
        self.store_id = f"SELECT value FROM {s}.turnlog_meta WHERE key = 'store_id'"
        self.store_id_insert = (
            f"INSERT INTO {s}.turnlog_meta (key, value) VALUES ('store_id', %s) ON CONFLICT (key) DO NOTHING"
        )
        self.lock = f"LOCK TABLE {s}.events IN EXCLUSIVE MODE"
        self.heads = f"""
            SELECT (SELECT coalesce(max(position), 0) FROM {s}.events), q.stream, e.version, e.hash
            FROM unnest(%s::text[]) AS q(stream)
            LEFT JOIN LATERAL (
                SELECT version, hash FROM {s}.events WHERE stream = q.stream ORDER BY version DESC LIMIT 1
            ) AS e ON true"""
        self.by_ids = f"SELECT {EVENT_COLUMNS} FROM {s}.events WHERE event_id = ANY(%s::uuid[])"
        self.insert = f"""
            WITH ins AS (
                INSERT INTO {s}.events ({EVENT_COLUMNS})
                SELECT * FROM unnest(%s::bigint[], %s::text[], %s::bigint[], %s::uuid[], %s::text[],
                                     %s::integer[], %s::bytea[], %s::bytea[], %s::bigint[], %s::text[],
                                     %s::text[])
                RETURNING position
            )
            SELECT pg_notify('{self.channel}', max(position)::text) FROM ins"""
        self.head = f"SELECT coalesce(max(position), 0) FROM {s}.events"
        self.stream_version = f"SELECT coalesce(max(version), 0) FROM {s}.events WHERE stream = %s"
        self.listen = f'LISTEN "{self.channel}"'


def advisory_key(text: str) -> int:
    """A signed 64-bit advisory lock key derived from ``text``."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)
