"""Shared pieces of the inspection commands: opening a store, naming a branch, rendering state."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import orjson
from turnlog.eventstore import EventStore, StoreError, open_store
from turnlog.kernel import AmbiguousBranch, UnknownBranch, find_branch
from turnlog.projections import (
    ActionResponse,
    AnyMessage,
    BranchState,
    ProjectionError,
    RunInfo,
    message_summary,
)

from ._command import UserError, sqlite_file, store_url

__all__ = [
    "branch_id_of",
    "message_line",
    "message_view",
    "opened_store",
    "parse_time",
    "run_view",
    "state_view",
]


@asynccontextmanager
async def opened_store(value: str | None, *, must_exist: bool = True) -> AsyncIterator[EventStore]:
    """Open the store named by ``--store``; store and projection errors become one-line errors.

    A read-only command refuses a SQLite path that does not exist rather than creating an
    empty store there (a typo should not look like an empty log).
    """
    url = store_url(value)
    path = sqlite_file(url)
    if must_exist and path is not None:
        if not path.exists():
            raise UserError(f"no store at {path} (give --store or set TURNLOG_STORE)")
    try:
        async with open_store(url) as store:
            yield store
    except (StoreError, ProjectionError) as exc:
        raise UserError(str(exc)) from exc


async def branch_id_of(store: EventStore, ref: str) -> str:
    """Resolve a branch id, unique id prefix or name; unknown or ambiguous is a user error."""
    try:
        return await find_branch(store, ref)
    except (UnknownBranch, AmbiguousBranch) as exc:
        raise UserError(str(exc)) from exc


def parse_time(text: str) -> datetime:
    """Parse an ISO 8601 time; a time without zone is taken as UTC."""
    from datetime import UTC

    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise UserError(f"not an ISO 8601 time: {text!r}") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


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
