"""turnlog.analytics: usage, cost, latency, errors and tools from the log.

A layer of its own beside the kernel: it reads the log through the public APIs of
``turnlog.eventstore`` and ``turnlog.projections`` and keeps flat fact tables in a SQLite
database of its own (never in the store's), updated incrementally and exactly once.
"""

from ._errors import (
    AnalyticsDatabaseError,
    AnalyticsError,
    InvalidQueryError,
    MissingExtraError,
    PriceTableError,
    TurnlogError,
)
from ._export import export_jsonl, export_parquet
from ._location import analytics_database_of, drop_legacy_tables, legacy_tables
from ._pricing import DEFAULT_PRICES, PRICES_ENV, Price, PriceTable, load_price_table
from ._projection import AnalyticsProjection, UpdateReport
from ._queries import (
    ErrorRow,
    Grouping,
    Percentiles,
    RunRow,
    TimeRange,
    ToolRow,
    UsageRow,
    error_rates,
    run_usage,
    tool_usage,
    usage,
)
from ._span_model import SEMCONV_OPT_IN_ENV, AttributeValue, Semconv, Span, SpanEvent, Trace, semconv_from_env
from ._spans import SPAN_EVENT_TYPES, SpanView, build_traces
from ._tables import FACT_TABLES, RELEVANT_TYPES, Column, FactTable

__all__ = [
    "DEFAULT_PRICES",
    "FACT_TABLES",
    "PRICES_ENV",
    "RELEVANT_TYPES",
    "SEMCONV_OPT_IN_ENV",
    "SPAN_EVENT_TYPES",
    "AnalyticsDatabaseError",
    "AnalyticsError",
    "AnalyticsProjection",
    "AttributeValue",
    "Column",
    "ErrorRow",
    "FactTable",
    "Grouping",
    "InvalidQueryError",
    "MissingExtraError",
    "Percentiles",
    "Price",
    "PriceTable",
    "PriceTableError",
    "RunRow",
    "Semconv",
    "Span",
    "SpanEvent",
    "SpanView",
    "TimeRange",
    "ToolRow",
    "Trace",
    "TurnlogError",
    "UpdateReport",
    "UsageRow",
    "analytics_database_of",
    "build_traces",
    "drop_legacy_tables",
    "error_rates",
    "export_jsonl",
    "export_parquet",
    "legacy_tables",
    "load_price_table",
    "run_usage",
    "semconv_from_env",
    "tool_usage",
    "usage",
]
