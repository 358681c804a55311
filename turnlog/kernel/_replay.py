"""Replay: audit a branch from its log, and re-execute its verbs against recorded responses.

Two levels, both without calling any model:

- ``audit_replay`` rebuilds the branch from its events alone and checks that result against
  every other way the state can be obtained: the snapshot path, each stored snapshot, and a
  live projection when one is given; it also verifies the hash chain of the stream.
- ``execute_replay`` re-runs the recorded exchanges through the current prompt-assembly code
  on a scratch store, with a ``RecordedModel`` (``_recorded``) armed, call by
  call, with the responses recorded in ``model.called``. Every request the verbs build is fingerprinted and compared with the
  fingerprint recorded for that call; the first difference stops the replay and names the
  call and what differs (divergence detection).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from turnlog.eventstore import EventStore, RecordedEvent, is_redacted, open_store, redacted_marker
from turnlog.projections import (
    AnyMessage,
    AssistantResponse,
    BranchState,
    Instruction,
    ModelCalled,
    StateCache,
    System,
    decode_event,
    message_from_dict,
    rebuild,
    visible_event,
)
from turnlog.projections import (
    diff as state_diff,
)

from ._errors import KernelError, ReplayMismatch
from ._recorded import RecordedModel
from .models import ToolCall

if TYPE_CHECKING:
    from ._branch import Branch

__all__ = ["AuditReport", "ExecuteReport", "audit_replay", "execute_replay"]


def _short(value: Any, width: int = 80) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 3] + "..."


@dataclass(frozen=True, slots=True)
class AuditReport:
    """What ``audit_replay`` checked.

    Attributes:
        branch_id: The branch.
        version: The version replayed to.
        events: How many events of the branch's own stream were folded.
        snapshots_checked: How many stored snapshots were compared with a fold from events.
        model_calls: How many recorded model calls the state holds.
        problems: Every mismatch found; empty when the replay matches.
        redacted: How many events of the branch's stream hold an erased payload whose
            redaction record verifies (they fold as redacted; they are not mismatches).
        redaction_reasons: The reasons of those redactions.
        redacted_calls: How many of those events are model calls (``model.called``): their
            raw response and errors were erased, so they are reported as redacted, never
            compared.
    """

    branch_id: str
    version: int
    events: int
    snapshots_checked: int
    model_calls: int
    problems: tuple[str, ...]
    redacted: int = 0
    redaction_reasons: tuple[str, ...] = ()
    redacted_calls: int = 0

    @property
    def ok(self) -> bool:
        """True when every way of obtaining the state agrees and the chain verifies."""
        return not self.problems


def _differences(label: str, a: BranchState, b: BranchState) -> list[str]:
    if a == b:
        return []
    d = state_diff(a, b)
    parts = []
    if a.version != b.version:
        parts.append(f"version {a.version} vs {b.version}")
    if d.added or d.removed:
        parts.append(f"{len(d.added)} messages only in one, {len(d.removed)} only in the other")
    if d.changed:
        parts.append(f"{len(d.changed)} messages differ")
    if d.runs:
        parts.append(f"{len(d.runs)} runs differ")
    if d.provider_sessions:
        parts.append("provider sessions differ")
    return [f"{label}: " + ("; ".join(parts) or "states differ")]


async def audit_replay(store: EventStore, branch_id: str, *, live: BranchState | None = None) -> AuditReport:
    """Rebuild ``branch_id`` from events alone and compare with every other source of its state.

    Checks: the stream's hash chain; the fold of every event equals the snapshot path; each
    stored snapshot equals a fold from events at its version; ``live`` (a running
    projection, e.g. ``branch.state``) equals the fold.
    """
    stream = f"branch-{branch_id}"
    verified = await store.verify(stream)
    problems: list[str] = [str(p) for p in verified.problems]
    from_events = await rebuild(store, branch_id, snapshots=False)
    via_snapshots = await rebuild(store, branch_id)
    problems += _differences("snapshot path", from_events, via_snapshots)
    checked = 0
    at: int | None = from_events.version
    while at is not None and at > 0:
        snap = await store.load_snapshot(stream, at)
        if snap is None:
            break
        folded = await rebuild(store, branch_id, at_version=snap.version, snapshots=False)
        restored = await rebuild(store, branch_id, at_version=snap.version)
        problems += _differences(f"snapshot at version {snap.version}", folded, restored)
        checked += 1
        at = snap.version - 1
    if live is not None:
        problems += _differences("live projection", from_events, live)
    return AuditReport(
        branch_id=branch_id,
        version=from_events.version,
        events=from_events.version,
        snapshots_checked=checked,
        model_calls=from_events.model_calls,
        problems=tuple(problems),
        redacted=verified.redacted,
        redaction_reasons=verified.redaction_reasons,
        redacted_calls=await _redacted_calls(store, stream) if verified.redacted else 0,
    )


async def _redacted_calls(store: EventStore, stream: str) -> int:
    return len(
        [e async for e in store.read_stream(stream) if e.type == "model.called" and is_redacted(e.data)]
    )


@dataclass(slots=True)
class ExecuteReport:
    """What ``execute_replay`` re-ran.

    Attributes:
        branch_id: The branch replayed.
        calls_replayed: Recorded model calls re-executed and matched.
        calls_skipped: Recorded model calls that cannot be re-executed (their instruction was
            never recorded, e.g. ``chat``, or they failed).
        messages_copied: Messages recorded without a model call (tools, CLI streams), copied.
        divergence: The first divergence, or None when every request matched.
        final_mismatch: Messages of the replayed branch that differ from the recorded ones.
        stopped_at_redaction: Why the replay stopped early: the first event whose recorded
            inputs were redacted (None when none was met).
    """

    branch_id: str
    calls_replayed: int = 0
    calls_skipped: int = 0
    messages_copied: int = 0
    divergence: ReplayMismatch | None = None
    final_mismatch: list[str] = field(default_factory=list)
    stopped_at_redaction: str | None = None

    @property
    def ok(self) -> bool:
        """True when every request matched and the replayed messages equal the recorded ones."""
        return self.divergence is None and not self.final_mismatch and self.stopped_at_redaction is None


async def _effective_events(
    store: EventStore, branch_id: str, upto: int | None = None
) -> list[RecordedEvent]:
    """The events whose fold is the branch: a fork's parent prefix, then its own stream."""
    events = [e async for e in store.read_stream(f"branch-{branch_id}", 1, upto)]
    if events and events[0].type == "branch.forked":
        data = events[0].data
        parent = await _effective_events(store, str(data["parent_branch_id"]), int(data["parent_version"]))
        return parent + events[1:]
    return events


def _message_of(event: RecordedEvent) -> AnyMessage:
    return message_from_dict(event.data["message"])


def _content_view(message: AnyMessage) -> Any:
    return (type(message).__name__, message.content.model_dump(mode="json"))


async def execute_replay(store: EventStore, branch_id: str) -> ExecuteReport:
    """Re-run the recorded exchanges of ``branch_id`` without calling any model.

    Each recorded exchange (an Instruction, its ``model.called`` and the AssistantResponse
    of that call) is re-executed with ``chat_and_record`` on a scratch branch, served by a
    ``RecordedModel`` armed with the recorded call. Messages recorded without a model call are
    copied as they are. The report holds the first divergence, if any.

    In steps: find the next recorded exchange (``_exchange_at``), re-run it
    (``_Replayer.exchange``) or copy the event (``_Replayer.copy``); stop at the first
    redacted event (``_redaction_note``) or divergence.
    """
    events = await _effective_events(store, branch_id)
    if not events:
        raise KernelError(f"branch {branch_id} has no events")
    report = ExecuteReport(branch_id=branch_id)
    state = await rebuild(store, branch_id, snapshots=False)
    model = RecordedModel()
    async with open_store("memory://") as scratch:
        replayer = _Replayer(
            store, report, model, _scratch_branch(scratch, branch_id, events[0], model), state
        )
        i = 0
        while i < len(events):
            note = _redaction_note(events[i]) if i else None
            if note is not None:
                report.stopped_at_redaction = note
                return report
            found = _exchange_at(events, i)
            if found is not None:
                if not await replayer.exchange(*found):
                    return report
                i += 3
                continue
            await replayer.copy(events[i])
            i += 1
        report.final_mismatch = _message_differences(replayer.branch.messages, state.messages)
    return report


def _scratch_branch(
    scratch: EventStore, branch_id: str, first: RecordedEvent, model: RecordedModel
) -> Branch:
    """A branch of the scratch store made as ``branch.created`` made the recorded one."""
    from ._branch import Branch  # local: Branch imports this module's layer

    created = visible_event(first).data
    recorded_system = created.get("system")
    system = message_from_dict(recorded_system) if isinstance(recorded_system, Mapping) else None
    if system is not None and not isinstance(system, System):
        raise KernelError(f"branch {branch_id}: branch.created holds a {type(system).__name__} as its system")
    return Branch(
        store=scratch, name=created.get("name"), user=created.get("user"), system=system, chat_model=model
    )


def _redaction_note(event: RecordedEvent) -> str | None:
    """Why the replay stops at ``event``: its recorded inputs were redacted (None: they were not)."""
    marker = redacted_marker(event.data)
    if marker is None:
        return None
    return (
        f"{event.stream} version {event.version} ({event.type}) was redacted "
        f"({marker.reason}): the calls from there on cannot be re-executed"
    )


def _exchange_at(
    events: Sequence[RecordedEvent], i: int
) -> tuple[Instruction, RecordedEvent, AssistantResponse] | None:
    """The recorded exchange starting at ``events[i]``: instruction, its ok ``model.called``, the answer."""
    if events[i].type != "message.added" or i + 2 >= len(events):
        return None
    message = _message_of(events[i])
    called, after = events[i + 1], events[i + 2]
    if not isinstance(message, Instruction) or called.type != "model.called" or after.type != "message.added":
        return None
    if called.data.get("status") != "ok":
        return None
    answer = _message_of(after)
    return (message, called, answer) if isinstance(answer, AssistantResponse) else None


class _Replayer:
    """The scratch branch a replay records to, and what it has seen of the recorded one."""

    def __init__(
        self,
        store: EventStore,
        report: ExecuteReport,
        model: RecordedModel,
        branch: Branch,
        state: BranchState,
    ) -> None:
        self.store = store
        self.report = report
        self.model = model
        self.branch = branch
        self.states = StateCache(store)  # the calls name their history by version: fold each once
        self.by_id: dict[str, AnyMessage] = {m.id: m for m in state.messages}
        if state.system is not None:
            self.by_id[state.system.id] = state.system
        self.seen: dict[str, AnyMessage] = {}
        self.renamed: dict[str, str] = {}
        self.index = 0

    async def exchange(self, message: Instruction, event: RecordedEvent, answer: AssistantResponse) -> bool:
        """Re-run one recorded exchange; False (the divergence in the report) when the request differs."""
        from ._called import called_message_ids

        self.index += 1
        called = decode_event(event)
        assert isinstance(called, ModelCalled)
        ids = await called_message_ids(self.store, event, cache=self.states)
        recorded = [m for m in (self.by_id.get(mid) or self.seen.get(mid) for mid in ids) if m is not None]
        self.model.expect(
            called,
            index=self.index,
            version=event.version,
            messages=[m.to_chat() for m in recorded],
            text=answer.content.text,
            tool_calls=_tool_calls_of(answer),
            reasoning=_reasoning_of(answer),
        )
        try:
            await self.branch.chat_and_record(message, tool_schemas=message.content.tool_schemas or None)
        except ReplayMismatch as exc:
            found = _message_differences([*self.branch.messages, message], recorded)
            self.report.divergence = (
                ReplayMismatch(
                    exc.actual,
                    found[0],
                    call_index=exc.call_index,
                    expected=exc.expected,
                    call_id=exc.call_id,
                    version=exc.version,
                )
                if found
                else exc
            )
            return False
        self.report.calls_replayed += 1
        self.seen[message.id] = message
        self.seen[answer.id] = answer
        # The replayed response is a new message; later events name the original.
        self.renamed[answer.id] = self.branch.messages[-1].id
        return True

    async def copy(self, event: RecordedEvent) -> None:
        """Apply an event that is no recorded exchange: copy a message, count a call, clear, annotate."""
        if event.type == "message.added":
            message = _message_of(event)
            self.seen[message.id] = message
            if isinstance(message, System):
                await self.branch.set_system(message)
            else:
                await self.branch.add_message(message)
            self.report.messages_copied += 1
        elif event.type == "model.called":
            self.report.calls_skipped += 1
        elif event.type == "messages.cleared":
            await self.branch.clear_messages()
        elif event.type == "message.annotated":
            target = str(event.data["message_id"])
            await self.branch.annotate(
                self.renamed.get(target, target),
                event.data.get("metadata") or {},
                reason=event.data.get("reason"),
            )


def _tool_calls_of(answer: AssistantResponse) -> tuple[ToolCall, ...]:
    """The tool calls an answer recorded in its metadata (``[{"id", "name", "arguments"}]``)."""
    recorded = answer.metadata.get("tool_calls")
    calls: list[ToolCall] = []
    for call in recorded if isinstance(recorded, list) else []:
        if isinstance(call, dict):
            arguments = call.get("arguments")
            signature = call.get("signature")
            calls.append(
                ToolCall(
                    str(call.get("id")),
                    str(call.get("name")),
                    arguments if isinstance(arguments, dict) else {},
                    signature=signature if isinstance(signature, str) else None,
                )
            )
    return tuple(calls)


def _reasoning_of(answer: AssistantResponse) -> list[dict[str, Any]]:
    """The signed reasoning blocks an answer recorded (``metadata["thinking_blocks"]``)."""
    blocks = answer.metadata.get("thinking_blocks")
    return [dict(b) for b in blocks if isinstance(b, dict)] if isinstance(blocks, list) else []


def _message_differences(now: Sequence[AnyMessage], then: Sequence[AnyMessage]) -> list[str]:
    """Every message of ``now`` whose content differs from the one recorded at its place."""
    now = [m for m in now if not isinstance(m, System)]
    then = [m for m in then if not isinstance(m, System)]
    problems = [
        f"message {n} ({type(a).__name__}) is {_short(a.rendered)!r} now, "
        f"but the log recorded {_short(b.rendered)!r}"
        for n, (a, b) in enumerate(zip(now, then, strict=False), 1)
        if _content_view(a) != _content_view(b)
    ]
    if len(now) != len(then):
        problems.append(f"{len(now)} messages now, the log recorded {len(then)}")
    return problems
