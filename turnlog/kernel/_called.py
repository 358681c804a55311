"""Which recorded messages a ``model.called`` was built from, however the call names them.

A call whose history was the branch's own view records only ``history_version`` and
``instruction_id`` (constant size, however long the conversation); a call given an explicit
progression lists ``message_ids``. ``called_message_ids`` answers the same list either way::

    async for event in store.read_stream(branch.stream):
        if event.type == "model.called":
            ids = await called_message_ids(store, event, cache=cache)
"""

from __future__ import annotations

from collections.abc import Sequence

from turnlog.eventstore import EventStore, RecordedEvent
from turnlog.kernel._errors import KernelError
from turnlog.projections import BranchState, ModelCalled, StateCache, System, decode_event, rebuild

__all__ = ["called_message_ids", "message_ids_at", "sent_message_ids"]


def sent_message_ids(
    history_ids: Sequence[str], system: System | None, instruction_id: str | None
) -> list[str]:
    """The ids of the recorded messages a request was built from: system, history, instruction.

    The same rule serves the assembly and the resolution of a recorded ``model.called`` that
    names its history by version (``called_message_ids``).
    """
    # one list built in one go: a turn copies the history's ids once (no insert at the front)
    lead = [system.id] if system is not None and system.id not in history_ids[:1] else []
    tail = [instruction_id] if instruction_id is not None else []
    return [*lead, *history_ids, *tail]


def message_ids_at(state: BranchState, called: ModelCalled) -> list[str]:
    """The message ids of ``called``, given the state of its branch at ``history_version``.

    Raises:
        KernelError: ``state`` is not at the version the call names.
    """
    if called.history_version is None:
        return list(called.message_ids)
    if state.version != called.history_version:
        raise KernelError(
            f"model call {called.call_id} was built from version {called.history_version} "
            f"of branch {state.branch_id}, not from version {state.version}"
        )
    return sent_message_ids([m.id for m in state.messages], state.system, called.instruction_id)


async def called_message_ids(
    store: EventStore, event: RecordedEvent, *, cache: StateCache | None = None
) -> list[str]:
    """The ids of the recorded messages a recorded ``model.called`` event was built from.

    In the order they were sent: the system message, the history, then the new instruction.

    Args:
        store: The store holding the event's branch.
        event: A ``model.called`` event of a ``branch-<id>`` stream.
        cache: Folded states to reuse across many calls of one branch (``StateCache``).

    Raises:
        KernelError: ``event`` is not a ``model.called`` event.
        EventDecodeError: its payload does not validate.
    """
    called = decode_event(event)
    if not isinstance(called, ModelCalled):
        raise KernelError(f"event {event.id} is a {event.type!r} event, not 'model.called'")
    if called.history_version is None:
        return list(called.message_ids)
    branch_id = event.stream.removeprefix("branch-")
    state = await rebuild(store, branch_id, at_version=called.history_version, cache=cache)
    return message_ids_at(state, called)
