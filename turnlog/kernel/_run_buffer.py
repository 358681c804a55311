"""The live buffer of a ``stream_persist`` run: its files, its line format (defined here once), its lock.

A buffer is ``<persist_dir>/<branch_id>.<run_id>.jsonl``, JSON Lines, private to its user
(0600 in a 0700 directory, or stricter under the user's umask):

- line 1, the header: ``{"format": "turnlog.run_buffer", "format_version": 1, "store_id": ...,
  "store": ..., "branch_id": ..., "run_id": ...}``: which store the run writes to (its
  ``store_id`` and, for a store file, its path), so that ``recover`` never imports a buffer
  into another store. Format version 2 adds ``"opening"``: the branch events that start the
  run (``branch.created`` when it starts the branch, its new messages, ``run.started``), as
  ``[{"type": ..., "data": ...}]`` payloads, for a writer that forwards chunks before it
  commits them (``turnlog proxy``); ``recover`` appends them when the store lacks the run's
  ``run.started``;
- then one line per chunk: its ``stream.chunk`` event in the store's envelope (``id``,
  ``stream``, ``version``, ``type``, ``schema``, ``data``, ``meta``, ``recorded_at``), holding
  the very id and data bytes the store receives; ``version`` is ``data.seq``, the chunk's
  version in the run stream ``run-<run_id>``.

The writer (``RunBuffer``, ``ChunkLine``) holds an exclusive ``flock`` on its file while the run
streams; ``recover`` takes the same lock before it reads a buffer, so it never touches the
buffer of a live run, and two recovers never import one buffer twice.

Branch and run ids name files here, so they must be canonical UUIDs (``UnsafePathError``
otherwise, before anything is written), and every path is checked to stay in its directory.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson

from turnlog.eventstore import EventStore
from turnlog.projections import ChunkReceived, default_run_dir

from ._errors import UnsafePathError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: buffers are not locked
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "BUFFER_FORMAT",
    "BUFFER_FORMAT_VERSION",
    "CHUNK_TYPE",
    "BufferHeader",
    "BufferedChunk",
    "ChunkLine",
    "RunBuffer",
    "UnsafePathError",
    "buffer_name",
    "buffer_path",
    "check_file_id",
    "default_persist_dir",
    "lock_buffer",
    "make_private_dir",
    "parse_buffer_name",
    "path_inside",
    "snapshot_path",
    "store_location",
]

CHUNK_TYPE = ChunkReceived.event_type
"""The event type of stream chunks (``stream.chunk``)."""

BUFFER_FORMAT = "turnlog.run_buffer"
"""The ``format`` field of a buffer's header line."""

BUFFER_FORMAT_VERSION = 2
"""The newest buffer format this code reads (1 is written unless the header has an opening)."""

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


# --------------------------------------------------------------------------------------- paths


def check_file_id(value: object, what: str) -> str:
    """``value`` when it is a canonical UUID (lower case, dashes), else ``UnsafePathError``."""
    if not isinstance(value, str):
        raise UnsafePathError(what, value, "not a string")
    try:
        canonical = str(UUID(value))
    except ValueError:
        canonical = None
    if canonical != value:
        raise UnsafePathError(what, value, "not a canonical UUID")
    return value


def path_inside(directory: str | os.PathLike[str], name: str) -> Path:
    """``directory/name``, refused (``UnsafePathError``) unless it resolves to a file right in ``directory``."""
    base = Path(directory)
    target = base / name
    if target.parent != base or name in ("", ".", ".."):
        raise UnsafePathError("path", name, f"not a file name inside {base}")
    if target.resolve().parent != base.resolve():
        raise UnsafePathError("path", str(target), f"resolves outside {base}")
    return target


def buffer_name(branch_id: str, run_id: str) -> str:
    """``<branch_id>.<run_id>.jsonl``; both ids must be canonical UUIDs (``UnsafePathError``)."""
    return f"{check_file_id(branch_id, 'branch id')}.{check_file_id(run_id, 'run id')}.jsonl"


def buffer_path(persist_dir: str | os.PathLike[str], branch_id: str, run_id: str) -> Path:
    """``<persist_dir>/<branch_id>.<run_id>.jsonl``; both ids must be canonical UUIDs."""
    return path_inside(persist_dir, buffer_name(branch_id, run_id))


def snapshot_path(snapshot_dir: str | os.PathLike[str], branch_id: str) -> Path:
    """``<snapshot_dir>/<branch_id>.json``; the id must be a canonical UUID."""
    return path_inside(snapshot_dir, f"{check_file_id(branch_id, 'branch id')}.json")


def parse_buffer_name(path: Path) -> tuple[str, str] | None:
    """``(branch_id, run_id)`` of a buffer file name, or None when it is not one."""
    if not path.name.endswith(".jsonl"):
        return None
    parts = path.name[: -len(".jsonl")].split(".")
    if len(parts) != 2:
        return None
    try:
        return check_file_id(parts[0], "branch id"), check_file_id(parts[1], "run id")
    except UnsafePathError:
        return None


def store_location(store: EventStore) -> str | None:
    """The resolved path of a store file, or None for in-memory and server stores."""
    path = store.local_path
    return None if path is None else str(path)


def default_persist_dir(store: EventStore) -> Path:
    """Where run files go when no ``persist_dir`` is given (``turnlog.projections.default_run_dir``)."""
    return default_run_dir(store)


def make_private_dir(directory: Path) -> None:
    """Create ``directory`` and missing parents as 0700 (masked by the umask); existing ones stay."""
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)


# -------------------------------------------------------------------------------------- format


@dataclass(frozen=True, slots=True)
class BufferHeader:
    """The first line of a buffer: the run and the store it writes to.

    Attributes:
        store_id: The store's ``store_id`` (None if the store had none).
        store: The store file's path, or None for other stores.
        branch_id: The branch.
        run_id: The run.
        format_version: The buffer format (2 with an opening, else 1).
        opening: The branch events that start the run, not yet committed when the buffer was
            made (``{"type": ..., "data": ...}`` each; ``branch.created`` first when the run
            starts its branch), or None when they were committed before.
    """

    store_id: str | None
    store: str | None
    branch_id: str
    run_id: str
    format_version: int = 1
    opening: tuple[dict[str, Any], ...] | None = None

    def encode(self) -> bytes:
        """The header line, with its newline."""
        body: dict[str, Any] = {
            "format": BUFFER_FORMAT,
            "format_version": 2 if self.opening is not None else self.format_version,
            "store_id": self.store_id,
            "store": self.store,
            "branch_id": self.branch_id,
            "run_id": self.run_id,
        }
        if self.opening is not None:
            body["opening"] = self.opening
        return orjson.dumps(body) + b"\n"

    @classmethod
    def decode(cls, raw: bytes) -> BufferHeader:
        """The header of a first line; ``ValueError`` saying what is wrong."""
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"no buffer header: the first line is not JSON ({exc})") from exc
        if not isinstance(body, dict) or body.get("format") != BUFFER_FORMAT:
            raise ValueError(f"no buffer header: the first line is not a {BUFFER_FORMAT} header")
        version = body.get("format_version")
        if type(version) is not int or version < 1:
            raise ValueError(f"unreadable buffer format version {version!r}")
        if version > BUFFER_FORMAT_VERSION:
            raise ValueError(
                f"written by a newer turnlog (buffer format {version}; this one reads up to "
                f"{BUFFER_FORMAT_VERSION}); recover it with that version"
            )
        store_id, store = body.get("store_id"), body.get("store")
        branch_id, run_id = body.get("branch_id"), body.get("run_id")
        if not isinstance(branch_id, str) or not isinstance(run_id, str):
            raise ValueError("the buffer header names no branch or run")
        if not (store_id is None or isinstance(store_id, str)) or not (
            store is None or isinstance(store, str)
        ):
            raise ValueError("the buffer header's store fields are not strings")
        opening = body.get("opening")
        if opening is not None and not (
            isinstance(opening, list)
            and all(
                isinstance(item, dict)
                and isinstance(item.get("type"), str)
                and isinstance(item.get("data"), dict)
                for item in opening
            )
        ):
            raise ValueError("the buffer header's opening is not a list of {type, data} events")
        return cls(store_id, store, branch_id, run_id, version, None if opening is None else tuple(opening))


@dataclass(frozen=True, slots=True)
class BufferedChunk:
    """One chunk line read back.

    Attributes:
        line_number: 1-based line number in the file.
        id: The event id (canonical UUID text).
        seq: The chunk's sequence number (its version in the run stream).
        data: The ``stream.chunk`` payload, validated.
        meta: The event meta.
        received: When the line was written, if readable.
        chunk: ``data`` validated.
    """

    line_number: int
    id: str
    seq: int
    data: dict[str, Any]
    meta: dict[str, Any]
    received: datetime | None
    chunk: ChunkReceived


def _literal(part: bytes) -> bytes:
    """``part`` as literal text of a bytes ``%`` template."""
    return part.replace(b"%", b"%%")


class ChunkLine:
    """The chunk line format of one run: ``encode`` for the writer, ``decode`` for ``recover``.

    Args:
        run_id: The run (stream ``run-<run_id>``).
        meta: The meta of every chunk event (``branch_id`` and ``run_id`` among it); a reader
            needs none.
        schema: The ``stream.chunk`` schema version.

    Attributes:
        template: The line as a bytes ``%`` template, its constant parts made once per run (any
            ``%`` in them escaped): ``template % (id, seq, data, recorded_at)`` is ``encode``
            inlined, for a writer that makes thousands of lines a second.
    """

    __slots__ = ("meta", "run_id", "schema", "stream", "template")

    def __init__(
        self, run_id: str, meta: dict[str, Any] | None = None, schema: int = ChunkReceived.schema_version
    ) -> None:
        self.run_id = run_id
        self.stream = f"run-{run_id}"
        self.meta = meta or {}
        self.schema = schema
        self.template = b"".join(
            (
                b'{"id":"%s","stream":',
                _literal(orjson.dumps(self.stream)),
                b',"version":%d,"type":',
                _literal(orjson.dumps(CHUNK_TYPE)),
                b',"schema":%d,"data":%%s,"meta":' % schema,
                _literal(orjson.dumps(self.meta, option=orjson.OPT_SORT_KEYS)),
                b',"recorded_at":"%s"}\n',
            )
        )

    def encode(self, event_id: bytes, seq: int, data: bytes, stamp: bytes) -> bytes:
        """One line: the event's id (ASCII), seq, canonical data bytes and ISO time; with its newline."""
        return self.template % (event_id, seq, data, stamp)

    def decode(self, raw: bytes, line_number: int) -> BufferedChunk:
        """The chunk of one line; ``ValueError`` saying what is wrong.

        Strict: the id is a canonical UUID, ``seq`` an int (not a string) equal to ``version``,
        the stream, type and schema those of this run, and the meta names this run (the reader
        checks that every line has the same meta).
        """
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc})") from exc
        if not isinstance(line, dict):
            raise ValueError("not a JSON object")
        if line.get("stream") != self.stream:
            raise ValueError(f"stream {line.get('stream')!r} is not {self.stream!r}")
        if line.get("type") != CHUNK_TYPE:
            raise ValueError(f"type {line.get('type')!r} is not {CHUNK_TYPE!r}")
        if line.get("schema") != self.schema or type(line.get("schema")) is not int:
            raise ValueError(f"schema {line.get('schema')!r} is not {self.schema}")
        event_id = line.get("id")
        try:
            check_file_id(event_id, "event id")
        except UnsafePathError:
            raise ValueError(f"id {event_id!r} is not a canonical UUID") from None
        data = line.get("data")
        seq = data.get("seq") if isinstance(data, dict) else None
        if type(seq) is not int or seq < 1:
            raise ValueError(f"seq {seq!r} is not an int >= 1")
        if line.get("version") != seq or type(line.get("version")) is not int:
            raise ValueError(f"version {line.get('version')!r} is not the seq {seq}")
        meta = line.get("meta")
        if not isinstance(meta, dict) or meta.get("run_id") != self.run_id:
            raise ValueError(f"meta {meta!r} is not of run {self.run_id}")
        try:
            chunk = ChunkReceived.model_validate(data)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise ValueError(f"not a valid chunk ({exc})".replace("\n", " ")) from exc
        received = None
        stamp = line.get("recorded_at")
        if isinstance(stamp, str):
            with contextlib.suppress(ValueError):
                received = datetime.fromisoformat(stamp)
        assert isinstance(data, dict) and isinstance(event_id, str)
        return BufferedChunk(line_number, event_id, seq, data, meta, received, chunk)


# -------------------------------------------------------------------------------------- writer


class RunBuffer:
    """The append-only buffer file of one run, locked while it is open.

    Created 0600 with ``O_EXCL | O_NOFOLLOW`` (a file or link planted at the path is refused),
    its directory 0700 when this creates it.

    Args:
        path: The file (its directory is created).
        fsync: fsync after every write (a line, or the lines of one ``write_lines``).
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.lines = 0
        make_private_dir(self.path.parent)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | _NOFOLLOW | _CLOEXEC
        self._fd: int | None = os.open(self.path, flags, 0o600)
        if fcntl is not None:
            # Held while the run streams: recover leaves a locked buffer alone. A crash drops it.
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def write(self, line: bytes) -> None:
        """Hand one line (with its newline) to the operating system, in one write call."""
        fd = self._fd
        if fd is None:
            raise ValueError(f"{self.path}: the buffer is closed")
        written = os.write(fd, line)
        if written != len(line):
            # A short write to a regular file is rare (disk full, signal): finish the line.
            view = memoryview(line)[written:]
            while view:
                view = view[os.write(fd, view) :]
        if self.fsync:
            os.fsync(fd)
        self.lines += 1

    def write_lines(self, lines: Sequence[bytes]) -> None:
        """Hand several lines (each with its newline) to the operating system in one write call."""
        if len(lines) == 1:
            self.write(lines[0])
            return
        self.write(b"".join(lines))
        self.lines += len(lines) - 1  # ``write`` counted one

    def close(self) -> None:
        """Close the file (idempotent); this drops the lock."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def remove(self) -> None:
        """Delete the file, then close it (so no recover sees it unlocked before it is gone)."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self.close()


def lock_buffer(path: Path) -> int | None:
    """Open ``path`` and take its lock without waiting; the fd, or None when another process holds it.

    Raises:
        OSError: the file cannot be opened (gone, not a regular file, a link).
    """
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    if fcntl is None:  # pragma: no cover - not POSIX
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd
