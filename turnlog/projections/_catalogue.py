"""The event catalogue: one frozen, versioned data schema per event type, and one registry.

Streams and their event types:

- ``branch-<id>``: ``branch.created``, ``branch.forked``, ``branch.user_set``,
  ``message.added``, ``message.annotated``, ``messages.cleared``, ``provider.session_bound``,
  ``model.called``, ``run.started``, ``run.ended``, ``run.failed``;
- ``run-<id>``: ``stream.chunk``;
- ``session-<id>``: ``session.created``, ``branch.included``, ``branch.removed``,
  ``session.default_branch_set``;
- ``name-<digest>``: ``branch.name_claimed`` (one event: which branch holds a name);
- ``graph-<id>``: ``node.queued``, ``node.started``, ``node.completed``, ``node.failed``,
  ``node.skipped``.

Each schema declares which of its fields hold conversation content (``content_fields``);
``redact``, ``forget``, retention and the exports read that declaration, nothing else.

Payloads are validated on write (``new_event``) and on read (``decode_event``). Event meta
keys (all optional): ``session_id``, ``branch_id``, ``run_id``, ``causation_id``,
``correlation_id``, ``actor``.

Example:
    >>> ev = new_event(BranchCreated(branch_id="b1", name="main"), meta={"actor": "cli"})
    >>> ev.type, ev.schema, ev.data["name"]
    ('branch.created', 1, 'main')

Why one module of about 650 lines: it is the catalogue, read as one table. Most of it is the
22 payload schemas with a docstring per field; split by stream, the registry and every reader
would import four modules to see the contract between kernel and projections.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any, ClassVar, Literal, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from turnlog._errors import UsageError
from turnlog.eventstore import NewEvent, RecordedEvent, Upcaster, Upcasters, redacted_marker

from ._errors import EventDecodeError, InvalidEventDataError, UnknownEventType
from ._messages import AnyMessage, System
from ._redacted import visible_data
from ._usage import Usage

__all__ = [
    "CATALOGUE",
    "META_KEYS",
    "BranchCreated",
    "BranchForked",
    "BranchIncluded",
    "BranchNameClaimed",
    "BranchRemoved",
    "BranchUserSet",
    "ChunkReceived",
    "DefaultBranchSet",
    "EventData",
    "EventRegistry",
    "MessageAdded",
    "MessageAnnotated",
    "MessagesCleared",
    "ModelCalled",
    "NodeCompleted",
    "NodeFailed",
    "NodeQueued",
    "NodeSkipped",
    "NodeStarted",
    "ProviderSessionBound",
    "RunEnded",
    "RunFailed",
    "RunStarted",
    "SessionCreated",
    "catalogue_upcasters",
    "decode_event",
    "decode_with",
    "new_event",
    "new_events",
    "stored_payload",
]

META_KEYS = ("session_id", "branch_id", "run_id", "causation_id", "correlation_id", "actor")
"""The meta keys with an agreed meaning; each is optional and, when present, a string."""

E = TypeVar("E", bound="EventData")


class EventData(BaseModel):
    """Base class of every event payload schema.

    Subclasses set ``event_type`` (the dotted name) and ``schema_version``; when a schema
    changes, bump ``schema_version`` and add an entry to ``upcasters`` lifting the old payload
    one version up (the stored bytes are never rewritten).

    Example:
        >>> class NoteAdded(EventData):
        ...     event_type: ClassVar[str] = "note.added"
        ...     schema_version: ClassVar[int] = 2
        ...     upcasters: ClassVar[dict[int, Upcaster]] = {1: lambda d: {**d, "tags": []}}
        ...     text: str
        ...     tags: list[str]
        >>> registry = CATALOGUE.copy()
        >>> _ = registry.register(NoteAdded)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_type: ClassVar[str]
    schema_version: ClassVar[int] = 1
    upcasters: ClassVar[Mapping[int, Upcaster]] = {}
    content_fields: ClassVar[tuple[str, ...] | None] = None
    """The fields that can hold conversation content (what a person said or was told, a
    tool's arguments or result, a provider's answer, an error quoting any of these).

    The one declaration that ``redact``, ``forget``, retention and the exports use to find
    content (see ``turnlog.projections.content_fields``): a redaction erases these fields and
    keeps the others. ``()`` declares that the type holds none; ``None`` (the default) means
    undeclared, and then the whole payload counts as content.
    """
    stores_defaults: ClassVar[bool] = True
    """Whether the stored payload spells out fields left at their defaults.

    False leaves them out (they read back as their defaults): for a type recorded on every
    turn whose many optional fields are mostly unset, so each event does not repeat them.
    """


_BUILT_ON_FIRST_USE = ConfigDict(defer_build=True)
"""The config of the schemas of other streams than branches (runs, sessions, names, graphs).

pydantic builds their validators when one is first used, not at import: no read of a branch
meets them, and every command that reads one (``turnlog show`` first) would pay for building
them, about a third of the catalogue's import. The branch schemas are built at import, so
that the first read of a branch spends nothing on them.
"""


# ------------------------------------------------------------------------------------ branch stream


class BranchCreated(EventData):
    """Version 1 of a new branch stream."""

    event_type: ClassVar[str] = "branch.created"
    content_fields: ClassVar[tuple[str, ...] | None] = ("user", "system", "metadata")
    branch_id: str
    """The branch id (the stream is ``branch-<branch_id>``)."""
    name: str | None = None
    """A human name."""
    user: str | None = None
    """The user (or session) the branch talks for."""
    system: System | None = None
    """The initial System message, if any."""
    chat_model: dict[str, JsonValue] | None = None
    """Chat model configuration (no secrets)."""
    parse_model: dict[str, JsonValue] | None = None
    """Parse model configuration (no secrets); None means the chat model."""
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    """Free-form facts about the branch."""
    session_id: str | None = None
    """The session that created the branch, if any."""


class BranchForked(EventData):
    """Version 1 of a fork's stream: the parent prefix is referenced, not copied."""

    event_type: ClassVar[str] = "branch.forked"
    content_fields: ClassVar[tuple[str, ...] | None] = ()
    branch_id: str
    """The new branch id."""
    parent_branch_id: str
    """The branch forked from."""
    parent_stream: str
    """The parent's stream name (``branch-<parent_branch_id>``)."""
    parent_version: int = Field(ge=1)
    """The last parent version included in the fork."""
    name: str | None = None
    """A human name for the fork."""


class BranchUserSet(EventData):
    """The user the branch talks for changed (a session that includes it sets its own id)."""

    event_type: ClassVar[str] = "branch.user_set"
    content_fields: ClassVar[tuple[str, ...] | None] = ("user",)
    user: str | None
    """The new user: the default sender of instructions and recipient of responses."""
    session_id: str | None = None
    """The session that set it, if a session did."""


class MessageAdded(EventData):
    """A message appended to the branch (a System message replaces the system in the view)."""

    event_type: ClassVar[str] = "message.added"
    content_fields: ClassVar[tuple[str, ...] | None] = ("message",)
    message: AnyMessage
    """The message, with its ``kind`` discriminator."""
    run_id: str | None = None
    """The run that produced it, if any."""


class MessageAnnotated(EventData):
    """Metadata merged into a message's view; the recorded message stays as it was."""

    event_type: ClassVar[str] = "message.annotated"
    content_fields: ClassVar[tuple[str, ...] | None] = ("metadata",)
    message_id: str
    """The message annotated."""
    metadata: dict[str, JsonValue]
    """Keys merged (shallowly) into the view's metadata."""
    reason: str | None = None
    """Why, e.g. ``parsed``."""


class MessagesCleared(EventData):
    """Every message leaves the view except the system message."""

    event_type: ClassVar[str] = "messages.cleared"
    content_fields: ClassVar[tuple[str, ...] | None] = ()


class ProviderSessionBound(EventData):
    """A provider session id to resume for a provider/model."""

    event_type: ClassVar[str] = "provider.session_bound"
    content_fields: ClassVar[tuple[str, ...] | None] = ()
    provider: str
    """The provider, e.g. ``claude_code``."""
    model: str
    """The model."""
    session_id: str
    """The provider's session id."""
    cwd: str | None = None
    """The working directory the session belongs to (CLIs keep sessions per directory)."""


def _usage_without_cache_counts(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 -> 2 of the events that carry a ``Usage``: nothing to change.

    Schema 2 added the cache counts to ``usage`` (``cache_read_tokens``,
    ``cache_write_tokens``); a schema-1 payload has none, and reads as "not reported". The
    version moved so that a reader of schema 1, which forbids unknown usage fields, refuses a
    newer payload by its schema number instead of failing on a field it does not know.
    """
    return data


_USAGE_UPCASTERS: Mapping[int, Upcaster] = {1: _usage_without_cache_counts}


def _answer_in_response(data: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 -> 3 of ``model.called``: nothing to change.

    Schema 3 added ``answer_id`` and ``answer_paths``: the answer's text may be taken out of
    ``response`` when the message that holds it is recorded in the same append; and fields
    left at their defaults are no longer stored. A schema-2 payload keeps its whole response
    and reads as "nothing taken out". The version moved so that a reader of schema 2 refuses a
    newer payload by its schema number instead of reading a response whose text is missing.
    """
    return data


class ModelCalled(EventData):
    """One model invocation, with enough facts to audit and replay it (never secrets)."""

    event_type: ClassVar[str] = "model.called"
    schema_version: ClassVar[int] = 3
    upcasters: ClassVar[Mapping[int, Upcaster]] = {1: _usage_without_cache_counts, 2: _answer_in_response}
    stores_defaults: ClassVar[bool] = False
    content_fields: ClassVar[tuple[str, ...] | None] = ("params", "response", "error_message")
    call_id: str
    """Unique id of the call."""
    provider: str
    """The provider name."""
    model: str
    """The model name as requested."""
    endpoint: str
    """The endpoint called, e.g. ``chat/completions`` or the CLI name."""
    served_model: str | None = None
    """The model the provider says it served, when it differs from ``model``: a dated
    snapshot (``gpt-4o-mini`` -> ``gpt-4o-mini-2024-07-18``) or a proxy's deployment."""
    verb: str | None = None
    """The verb that made the call."""
    run_id: str | None = None
    """The run the call belongs to."""
    message_ids: list[str] = Field(default_factory=list)
    """Ids of the recorded messages the request was built from, when they are listed.

    Empty when ``history_version`` is set: the ids are then those of the branch's view at
    that version (system first), followed by ``instruction_id``, and are not stored again
    on every call (``turnlog.kernel.called_message_ids`` resolves them either way).
    """
    history_version: int | None = None
    """The branch version whose message view was sent as history (None: see ``message_ids``)."""
    instruction_id: str | None = None
    """The id of the new instruction sent after that history (with ``history_version``)."""
    params: dict[str, JsonValue] = Field(default_factory=dict)
    """Request parameters other than messages (no secrets)."""
    tools: list[str] = Field(default_factory=list)
    """Names of the tools offered."""
    response_format: str | None = None
    """Name of the response schema, if any."""
    fingerprint: str
    """SHA-256 hex of the canonical request."""
    context_providers: list[str] = Field(default_factory=list)
    """Names of the context providers that fired."""
    response: dict[str, JsonValue] | None = None
    """The raw provider response; with ``answer_paths``, without the answer's text.

    ``turnlog.projections.with_answer`` puts the text back (from the message ``answer_id``).
    """
    answer_id: str | None = None
    """The ``AssistantResponse`` recorded in the same append whose text ``response`` leaves out."""
    answer_paths: list[list[str | int]] = Field(default_factory=list)
    """Where the answer's text stood in ``response`` (keys and indexes); null is stored there."""
    usage: Usage = Field(default=Usage.NONE)
    """Tokens and cost."""
    latency_ms: float
    """Wall time of the call including retries."""
    ttft_ms: float | None = None
    """Time to first token (streams)."""
    attempts: int = 1
    """How many attempts the call took."""
    status: Literal["ok", "error"]
    """Outcome."""
    error_type: str | None = None
    """Error class name when status is error."""
    error_message: str | None = None
    """Error message when status is error."""
    stream: bool = False
    """Whether the call streamed."""


class RunStarted(EventData):
    """A verb's run began."""

    event_type: ClassVar[str] = "run.started"
    content_fields: ClassVar[tuple[str, ...] | None] = ()
    run_id: str
    """The run id (chunks go to ``run-<run_id>``)."""
    verb: str
    """The verb, e.g. ``communicate``."""
    parent_run_id: str | None = None
    """The enclosing run, if nested."""
    provider: str | None = None
    """The provider used."""
    model: str | None = None
    """The model used."""
    cwd: str | None = None
    """The working directory of a CLI agent run."""


class RunEnded(EventData):
    """A run finished normally."""

    event_type: ClassVar[str] = "run.ended"
    schema_version: ClassVar[int] = 2
    upcasters: ClassVar[Mapping[int, Upcaster]] = _USAGE_UPCASTERS
    content_fields: ClassVar[tuple[str, ...] | None] = ()
    run_id: str
    """The run id."""
    verb: str
    """The verb."""
    duration_ms: float
    """Wall time of the run."""
    usage: Usage = Field(default=Usage.NONE)
    """Usage of this run only."""
    chunks: int | None = None
    """Stream chunks recorded, for streamed runs."""


class RunFailed(EventData):
    """A run ended with an error, a cancellation, a timeout, or was closed by recovery."""

    event_type: ClassVar[str] = "run.failed"
    schema_version: ClassVar[int] = 2
    upcasters: ClassVar[Mapping[int, Upcaster]] = _USAGE_UPCASTERS
    content_fields: ClassVar[tuple[str, ...] | None] = ("error_message", "recovered")
    run_id: str
    """The run id."""
    verb: str
    """The verb."""
    duration_ms: float
    """Wall time of the run (until the failure was noticed)."""
    usage: Usage = Field(default=Usage.NONE)
    """Usage of this run only."""
    error_type: str
    """Error class name."""
    error_message: str
    """Error message."""
    reason: Literal["error", "cancelled", "timeout", "crashed"]
    """Why the run failed."""
    recovered: dict[str, JsonValue] | None = None
    """What recovery materialized (crashed runs), if any."""


# --------------------------------------------------------------------------- run, session, graph


class ChunkReceived(EventData):
    """One normalized stream chunk (``stream.chunk`` on ``run-<id>``)."""

    model_config = _BUILT_ON_FIRST_USE

    event_type: ClassVar[str] = "stream.chunk"
    content_fields: ClassVar[tuple[str, ...] | None] = ("content", "tool_input", "tool_output", "metadata")
    seq: int = Field(ge=1)
    """1-based sequence number inside the run."""
    type: Literal["system", "thinking", "text", "tool_use", "tool_result", "result", "error"]
    """Chunk type."""
    content: str = ""
    """Text content."""
    tool_name: str | None = None
    """Tool name of a tool_use."""
    tool_id: str | None = None
    """Call id of a tool_use or tool_result."""
    tool_input: dict[str, JsonValue] | None = None
    """Arguments of a tool_use."""
    tool_output: JsonValue = None
    """Output of a tool_result."""
    is_error: bool = False
    """Error result or error chunk."""
    is_delta: bool = False
    """Content is an increment."""
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    """Everything else the provider said."""


class SessionCreated(EventData):
    """A session began."""

    model_config = _BUILT_ON_FIRST_USE

    event_type: ClassVar[str] = "session.created"
    content_fields: ClassVar[tuple[str, ...] | None] = ()
    session_id: str
    """The session id."""
    name: str | None = None
    """A human name."""


class BranchIncluded(EventData):
    """A branch joined the session."""

    model_config = _BUILT_ON_FIRST_USE

    event_type: ClassVar[str] = "branch.included"
    content_fields: ClassVar[tuple[str, ...] | None] = ()
    branch_id: str
    """The branch."""


class BranchRemoved(EventData):
    """A branch left the session."""

    model_config = _BUILT_ON_FIRST_USE

    event_type: ClassVar[str] = "branch.removed"
    content_fields: ClassVar[tuple[str, ...] | None] = ()
    branch_id: str
    """The branch."""


class DefaultBranchSet(EventData):
    """The session's default branch changed."""

    model_config = _BUILT_ON_FIRST_USE

    event_type: ClassVar[str] = "session.default_branch_set"
    content_fields: ClassVar[tuple[str, ...] | None] = ()
    branch_id: str
    """The new default branch."""


# ------------------------------------------------------------------------------ name streams


class BranchNameClaimed(EventData):
    """A branch took a name: version 1 of the name's stream (``name-<digest of the name>``).

    Appended in the same transaction as the branch's first event, on the condition that the
    name's stream has no event: of two processes creating one name at the same instant, one
    commits and the other gets a concurrency conflict (``BranchNameTaken``).
    """

    model_config = _BUILT_ON_FIRST_USE

    event_type: ClassVar[str] = "branch.name_claimed"
    content_fields: ClassVar[tuple[str, ...] | None] = ()
    name: str
    """The name (as in the branch's ``branch.created`` or ``branch.forked``)."""
    branch_id: str
    """The branch that holds it."""


class NodeQueued(EventData):
    """A graph node is ready to run."""

    model_config = _BUILT_ON_FIRST_USE

    event_type: ClassVar[str] = "node.queued"
    content_fields: ClassVar[tuple[str, ...] | None] = ()
    node_id: str
    """The node."""
    operation: str
    """The operation it runs."""
    branch_id: str | None = None
    """The branch it runs on."""


class NodeStarted(EventData):
    """A graph node started."""

    model_config = _BUILT_ON_FIRST_USE

    event_type: ClassVar[str] = "node.started"
    content_fields: ClassVar[tuple[str, ...] | None] = ()
    node_id: str
    """The node."""
    operation: str
    """The operation it runs."""
    branch_id: str | None = None
    """The branch it runs on."""


class NodeCompleted(EventData):
    """A graph node finished."""

    model_config = _BUILT_ON_FIRST_USE

    event_type: ClassVar[str] = "node.completed"
    content_fields: ClassVar[tuple[str, ...] | None] = ("result",)
    node_id: str
    """The node."""
    duration_ms: float
    """Wall time."""
    result: JsonValue = None
    """Its JSON result."""


class NodeFailed(EventData):
    """A graph node failed."""

    model_config = _BUILT_ON_FIRST_USE

    event_type: ClassVar[str] = "node.failed"
    content_fields: ClassVar[tuple[str, ...] | None] = ("error_message",)
    node_id: str
    """The node."""
    duration_ms: float
    """Wall time."""
    error_type: str
    """Error class name."""
    error_message: str
    """Error message."""


class NodeSkipped(EventData):
    """A graph node was skipped."""

    model_config = _BUILT_ON_FIRST_USE

    event_type: ClassVar[str] = "node.skipped"
    content_fields: ClassVar[tuple[str, ...] | None] = ("reason",)
    node_id: str
    """The node."""
    reason: str
    """Why."""


# ----------------------------------------------------------------------------------------- registry


class EventRegistry:
    """Event type name -> schema class.

    ``CATALOGUE`` holds the agreed types; make a copy to add your own without touching it.

    Example:
        >>> reg = CATALOGUE.copy()
        >>> reg.get("message.added") is MessageAdded
        True
    """

    __slots__ = ("_types",)

    def __init__(self, schemas: Mapping[str, type[EventData]] | None = None) -> None:
        self._types: dict[str, type[EventData]] = dict(schemas or {})

    def register(self, schema: type[E]) -> type[E]:
        """Register ``schema`` under its ``event_type`` (usable as a class decorator).

        Raises:
            ValueError: another class is registered under the same name already.
        """
        name = getattr(schema, "event_type", None)
        if not isinstance(name, str) or not name:
            raise UsageError(f"{schema.__name__} has no event_type")
        existing = self._types.get(name)
        if existing is not None and existing is not schema:
            raise UsageError(f"event type {name!r} is already registered to {existing.__name__}")
        self._types[name] = schema
        return schema

    def get(self, type_name: str) -> type[EventData] | None:
        """The schema of ``type_name``, or None when unknown."""
        return self._types.get(type_name)

    def __contains__(self, type_name: object) -> bool:
        return type_name in self._types

    def __iter__(self) -> Iterator[str]:
        return iter(self._types)

    def __len__(self) -> int:
        return len(self._types)

    def copy(self) -> EventRegistry:
        """An independent registry with the same types."""
        return EventRegistry(self._types)

    def upcasters(self) -> Upcasters:
        """An ``Upcasters`` with every registered type's upcasters, for ``open_store``."""
        ups = Upcasters()
        for name, schema in self._types.items():
            for from_schema, fn in sorted(schema.upcasters.items()):
                ups.add(name, from_schema, fn)
        return ups


CATALOGUE = EventRegistry()
"""The agreed event types. Copy it (``CATALOGUE.copy()``) to register more."""

for _schema in (
    BranchCreated,
    BranchForked,
    BranchUserSet,
    MessageAdded,
    MessageAnnotated,
    MessagesCleared,
    ProviderSessionBound,
    ModelCalled,
    RunStarted,
    RunEnded,
    RunFailed,
    ChunkReceived,
    SessionCreated,
    BranchIncluded,
    BranchRemoved,
    DefaultBranchSet,
    BranchNameClaimed,
    NodeQueued,
    NodeStarted,
    NodeCompleted,
    NodeFailed,
    NodeSkipped,
):
    CATALOGUE.register(_schema)


def catalogue_upcasters(registry: EventRegistry | None = None) -> Upcasters:
    """The upcasters of the catalogue (and of snapshots), ready to pass to ``open_store``.

    ``model.called``, ``run.ended`` and ``run.failed`` have a schema 1 (usage without cache
    counts); passing the result means old events keep decoding whenever a schema moves on.
    """
    ups = (registry or CATALOGUE).upcasters()
    for from_schema, fn in sorted(_SNAPSHOT_UPCASTERS.items()):
        ups.add("branch_state", from_schema, fn)
    return ups


# branch_state snapshot schema n -> n + 1 (none yet; snapshots older than the projection code
# version are ignored and rebuilt anyway).
_SNAPSHOT_UPCASTERS: dict[int, Upcaster] = {}


def _check_meta(type_name: str, meta: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if meta is None:
        return None
    if not isinstance(meta, Mapping):
        raise InvalidEventDataError(type_name, f"meta must be a mapping, got {type(meta).__name__}")
    for key in META_KEYS:
        value = meta.get(key)
        if value is not None and not isinstance(value, str):
            raise InvalidEventDataError(
                type_name, f"meta[{key!r}] must be a string, got {type(value).__name__}"
            )
    return dict(meta)


def new_event(
    data: EventData,
    *,
    meta: Mapping[str, Any] | None = None,
    id: UUID | None = None,
    registry: EventRegistry | None = None,
) -> NewEvent:
    """Build the ``NewEvent`` for a payload, validating it on the way in.

    Args:
        data: A schema instance, e.g. ``MessageAdded(message=msg)``.
        meta: Correlation and causation data (see ``META_KEYS``).
        id: The idempotency key; a fresh UUIDv7 when None.
        registry: Where the type must be registered (``CATALOGUE`` by default).

    Raises:
        InvalidEventDataError: the type is not registered, the payload does not validate, or
            a known meta key is not a string.
    """
    schema, payload = _checked_payload(data, registry or CATALOGUE)
    checked = _check_meta(schema.event_type, meta)
    if id is None:
        return NewEvent(schema.event_type, payload, checked, schema=schema.schema_version)
    return NewEvent(schema.event_type, payload, checked, id=id, schema=schema.schema_version)


def new_events(
    datas: Iterable[EventData],
    *,
    meta: Mapping[str, Any] | None = None,
    registry: EventRegistry | None = None,
) -> list[NewEvent]:
    """``new_event`` for a batch that shares one meta: each payload validated, the meta checked once.

    The events hold one copy of ``meta`` between them, so an append encodes it once rather
    than once per event (``append`` encodes a meta object again only when it is another
    object than the previous event's).

    Example:
        >>> evs = new_events([MessagesCleared(), MessagesCleared()], meta={"run_id": "r1"})
        >>> evs[0].meta is evs[1].meta
        True

    Raises:
        InvalidEventDataError: as ``new_event``, for the first payload that fails.
    """
    reg = registry or CATALOGUE
    events: list[NewEvent] = []
    checked: dict[str, Any] | None = None
    for number, data in enumerate(datas):
        schema, payload = _checked_payload(data, reg)
        if number == 0:
            checked = _check_meta(schema.event_type, meta)
        events.append(NewEvent(schema.event_type, payload, checked, schema=schema.schema_version))
    return events


def stored_payload(data: EventData) -> dict[str, Any]:
    """The payload of ``data`` as the store keeps it: JSON values, defaults left out where its schema says.

    Not validated again: ``new_event`` does that for payloads it did not build itself; a
    caller that built ``data`` with its final values (never ``model_construct`` or a mutation)
    may journal this as it is.
    """
    return data.model_dump(mode="json", warnings=False, exclude_defaults=not type(data).stores_defaults)


def _checked_payload(data: EventData, registry: EventRegistry) -> tuple[type[EventData], dict[str, Any]]:
    """The schema of ``data`` and its payload as stored, validated again from that payload."""
    schema = registry.get(getattr(data, "event_type", ""))
    if schema is None or type(data) is not schema:
        raise InvalidEventDataError(
            getattr(data, "event_type", type(data).__name__),
            f"{type(data).__name__} is not a registered schema",
        )
    payload = stored_payload(data)
    try:
        # re-validate: a model built with model_construct (or mutated) must not slip through
        schema.model_validate(payload)
    except ValidationError as exc:
        raise InvalidEventDataError(schema.event_type, _describe(exc)) from exc
    return schema, payload


def decode_event(recorded: RecordedEvent, registry: EventRegistry | None = None) -> EventData:
    """Validate a recorded event's payload into its schema class.

    A payload stored under an older schema is lifted with the schema's upcasters first (the
    store usually did that already when it was opened with ``catalogue_upcasters()``).

    Raises:
        UnknownEventType: no schema is registered for the type.
        EventDecodeError: the payload does not validate, or its schema version is newer than
            (or cannot be lifted to) the registered one.
    """
    schema = (registry or CATALOGUE).get(recorded.type)
    if schema is None:
        raise UnknownEventType(
            recorded.stream,
            recorded.version,
            recorded.type,
            "no schema is registered",
            position=recorded.position,
        )
    return decode_with(schema, recorded)


def decode_with(schema: type[E], recorded: RecordedEvent) -> E:
    """``decode_event`` with the schema given: redaction resolved, old schemas lifted."""
    data = recorded.data
    redacted = ""
    if len(data) == 1 and "turnlog_redacted" in data:
        # A redacted payload: what the redaction kept, or a clear error (never None).
        marker = redacted_marker(recorded.data)
        redacted = f"the payload was redacted ({marker.reason if marker else 'no reason'})"
        data = visible_data(recorded.type, data)
        if data is recorded.data:
            raise EventDecodeError(
                recorded.stream,
                recorded.version,
                recorded.type,
                f"{redacted} and kept nothing to decode",
                position=recorded.position,
            )
        recorded = replace(recorded, data=data)
    if recorded.schema != schema.schema_version:
        data = _lift(schema, recorded)
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        why = f"{redacted} and what it kept does not decode: {_describe(exc)}" if redacted else _describe(exc)
        raise EventDecodeError(
            recorded.stream, recorded.version, recorded.type, why, position=recorded.position
        ) from exc


def _lift(schema: type[EventData], recorded: RecordedEvent) -> dict[str, Any]:
    version, data = recorded.schema, recorded.data
    while version < schema.schema_version and (fn := schema.upcasters.get(version)) is not None:
        data = fn(data)
        version += 1
    if version != schema.schema_version:
        raise EventDecodeError(
            recorded.stream,
            recorded.version,
            recorded.type,
            f"stored schema {recorded.schema} cannot be read as schema {schema.schema_version}",
            position=recorded.position,
        )
    return data


def _describe(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors())
