"""The span records of the span view, the semantic-convention versions, and the id derivation.

Pure values only: the span view (``_spans``) builds them, the OTLP export and the ui read them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, NamedTuple

__all__ = [
    "SEMCONV_OPT_IN_ENV",
    "AttributeValue",
    "Semconv",
    "Span",
    "SpanEvent",
    "Trace",
    "derived_id",
    "semconv_from_env",
]

SEMCONV_OPT_IN_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"
"""The environment variable that opts in to the latest experimental GenAI conventions."""

AttributeValue = str | bool | int | float | tuple[str, ...]
"""What an OpenTelemetry attribute may hold (the subset the span view uses)."""


class Semconv(Enum):
    """Which version of the OpenTelemetry GenAI semantic conventions the spans follow.

    The conventions ask instrumentations to keep emitting v1.36.0 by default and to switch to
    the latest experimental version only when ``OTEL_SEMCONV_STABILITY_OPT_IN`` lists
    ``gen_ai_latest_experimental`` (and then not to emit the old one as well).
    """

    V1_36 = "1.36.0"
    """``gen_ai.system``; content as span events (``gen_ai.user.message``, ``gen_ai.choice``, ...)."""
    LATEST = "gen_ai_latest_experimental"
    """``gen_ai.provider.name``; content as ``gen_ai.input.messages`` / ``gen_ai.output.messages``."""


def semconv_from_env(environ: Mapping[str, str]) -> Semconv:
    """The convention version ``environ`` selects (a comma-separated opt-in list, as the spec says).

    Example:
        >>> semconv_from_env({"OTEL_SEMCONV_STABILITY_OPT_IN": "http, gen_ai_latest_experimental"})
        <Semconv.LATEST: 'gen_ai_latest_experimental'>
        >>> semconv_from_env({})
        <Semconv.V1_36: '1.36.0'>
    """
    values = {part.strip() for part in environ.get(SEMCONV_OPT_IN_ENV, "").split(",")}
    return Semconv.LATEST if Semconv.LATEST.value in values else Semconv.V1_36


def derived_id(kind: str, key: str, size: int) -> int:
    """A non-zero id of ``size`` bytes derived from ``key``: the same key gives the same id.

    Trace ids (16 bytes) and span ids (8 bytes) come from event and run ids this way, so that
    exporting a log twice yields the same ids and a backend can recognise what it holds already.

    Example:
        >>> derived_id("span", "e1", 8) == derived_id("span", "e1", 8) != derived_id("span", "e2", 8)
        True
    """
    digest = hashlib.sha256(f"turnlog.{kind}:{key}".encode()).digest()
    return int.from_bytes(digest[:size], "big") or 1


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """A moment inside a span: the first token, a retry, a message of the content."""

    name: str
    """Event name, e.g. ``gen_ai.first_token`` or ``gen_ai.user.message``."""
    time_ns: int
    """Unix time in nanoseconds."""
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    """Its attributes."""


class Span(NamedTuple):
    """One span of a run's trace, with the log coordinates it was built from.

    Immutable like the other records here; a named tuple rather than a frozen dataclass
    because the span view makes one per model call, tool call and run, and a named tuple is
    made faster (``turnlog bench otel``).
    """

    trace_id: int
    """128-bit trace id (derived from the root run's id)."""
    span_id: int
    """64-bit span id (derived from an event or run id)."""
    parent_id: int | None
    """The parent span's id; None for the root of a trace."""
    name: str
    """Span name, e.g. ``chat gpt-4.1-mini`` or ``execute_tool get_weather``."""
    kind: Literal["internal", "client"]
    """OpenTelemetry span kind: ``client`` for model calls, else ``internal``."""
    start_ns: int
    """Start, Unix time in nanoseconds."""
    end_ns: int
    """End, Unix time in nanoseconds (never before ``start_ns``)."""
    attributes: Mapping[str, AttributeValue]
    """``gen_ai.*`` and ``turnlog.*`` attributes."""
    events: tuple[SpanEvent, ...] = ()
    """Span events in time order."""
    status: Literal["unset", "ok", "error"] = "unset"
    """The span status; ``error`` carries ``error.type`` in the attributes."""
    status_message: str | None = None
    """The error message of a failed span."""
    branch_id: str | None = None
    """The branch whose log the span comes from."""
    branch_version: int | None = None
    """The branch version at which the span's last event was recorded."""
    position: int = 0
    """Global position of the span's last event."""
    kind_of: Literal["run", "step", "chat", "tool", "node"] = "run"
    """What the span stands for in turnlog's terms."""

    @property
    def trace_hex(self) -> str:
        """The trace id as 32 hex digits (W3C trace-context form)."""
        return f"{self.trace_id:032x}"

    @property
    def span_hex(self) -> str:
        """The span id as 16 hex digits."""
        return f"{self.span_id:016x}"


@dataclass(frozen=True, slots=True)
class Trace:
    """The spans of one finished top-level run (its nested runs, steps, calls and tools)."""

    spans: tuple[Span, ...]
    """Root first, then the rest in start order."""
    start_position: int
    """Global position of the root run's ``run.started``."""
    end_position: int
    """Global position of the event that closed the root run."""

    @property
    def root(self) -> Span:
        """The root span (the top-level run)."""
        return self.spans[0]
