"""``stream_persist``: branch snapshot files, the live JSONL buffer and batched chunk commits.

Files of one run, under ``persist_dir`` (default: a directory of the store's own,
``<store file>.runs/`` next to a SQLite store file, else ``./runs/<store_id>/``), all private
to their user (files 0600, directories 0700, or stricter under the umask):

- ``<snapshot_dir or persist_dir>/<branch_id>.json``: the branch projection, written
  atomically (a temporary file of an unpredictable name opened with ``O_EXCL | O_NOFOLLOW``,
  fsync, rename) before the stream starts and again at cleanup;
  ``Branch.from_snapshot(path, store=...)`` opens it. As a store's snapshots are, it is
  checked on load: a SHA-256 ``digest`` of its content, and the ``event_hash`` of the
  branch's event it stands at, which must be the store's (``check_snapshot_files`` checks a
  directory of them; ``turnlog verify`` reports them).
- ``<persist_dir>/<branch_id>.<run_id>.jsonl``: the live buffer (format in
  ``turnlog.kernel._run_buffer``): a header naming the store, then one line per chunk, its
  ``stream.chunk`` event written with one ``os.write`` *before* the chunk is processed, so a
  chunk that reached the process survives its crash. The store receives the same events
  (same ids) in batches; the buffer is removed once every one of them is committed, and
  ``recover`` imports what a crash left in it.

Branch and run ids name these files, so they must be canonical UUIDs: anything else raises
``UnsafePathError`` before a file is written.

Example::

    log = ChunkLog(store, run_id, meta, buffer=RunBuffer(path), options=PersistOptions())
    event = log.add(chunk)          # line written to the buffer, event queued
    if log.due():                   # a batch is appended when it is due
        await log.commit()
    await log.finish()              # everything queued is in the store, the buffer removed
"""

from __future__ import annotations

import hashlib
import os
import secrets
import struct
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import orjson

from turnlog._errors import UsageError
from turnlog.eventstore import EncodedEvent, EventEncoder, EventStore, MemoryEventStore
from turnlog.kernel.models import StreamChunk
from turnlog.projections import (
    PROJECTION_VERSION,
    SNAPSHOT_TYPE,
    BranchState,
    ChunkReceived,
    load_snapshot_state,
    snapshot_records,
)

from ._errors import SnapshotFileError
from ._run_buffer import (
    CHUNK_TYPE,
    BufferHeader,
    ChunkLine,
    RunBuffer,
    UnsafePathError,
    buffer_path,
    default_persist_dir,
    make_private_dir,
    snapshot_path,
    store_location,
)

__all__ = [
    "CHUNK_TYPE",
    "SNAPSHOT_FORMAT",
    "ChunkLog",
    "PersistOptions",
    "RunBuffer",
    "SnapshotFileError",
    "SnapshotFiles",
    "UnsafePathError",
    "buffer_path",
    "check_snapshot_files",
    "chunk_payload",
    "default_persist_dir",
    "read_snapshot_file",
    "snapshot_path",
    "verify_snapshot_files",
    "write_snapshot_file",
]

SNAPSHOT_FORMAT = "turnlog.branch_snapshot"
"""The ``format`` field of snapshot files."""

_SNAPSHOT_FILE_VERSION = 1
_DIGEST = "digest"
_EVENT_HASH = "event_hash"

UNVERIFIED_LEGACY = (
    "written before snapshot files carried a digest (no digest, no event_hash): its content "
    "cannot be checked; Branch.load rebuilds the branch from the store, and the next "
    "stream_persist run of the branch writes the file again with its digest"
)
"""Why a snapshot file of the format before digests is unverified (``Branch.snapshot_unverified``)."""


@dataclass(frozen=True, slots=True)
class PersistOptions:
    """How a streamed run hands its chunks to the store.

    Attributes:
        batch_chunks: Commit when this many chunks are waiting.
        batch_ms: Commit when this many milliseconds passed since the last commit (checked as
            chunks arrive; the rest is committed at the end of the run).
        fsync: With ``stream_persist``, fsync the buffer after every line (survives power
            loss, much slower); without it a line is handed to the operating system, which
            survives a crash of the process.
    """

    batch_chunks: int = 1024
    batch_ms: float = 50.0
    fsync: bool = False

    def __post_init__(self) -> None:
        if self.batch_chunks < 1:
            raise UsageError(f"PersistOptions.batch_chunks must be >= 1, got {self.batch_chunks}")
        if self.batch_ms < 0:
            raise UsageError(f"PersistOptions.batch_ms must be >= 0, got {self.batch_ms}")


# ----------------------------------------------------------------------------------- snapshots


def _snapshot_bytes(state: BranchState, event_hash: str) -> bytes:
    records = snapshot_records(state, None)
    body: dict[str, Any] = {
        "format": SNAPSHOT_FORMAT,
        "format_version": _SNAPSHOT_FILE_VERSION,
        "projection_version": PROJECTION_VERSION,
        "branch_id": state.branch_id,
        "stream": f"branch-{state.branch_id}",
        "version": state.version,
        "event_hash": event_hash,
        "written_at": datetime.now(UTC).isoformat(),
        "records": [
            {"type": r.type, "version": r.version, "schema": r.schema, "data": dict(r.data)} for r in records
        ],
    }
    body[_DIGEST] = _body_digest(body)
    return orjson.dumps(body)


def _body_digest(body: Mapping[str, Any]) -> str:
    """SHA-256 of every field but the digest itself, as canonical JSON (sorted keys)."""
    rest = {key: value for key, value in body.items() if key != _DIGEST}
    return hashlib.sha256(orjson.dumps(rest, option=orjson.OPT_SORT_KEYS)).hexdigest()


async def _event_hash(store: EventStore, stream: str, version: int) -> str:
    """The hash of ``stream``'s event at ``version`` ("" when there is none)."""
    if version < 1:
        return ""
    async for event in store.read_stream(stream, version, version):
        return event.hash
    return ""


def _write_atomic(path: Path, payload: bytes) -> None:
    make_private_dir(path.parent)
    # An unpredictable name, opened exclusively and never through a link: nothing planted in
    # the directory can redirect the write.
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    try:
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    # The rename itself must survive too: fsync the directory.
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


async def write_snapshot_file(path: str | os.PathLike[str], state: BranchState, *, store: EventStore) -> Path:
    """Write ``state`` to ``path`` atomically (temporary file, fsync, rename); return the path.

    The file holds the digest of its content and the hash of the branch's event in ``store``
    at the state's version, both checked when it is read back.
    """
    target = Path(path)
    payload = _snapshot_bytes(state, await _event_hash(store, f"branch-{state.branch_id}", state.version))
    await anyio.to_thread.run_sync(_write_atomic, target, payload)
    return target


async def read_snapshot_file(
    path: str | os.PathLike[str], *, store: EventStore
) -> tuple[BranchState, str | None]:
    """The branch state a snapshot file holds, once its digest and its place in ``store``'s log are checked.

    A file of the format before digests (neither ``digest`` nor ``event_hash``) is read, not
    refused, and returned with the reason it is unverified (``UNVERIFIED_LEGACY``) in place of
    None: only that the store holds the branch's event at its version could be checked.

    Raises:
        SnapshotFileError: the file is missing, not JSON, not a turnlog snapshot, written by
            another projection version, edited (its digest differs), stripped of its digest
            (an ``event_hash`` without one), or it stands at an event that is not the store's.
    """
    try:
        raw = await anyio.Path(path).read_bytes()
    except OSError as exc:
        raise SnapshotFileError(path, f"cannot read the snapshot: {exc}") from exc
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SnapshotFileError(path, f"not JSON: {exc}") from exc
    if not isinstance(body, dict) or body.get("format") != SNAPSHOT_FORMAT:
        raise SnapshotFileError(path, f"not a {SNAPSHOT_FORMAT} file")
    if body.get("projection_version") != PROJECTION_VERSION:
        raise SnapshotFileError(
            path,
            f"written by projection version {body.get('projection_version')}, this code is "
            f"{PROJECTION_VERSION}; rebuild the branch from the store instead",
        )
    unverified = await _check_binding(path, body, store)
    # The state is decoded by the same loader as store snapshots, from a private in-memory store.
    from turnlog.eventstore import NewSnapshot

    scratch = MemoryEventStore()
    stream = str(body["stream"])
    try:
        for record in body["records"]:
            await scratch.save_snapshot(
                NewSnapshot(
                    stream,
                    int(record["version"]),
                    str(record["type"]),
                    record["data"],
                    int(record["schema"]),
                    {"projection_version": PROJECTION_VERSION},
                )
            )
        state = await load_snapshot_state(scratch, stream, int(body["version"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise SnapshotFileError(path, f"malformed snapshot: {exc}") from exc
    finally:
        await scratch.close()
    if state is None:
        raise SnapshotFileError(path, f"no {SNAPSHOT_TYPE} record in the file")
    return state, unverified


async def _check_binding(path: str | os.PathLike[str], body: dict[str, Any], store: EventStore) -> str | None:
    """The digest of the file's content, then the hash of the event it stands at, against the store.

    Returns None when both hold, or why the file is unverified: a file of the format before
    digests has neither field, and only that its version exists in the store is checked. A
    file with an ``event_hash`` but no digest was written by this format and stripped.
    """
    stream, version = body.get("stream"), body.get("version")
    if not isinstance(stream, str) or not isinstance(version, int) or isinstance(version, bool):
        raise SnapshotFileError(path, "malformed snapshot: no stream and version")
    digest = body.get(_DIGEST)
    if digest is None and _EVENT_HASH not in body:
        if not await _event_hash(store, stream, version):
            raise SnapshotFileError(
                path, f"it stands at version {version} of {stream}, which this store does not hold"
            )
        return UNVERIFIED_LEGACY
    if not isinstance(digest, str):
        raise SnapshotFileError(path, "it carries no digest (stripped: it has the event_hash of a file "
                                      "that had one); open the branch with Branch.load instead")  # fmt: skip
    if digest != _body_digest(body):
        raise SnapshotFileError(path, "its digest does not match its content (the file was edited)")
    if body.get(_EVENT_HASH) != await _event_hash(store, stream, version):
        raise SnapshotFileError(
            path,
            f"it stands at version {version} of {stream}, whose hash in this store differs "
            "(a snapshot of another store or another history)",
        )
    return None


@dataclass(frozen=True, slots=True)
class SnapshotFiles:
    """What ``verify_snapshot_files`` found in a directory of snapshot files.

    Attributes:
        checked: How many files were read.
        problems: The files refused (edited, stripped, foreign, unreadable), each naming its path.
        unverified: ``(path, why)`` of the files that load but could not be checked: written in
            the format before digests.
    """

    checked: int
    problems: tuple[SnapshotFileError, ...]
    unverified: tuple[tuple[str, str], ...]


async def verify_snapshot_files(directory: str | os.PathLike[str], store: EventStore) -> SnapshotFiles:
    """Check every snapshot file (``*.json``) in ``directory`` against ``store``.

    ``turnlog verify`` runs it on the store's run directory: problems fail it, unverified
    files are named. A directory that does not exist holds nothing.

    Example::

        found = await verify_snapshot_files(default_persist_dir(store), store)
        for path, why in found.unverified:
            print(f"{path}: unverified: {why}")
    """
    folder = anyio.Path(directory)
    if not await folder.is_dir():
        return SnapshotFiles(0, (), ())
    problems: list[SnapshotFileError] = []
    unverified: list[tuple[str, str]] = []
    paths = sorted([found async for found in folder.glob("*.json")])
    for path in paths:
        try:
            _, why = await read_snapshot_file(path, store=store)
        except SnapshotFileError as exc:
            problems.append(exc)
        else:
            if why is not None:
                unverified.append((os.fspath(path), why))
    return SnapshotFiles(len(paths), tuple(problems), tuple(unverified))


async def check_snapshot_files(
    directory: str | os.PathLike[str], store: EventStore
) -> list[SnapshotFileError]:
    """Check every snapshot file (``*.json``) in ``directory`` against ``store``; return the problems.

    The problems of ``verify_snapshot_files`` (which also names the unverified files). A
    directory that does not exist holds no problems.

    Example::

        for problem in await check_snapshot_files(default_persist_dir(store), store):
            print(problem)      # "<path>: its digest does not match its content (...)"
    """
    return list((await verify_snapshot_files(directory, store)).problems)


# -------------------------------------------------------------------------------------- buffer


def chunk_payload(chunk: StreamChunk, seq: int) -> dict[str, Any]:
    """The ``stream.chunk`` payload of a chunk: ``seq``, ``type``, ``content`` and the fields set.

    Fields at their default (no tool, not an error, not a delta, no metadata) are left out;
    decoding (``ChunkReceived``) restores them, so the stored bytes stay small.
    """
    data: dict[str, Any] = {"seq": seq, "type": chunk.type, "content": chunk.content or ""}
    if chunk.tool_name is not None:
        data["tool_name"] = chunk.tool_name
    if chunk.tool_id is not None:
        data["tool_id"] = chunk.tool_id
    if chunk.tool_input is not None:
        data["tool_input"] = chunk.tool_input
    if chunk.tool_output is not None:
        data["tool_output"] = chunk.tool_output
    if chunk.is_error:
        data["is_error"] = True
    if chunk.is_delta:
        data["is_delta"] = True
    if chunk.metadata:
        data["metadata"] = chunk.metadata
    return data


class _ChunkIds:
    """UUIDv7 ids (as ints) for the chunks of one run, increasing, with random bits drawn in bulk.

    The same layout as ``turnlog.eventstore.uuid7`` (48-bit milliseconds, version 7, a 12-bit
    counter, variant, 62 random bits); a run makes thousands of ids per second, and one
    ``os.urandom`` call per 4096 ids instead of one per id is a visible part of a chunk's cost.
    The encoder takes the ints as they are, so no ``UUID`` object is made per chunk.
    """

    __slots__ = ("_counter", "_ms", "_pool", "_pos")

    def __init__(self) -> None:
        self._ms = 0
        self._counter = 0
        self._pool: tuple[int, ...] = ()
        self._pos = 0

    def __call__(self, ms: int) -> int:
        """The next id at ``ms`` milliseconds since the epoch (never below the previous one)."""
        if ms > self._ms:
            self._ms = ms
            self._counter = 0
        else:
            self._counter += 1
            if self._counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                self._ms += 1
                self._counter = 0
            ms = self._ms
        pos = self._pos
        if pos >= len(self._pool):
            # a run of a dozen chunks (a proxied call) draws 512 bytes, a long one 32 KiB at a time
            self._pool = _RANDOM(os.urandom(8 * 4096)) if self._pool else _FIRST(os.urandom(8 * 64))
            pos = 0
        self._pos = pos + 1
        return (
            (ms & 0xFFFF_FFFF_FFFF) << 80
            | 0x7 << 76
            | self._counter << 64
            | 0b10 << 62
            | (self._pool[pos] & 0x3FFF_FFFF_FFFF_FFFF)
        )


_RANDOM = struct.Struct(">4096Q").unpack
_FIRST = struct.Struct(">64Q").unpack


class ChunkLog:
    """Numbers the chunks of one run, writes them to the buffer and commits them in batches.

    The run stream ``run-<run_id>`` holds only this run's chunks, so chunk ``seq`` k is stream
    version k; a batch is appended with ``expected_version`` = the last committed seq.

    Args:
        store: The event store.
        run_id: The run (stream ``run-<run_id>``).
        meta: Event meta of every chunk (branch_id, run_id, session_id).
        buffer: The live buffer, or None without ``stream_persist``.
        options: Batching and fsync.
    """

    def __init__(
        self,
        store: EventStore,
        run_id: str,
        meta: Mapping[str, Any],
        *,
        buffer: RunBuffer | None = None,
        options: PersistOptions | None = None,
    ) -> None:
        self.store = store
        self.stream = f"run-{run_id}"
        self.meta = {k: v for k, v in meta.items() if v is not None}
        self.buffer = buffer
        self.options = options or PersistOptions()
        self.seq = 0
        self.committed = 0
        self._pending: list[EncodedEvent] = []
        self._last_commit = time.monotonic()
        self._batch_s = self.options.batch_ms / 1000.0
        self._schema = ChunkReceived.schema_version
        self._stamp_ms = -1
        self._stamp = b""
        self._uncertain = False
        self._ids = _ChunkIds()
        # Each chunk is validated and encoded once, here: the canonical bytes serve the buffer
        # line and the store, which takes them without encoding them again (append_encoded).
        self._encode = EventEncoder(
            CHUNK_TYPE, schema=self._schema, meta=self.meta, max_event_bytes=store.max_event_bytes
        ).encode
        # The line format is defined once, in _run_buffer; a new buffer starts with its header.
        self._line = ChunkLine(run_id, self.meta, self._schema).template
        if buffer is not None and buffer.lines == 0:
            branch_id = str(self.meta.get("branch_id", ""))
            buffer.write(BufferHeader(store.store_id, store_location(store), branch_id, run_id).encode())

    @property
    def pending(self) -> int:
        """Chunks recorded (and buffered) but not yet committed."""
        return len(self._pending)

    def add(self, chunk: StreamChunk) -> EncodedEvent:
        """Number one chunk, buffer its event, and queue the event for the store.

        The buffer line is written before this returns, hence before the chunk is processed.

        Raises:
            EventTooLarge: the chunk's event is over the store's size limit (nothing is written).
        """
        return self.add_data(chunk_payload(chunk, self.seq + 1))

    def add_data(self, data: dict[str, Any]) -> EncodedEvent:
        """``add`` for a ``stream.chunk`` payload made already (``data["seq"]`` the next seq).

        Raises:
            UsageError: ``data["seq"]`` is not the next seq (nothing is written).
            EventTooLarge: the chunk's event is over the store's size limit (nothing is written).
        """
        return self.add_many((data,))[0]

    def add_many(self, payloads: Sequence[dict[str, Any]]) -> list[EncodedEvent]:
        """``add_data`` for several payloads in order, their buffer lines written in one call.

        Every line is written before this returns. Should a payload be refused, the ones before
        it are written and queued as ``add_data`` would have done, and the error raised.

        Raises:
            UsageError: a payload's ``seq`` is not the next one.
            EventTooLarge: a chunk's event is over the store's size limit.
        """
        events: list[EncodedEvent] = []
        lines: list[bytes] = []
        try:
            for data in payloads:
                seq = self.seq + 1
                if data.get("seq") != seq:
                    raise UsageError(f"chunk seq {data.get('seq')!r} is not the next one ({seq})")
                ms = time.time_ns() // 1_000_000  # one clock read for the id and the line's recorded_at
                event = self._encode(data, self._ids(ms))
                self.seq = seq  # counted once it is an event: seq k stays stream version k
                if self.buffer is not None:
                    if ms != self._stamp_ms:
                        # One ISO timestamp per millisecond: formatting one per chunk costs more than the write.
                        self._stamp_ms = ms
                        self._stamp = datetime.fromtimestamp(ms / 1000, UTC).isoformat().encode()
                    # The line holds the very id and data bytes the store gets.
                    lines.append(self._line % (event.id.encode(), seq, event.data, self._stamp))
                events.append(event)
        finally:
            if lines and self.buffer is not None:
                self.buffer.write_lines(lines)
            self._pending += events
        return events

    def due(self) -> bool:
        """True when the waiting chunks should be committed now."""
        pending = self._pending
        return bool(pending) and (
            len(pending) >= self.options.batch_chunks or time.monotonic() - self._last_commit >= self._batch_s
        )

    async def _resync(self) -> None:
        # The run stream holds only this run's chunks, in order: its version is the count stored.
        stored = await self.store.stream_version(self.stream)
        done = stored - self.committed
        if done > 0:
            del self._pending[:done]
            self.committed = stored
        self._uncertain = False

    async def commit(self) -> None:
        """Append every waiting chunk to the run stream (one atomic append).

        The chunks stay waiting until the append returned, so nothing is lost when it is
        cancelled or fails; the next commit first reads how many of them the store has.
        """
        self._last_commit = time.monotonic()
        if not self._pending:
            return
        if self._uncertain:
            await self._resync()
        batch = self._pending[:]  # a copy: chunks added while the append runs wait for the next one
        try:
            await self.store.append_encoded(self.stream, batch, self.committed)
        except BaseException:
            # Maybe stored, maybe not (a cancelled append may still commit): check next time.
            self._uncertain = True
            raise
        del self._pending[: len(batch)]
        self.committed += len(batch)

    async def finish(self) -> bool:
        """Commit what is waiting and, when all is committed, remove the buffer.

        Returns:
            True when every chunk is in the store (the buffer, if any, is gone).
        """
        await self.commit()
        if self.buffer is not None:
            if self.committed == self.seq:
                await anyio.to_thread.run_sync(self.buffer.remove)
            else:
                self.buffer.close()
        return self.committed == self.seq
