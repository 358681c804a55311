"""History and diff: looking at a branch's past (a fork is written by the kernel, ``Branch.fork``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from turnlog.eventstore import EventStore, RecordedEvent

from ._errors import UnknownBranch
from ._fold import Appliers, decode_branch_event
from ._messages import (
    ActionRequest,
    ActionResponse,
    AnyMessage,
    AssistantResponse,
    Instruction,
    System,
)
from ._rebuild import _stream
from ._redacted import redaction_note
from ._state import BranchState, RunInfo

__all__ = ["BranchDiff", "HistoryRow", "diff", "history", "message_summary", "summarize"]

_WIDTH = 72


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One event of a branch stream, for listing.

    Attributes:
        version: Version inside the branch stream.
        position: Global position.
        recorded_at: When it was appended (UTC).
        type: Event type.
        summary: One line saying what it did.
    """

    version: int
    position: int
    recorded_at: datetime
    type: str
    summary: str


def _short(value: Any, width: int = _WIDTH) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def message_summary(msg: AnyMessage) -> str:
    """One line saying what a message is: ``user: ...``, ``tool call f(...)``, ..."""
    redacted = redaction_note(msg)
    if redacted is not None:
        return redacted
    if isinstance(msg, System):
        return f"system: {_short(msg.content.system_message)}"
    if isinstance(msg, Instruction):
        c = msg.content
        return f"user: {_short(c.plain_content if c.plain_content is not None else c.instruction)}"
    if isinstance(msg, AssistantResponse):
        return f"assistant: {_short(msg.content.text)}"
    if isinstance(msg, ActionRequest):
        return f"tool call {msg.content.function}({_short(msg.content.arguments, 48)})"
    if isinstance(msg, ActionResponse):
        outcome = f"error {_short(msg.content.error, 48)}" if msg.content.error is not None else "ok"
        return f"tool result {msg.content.function}: {outcome}"
    return msg.kind  # pragma: no cover - the union is closed


def _model_label(provider: str, model: str | None) -> str:
    """``provider/model``; a CLI agent run on its own default model has no model name."""
    return f"{provider}/{model}" if model else f"{provider} (default model)"


def _or_unknown(value: int | None) -> str:
    return "?" if value is None else str(value)


def summarize(event: RecordedEvent, appliers: Appliers | None = None) -> str:
    """One line saying what a branch event did (decoded and validated on the way)."""
    d: Any = decode_branch_event(event, appliers)
    match event.type:
        case "branch.created":
            return f"created {d.name or d.branch_id!r}" + (" with a system message" if d.system else "")
        case "branch.forked":
            return f"forked from {d.parent_branch_id} at version {d.parent_version}"
        case "message.added":
            return message_summary(d.message)
        case "message.annotated":
            keys = ", ".join(sorted(d.metadata))
            return f"annotated {d.message_id}: {keys}" + (f" ({d.reason})" if d.reason else "")
        case "messages.cleared":
            return "messages cleared (system kept)"
        case "provider.session_bound":
            return f"{_model_label(d.provider, d.model)} session {d.session_id}"
        case "model.called":
            u = d.usage
            tokens = f"{_or_unknown(u.input_tokens)}->{_or_unknown(u.output_tokens)} tokens"
            return f"{_model_label(d.provider, d.model)} {d.status} in {d.latency_ms:.0f} ms, {tokens}"
        case "run.started":
            return f"{d.verb} started (run {d.run_id})"
        case "run.ended":
            return f"{d.verb} ended after {d.duration_ms:.0f} ms (run {d.run_id})"
        case "run.failed":
            error = _short(f"{d.error_type}: {d.error_message}", 48)
            return f"{d.verb} failed ({d.reason}): {error} (run {d.run_id})"
        case _:
            return _short(event.type)


async def history(
    store: EventStore,
    branch_id: str,
    *,
    from_version: int = 1,
    to_version: int | None = None,
    appliers: Appliers | None = None,
) -> list[HistoryRow]:
    """One row per event of the branch's own stream (a fork's parent events are not repeated).

    Raises:
        UnknownBranch: the branch has no event.
        EventDecodeError: a stored payload does not validate.
    """
    stream = _stream(branch_id)
    rows = [
        HistoryRow(e.version, e.position, e.recorded_at, e.type, summarize(e, appliers))
        async for e in store.read_stream(stream, from_version, to_version)
    ]
    if not rows and await store.stream_version(stream) == 0:
        raise UnknownBranch(branch_id)
    return rows


@dataclass(frozen=True, slots=True)
class BranchDiff:
    """What changed from one state to another.

    Attributes:
        added: Messages in ``b`` and not in ``a`` (by id), in ``b``'s order.
        removed: Messages in ``a`` and not in ``b``, in ``a``'s order.
        changed: ``(before, after)`` pairs of messages in both whose view differs (annotations,
            links, upserts).
        system: ``(before, after)`` when the system message differs, else None.
        runs: Run id -> ``(before, after)`` for every run that appeared or changed.
        provider_sessions: ``(provider, model)`` -> ``(before, after)`` session ids that changed.
    """

    added: list[AnyMessage]
    removed: list[AnyMessage]
    changed: list[tuple[AnyMessage, AnyMessage]]
    system: tuple[System | None, System | None] | None
    runs: dict[str, tuple[RunInfo | None, RunInfo | None]]
    provider_sessions: dict[tuple[str, str], tuple[str | None, str | None]]

    def __bool__(self) -> bool:
        """True when anything differs."""
        return bool(
            self.added or self.removed or self.changed or self.system or self.runs or self.provider_sessions
        )


def _mapping_changes(a: Mapping[Any, Any], b: Mapping[Any, Any]) -> dict[Any, tuple[Any, Any]]:
    return {k: (a.get(k), b.get(k)) for k in [*a, *(k for k in b if k not in a)] if a.get(k) != b.get(k)}


def diff(a: BranchState, b: BranchState) -> BranchDiff:
    """Compare two states (of one branch at two versions, or of a branch and its fork).

    Example:
        >>> d = diff(await rebuild(store, bid, at_version=3), await rebuild(store, bid))  # doctest: +SKIP
        >>> [m.kind for m in d.added]  # doctest: +SKIP
        ['Instruction', 'AssistantResponse']
    """
    in_a = {m.id: m for m in a.messages}
    in_b = {m.id: m for m in b.messages}
    return BranchDiff(
        added=[m for m in b.messages if m.id not in in_a],
        removed=[m for m in a.messages if m.id not in in_b],
        changed=[(in_a[m.id], m) for m in b.messages if m.id in in_a and in_a[m.id] != m],
        system=(a.system, b.system) if a.system != b.system else None,
        runs=_mapping_changes(a.runs, b.runs),
        provider_sessions=_mapping_changes(a.provider_sessions, b.provider_sessions),
    )
