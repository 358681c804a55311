"""The buffers ``recover`` reads: locked, parsed, checked against the store, then disposed of.

A buffer ``<persist_dir>/<branch_id>.<run_id>.jsonl`` is opened under its writer's lock and
read whole. ``open_buffer`` refuses one that is in use, misnamed, headed for another run, or
written for another store (or for the original of a copied store); ``plan_import`` decides
which chunks go after the stored ones so that chunk ``seq`` k stays stream version k; and
``dispose`` removes a buffer whose chunks are all stored or keeps it, renamed ``*.corrupt``.
Problems are noted on the buffer as ``(line number, what)``; ``_recover`` reports them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turnlog.eventstore import EventStore

from ._run_buffer import BufferedChunk, BufferHeader, ChunkLine, lock_buffer, parse_buffer_name

__all__ = ["IN_USE", "Buffer", "check_branch", "dispose", "open_buffer", "plan_import"]

IN_USE = "in use by a running process (a live run, or another recover): left alone"


@dataclass(slots=True)
class Buffer:
    """A buffer read under its lock (held until ``release``)."""

    path: Path
    branch_id: str
    run_id: str
    fd: int
    header: BufferHeader | None = None
    chunks: list[BufferedChunk] = field(default_factory=list)
    problems: list[tuple[int, str]] = field(default_factory=list)
    torn: bool = False
    refused: str | None = None
    complete: bool = False

    def problem(self, line_number: int, what: str) -> None:
        """Note a problem at ``line_number`` (0: the whole buffer)."""
        self.problems.append((line_number, what))

    def release(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


def read_all(fd: int) -> bytes:
    parts: list[bytes] = []
    while part := os.read(fd, 1 << 20):
        parts.append(part)
    return b"".join(parts)


def open_buffer(path: Path, store_id: str | None, here: str | None) -> Buffer | str:
    """The buffer at ``path``, locked, parsed and checked against the store; or why it is skipped."""
    names = parse_buffer_name(path)
    if names is None:
        return "not a run buffer: the name is not <branch_id>.<run_id>.jsonl with canonical UUIDs"
    try:
        fd = lock_buffer(path)
    except OSError as exc:
        return f"cannot open it: {exc.strerror or exc}"
    if fd is None:
        return IN_USE
    buffer = Buffer(path, *names, fd=fd)
    try:
        parse_buffer(buffer, read_all(fd))
    except OSError as exc:
        buffer.refused = f"cannot read it: {exc.strerror or exc}"
    check_identity(buffer, store_id, here)
    return buffer


def parse_buffer(buffer: Buffer, raw: bytes) -> None:
    lines = raw.split(b"\n")
    last_index = len(lines) - 1  # the piece after the final newline ("" when the file ends cleanly)
    codec = ChunkLine(buffer.run_id)
    meta: dict[str, Any] | None = None
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        number = index + 1
        if buffer.header is None:
            try:
                header = BufferHeader.decode(line)
            except ValueError as exc:
                buffer.refused = str(exc)
                return
            if (header.branch_id, header.run_id) != (buffer.branch_id, buffer.run_id):
                buffer.refused = f"the header names branch {header.branch_id}, run {header.run_id}"
                return
            buffer.header = header
            continue
        try:
            chunk = codec.decode(line, number)
            if meta is not None and chunk.meta != meta:
                raise ValueError(f"meta {chunk.meta!r} differs from the first line's")
            if chunk.meta.get("branch_id") != buffer.branch_id:
                raise ValueError(f"meta names branch {chunk.meta.get('branch_id')!r}")
        except ValueError as exc:
            if index == last_index:
                buffer.torn = True  # cut off by the crash: tolerated
            else:
                buffer.problem(number, str(exc))
            continue
        meta = chunk.meta
        buffer.chunks.append(chunk)
    if buffer.header is None:
        buffer.refused = "no buffer header: the file is empty or was cut before its first line"


def check_identity(buffer: Buffer, store_id: str | None, here: str | None) -> None:
    """Refuse a buffer written for another store, or for the original of this copy."""
    header = buffer.header
    if buffer.refused is not None or header is None:
        return
    if header.store_id is None or header.store_id != store_id:
        buffer.refused = f"written for another store (store id {header.store_id}; this one is {store_id})"
    elif header.store and here and header.store != here and Path(header.store).exists():
        buffer.refused = (
            f"written for the store at {header.store}, which still exists "
            f"({here} has the same store id: it is a copy)"
        )


async def check_branch(store: EventStore, buffer: Buffer) -> None:
    """Refuse a buffer of a branch this store does not hold (and that its opening does not create)."""
    if buffer.refused is None and await store.stream_version(f"branch-{buffer.branch_id}") == 0:
        opening = buffer.header.opening if buffer.header is not None else None
        if not opening or opening[0].get("type") != "branch.created":
            buffer.refused = f"branch {buffer.branch_id} is not in this store"


def plan_import(buffer: Buffer, stored_ids: Sequence[str]) -> list[BufferedChunk]:
    """The buffered chunks to append after the stored ones, keeping seq == version; problems noted."""
    by_seq: dict[int, BufferedChunk] = {}
    conflicts: set[int] = set()
    for chunk in buffer.chunks:
        seen = by_seq.get(chunk.seq)
        if seen is None:
            by_seq[chunk.seq] = chunk
        elif seen.id != chunk.id or seen.data != chunk.data:
            conflicts.add(chunk.seq)
            buffer.problem(
                chunk.line_number, f"seq {chunk.seq} again (line {seen.line_number}) with another id"
            )
    count = len(stored_ids)
    for seq, chunk in sorted(by_seq.items()):
        if seq <= count and stored_ids[seq - 1] != chunk.id:
            buffer.problem(
                chunk.line_number,
                f"seq {seq} has id {chunk.id}, the store holds {stored_ids[seq - 1]}: "
                "the buffer is not this run's, nothing imported",
            )
            return []
    new: list[BufferedChunk] = []
    seq = count + 1
    while seq in by_seq and seq not in conflicts:
        new.append(by_seq[seq])
        seq += 1
    beyond = sorted(s for s in by_seq if s >= seq)
    if beyond:
        why = f"seq {seq} is on two lines with different ids" if seq in conflicts else f"seq {seq} is missing"
        buffer.problem(
            by_seq[beyond[0]].line_number,
            f"{why}: import stopped there, chunks {beyond[0]}..{beyond[-1]} ({len(beyond)}) not imported",
        )
    buffer.complete = not beyond
    return new


def dispose(buffer: Buffer) -> str:
    """Remove a fully stored buffer, or rename one with problems ``*.corrupt``; the path it left."""
    try:
        if buffer.problems or not buffer.complete:
            target = buffer.path.with_name(buffer.path.name + ".corrupt")
            os.replace(buffer.path, target)
            return str(target)
        buffer.path.unlink()
        return ""
    finally:
        buffer.release()
