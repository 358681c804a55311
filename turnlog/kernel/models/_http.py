"""What the HTTP providers share around one request.

The loopback guard, the attempt failure, the secret holder, error classes by status,
proxy-reported cost, and credential redaction.

``OpenAIChatModel`` (and through it ``AnthropicModel`` and ``GeminiAPIModel``) uses these; the
wire formats stay in the provider modules. Importing this module installs a filter that
scrubs credentials from the URLs in httpx's and httpcore's log lines.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import ipaddress
import logging
import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import httpx

from ._errors import (
    AuthenticationError,
    ContextLengthError,
    ProviderError,
    ProviderHTTPError,
    RateLimitError,
    ServerError,
)
from ._secrets import REDACTED, Scrubber, scrub_url
from ._types import ModelResponse, StreamChunk

__all__ = [
    "CLASS_DEFAULT",
    "ClassDefault",
    "COST_HEADERS",
    "SERVED_MODEL_HEADERS",
    "Failure",
    "Secret",
    "error_class",
    "is_loopback",
    "number",
    "redact_request",
    "scrubbed",
    "with_reported",
]

_CONTEXT_MESSAGE = re.compile(
    r"context[\s_-]?(length|window)|maximum context|prompt is too long|input token count", re.IGNORECASE
)


class ClassDefault(enum.Enum):
    """The marker of an argument left to the class's ``default_...`` attribute."""

    TOKEN = "the class default"


#: ``api_key_env`` left unset: the class's ``default_api_key_env`` (None already means "no variable").
CLASS_DEFAULT: Final = ClassDefault.TOKEN


def is_loopback(url: str) -> bool:
    """True when ``url`` names this machine (localhost, 127.0.0.0/8, ::1)."""
    host = (urlsplit(url).hostname or "").lower()
    if host in {"localhost", "localhost.localdomain"} or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Secret:
    """A string that never shows itself in a repr, a str or a traceback."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return REDACTED

    __str__ = __repr__


class Failure(Exception):
    """One failed attempt: the error to raise, whether it may be retried, and the server's wait."""

    def __init__(self, error: ProviderError, *, retryable: bool, retry_after: float | None = None) -> None:
        self.error = error
        self.retryable = retryable
        self.retry_after = retry_after
        super().__init__(str(error))


#: Headers in which proxies report the real cost and the deployment's model (LiteLLM).
COST_HEADERS = ("x-litellm-response-cost",)
SERVED_MODEL_HEADERS = ("x-litellm-model-name",)


def with_reported(answer: ModelResponse, headers: httpx.Headers) -> ModelResponse:
    """The answer with the cost and model a proxy reported in its headers (they win)."""
    changes: dict[str, Any] = {}
    for name in COST_HEADERS:
        cost = number(headers.get(name))
        if cost is not None:
            changes["usage"] = answer.usage.model_copy(update={"cost_usd": cost})
            break
    for name in SERVED_MODEL_HEADERS:
        served = (headers.get(name) or "").strip()
        if served:
            changes["model"] = served
            break
    return dataclasses.replace(answer, **changes) if changes else answer


def number(value: Any) -> float | None:
    """A number given as a number, or as a string of a non-negative finite one; else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            parsed = float(value)
        except ValueError:
            return None
        return parsed if parsed >= 0 and parsed != float("inf") else None
    return None


def error_class(status: int, code: Any, message: str) -> type[ProviderHTTPError]:
    """The ``ProviderHTTPError`` subclass of an HTTP error status (and its code or message)."""
    if status in (401, 403):
        return AuthenticationError
    if status == 429:
        return RateLimitError
    if status in (400, 413) and (code == "context_length_exceeded" or _CONTEXT_MESSAGE.search(message)):
        return ContextLengthError
    if status >= 500:
        return ServerError
    return ProviderHTTPError


_CREDENTIAL_HEADERS = ("authorization", "api-key", "x-api-key", "openai-organization", "openai-project")


def redact_request(exc: httpx.RequestError, extra: Mapping[str, str]) -> None:
    # The httpx request hangs off the chained exception; its headers and URL carry the credentials.
    with contextlib.suppress(RuntimeError):
        request = exc.request
        headers = request.headers
        for name in {*_CREDENTIAL_HEADERS, *(k.lower() for k in extra)}:
            if name in headers:
                headers[name] = REDACTED
        request.url = httpx.URL(scrub_url(str(request.url)))


class _ScrubURLs(logging.Filter):
    """Scrubs the URLs in httpx's log lines (``HTTP Request: POST <url> ...``) of their credentials."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(
                scrub_url(str(arg)) if isinstance(arg, httpx.URL | str) and "://" in str(arg) else arg
                for arg in record.args
            )
        return True


_URL_FILTER = _ScrubURLs()
for _name in ("httpx", "httpcore"):
    if not any(isinstance(f, _ScrubURLs) for f in logging.getLogger(_name).filters):
        logging.getLogger(_name).addFilter(_URL_FILTER)


def scrubbed(chunk: StreamChunk, scrub: Scrubber) -> StreamChunk:
    """A chunk without the credentials its text or tool input might carry."""
    return dataclasses.replace(chunk, content=scrub(chunk.content), tool_input=scrub(chunk.tool_input))
