"""Conversation messages: System, Instruction, AssistantResponse, ActionRequest, ActionResponse.

Messages are frozen pydantic models. A recorded message is never changed: what a mutable
message store would do in place (link a request to its response, add metadata after parsing,
replace the system message) is an event, and the fold derives the linked view from it.

Every message serializes to a JSON object with a ``kind`` field naming its class;
``message_from_dict(msg.to_dict()) == msg`` holds for every message, and
``message_from_dict(d).to_dict() == d`` for every dict ``to_dict`` produced.

Example:
    >>> ins = Instruction.create("What is 2 + 2?", guidance="Answer with a number.")
    >>> ins.to_chat()["role"]
    'user'
    >>> message_from_dict(ins.to_dict()) == ins
    True
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from turnlog.eventstore import uuid7

from ._errors import InvalidMessageError
from ._render import render_yaml

__all__ = [
    "DEFAULT_SYSTEM_MESSAGE",
    "ActionRequest",
    "ActionRequestContent",
    "ActionResponse",
    "ActionResponseContent",
    "AnyMessage",
    "AssistantResponse",
    "AssistantResponseContent",
    "Instruction",
    "InstructionContent",
    "Message",
    "MessageRole",
    "System",
    "SystemContent",
    "message_from_dict",
]

MessageRole: TypeAlias = Literal["system", "user", "assistant", "action"]

DEFAULT_SYSTEM_MESSAGE = "You are a helpful AI assistant. Let's think step by step."

_RESPONSE_FORMAT_HINT = (
    "Return only a JSON object that conforms to ResponseSchema, inside a ```json code block."
)
_DATA_IMAGE = re.compile(r"data:image/(png|jpe?g|gif|webp);base64,[A-Za-z0-9+/=\s]+\Z")
_RAW_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+\Z")


def _new_id() -> str:
    return str(uuid7())


def _now() -> datetime:
    return datetime.now(UTC)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# ---------------------------------------------------------------------------------------- contents


class SystemContent(_Frozen):
    """What a System message says."""

    system_message: str = DEFAULT_SYSTEM_MESSAGE
    """The system prompt."""
    system_datetime: str | None = None
    """A time shown before the prompt (``System Time: ...``), when given."""


class InstructionContent(_Frozen):
    """What an Instruction asks, with everything the model needs to answer it."""

    instruction: JsonValue = None
    """The request itself (usually text)."""
    guidance: JsonValue = None
    """How to answer; a non-string value is rendered as YAML."""
    context: list[JsonValue] = Field(default_factory=list)
    """Extra context items shown under ``Context``."""
    plain_content: str | None = None
    """When set, rendered verbatim instead of the structured form."""
    tool_schemas: list[dict[str, JsonValue]] = Field(default_factory=list)
    """Tool schemas offered with this instruction."""
    response_format: dict[str, JsonValue] | None = None
    """JSON schema the answer must follow, if any."""
    images: list[str] = Field(default_factory=list)
    """Image URLs (http(s) or ``data:image/...;base64,``); raw base64 becomes a JPEG data URI."""
    image_detail: Literal["low", "high", "auto"] | None = None
    """The detail level requested for the images."""

    @field_validator("images")
    @classmethod
    def _check_images(cls, images: list[str]) -> list[str]:
        if not images:
            return images
        out = []
        for i, url in enumerate(images):
            if url.startswith(("http://", "https://")) or _DATA_IMAGE.match(url):
                out.append(url)
            elif ":" not in url and _RAW_BASE64.match(url):
                out.append("data:image/jpeg;base64," + url)
            else:
                raise ValueError(
                    f"images[{i}] must be an http(s) URL or a data:image/(png|jpeg|gif|webp);base64 URI"
                )
        return out


class AssistantResponseContent(_Frozen):
    """What the assistant answered."""

    text: str = ""
    """The answer text ("" when the model only called tools)."""


class ActionRequestContent(_Frozen):
    """A tool call the model asked for."""

    function: str
    """The tool (function) name."""
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    """The call's arguments."""
    call_id: str | None = None
    """The provider's id of the call, when it gave one."""
    action_response_id: str | None = None
    """Id of the ActionResponse that answers this request. Derived by the fold; None as recorded."""


class ActionResponseContent(_Frozen):
    """The outcome of a tool call."""

    action_request_id: str | None = None
    """Id of the ActionRequest this answers."""
    function: str
    """The tool (function) name."""
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    """The arguments the tool was called with."""
    output: JsonValue = None
    """What the tool returned (None on error)."""
    error: str | None = None
    """The error message when the call failed or was denied; None on success."""
    duration_ms: float | None = None
    """How long the call took."""


# ---------------------------------------------------------------------------------------- messages


class Message(_Frozen):
    """Fields every message has. Use one of the five concrete classes."""

    kind: str
    """The class name; the discriminator of the serialized form."""
    id: str = Field(default_factory=_new_id)
    """Unique id (a UUIDv7 string by default)."""
    created_at: datetime = Field(default_factory=_now)
    """When the message was made (aware, stored in UTC)."""
    sender: str | None = None
    """Who sent it (a name or an id)."""
    recipient: str | None = None
    """Who it is for (a name or an id)."""
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
    """Free-form JSON facts about the message."""
    role: MessageRole
    """Who speaks: system, user, assistant or action (fixed by the class)."""

    @field_validator("created_at", mode="before")
    @classmethod
    def _utc(cls, value: Any) -> Any:
        # ISO strings go through the C parser (fast, and "Z" becomes datetime.UTC); every
        # datetime must be aware and is kept in UTC.
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                raise ValueError(f"not an ISO 8601 datetime: {value!r}") from None
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise ValueError("created_at must be timezone-aware (UTC)")
            if value.tzinfo is not UTC:
                value = value.astimezone(UTC)
        return value

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (with ``kind`` and ``role``); ``message_from_dict`` reverses it."""
        return self.model_dump(mode="json")

    @property
    def rendered(self) -> str | list[dict[str, Any]]:
        """The text a model sees for this message."""
        raise NotImplementedError  # pragma: no cover - every concrete class overrides it

    def to_chat(self) -> dict[str, Any]:
        """The chat message ``{"role", "content"}`` of this message."""
        return {"role": self.role, "content": self.rendered}


class System(Message):
    """The system prompt of a branch; a new one replaces the old one in the view."""

    kind: Literal["System"] = "System"
    role: Literal["system"] = "system"
    sender: str | None = "system"
    recipient: str | None = "assistant"
    content: SystemContent = Field(default_factory=SystemContent)
    """The prompt."""

    @classmethod
    def create(cls, system_message: str = DEFAULT_SYSTEM_MESSAGE, **fields: Any) -> System:
        """Make a System message; ``system_datetime=True`` stamps the current UTC minute."""
        stamp = fields.pop("system_datetime", None)
        if stamp is True:
            stamp = _now().isoformat(timespec="minutes")
        content = SystemContent(system_message=system_message, system_datetime=stamp or None)
        return cls(content=content, **fields)

    @property
    def rendered(self) -> str:
        """``System Time: <dt>`` and a blank line before the prompt when a time is set."""
        c = self.content
        return (
            f"System Time: {c.system_datetime}\n\n{c.system_message}"
            if c.system_datetime
            else c.system_message
        )


class Instruction(Message):
    """A user turn: the instruction plus guidance, context, tools, response schema and images."""

    kind: Literal["Instruction"] = "Instruction"
    role: Literal["user"] = "user"
    content: InstructionContent = Field(default_factory=InstructionContent)
    """What is asked."""

    @classmethod
    def create(cls, instruction: JsonValue = None, **fields: Any) -> Instruction:
        """Make an Instruction; content fields and message fields may be mixed as keywords."""
        content = {k: fields.pop(k) for k in list(fields) if k in InstructionContent.model_fields}
        return cls(content=InstructionContent(instruction=instruction, **content), **fields)

    @property
    def rendered(self) -> str | list[dict[str, Any]]:
        """YAML of Guidance/Instruction/Context/Tools/ResponseSchema (empty parts dropped).

        ``plain_content`` replaces the YAML when set. With images the result is a list of
        content parts: the text, then one ``image_url`` part per image.
        """
        c = self.content
        if c.plain_content is not None:
            text = c.plain_content
        else:
            parts = {
                "Guidance": c.guidance,
                "Instruction": c.instruction,
                "Context": c.context,
                "Tools": c.tool_schemas,
                "ResponseSchema": c.response_format,
                "ResponseFormat": _RESPONSE_FORMAT_HINT if c.response_format else None,
            }
            text = render_yaml({k: v for k, v in parts.items() if v not in (None, "", [], {})})
        if not c.images:
            return text
        detail = c.image_detail or "auto"
        return [
            {"type": "text", "text": text},
            *({"type": "image_url", "image_url": {"url": url, "detail": detail}} for url in c.images),
        ]


class AssistantResponse(Message):
    """An assistant turn. ``metadata["model_response"]`` holds the raw provider response."""

    kind: Literal["AssistantResponse"] = "AssistantResponse"
    role: Literal["assistant"] = "assistant"
    recipient: str | None = "user"
    content: AssistantResponseContent = Field(default_factory=AssistantResponseContent)
    """The answer."""

    @classmethod
    def create(cls, text: str = "", **fields: Any) -> AssistantResponse:
        """Make an AssistantResponse from its text."""
        return cls(content=AssistantResponseContent(text=text), **fields)

    @classmethod
    def from_response(cls, raw: JsonValue, **fields: Any) -> AssistantResponse:
        """Make one from a raw provider response, kept in ``metadata["model_response"]``.

        Understands an OpenAI chat completion (``choices[].message.content`` or
        ``delta.content``), an Anthropic message (``content[].text``), a Responses API object
        (``output[].content[].text``), a Claude Code result (``result``) and a plain string;
        text parts are joined with "".
        """
        metadata = {**fields.pop("metadata", {}), "model_response": raw}
        return cls(content=AssistantResponseContent(text=_response_text(raw)), metadata=metadata, **fields)

    @property
    def response(self) -> str:
        """The answer text."""
        return self.content.text

    @property
    def model_response(self) -> JsonValue:
        """The raw provider response (``{}`` when none was kept)."""
        return self.metadata.get("model_response", {})

    @property
    def rendered(self) -> str:
        """The answer text."""
        return self.content.text


class ActionRequest(Message):
    """A tool call the model asked for; the view shows the id of the response that answers it."""

    kind: Literal["ActionRequest"] = "ActionRequest"
    role: Literal["action"] = "action"
    content: ActionRequestContent
    """The call."""

    @classmethod
    def create(
        cls,
        function: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
        **fields: Any,
    ) -> ActionRequest:
        """Make an ActionRequest."""
        content = ActionRequestContent(function=function, arguments=dict(arguments or {}), call_id=call_id)
        return cls(content=content, **fields)

    @property
    def function(self) -> str:
        """The tool name."""
        return self.content.function

    @property
    def arguments(self) -> dict[str, JsonValue]:
        """The call's arguments."""
        return self.content.arguments

    @property
    def is_responded(self) -> bool:
        """True when the view links a response to this request."""
        return self.content.action_response_id is not None

    @property
    def rendered(self) -> str:
        """YAML with Function and Arguments."""
        return render_yaml({"Function": self.content.function, "Arguments": self.content.arguments})


class ActionResponse(Message):
    """The outcome of a tool call; ``error`` is set when it failed or was denied."""

    kind: Literal["ActionResponse"] = "ActionResponse"
    role: Literal["action"] = "action"
    content: ActionResponseContent
    """The outcome."""

    @classmethod
    def create(
        cls,
        request: ActionRequest | None = None,
        *,
        output: JsonValue = None,
        error: str | None = None,
        duration_ms: float | None = None,
        function: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> ActionResponse:
        """Make the response to ``request`` (or to a call described by function/arguments)."""
        if request is not None:
            function = function if function is not None else request.content.function
            arguments = arguments if arguments is not None else request.content.arguments
        if function is None:
            raise InvalidMessageError("ActionResponse.create needs a request or a function name")
        content = ActionResponseContent(
            action_request_id=request.id if request is not None else None,
            function=function,
            arguments=dict(arguments or {}),
            output=output,
            error=error,
            duration_ms=duration_ms,
        )
        return cls(content=content, **fields)

    @property
    def function(self) -> str:
        """The tool name."""
        return self.content.function

    @property
    def output(self) -> JsonValue:
        """What the tool returned."""
        return self.content.output

    @property
    def error(self) -> str | None:
        """The error message, None on success."""
        return self.content.error

    @property
    def success(self) -> bool:
        """True when the call did not fail."""
        return self.content.error is None

    @property
    def rendered(self) -> str:
        """YAML with Function, Arguments and Output (and Error when there is one)."""
        body: dict[str, Any] = {
            "Function": self.content.function,
            "Arguments": self.content.arguments,
            "Output": self.content.output,
        }
        if self.content.error is not None:
            body["Error"] = self.content.error
        return render_yaml(body)


AnyMessage: TypeAlias = Annotated[
    System | Instruction | AssistantResponse | ActionRequest | ActionResponse, Field(discriminator="kind")
]
"""Any of the five message classes, discriminated by ``kind``."""


@functools.cache
def _adapter() -> TypeAdapter[AnyMessage]:
    # built on first use: the fold and the snapshot loader read stored messages through
    # ``_decode``, so a read command never needs this one
    return TypeAdapter(AnyMessage)


def message_from_dict(data: Mapping[str, Any]) -> AnyMessage:
    """Rebuild a message from ``Message.to_dict()`` output.

    Raises:
        InvalidMessageError: the dict names no known kind, has a role that does not match
            the kind, or a field fails validation.
    """
    if not isinstance(data, Mapping):
        raise InvalidMessageError(f"expected a JSON object, got {type(data).__name__}")
    try:
        return _adapter().validate_python(data)
    except ValidationError as exc:
        raise InvalidMessageError(_describe(exc)) from exc


def _describe(exc: ValidationError) -> str:
    """One line per failing field: ``field.path: message``."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors())


def _response_text(raw: Any) -> str:
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list):
        return "".join(_response_text(item) for item in raw)
    if not isinstance(raw, dict):
        return str(raw)
    if "choices" in raw:
        parts = []
        for choice in raw["choices"] or []:
            msg = choice.get("message") or choice.get("delta") or {}
            parts.append(msg.get("content") or "")
        return "".join(parts)
    if isinstance(raw.get("content"), list):  # Anthropic messages
        return "".join(
            b.get("text", "") for b in raw["content"] if isinstance(b, dict) and b.get("type") == "text"
        )
    if isinstance(raw.get("output"), list):  # Responses API
        return "".join(
            part.get("text", "")
            for item in raw["output"]
            if isinstance(item, dict)
            for part in item.get("content") or []
            if isinstance(part, dict) and part.get("type") == "output_text"
        )
    if "result" in raw:  # Claude Code result
        return str(raw["result"] or "")
    return str(raw.get("content") or "")
