"""The compact layout of SQLite stores (formats 3 and 4): bytes for ids and hashes, numbers for names.

It stores, per event:

- the id as its 16 bytes and the hash as its 32 bytes (a value that is not canonical, as a
  damaged or legacy one may be, is kept as the text it is, so it reads back unchanged);
- no ``prev_hash``: it is by definition the hash of the stream's previous version (empty for
  version 1), so reads take it from that row (``PREV_HASH``). A deleted or altered row still
  shows in ``verify``: the next version's hash covers the predecessor's hash, and a missing
  predecessor reads as an empty ``prev_hash``, which breaks the chain at that version;
- the stream and the type as small integers (``streams``, ``event_types``);
- the meta as an integer naming one row of ``metas``: every event of a run carries the same
  meta (its branch and run ids), so it is kept once;
- the payload compressed with a dictionary when that makes it smaller: ``codec`` names the
  row of ``dicts`` used, and its sign the codec: ``n > 0`` zlib with dictionary ``n`` (format 3
  writes these), ``n < 0`` zstd with dictionary ``-n`` as raw content (format 4), 0 a payload
  kept as it is. Reads follow each row's codec, so a store written by both reads alike.

The dictionary is trained from the store's first ``TRAIN_AFTER`` events, of their JSON *keys*
only (their values are replaced by empty ones): key names are what small payloads repeat,
and a dictionary holding no values cannot keep a copy of a redacted payload's content. Each
dictionary is stored with its SHA-256, checked when it is loaded; zlib checks each row
(the dictionary's Adler-32 in its header, the payload's at its end), zstd by the checksum of
its frame. Snapshots are compressed without a dictionary (zlib in format 3, zstd in format 4).

Format 4 is format 3 with zstd in place of zlib for what it writes: on the payloads of a kernel
conversation it compresses in about half the CPU time and inflates in about half, to the same
size (measured in docs/eventstore.md). A format 3 store keeps writing zlib, so that the
turnlog that made it can still read it; ``turnlog migrate`` copies it into format 4.

Names and ids learned inside a write transaction are kept apart until it commits: a rolled
back row's integer may be given to another name afterwards.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID, SafeUUID

import orjson

from ._errors import CorruptStoreError
from ._records import EncodedEvent
from ._sqlite_layout import TEXT_LAYOUT, Layout, StoreConnection, blob_param

__all__ = [
    "COMPACT_FORMAT",
    "ZSTD_FORMAT",
    "COMPACT_PAGE_SIZE",
    "PREV_HASH",
    "TRAIN_AFTER",
    "CompactLayout",
    "add_snapshot_codec",
    "attach",
    "create_compact",
    "meta_digest",
    "train_dictionary",
]

COMPACT_FORMAT = 3
"""The first format with the compact layout (its payloads compressed with zlib)."""
ZSTD_FORMAT = 4
"""The compact layout with payloads and snapshots compressed with zstd."""
COMPACT_PAGE_SIZE = 2048
"""The page size of a new format 3 file (SQLite's default is 4096). Each table and index takes
at least one page, and a store has 13 of them that stay small; on a 500-turn chat, 2048 made the
file 4% smaller for the same reads (measured in docs/eventstore.md)."""
TRAIN_AFTER = 64
"""Events a store holds before its first dictionary is trained from them."""
_MIN_COMPRESS = 48
"""Payloads shorter than this are kept as they are: zlib's 10 bytes of framing eat the gain."""
_LEVEL = 6
_WBITS = 12
_MEM_LEVEL = 5
"""A 4 KiB window and small hash tables: setting up zlib's default state (32 KiB window,
memLevel 8 or 9) costs 200-300 µs a payload, these 10-20 µs, for the same output on payloads of
a few hundred bytes (measured on a model.called event: 1,037 B to 301 B either way)."""
_DICT_BYTES = 3 * 1024
"""Within the window, with room for zlib's look-ahead."""
_CACHE_MAX = 4096
_SNAPSHOT_ZLIB = -1
"""``snapshots.codec`` of a snapshot compressed with plain zlib (0: kept as it is)."""
_SNAPSHOT_ZSTD = -2
"""``snapshots.codec`` of a snapshot compressed with zstd, without a dictionary."""
_ZSTD_SNAPSHOT_LEVEL = 3
_ZSTD_MAX_OUTPUT = 1 << 30
"""The most a zstd row may inflate to: a damaged frame header must not ask for more memory."""


def _zstd() -> Any:
    """The ``zstandard`` module, imported on first use.

    About 1 ms, which a store that holds no zstd row (format 2 or 3) never pays.
    """
    import zstandard

    return zstandard


def _zstd_params(zstd: Any) -> Any:
    # Greedy matching with small tables: on payloads of a few hundred bytes and a dictionary
    # of their keys it finds what the lazy strategies of zlib's level 6 find (the same size,
    # within 1%), in about half zlib's time; a frame checksum, as zlib's Adler-32, so that a
    # damaged row is an error on read, not other bytes. No magic number: the codec column
    # says what the bytes are (4 bytes a row).
    return zstd.ZstdCompressionParameters(
        window_log=12,
        hash_log=12,
        chain_log=12,
        search_log=4,
        min_match=4,
        strategy=zstd.STRATEGY_GREEDY,
        write_checksum=True,
        write_content_size=True,
        write_dict_id=False,
        format=zstd.FORMAT_ZSTD1_MAGICLESS,
    )


_decompressobj = zlib.decompressobj

PREV_HASH = "(SELECT p.hash FROM events p WHERE p.stream_id = e.stream_id AND p.version = e.version - 1)"
"""The select of an event's ``prev_hash``: the hash of its stream's previous version (NULL for
version 1, or when that row is missing), found through the ``(stream_id, version)`` index."""
_HASH_AT = "SELECT hash FROM events WHERE stream_id = ? AND version = ?"
_HEAD = "SELECT version, hash FROM events WHERE stream_id = ? ORDER BY version DESC LIMIT 1"
_UNSEEN = object()


def _id_text(value: Any) -> Any:
    if type(value) is bytes and len(value) == 16:
        h = value.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    return value


_new_uuid = object.__new__
_set_field = object.__setattr__
_from_bytes = int.from_bytes
_UNKNOWN_SAFETY = SafeUUID.unknown


def _uuid_of(raw: bytes) -> UUID:
    """The ``UUID`` of 16 bytes, built as ``UUID(bytes=raw)`` builds it, without its checks."""
    uuid = _new_uuid(UUID)
    _set_field(uuid, "int", _from_bytes(raw))
    _set_field(uuid, "is_safe", _UNKNOWN_SAFETY)
    return uuid


def _hash_text(value: Any) -> Any:
    return value.hex() if type(value) is bytes else value


def _id_bytes(event_id: Any) -> Any:
    """An id's 16 bytes when it is in the canonical form (lower-case, dashed), else the id itself."""
    if type(event_id) is str and len(event_id) == 36:
        digits = event_id.replace("-", "")
        try:
            raw = bytes.fromhex(digits)
        except ValueError:
            return event_id
        # Canonical: lower-case digits (hex() gives them back) with the four dashes in place.
        if (
            len(raw) == 16
            and raw.hex() == digits
            and event_id[8] == event_id[13] == event_id[18] == event_id[23] == "-"
        ):
            return raw
    return event_id


def _hash_bytes(digest: Any) -> Any:
    """A hash's 32 bytes when it is lower-case hex of a SHA-256, else the hash itself."""
    if type(digest) is str and len(digest) == 64:
        try:
            raw = bytes.fromhex(digest)
        except ValueError:
            return digest
        if raw.hex() == digest:
            return raw
    return digest


def meta_digest(meta: bytes) -> int:
    """The key ``metas`` rows are looked up by: 64 bits of BLAKE2b, as a signed SQLite integer."""
    return int.from_bytes(hashlib.blake2b(meta, digest_size=8).digest(), "big", signed=True)


def create_compact(conn: sqlite3.Connection, format_version: int = ZSTD_FORMAT) -> None:
    """Create the compact layout's event tables (in the open write transaction)."""
    conn.execute("CREATE TABLE streams (stream_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)")
    conn.execute("CREATE TABLE event_types (type_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)")
    # Looked up by a 64-bit digest: an index of the blobs themselves would double their size.
    conn.execute(
        "CREATE TABLE metas (meta_id INTEGER PRIMARY KEY, digest INTEGER NOT NULL, meta BLOB NOT NULL)"
    )
    conn.execute("CREATE INDEX metas_by_digest ON metas (digest)")
    conn.execute(
        "CREATE TABLE dicts (dict_id INTEGER PRIMARY KEY, zdict BLOB NOT NULL, sha256 BLOB NOT NULL)"
    )
    # Positions are never reused. Format 3 kept that promise with AUTOINCREMENT, whose
    # ``sqlite_sequence`` table is one more page written by every commit; format 4 keeps it as
    # the text layout does, by refusing every delete (a rowid is one more than the largest).
    autoincrement = " AUTOINCREMENT" if format_version < ZSTD_FORMAT else ""
    conn.execute(
        f"""
        CREATE TABLE events (
            position INTEGER PRIMARY KEY{autoincrement},
            id BLOB NOT NULL UNIQUE,
            stream_id INTEGER NOT NULL,
            version INTEGER NOT NULL,
            type_id INTEGER NOT NULL,
            schema INTEGER NOT NULL,
            codec INTEGER NOT NULL,
            data BLOB NOT NULL,
            meta_id INTEGER NOT NULL,
            recorded_at INTEGER NOT NULL,
            hash BLOB NOT NULL,
            UNIQUE (stream_id, version)
        )
        """
    )
    if not autoincrement:
        conn.execute(
            "CREATE TRIGGER events_no_delete BEFORE DELETE ON events "
            "BEGIN SELECT RAISE(ABORT, 'turnlog never deletes events'); END"
        )


def add_snapshot_codec(conn: sqlite3.Connection) -> None:
    """Give the compact layout's new ``snapshots`` table its ``codec`` column."""
    conn.execute("ALTER TABLE snapshots ADD COLUMN codec INTEGER NOT NULL DEFAULT 0")


def train_dictionary(payloads: Iterable[bytes]) -> bytes:
    """A zlib preset dictionary of the JSON keys of ``payloads`` (their values left empty).

    Each payload's *skeleton* (its JSON with every string emptied, every number zero) is kept
    once, if at least two payloads share it: a structure one event alone has may be keyed by
    its content (a mapping of names), which must not outlive a redaction of that event. The
    skeletons seen most often come last, where zlib reaches them most cheaply.
    """
    counts: dict[bytes, int] = {}
    for payload in payloads:
        try:
            skeleton = orjson.dumps(_skeleton(orjson.loads(payload)), option=orjson.OPT_SORT_KEYS)
        except (orjson.JSONDecodeError, TypeError):
            continue
        counts[skeleton] = counts.get(skeleton, 0) + 1
    ordered = sorted((s for s in counts if counts[s] > 1), key=lambda s: counts[s])
    out = b"".join(ordered)
    return out[-_DICT_BYTES:]


def _skeleton(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _skeleton(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_skeleton(item) for item in value[:2]]
    if isinstance(value, str):
        return ""
    if isinstance(value, bool) or value is None:
        return value
    return 0


class _Inflaters(threading.local):
    """The zstd decompressors of one thread.

    A ``ZstdDecompressor`` must not be shared: it lets go of the GIL while it works, and a
    store's reads run on the event loop's thread (``read_stream``) and its worker's
    (``read_rows``) at once.
    """

    def __init__(self) -> None:
        self.by_codec: dict[int, Any] = {}


class CompactLayout(Layout):
    """The compact layout (formats 3 and 4) of one connection, with its caches of interned values."""

    compact = True
    events_from = (
        "events e LEFT JOIN streams s ON s.stream_id = e.stream_id "
        "LEFT JOIN event_types t ON t.type_id = e.type_id LEFT JOIN metas m ON m.meta_id = e.meta_id"
    )
    select_columns = (
        "e.position, e.id, s.name, e.version, t.name, e.schema, e.data, m.meta, e.recorded_at, "
        f"{PREV_HASH}, e.hash, e.codec"
    )
    stream_col = "s.name"
    type_col = "t.name"
    id_col = "e.id"
    position_col = "e.position"
    version_col = "e.version"
    insert_columns = "id, stream_id, version, type_id, schema, codec, data, meta_id, recorded_at, hash"
    per_row = 7
    bound_snapshots = (
        "SELECT s.stream, s.type, s.version, s.schema, s.data, s.meta, s.recorded_at, "
        "CASE WHEN typeof(e.hash) = 'blob' THEN lower(hex(e.hash)) ELSE e.hash END, s.codec "
        "FROM snapshots s LEFT JOIN streams n ON n.name = s.stream "
        "LEFT JOIN events e ON e.stream_id = n.stream_id AND e.version = s.version"
    )
    snapshot_columns = "stream, type, version, schema, data, meta, recorded_at, NULL, codec"
    upsert_snapshot = (
        "INSERT OR REPLACE INTO snapshots (stream, type, version, schema, data, meta, recorded_at, codec) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    )

    def snapshot_params(self, values: Sequence[Any]) -> Sequence[Any]:
        # A snapshot holds a whole state (every message of a branch): compression shrinks it
        # about tenfold, without a dictionary, which would be trained on events.
        data = values[4]
        if self.zstd:
            packed, codec = self._snapshot_packer().compress(data), _SNAPSHOT_ZSTD
        else:
            packed, codec = zlib.compress(data, _LEVEL), _SNAPSHOT_ZLIB
        if len(packed) < len(data):
            return (*values[:4], packed, *values[5:7], codec)
        return (*values[:7], 0)

    _snapshot_zstd: Any
    """The zstd compressor of snapshots (format 4), made on first use."""

    def _snapshot_packer(self) -> Any:
        if self._snapshot_zstd is None:
            self._snapshot_zstd = _zstd().ZstdCompressor(level=_ZSTD_SNAPSHOT_LEVEL, write_checksum=True)
        return self._snapshot_zstd

    def snapshot_row(self, row: Sequence[Any]) -> Sequence[Any]:
        codec = row[8]
        data = row[4]
        if codec == _SNAPSHOT_ZLIB:
            try:
                data = zlib.decompress(data)
            except (zlib.error, TypeError):
                # Kept as stored: the snapshot then fails its digest and is ignored (loads)
                # or reported (verify), like any damaged snapshot.
                pass
        elif codec == _SNAPSHOT_ZSTD:
            zstd = _zstd()
            try:
                data = zstd.ZstdDecompressor().decompress(data, max_output_size=_ZSTD_MAX_OUTPUT)
            except (zstd.ZstdError, TypeError, ValueError):
                pass  # as above: the digest check rejects it
        return (*row[:4], data, *row[5:8])

    raw_insert = (
        "INSERT INTO events (position, id, stream_id, version, type_id, schema, codec, data, meta_id, "
        "recorded_at, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )

    def __init__(self, location: str, format_version: int = COMPACT_FORMAT) -> None:
        self.location = location
        self.zstd = format_version >= ZSTD_FORMAT
        """Whether new payloads and snapshots are compressed with zstd (format 4), else zlib."""
        self._threads = _Inflaters()
        """zstd decompressors by ``codec``, each with its dictionary digested once, per thread."""
        self._deflater: tuple[bytes, Any] | None = None
        """The dictionary new payloads use and its zstd compressor (that digested it once)."""
        self._snapshot_zstd = None
        self._known: dict[Any, int] = {}
        """Committed ``("type", name)`` and ``("meta", bytes)`` keys and their integers."""
        self._fresh: dict[Any, int] = {}
        """The same, learned in the open write transaction."""
        self._zdicts: dict[int, bytes] = {}
        self._fresh_zdicts: dict[int, bytes] = {}
        self._writing: tuple[int, bytes] | None = None
        """The dictionary new payloads are compressed with (committed), if any."""
        self._fresh_writing: tuple[int, bytes] | None = None
        self._looked_for_dict = False
        self._untrainable = False
        self._in_write = False

    # ------------------------------------------------------------------ transactions

    def begin(self) -> None:
        self._in_write = True

    def committed(self) -> None:
        if self._fresh:
            if len(self._known) > _CACHE_MAX:
                self._known.clear()
            self._known.update(self._fresh)
            self._fresh.clear()
        if self._fresh_zdicts:
            self._zdicts.update(self._fresh_zdicts)
            self._fresh_zdicts.clear()
        if self._fresh_writing is not None:
            self._writing, self._fresh_writing = self._fresh_writing, None
        self._in_write = False

    def discard(self) -> None:
        self._fresh.clear()
        self._fresh_zdicts.clear()
        self._fresh_writing = None

    def end(self) -> None:
        """The write transaction ended without a commit."""
        self.discard()
        self._in_write = False

    def forget_metas(self) -> None:
        """Drop every cached meta (a redaction deleted some rows of ``metas``)."""
        self._known = {k: v for k, v in self._known.items() if k[0] != "meta"}
        self._fresh.clear()

    # ------------------------------------------------------------------ reads

    page_columns = select_columns.replace(PREV_HASH, "e.stream_id")
    """``select_columns`` with the stream's number where ``prev_hash`` goes, for ``page``."""

    def page_select(self, where: str = "1", tail: str = "") -> str:
        return f"SELECT {self.page_columns} FROM {self.events_from} WHERE {where} {tail}"

    def page(self, conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        # Each prev_hash from the row before when it is the previous version (a read by stream
        # or of a log of one busy stream: all but the first row), else from the page, else by
        # one lookup. The per-row subquery of ``select`` costs 1.3 µs a row, this about 0.25.
        out: list[tuple[Any, ...]] = []
        append = out.append
        hashes: dict[tuple[Any, int], Any] | None = None
        last_key = last_version = last_hash = None
        for row in rows:
            key, version = row[9], row[3]
            if key == last_key and type(version) is int and version - 1 == last_version:
                prev = last_hash
            elif type(version) is int and version > 1:
                if hashes is None:
                    hashes = {(r[9], r[3]): r[10] for r in rows}
                before = (key, version - 1)
                prev = hashes.get(before, _UNSEEN)
                if prev is _UNSEEN:
                    found = conn.execute(_HASH_AT, before).fetchone()
                    prev = hashes[before] = None if found is None else found[0]
            else:
                prev = None
            last_key, last_version, last_hash = key, version, row[10]
            append(row[:9] + (prev,) + row[10:])  # noqa: RUF005 - 50 ns a row faster than unpacking
        return out

    def stream_is(self) -> str:
        return "e.stream_id = (SELECT stream_id FROM streams WHERE name = ?)"

    def filters(self, types: list[str] | None, stream_prefix: str | None) -> tuple[str, list[Any]]:
        sql = ""
        params: list[Any] = []
        if types is not None:
            if not types:
                return " AND 0", []
            sql += f" AND e.type_id IN (SELECT type_id FROM event_types WHERE name IN ({','.join('?' * len(types))}))"
            params.extend(types)
        if stream_prefix:
            sql += " AND e.stream_id IN (SELECT stream_id FROM streams WHERE substr(name, 1, ?) = ?)"
            params.extend((len(stream_prefix), stream_prefix))
        return sql, params

    def list_streams_sql(self, prefix: str | None) -> tuple[str, list[Any]]:
        params: list[Any] = []
        where = ""
        if prefix:
            where = "WHERE substr(name, 1, ?) = ?"
            params = [len(prefix), prefix]
        return (
            "SELECT name, v FROM (SELECT name, (SELECT max(version) FROM events e "
            f"WHERE e.stream_id = streams.stream_id) AS v FROM streams {where}) "
            "WHERE v IS NOT NULL ORDER BY name",
            params,
        )

    def stream_version_sql(self) -> str:
        return f"SELECT max(version) FROM events e WHERE {self.stream_is()}"

    def row(self, row: Sequence[Any]) -> tuple[Any, ...]:
        # Every event read goes through here: kept to plain operations (about 2 µs a row).
        position, eid, stream, version, type_, schema, data, meta, recorded, prev, digest, codec = row
        if stream is None or type_ is None or meta is None:
            self._dangling(position)
        if codec:
            data = self._payload(codec, data, position)
        if type(eid) is bytes and len(eid) == 16:
            h = eid.hex()
            eid = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        if type(prev) is bytes:
            prev = prev.hex()
        elif prev is None:  # version 1, or a predecessor that is missing (verify names the gap)
            prev = ""
        if type(digest) is bytes:
            digest = digest.hex()
        return (position, eid, stream, version, type_, schema, data, meta, recorded, prev, digest)

    def event_row(self, row: Sequence[Any]) -> tuple[Any, ...]:
        """``row`` for ``decode_event``: the id as a ``UUID`` made from its bytes, not as text.

        The text form would be parsed back by ``decode_event``: going straight from the 16
        bytes spares about 1 µs an event read.
        """
        position, eid, stream, version, type_, schema, data, meta, recorded, prev, digest, codec = row
        if stream is None or type_ is None or meta is None:
            self._dangling(position)
        if codec:
            inflater = self._threads.by_codec.get(codec)  # ``_payload``'s zstd case, inline: once per event
            if inflater is None:
                data = self._payload(codec, data, position)
            else:
                try:
                    data = inflater.decompress(data, _ZSTD_MAX_OUTPUT, False, False)
                except Exception:  # zstd's error type is imported lazily; the slow path says what it is
                    data = self.inflate(codec, data, position)
        if type(eid) is bytes and len(eid) == 16:
            eid = _uuid_of(eid)
        if type(prev) is bytes:
            prev = prev.hex()
        elif prev is None:
            prev = ""
        if type(digest) is bytes:
            digest = digest.hex()
        return (position, eid, stream, version, type_, schema, data, meta, recorded, prev, digest)

    stored_columns = "e.position, s.name, e.version, t.name, e.schema, e.data, m.meta, e.recorded_at, e.codec"

    def stored_rows(self, rows: list[tuple[Any, ...]]) -> list[Any]:
        # Names joined in, payloads inflated; no id, no hashes, so no prev_hash either.
        out: list[Any] = []
        append = out.append
        for position, stream, version, type_, schema, data, meta, recorded, codec in rows:
            if stream is None or type_ is None or meta is None:
                self._dangling(position)
            if codec:
                data = self._payload(codec, data, position)
            append((position, stream, version, type_, schema, data, meta, recorded))
        return out

    def _payload(self, codec: Any, data: Any, position: Any) -> bytes:
        # The common cases inline, with the dictionary already loaded: zstd (format 4), zlib.
        inflater = self._threads.by_codec.get(codec)
        if inflater is not None:
            try:
                # Positional: keyword arguments cost this call a quarter of its 1.5 µs.
                out: bytes = inflater.decompress(data, _ZSTD_MAX_OUTPUT, False, False)
                return out
            except Exception:  # zstd's error type is imported lazily; the slow path says what it is
                return self.inflate(codec, data, position)
        zdict = self._zdicts.get(codec)
        try:
            if zdict is None:
                raise KeyError(codec)
            inflater = _decompressobj(_WBITS, zdict=zdict)
            out = inflater.decompress(data)
            if not inflater.eof or inflater.unused_data:
                raise zlib.error("the compressed payload is truncated or has bytes after its end")
            return out
        except (KeyError, zlib.error, TypeError, ValueError):
            return self.inflate(codec, data, position)  # the slow path: loads, or says what is wrong

    def _dangling(self, position: int) -> None:
        found = self.conn.execute(
            "SELECT e.stream_id, s.name, e.type_id, t.name, e.meta_id, m.meta_id FROM events e "
            "LEFT JOIN streams s ON s.stream_id = e.stream_id LEFT JOIN event_types t ON t.type_id = e.type_id "
            "LEFT JOIN metas m ON m.meta_id = e.meta_id WHERE e.position = ?",
            (position,),
        ).fetchone()
        missing = []
        if found is not None:
            for key, present, table in zip(
                found[::2], found[1::2], ("streams", "event_types", "metas"), strict=True
            ):
                if present is None:
                    missing.append(f"row {key!r} of {table}")
        raise CorruptStoreError(
            self.location,
            f"the event at position {position} refers to {' and '.join(missing) or 'rows'} that are missing",
            position=position,
        )

    def inflate(self, codec: Any, data: Any, position: Any) -> bytes:
        """The payload of a compressed row.

        Raises:
            CorruptStoreError: the row or its dictionary is damaged (naming the row's position).
        """
        if type(codec) is int and codec < 0:
            return self._inflate_zstd(codec, data, position)
        zdict = self._dictionary(codec, position)
        try:
            inflater = zlib.decompressobj(zdict=zdict)
            out = inflater.decompress(data)
            if not inflater.eof or inflater.unused_data:
                raise zlib.error("the compressed payload is truncated or has bytes after its end")
        except (zlib.error, TypeError, ValueError) as exc:
            raise CorruptStoreError(
                self.location,
                f"the payload of the event at position {position} cannot be decompressed "
                f"(dictionary {codec!r}): {exc}",
                position=position,
            ) from exc
        return out

    def _inflate_zstd(self, codec: int, data: Any, position: Any) -> bytes:
        zstd = _zstd()
        inflater = self._threads.by_codec.get(codec)
        if inflater is None:
            zdict = self._dictionary(-codec, position)
            inflater = zstd.ZstdDecompressor(
                dict_data=zstd.ZstdCompressionDict(zdict, dict_type=zstd.DICT_TYPE_RAWCONTENT),
                format=zstd.FORMAT_ZSTD1_MAGICLESS,
            )
        try:
            out = inflater.decompress(data, max_output_size=_ZSTD_MAX_OUTPUT, allow_extra_data=False)
        except (zstd.ZstdError, TypeError, ValueError) as exc:
            raise CorruptStoreError(
                self.location,
                f"the payload of the event at position {position} cannot be decompressed "
                f"(zstd, dictionary {-codec!r}): {exc}",
                position=position,
            ) from exc
        if -codec in self._zdicts:  # a committed dictionary: its decompressor is kept
            self._threads.by_codec[codec] = inflater
        return out  # type: ignore[no-any-return]

    def _dictionary(self, codec: Any, position: Any) -> bytes:
        found = self._zdicts.get(codec)
        if found is None:
            found = self._fresh_zdicts.get(codec)
        if found is not None:
            return found
        row = self.conn.execute("SELECT zdict, sha256 FROM dicts WHERE dict_id = ?", (codec,)).fetchone()
        if row is None:
            raise CorruptStoreError(
                self.location,
                f"the event at position {position} is compressed with dictionary {codec!r}, "
                "which the dicts table lacks",
                position=position,
            )
        zdict, digest = row
        if type(zdict) is not bytes or hashlib.sha256(zdict).digest() != digest:
            raise CorruptStoreError(
                self.location,
                f"dictionary {codec!r} of the dicts table was altered (its SHA-256 does not match); "
                f"the event at position {position} and every other it compressed cannot be read",
                position=position,
            )
        (self._fresh_zdicts if self._in_write else self._zdicts)[codec] = zdict
        return zdict

    def id_param(self, event_id: str) -> Any:
        return _id_bytes(event_id)

    def _hash_text(self, value: Any) -> Any:
        return _hash_text(value)

    def head(self, conn: sqlite3.Connection, stream: str) -> tuple[Any, int, str]:
        # A stream's number, once committed, never changes (streams are never deleted): known,
        # it spares every append the join on the stream's name.
        key = ("stream", stream)
        stream_id = self._known.get(key) or self._fresh.get(key)
        if stream_id is not None:
            row = conn.execute(_HEAD, (stream_id,)).fetchone()
            return (stream_id, 0, "") if row is None else (stream_id, row[0], _hash_text(row[1]))
        row = conn.execute(
            "SELECT s.stream_id, e.version, e.hash FROM streams s "
            "LEFT JOIN events e ON e.stream_id = s.stream_id WHERE s.name = ? "
            "ORDER BY e.version DESC LIMIT 1",
            (stream,),
        ).fetchone()
        if row is None:
            return None, 0, ""
        self._learn(key, row[0])
        if row[1] is None:  # interned, but its events were redacted away? never deleted: damage or a rollback
            return row[0], 0, ""
        return row[0], row[1], _hash_text(row[2])

    def _learn(self, key: Any, value: int) -> None:
        """Remember a stream's number until the transaction ends: kept if it commits (``committed``)."""
        self._fresh[key] = value

    def stream_key(self, conn: sqlite3.Connection, stream: str) -> Any:
        conn.execute("INSERT OR IGNORE INTO streams (name) VALUES (?)", (stream,))
        stream_id = conn.execute("SELECT stream_id FROM streams WHERE name = ?", (stream,)).fetchone()[0]
        self._learn(("stream", stream), stream_id)
        return stream_id

    # ------------------------------------------------------------------ writes

    def _type_id(self, conn: sqlite3.Connection, name: str) -> int:
        key = ("type", name)
        found = self._known.get(key) or self._fresh.get(key)
        if found is None:
            row = conn.execute("SELECT type_id FROM event_types WHERE name = ?", (name,)).fetchone()
            if row is None:
                found = conn.execute("INSERT INTO event_types (name) VALUES (?)", (name,)).lastrowid
            else:
                found = row[0]
            assert found is not None
            self._fresh[key] = found
        return found

    def _meta_id(self, conn: sqlite3.Connection, meta: bytes) -> int:
        key = ("meta", meta)
        found = self._known.get(key) or self._fresh.get(key)
        if found is None:
            digest = meta_digest(meta)
            row = conn.execute(
                "SELECT meta_id FROM metas WHERE digest = ? AND meta = ?", (digest, meta)
            ).fetchone()
            if row is None:
                found = conn.execute(
                    "INSERT INTO metas (digest, meta) VALUES (?, ?)", (digest, meta)
                ).lastrowid
            else:
                found = row[0]
            assert found is not None
            self._fresh[key] = found
        return found

    def _compress(self, conn: sqlite3.Connection, data: bytes) -> tuple[int, bytes]:
        if len(data) < _MIN_COMPRESS:
            return 0, data
        writing = self._fresh_writing or self._writing
        if writing is None:
            if self._looked_for_dict:
                return 0, data
            self._looked_for_dict = True  # only to spare a look per event: ``after_write`` looks again
            writing = self._load_writing(conn)
            if writing is None:
                return 0, data
        dict_id, zdict = writing
        if self.zstd:
            packer = self._deflater
            if packer is None or packer[0] is not zdict:  # a new dictionary (or one rolled back)
                packer = self._deflater = (zdict, self._zstd_deflater(zdict))
            out = packer[1].compress(data)
            return (-dict_id, out) if len(out) < len(data) else (0, data)
        deflater = zlib.compressobj(_LEVEL, zlib.DEFLATED, _WBITS, _MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY, zdict)
        out = deflater.compress(data) + deflater.flush()
        return (dict_id, out) if len(out) < len(data) else (0, data)

    @staticmethod
    def _zstd_deflater(zdict: bytes) -> Any:
        zstd = _zstd()
        params = _zstd_params(zstd)
        digested = zstd.ZstdCompressionDict(zdict, dict_type=zstd.DICT_TYPE_RAWCONTENT)
        digested.precompute_compress(compression_params=params)
        return zstd.ZstdCompressor(dict_data=digested, compression_params=params)

    def _load_writing(self, conn: sqlite3.Connection) -> tuple[int, bytes] | None:
        """The store's newest dictionary, looked for once per connection (and after training)."""
        row = conn.execute("SELECT dict_id FROM dicts ORDER BY dict_id DESC LIMIT 1").fetchone()
        if row is None:
            return None
        writing = (row[0], self._dictionary(row[0], None))
        if self._in_write:
            self._fresh_writing = writing
        else:
            self._writing = writing
        return writing

    def encode(self, conn: sqlite3.Connection, ev: EncodedEvent) -> Sequence[Any]:
        codec, data = self._compress(conn, ev.data)
        return (
            blob_param(_id_bytes(ev.id)),
            self._type_id(conn, ev.type),
            ev.schema,
            codec,
            blob_param(data),
            self._meta_id(conn, ev.meta),
        )

    def hash_param(self, digest: str) -> Any:
        return blob_param(_hash_bytes(digest))

    single_insert = (
        "INSERT INTO events (id, stream_id, version, type_id, schema, codec, data, meta_id, recorded_at, "
        "hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )

    def single_row(
        self,
        conn: sqlite3.Connection,
        key: Any,
        version: int,
        prev: str,
        ev: EncodedEvent,
        digest: str,
        now: int,
    ) -> tuple[Any, ...]:
        eid, type_id, schema, codec, data, meta_id = self.encode(conn, ev)
        return (
            eid,
            key,
            version + 1,
            type_id,
            schema,
            codec,
            data,
            meta_id,
            now,
            blob_param(_hash_bytes(digest)),
        )

    def block_row(self, n: int, j: int, prev: str) -> str:
        # No previous hash: it is the row before's, derived on read (``?4`` is left unused).
        return f"(?{n}, ?1, ?3 + {j}, ?{n + 1}, ?{n + 2}, ?{n + 3}, ?{n + 4}, ?{n + 5}, ?2, ?{n + 6})"

    def raw_params(self, conn: sqlite3.Connection, event: Any) -> tuple[Any, ...]:
        codec, data = self._compress(conn, event.data)
        return (
            event.position,
            _id_bytes(event.id),
            self.stream_key(conn, event.stream),
            event.version,
            self._type_id(conn, event.type),
            event.schema,
            codec,
            data,
            self._meta_id(conn, bytes(event.meta)),
            event.recorded_at_us,
            _hash_bytes(event.hash),
        )

    def set_payload(
        self, conn: sqlite3.Connection, stream: str, version: int, data: bytes, meta: bytes
    ) -> None:
        found = conn.execute(
            f"SELECT e.position, e.meta_id FROM events e WHERE {self.stream_is()} AND e.version = ?",
            (stream, version),
        ).fetchone()
        if found is None:
            return
        position, old_meta = found
        # A redacted payload is a small marker: kept as it is, never in a dictionary.
        new_meta = self._meta_id(conn, meta)
        conn.execute(
            "UPDATE events SET codec = 0, data = ?, meta_id = ? WHERE position = ?",
            (data, new_meta, position),
        )
        if new_meta != old_meta:
            # The erased meta must leave no copy: its row goes once no event refers to it.
            conn.execute(
                "DELETE FROM metas WHERE meta_id = ? AND NOT EXISTS (SELECT 1 FROM events WHERE meta_id = ?)",
                (old_meta, old_meta),
            )
            self.forget_metas()

    def set_hashes(self, conn: sqlite3.Connection, updates: Iterable[tuple[int, str, str]]) -> None:
        # Each new prev_hash is the new hash of the row before, which the same updates set.
        conn.executemany(
            "UPDATE events SET hash = ? WHERE position = ?",
            [(_hash_bytes(digest), position) for position, _prev, digest in updates],
        )

    def after_write(self, conn: sqlite3.Connection, last_position: int) -> None:
        """Train the store's first dictionary once it holds ``TRAIN_AFTER`` events."""
        if last_position >= TRAIN_AFTER and not self._has_dictionary(conn):
            self._train(conn, [])

    def before_import(self, conn: sqlite3.Connection, payloads: list[bytes]) -> None:
        """Train the first dictionary from the store's and ``payloads`` before a copy goes in.

        A migration copies events in chunks of a thousand: trained only after its first
        chunk, the dictionary would leave every event of a small store uncompressed.
        """
        if not self._has_dictionary(conn):
            self._train(conn, payloads)

    def _has_dictionary(self, conn: sqlite3.Connection) -> bool:
        if self._writing is not None or self._fresh_writing is not None or self._untrainable:
            return True
        return self._load_writing(conn) is not None

    def _train(self, conn: sqlite3.Connection, extra: list[bytes]) -> None:
        sample = [
            row[0]
            for row in conn.execute(
                "SELECT data FROM events WHERE codec = 0 ORDER BY position LIMIT ?", (TRAIN_AFTER * 4,)
            )
        ]
        sample.extend(extra[: max(0, TRAIN_AFTER * 4 - len(sample))])
        if len(sample) < TRAIN_AFTER:
            return
        zdict = train_dictionary(sample)
        if len(zdict) < 32:  # nothing worth a dictionary: this connection stops trying
            self._untrainable = True
            return
        dict_id = conn.execute(
            "INSERT INTO dicts (zdict, sha256) VALUES (?, ?)", (zdict, hashlib.sha256(zdict).digest())
        ).lastrowid
        assert dict_id is not None
        self._fresh_zdicts[dict_id] = zdict
        self._fresh_writing = (dict_id, zdict)

    conn: sqlite3.Connection
    """The connection this layout belongs to (set by ``attach``)."""


def attach(conn: sqlite3.Connection, format_version: int, location: str) -> None:
    """Give ``conn`` (a ``StoreConnection``) the layout of a store of ``format_version``."""
    if not isinstance(conn, StoreConnection):
        raise TypeError("a store's connection is a StoreConnection")
    if format_version >= COMPACT_FORMAT:
        layout = CompactLayout(location, format_version)
        layout.conn = conn
        conn.layout = layout
    else:
        conn.layout = TEXT_LAYOUT
