"""``turnlog.analytics`` exports exactly the names users need, no more (checked by equality)."""

from __future__ import annotations

import inspect

import turnlog.analytics as analytics

EXPECTED = [
    "AnalyticsDatabaseError",
    "AnalyticsError",
    "AnalyticsProjection",
    "AttributeValue",
    "Column",
    "DEFAULT_PRICES",
    "ErrorRow",
    "FACT_TABLES",
    "FactTable",
    "Grouping",
    "InvalidQueryError",
    "MissingExtraError",
    "PRICES_ENV",
    "Percentiles",
    "Price",
    "PriceTable",
    "PriceTableError",
    "RELEVANT_TYPES",
    "RunRow",
    "SEMCONV_OPT_IN_ENV",
    "SPAN_EVENT_TYPES",
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


def test_all_is_exactly_the_public_api() -> None:
    assert EXPECTED == sorted(EXPECTED)
    assert sorted(analytics.__all__) == EXPECTED
    assert len(analytics.__all__) == len(set(analytics.__all__))


def test_every_public_name_is_defined_in_analytics() -> None:
    for name in analytics.__all__:
        value = getattr(analytics, name)
        module = getattr(value, "__module__", None)
        if name == "TurnlogError":  # the root every layer re-exports (docs/errors.md)
            continue
        if isinstance(value, type) or inspect.isfunction(value):
            assert module is not None and module.startswith("turnlog.analytics."), (name, module)
