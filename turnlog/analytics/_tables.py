"""The fact tables: their names, key columns and columns, in row order.

Three fact tables, one row per model call, per tool call and per run. Column names follow
the OpenTelemetry GenAI semantic conventions where they name the thing
(``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens``,
``gen_ai.client.operation.duration`` in seconds, ``error.type``, ...); turnlog's own facts
use a ``turnlog.`` prefix. A branch is a conversation, so its id is ``gen_ai.conversation.id``.
The functions that fill them live in ``_facts``; the SQL that keeps them, in ``_database``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "FACT_TABLES",
    "MODEL_CALLS",
    "RELEVANT_TYPES",
    "RUNS",
    "TOOL_CALLS",
    "Column",
    "ColumnKind",
    "FactTable",
]

RELEVANT_TYPES: tuple[str, ...] = (
    "model.called",
    "message.added",
    "run.started",
    "run.ended",
    "run.failed",
    "branch.created",
    "branch.forked",
    "branch.included",
)
"""The event types the analytics projection reads; every other type is skipped."""

ColumnKind = Literal["int", "float", "text", "bool"]


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a fact table.

    Attributes:
        name: The column name (an OpenTelemetry attribute name where there is one).
        kind: Its value type: int, float, text or bool (stored 0/1 in SQLite).
        doc: What it holds, in one line.
    """

    name: str
    kind: ColumnKind
    doc: str

    @property
    def sql(self) -> str:
        """The column name quoted for SQL."""
        return '"' + self.name.replace('"', '""') + '"'


@dataclass(frozen=True, slots=True)
class FactTable:
    """A fact table: its SQL name, its key column and its columns in row order."""

    name: str
    key: str
    columns: tuple[Column, ...]

    @property
    def column_names(self) -> tuple[str, ...]:
        """The column names in row order."""
        return tuple(c.name for c in self.columns)


def _c(name: str, kind: ColumnKind, doc: str) -> Column:
    return Column(name, kind, doc)


_WHERE = (
    _c("gen_ai.conversation.id", "text", "branch id (a branch is a conversation)"),
    _c(
        "turnlog.session.id",
        "text",
        "session id: the event's meta, else the session that included the branch",
    ),
    _c("turnlog.run.id", "text", "run id, when the call happened inside a run"),
)

MODEL_CALLS = FactTable(
    "analytics_model_calls",
    "position",
    (
        _c("position", "int", "global position of the model.called event"),
        _c("recorded_at", "text", "UTC time of the event, ISO 8601 with microseconds"),
        _c("day", "text", "UTC day of the event, YYYY-MM-DD"),
        _c("gen_ai.provider.name", "text", "provider, e.g. openai, anthropic, claude_code"),
        _c("gen_ai.request.model", "text", "model name as requested"),
        _c("turnlog.endpoint", "text", "provider endpoint called"),
        *_WHERE,
        _c("turnlog.verb", "text", "verb that made the call (chat, operate, ReAct, ...)"),
        _c("turnlog.call.id", "text", "id of the call inside the log"),
        _c("gen_ai.request.stream", "bool", "the call streamed its response"),
        _c("gen_ai.usage.input_tokens", "int", "input (prompt) tokens; null when not reported"),
        _c("gen_ai.usage.output_tokens", "int", "output (completion) tokens; null when not reported"),
        _c(
            "gen_ai.usage.cache_read.input_tokens",
            "int",
            "input tokens read from the prompt cache (part of input_tokens); null when not reported",
        ),
        _c(
            "gen_ai.usage.cache_creation.input_tokens",
            "int",
            "input tokens written to the prompt cache (part of input_tokens); null when not reported",
        ),
        _c("turnlog.cost_usd", "float", "cost in US dollars; null when unknown"),
        _c("turnlog.cost_source", "text", "'provider' (reported), 'price_table' (computed) or null"),
        _c("gen_ai.client.operation.duration", "float", "latency of the call in seconds"),
        _c("gen_ai.response.time_to_first_chunk", "float", "time to first chunk in seconds (streams)"),
        _c("turnlog.status", "text", "'ok' or 'error'"),
        _c("error.type", "text", "error class name when the call failed"),
        _c("turnlog.attempts", "int", "attempts made, retries included"),
        _c(
            "gen_ai.response.model",
            "text",
            "model the provider says it served (a dated snapshot, a proxy's deployment), else the requested one",
        ),
    ),
)

TOOL_CALLS = FactTable(
    "analytics_tool_calls",
    "position",
    (
        _c("position", "int", "global position of the message.added event of the ActionResponse"),
        _c("recorded_at", "text", "UTC time of the event, ISO 8601 with microseconds"),
        _c("day", "text", "UTC day of the event, YYYY-MM-DD"),
        _c("gen_ai.tool.name", "text", "tool (function) name"),
        _c("gen_ai.tool.call.id", "text", "id of the ActionRequest answered"),
        _c("turnlog.message.id", "text", "id of the ActionResponse message"),
        *_WHERE,
        _c("turnlog.status", "text", "'ok', 'error' or 'denied'"),
        _c("turnlog.error", "text", "error message of a failed or denied call"),
        _c(
            "gen_ai.client.operation.duration",
            "float",
            "duration of the tool call in seconds; null when unknown",
        ),
    ),
)

RUNS = FactTable(
    "analytics_runs",
    "turnlog.run.id",
    (
        _c("turnlog.run.id", "text", "run id"),
        _c("position", "int", "global position of run.started (of the closing event when never started)"),
        _c("recorded_at", "text", "UTC time the run started, ISO 8601 with microseconds"),
        _c("day", "text", "UTC day the run started, YYYY-MM-DD"),
        _c("ended_at", "text", "UTC time the run ended or failed; null while running"),
        _c("turnlog.verb", "text", "verb of the run"),
        _c("turnlog.run.parent_id", "text", "enclosing run, when nested"),
        _c("gen_ai.provider.name", "text", "provider named when the run started"),
        _c("gen_ai.request.model", "text", "model named when the run started"),
        _c("gen_ai.conversation.id", "text", "branch id"),
        _c("turnlog.session.id", "text", "session id"),
        _c("turnlog.status", "text", "'running', 'ok' or 'failed'"),
        _c("turnlog.reason", "text", "why it failed: error, cancelled, timeout or crashed"),
        _c("error.type", "text", "error class name of a failed run"),
        _c("gen_ai.client.operation.duration", "float", "duration of the run in seconds"),
        _c("turnlog.chunks", "int", "stream chunks of the run, when it streamed"),
        _c("gen_ai.usage.input_tokens", "int", "input tokens of the run"),
        _c("gen_ai.usage.output_tokens", "int", "output tokens of the run"),
        _c(
            "gen_ai.usage.cache_read.input_tokens",
            "int",
            "input tokens of the run read from the prompt cache",
        ),
        _c(
            "gen_ai.usage.cache_creation.input_tokens",
            "int",
            "input tokens of the run written to the prompt cache",
        ),
        _c("turnlog.cost_usd", "float", "cost of the run in US dollars; null when unknown"),
        _c("turnlog.cost_source", "text", "'provider', 'price_table' or null"),
    ),
)

FACT_TABLES: tuple[FactTable, ...] = (MODEL_CALLS, TOOL_CALLS, RUNS)
"""Every fact table, in export order."""
