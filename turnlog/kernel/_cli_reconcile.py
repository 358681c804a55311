"""Reconcile a crashed CLI run with the CLI's own session record (a step of ``recover``).

A CLI agent keeps its own copy of the conversation (``models._cli_sessions``). When the
process running it is killed, the CLI is stopped with it (``models._orphans``), but it may
already have written to its record something the log does not hold: a content block it
finished between our last read and the kill, a tool result. Resuming that session would
then show the model a turn the log does not have.

``reconcile_with_cli`` compares the run's chunks with the part of the record written since
the run started, and appends what only the record has as ``stream.chunk`` events of the
same run, after the chunks already there, each marked ``metadata["source"] =
"cli_session"`` with ``metadata["session_file"]`` (relative to the CLI's session root: no
home-directory path is recorded). The chunk rules then make messages of
them like of any chunk, and those messages carry the same ``source`` marker.

What is compared: assistant text (the log's text, in order, against each text block of
the record: a block the log holds only the beginning of gets its rest; a block the log does
not hold at all is added; one that disagrees replaces the streamed text, the mismatch being
recorded), and, for Claude Code and Gemini CLI, tool calls and results by call id (Codex
numbers the items of its JSON stream differently from its record, and reports tool calls
when they start, so only its text is compared).

The outcome (``Reconciliation.status``) goes into ``run.failed.recovered["cli_session"]``:
``reconciled`` (chunks were added), ``in_agreement`` (the record holds nothing more),
``complete`` (the run had received the CLI's final result), ``no_session`` (the stream
named no session: the CLI never started one), or ``unreconciled`` (the record could not be
found or read): then the provider session may hold more than the log, and the next run
that resumes it says so.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import anyio

from turnlog.eventstore import EventStore, NewEvent, uuid7
from turnlog.kernel._persist import CHUNK_TYPE, chunk_payload
from turnlog.kernel.models import StreamChunk
from turnlog.kernel.models._cli_sessions import SessionItem, read_session, shown_path
from turnlog.projections import ChunkReceived

__all__ = ["Reconciliation", "reconcile_with_cli"]

CLI_PROVIDERS = frozenset({"claude_code", "codex", "gemini"})
_TOOLS_BY_ID = frozenset({"claude_code", "gemini"})
_CLOCK_SLACK = timedelta(seconds=2)


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """What reconciling one run with the CLI's record did.

    Attributes:
        status: ``reconciled``, ``in_agreement``, ``complete``, ``no_session`` or
            ``unreconciled`` (see the module docstring).
        added: Chunks appended from the record.
        session_file: The record read, if one was found: relative to the CLI's session root
            (``projects/<directory>/<session>.jsonl``), never with the user's home directory.
        reason: Why the run could not be reconciled, for ``unreconciled``.
        appended: The chunk payloads appended to the run stream, in order.
    """

    status: str
    added: int = 0
    session_file: str | None = None
    reason: str | None = None
    appended: tuple[ChunkReceived, ...] = ()

    def recovered(self) -> dict[str, Any]:
        """The facts for ``run.failed.recovered``."""
        facts: dict[str, Any] = {"cli_session": self.status}
        if self.added:
            facts["cli_session_added"] = self.added
        if self.session_file is not None:
            facts["cli_session_file"] = self.session_file
        if self.reason is not None:
            facts["cli_session_reason"] = self.reason
        return facts


@dataclass(slots=True)
class _Log:
    """What the run's chunks hold, in the terms of a session record."""

    text: str
    tool_ids: set[str]
    result_ids: set[str]
    session_id: str | None
    home: str | None
    cwd: str | None
    finished: bool


def _summarize(chunks: list[ChunkReceived]) -> _Log:
    parts: list[str] = []
    log = _Log("", set(), set(), None, None, None, False)
    for chunk in chunks:
        meta = chunk.metadata
        if chunk.type == "system" and isinstance(meta.get("session_id"), str) and log.session_id is None:
            log.session_id = str(meta["session_id"])
            home, cwd = meta.get("cli_home"), meta.get("cwd")
            log.home = home if isinstance(home, str) else None
            log.cwd = cwd if isinstance(cwd, str) else None
        elif chunk.type == "text":
            streamed = meta.get("streamed")
            joined = "".join(parts)
            if (
                meta.get("reconciled") == "replace"
                and isinstance(streamed, str)
                and joined.endswith(streamed)
            ):
                parts = [joined[: len(joined) - len(streamed)]]
            parts.append(chunk.content)
        elif chunk.type == "tool_use" and chunk.tool_id:
            log.tool_ids.add(chunk.tool_id)
        elif chunk.type == "tool_result" and chunk.tool_id:
            log.result_ids.add(chunk.tool_id)
        elif chunk.type == "result":
            log.finished = True
    log.text = "".join(parts)
    return log


def _missing(
    provider: str, log: _Log, items: tuple[SessionItem, ...], marker: dict[str, Any]
) -> list[StreamChunk]:
    """The chunks that make the log hold what the record holds (see the module docstring)."""
    out: list[StreamChunk] = []
    cursor = 0
    by_id = provider in _TOOLS_BY_ID
    for item in items:
        if item.kind == "text":
            found = log.text.find(item.text, cursor)
            if found >= 0:
                cursor = found + len(item.text)
                continue
            rest = log.text[cursor:]
            if item.text.startswith(rest):
                out.append(StreamChunk("text", content=item.text[len(rest) :], metadata=dict(marker)))
            else:
                meta = {**marker, "reconciled": "replace", "streamed": rest}
                out.append(StreamChunk("text", content=item.text, metadata=meta))
            cursor = len(log.text)
        elif item.kind == "tool_use" and by_id and item.tool_id and item.tool_id not in log.tool_ids:
            log.tool_ids.add(item.tool_id)
            out.append(
                StreamChunk(
                    "tool_use",
                    tool_name=item.tool_name,
                    tool_id=item.tool_id,
                    tool_input=dict(item.tool_input),
                    metadata=dict(marker),
                )
            )
        elif (
            item.kind == "tool_result"
            and by_id
            and item.tool_id in log.tool_ids
            and item.tool_id not in log.result_ids
        ):
            log.result_ids.add(str(item.tool_id))
            out.append(
                StreamChunk(
                    "tool_result",
                    tool_id=item.tool_id,
                    tool_output=item.tool_output,
                    is_error=item.is_error,
                    metadata=dict(marker),
                )
            )
    return out


async def reconcile_with_cli(
    store: EventStore,
    run_id: str,
    provider: str,
    started_at: datetime | None,
    chunks: Sequence[ChunkReceived] | None = None,
) -> Reconciliation | None:
    """Append to ``run-<run_id>`` what only the CLI's session record holds (None: not a CLI run).

    Args:
        store: The store.
        run_id: The run (its chunks are in ``run-<run_id>``, ``seq`` equal to the version).
        provider: The run's provider.
        started_at: When the run started (the record is read from there on).
        chunks: The run's chunks when the caller has read them already (else they are read).
    """
    if provider not in CLI_PROVIDERS:
        return None
    stream = f"run-{run_id}"
    meta: dict[str, Any] = {}
    if chunks is None:
        events = [e async for e in store.read_stream(stream)]
        chunks = [ChunkReceived.model_validate(e.data) for e in events]
        meta = dict(events[-1].meta) if events else {}
    log = _summarize(list(chunks))
    if log.finished:
        return Reconciliation("complete")
    if log.session_id is None:
        return Reconciliation("no_session")
    if log.home is None:
        return Reconciliation(
            "unreconciled", reason="the stream does not say where the CLI keeps its sessions"
        )
    since = started_at - _CLOCK_SLACK if started_at is not None else None
    # Recorded with ~ for the home directory (``shown_path``): this user's home is meant.
    home = await anyio.to_thread.run_sync(os.path.expanduser, str(log.home))
    record = await anyio.to_thread.run_sync(
        lambda: read_session(provider, home, str(log.session_id), cwd=log.cwd, since=since)
    )
    if record is None:
        return Reconciliation(
            "unreconciled", reason=f"no record of session {log.session_id} found under {shown_path(home)}"
        )
    session_file = shown_path(record.path, root=home)
    marker = {"source": "cli_session", "session_file": session_file}
    extra = _missing(provider, log, record.items, marker)
    if not extra:
        return Reconciliation("in_agreement", session_file=session_file)
    if not meta and chunks:
        async for event in store.read_stream(stream, from_version=len(chunks)):
            meta = dict(event.meta)  # the last chunk's correlation (branch, run, session)
    first = chunks[-1].seq + 1 if chunks else 1
    payloads = [chunk_payload(chunk, first + i) for i, chunk in enumerate(extra)]
    new = [NewEvent(CHUNK_TYPE, payload, meta, uuid7()) for payload in payloads]
    await store.append(stream, new, len(chunks))
    appended = tuple(ChunkReceived.model_validate(payload) for payload in payloads)
    return Reconciliation("reconciled", len(new), session_file, appended=appended)
