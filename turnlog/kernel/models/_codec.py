"""What every API codec is: request building, answer parsing and stream assembly, without I/O.

A codec knows one wire format (Chat Completions, Anthropic Messages, Gemini ``generateContent``)
and nothing about sockets, keys or retries: ``HTTPChatModel`` owns those and asks its codec for
the body, the path, the headers of the API and the meaning of every answer. The same codecs
serve anything else that reads or writes these formats (a recording proxy, the tests).

A codec reports a malformed answer with ``WireError`` and an error event inside a stream with
``StreamFault``; both are private signals that the HTTP base turns into the public
``ResponseFormatError`` / ``ServerError`` / ``RateLimitError`` with the provider's name.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

from turnlog._errors import UsageError

from ._errors import ProviderHTTPError
from ._http import error_class
from ._types import ModelRequest, ModelResponse, StreamChunk

__all__ = [
    "Assembly",
    "Codec",
    "StreamFault",
    "WireError",
    "function_of",
    "refuse_unknown",
]


class WireError(ValueError):
    """An answer that does not have the shape its API promises (the message says what is wrong)."""


class StreamFault(Exception):
    """An error event inside a stream that had answered 200.

    Attributes:
        summary: What happened, e.g. ``overloaded_error event in the stream after 3 events: ...``.
        detail: The error object of the event (for ``ProviderHTTPError.body``).
        rate_limited: The event says the caller is rate-limited (``RateLimitError``), else the
            service failed (``ServerError``).
    """

    def __init__(self, summary: str, detail: Any, *, rate_limited: bool = False) -> None:
        super().__init__(summary)
        self.summary = summary
        self.detail = detail
        self.rate_limited = rate_limited


class Assembly(Protocol):
    """Folds the decoded payloads of one stream into the object a non-streamed call returns."""

    #: Payloads folded so far, and what one is called (``chunks``, ``events``) in messages.
    count: int
    unit: str
    #: A ``data`` payload that ends the stream without being JSON (``[DONE]``), if the API has one.
    end_marker: str | None

    def add(self, payload: Any) -> bool:
        """Fold one decoded payload (None: the ``end_marker`` arrived); True when it carried output.

        Raises:
            WireError: The payload is not an object of this API.
            StreamFault: The payload is an error event.
        """
        ...

    def take_pieces(self) -> list[StreamChunk]:
        """The chunks completed since the last call (text deltas, finished tool calls)."""
        ...

    @property
    def stopped(self) -> bool:
        """The API said the answer is complete; nothing after this needs reading."""
        ...

    def missing(self) -> str | None:
        """What a stream that ended here lacks to be complete (None when complete)."""
        ...

    def result(self) -> dict[str, Any]:
        """The assembled answer, shaped like the API's non-streamed answer."""
        ...


class Codec(abc.ABC):
    """One API's wire format. Subclasses are stateless; one instance serves every call."""

    #: The name of the API (``chat_completions``, ``anthropic_messages``, ``gemini``).
    api: ClassVar[str]
    #: The endpoint recorded with each call (``chat/completions``, ``v1/messages``, ...).
    endpoint: ClassVar[str]
    #: The request parameters (``ModelRequest.params`` keys) this API takes, directly or translated.
    ACCEPTED_PARAMETERS: ClassVar[frozenset[str]]
    #: ``ModelRequest.params`` keys that have a ``ModelRequest`` field of their own.
    RESERVED_PARAMETERS: ClassVar[frozenset[str]] = frozenset(
        {"model", "messages", "tools", "response_format", "stream"}
    )

    @abc.abstractmethod
    def path(self, model: str, *, stream: bool) -> tuple[str, str]:
        """The path below the base URL and the query string of one request."""

    @abc.abstractmethod
    def auth_headers(self, key: str) -> dict[str, str]:
        """The headers carrying the API key."""

    def api_headers(self) -> dict[str, str]:
        """Headers the API requires on every request besides the key (a version pin)."""
        return {}

    @abc.abstractmethod
    def body(self, model: str, request: ModelRequest) -> dict[str, Any]:
        """The JSON body of ``request``.

        Raises:
            UsageError: A parameter or message this API cannot take (nothing is sent then).
        """

    @abc.abstractmethod
    def parse(self, raw: Any, *, model: str, provider: str) -> ModelResponse:
        """The ``ModelResponse`` of a decoded answer.

        Raises:
            WireError: ``raw`` is not an answer of this API.
        """

    @abc.abstractmethod
    def assembly(self, model: str) -> Assembly:
        """A fresh stream assembly for one streamed call."""

    def error_parts(self, body: Any) -> tuple[str, Any]:
        """The message and the code of an error body (``{"error": {"message", "code"}}`` here)."""
        detail = body.get("error", body) if isinstance(body, dict) else body
        message = detail.get("message") if isinstance(detail, dict) else None
        code = detail.get("code") if isinstance(detail, dict) else None
        return str(message if message is not None else detail), code

    def error_class(self, status: int, code: Any, message: str, body: Any) -> type[ProviderHTTPError]:
        """The ``ProviderHTTPError`` subclass of an error answer."""
        return error_class(status, code, message)

    def retry_after(self, body: Any) -> float | None:
        """A wait (seconds) the error body asks for, when the headers named none."""
        return None

    def check_reserved(self, request: ModelRequest) -> None:
        """Refuse parameters that have a ``ModelRequest`` field of their own."""
        reserved = sorted(self.RESERVED_PARAMETERS & set(request.params))
        if reserved:
            raise UsageError(
                f"ModelRequest.params may not set {', '.join(reserved)}: "
                "use the ModelRequest fields (messages, tools, response_format, stream) or the model"
            )


def refuse_unknown(api: str, params: Mapping[str, Any], accepted: frozenset[str]) -> None:
    """Raise ``UsageError`` naming the parameters ``api`` would refuse (before anything is sent)."""
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise UsageError(
            f"the {api} API does not take {', '.join(unknown)}; it takes {', '.join(sorted(accepted))}"
        )


def function_of(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """The function object of a tool schema in Chat Completions form (or a bare function object).

    Raises:
        UsageError: The schema names no function.
    """
    function = schema.get("function") if schema.get("type") == "function" else schema
    if not isinstance(function, Mapping) or not function.get("name"):
        raise UsageError(f"a tool schema needs a function name: {dict(schema)!r}")
    return function
