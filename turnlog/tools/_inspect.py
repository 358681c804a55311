"""Shared pieces of the inspection commands: opening a store, naming a branch, rendering state."""

from __future__ import annotations

import argparse
import unicodedata
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import orjson

from turnlog.eventstore import EventStore, StoreNotFound, open_store
from turnlog.projections import (
    ActionResponse,
    AnyMessage,
    BranchState,
    RunInfo,
    catalogue_upcasters,
    match_ref,
    message_summary,
    visible_event,
)

from ._command import UserError, sqlite_file, store_url

MAX_NAME = 200
"""The longest branch name, in characters (the kernel's rule)."""

__all__ = [
    "MAX_NAME",
    "add_branch_argument",
    "branch_id_of",
    "branch_names",
    "check_new_name",
    "free_name",
    "check_version",
    "check_store_exists",
    "message_line",
    "message_view",
    "opened_store",
    "parse_time",
    "run_view",
    "state_view",
]


def add_branch_argument(parser: argparse.ArgumentParser, *, optional: bool = False) -> None:
    """Add the positional ``branch`` (an id, a unique id prefix or a name)."""
    extra: dict[str, Any] = {"nargs": "?", "default": None} if optional else {}
    parser.add_argument("branch", help="branch id, unique id prefix or name", **extra)


def check_store_exists(url: str) -> None:
    """Refuse a SQLite store path that does not exist (or is not a file) before anything opens it.

    Opening a SQLite URL creates the file: a read-only command must not turn a typo into an
    empty store that then looks like an empty log.
    """
    path = sqlite_file(url)
    if path is None:
        return
    if not path.exists():
        raise UserError(f"no store at {path} (give --store or set TURNLOG_STORE)")
    if not path.is_file():
        raise UserError(f"{path} is not a store file")


@asynccontextmanager
async def opened_store(
    value: str | None, *, must_exist: bool = True, upcast: bool = True
) -> AsyncIterator[EventStore]:
    """Open the store named by ``--store`` (a value, ``$TURNLOG_STORE`` or ``./turnlog.db``).

    Args:
        value: The ``--store`` option.
        must_exist: True for every command that only reads: a store that does not exist is
            refused with one line rather than created. Only writing commands pass False.
        upcast: Lift old event schemas on read (False: events exactly as stored, for
            ``export`` and ``tail``, whose output carries the stored hashes).

    The store's own errors (unreachable, damaged, newer format) reach the command line's
    handler unchanged, which prints them as one line (exit status 3).
    """
    url = store_url(value)
    if must_exist:
        check_store_exists(url)
    upcasters = catalogue_upcasters() if upcast else None
    try:
        async with open_store(url, upcasters=upcasters, create=not must_exist) as store:
            yield store
    except StoreNotFound as exc:  # an empty file, a PostgreSQL schema without turnlog's tables
        raise UserError(f"{exc} (give --store or set TURNLOG_STORE)") from exc


async def branch_names(store: EventStore) -> dict[str, list[str]]:
    """Branch name -> the ids of the branches that carry it."""
    names: dict[str, list[str]] = {}
    for stream, _version in await store.list_streams("branch-"):
        async for first in store.read_stream(stream, 1, 1):
            name = visible_event(first).data.get("name")
            if isinstance(name, str):
                names.setdefault(name, []).append(stream.removeprefix("branch-"))
    return names


async def branch_id_of(store: EventStore, ref: str) -> str:
    """Resolve a branch id, unique id prefix or name; unknown or ambiguous is a user error.

    A full id is taken first; a reference that is both the name of one branch and an id
    prefix of another is ambiguous (every candidate is named), never silently one of them.
    """
    if not ref.strip():
        raise UserError("the branch is empty: give a branch id, a unique id prefix or a name")
    # The lookup of the projections, not the kernel's: a command that reads a branch starts
    # without importing the kernel, about half of its start-up.
    match = await match_ref(store, "branch", ref)
    if match.found is None:
        raise UserError(match.message)
    found = match.found
    if found == ref:
        return found  # a full id
    ids = [stream.removeprefix("branch-") for stream, _ in await store.list_streams("branch-")]
    candidates = {i for i in ids if i.startswith(ref)} | set((await branch_names(store)).get(ref, []))
    if len(candidates) > 1:
        raise UserError(
            f"{ref!r} is ambiguous: it is the name or an id prefix of {len(candidates)} branches "
            f"({', '.join(sorted(candidates))}); give more of the id"
        )
    return found


async def free_name(store: EventStore, wanted: str) -> str:
    """``wanted`` if no branch has that name, else the first free ``wanted-2``, ``wanted-3``, ..."""
    taken = await branch_names(store)
    name, n = wanted, 1
    while name in taken:
        n += 1
        name = f"{wanted}-{n}"
    return name


async def check_version(store: EventStore, branch_id: str, version: int, option: str) -> int:
    """Refuse a version the branch does not have, naming the option; return the branch's version."""
    last = await store.stream_version(f"branch-{branch_id}")
    if not 1 <= version <= last:
        raise UserError(f"{option} {version}: the branch has versions 1 to {last}")
    return last


async def check_new_name(store: EventStore | None, name: str | None) -> None:
    """Refuse a name for a new branch that is blank, has control characters, is too long or is in use.

    The rule of the command line: a branch name names one branch. ``store`` None checks the
    spelling only.
    """
    if name is None:
        return
    if not name.strip():
        raise UserError("a branch name must not be empty or only spaces")
    if len(name) > MAX_NAME:
        raise UserError(f"a branch name has at most {MAX_NAME} characters, not {len(name)}")
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in name):
        raise UserError(f"a branch name must not contain control characters: {name!r:.80}")
    if store is not None and (taken := (await branch_names(store)).get(name)):
        raise UserError(f"a branch named {name!r} exists already ({', '.join(taken)}); choose another name")


def parse_time(text: str, option: str = "--at-time") -> datetime:
    """Parse an ISO 8601 time or date given to ``option``, as an aware UTC time.

    A time without a zone is taken as UTC, a date as its midnight UTC. An empty value, a
    malformed one, and one that does not fit in UTC (``9999-12-31T23:59:59-05:00``) are
    user errors naming the option.
    """
    value = text.strip()
    if not value:
        raise UserError(f"{option} is empty; give an ISO 8601 time such as 2026-12-01T10:00:00Z")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as exc:
        raise UserError(f"{option}: not an ISO 8601 time or date: {text!r}") from exc
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    try:
        return moment.astimezone(UTC)
    except OverflowError as exc:
        raise UserError(f"{option}: {text!r} is out of the range of times") from exc


def message_line(message: AnyMessage) -> str:
    """One line per message, as ``turnlog log`` summarizes it (``user: ...``, ``tool call ...``).

    A successful tool result also shows its value (``tool result lookup: ok -> {...}``).
    """
    line = message_summary(message)
    if isinstance(message, ActionResponse) and message.content.error is None:
        value = " ".join(orjson.dumps(message.content.output).decode().split())
        line += f" -> {value if len(value) <= 72 else value[:71] + '…'}"
    return line


def message_view(message: AnyMessage) -> dict[str, Any]:
    """A JSON object of a message (its full round-trip form)."""
    return message.to_dict()


def run_view(run: RunInfo) -> dict[str, Any]:
    """A JSON object of one run."""
    return {
        "run_id": run.run_id,
        "verb": run.verb,
        "status": run.status,
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "ended_at": run.ended_at.isoformat() if run.ended_at else None,
        "duration_ms": run.duration_ms,
        "usage": run.usage.model_dump() if hasattr(run.usage, "model_dump") else run.usage,
        "error_type": run.error_type,
        "error_message": run.error_message,
        "reason": run.reason,
    }


def state_view(state: BranchState) -> dict[str, Any]:
    """A JSON object of a branch state: the facts a person or a script asks for."""
    return {
        "branch_id": state.branch_id,
        "name": state.name,
        "version": state.version,
        "position": state.position,
        "forked_from": (
            {"branch_id": state.forked_from.parent_branch_id, "version": state.forked_from.parent_version}
            if state.forked_from
            else None
        ),
        "system": state.system.to_dict() if state.system else None,
        "messages": [message_view(m) for m in state.messages],
        "runs": [run_view(r) for r in state.runs.values()],
        "provider_sessions": [
            {"provider": p, "model": m, "session_id": s} for (p, m), s in state.provider_sessions.items()
        ],
        "model_calls": state.model_calls,
    }
