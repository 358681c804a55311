"""Errors raised by the analytics projection.

Every error derives from ``TurnlogError`` through the projections layer's root::

    TurnlogError
    └── ProjectionError
        └── AnalyticsError
            ├── PriceTableError         a price entry or price file is malformed (ValueError)
            ├── AnalyticsDatabaseError  no place to keep the read model, or it cannot be used
            ├── InvalidQueryError       a query argument is malformed (UsageError)
            └── MissingExtraError       an optional package is not installed (ImportError)

A recorded event whose payload lacks what a fact needs raises
``turnlog.projections.EventDecodeError`` (stream, version, type, position); it never
turns into a fact full of nulls.
"""

from __future__ import annotations

from turnlog._errors import TurnlogError, UsageError

__all__ = [
    "AnalyticsDatabaseError",
    "AnalyticsError",
    "InvalidQueryError",
    "MissingExtraError",
    "PriceTableError",
    "TurnlogError",
]


class AnalyticsError(TurnlogError):
    """Root of every error raised by ``turnlog.analytics``."""


class PriceTableError(AnalyticsError, ValueError):
    """A price table entry, file or environment value is malformed.

    Attributes:
        source: Where the entry came from (a file path, ``$TURNLOG_PRICES`` or ``argument``).
        reason: What is wrong, naming the offending model.
    """

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"price table ({source}): {reason}")


class AnalyticsDatabaseError(AnalyticsError):
    """The analytics read model has nowhere to live, or its database cannot be used.

    Attributes:
        database: The database path concerned, when there is one.
    """

    def __init__(self, message: str, *, database: str | None = None) -> None:
        self.database = database
        super().__init__(message)


class InvalidQueryError(AnalyticsError, UsageError):
    """A query argument (grouping, time bound) is malformed.

    Attributes:
        argument: The argument's name.
        value: The value given.
    """

    def __init__(self, argument: str, value: object, reason: str) -> None:
        self.argument = argument
        self.value = value
        super().__init__(f"{argument}={value!r}: {reason}")


class MissingExtraError(AnalyticsError, ImportError):
    """An optional package is missing; the message names the extra that installs it.

    Attributes:
        package: The missing import name.
        extra: The turnlog extra that installs it.
    """

    def __init__(self, package: str, extra: str, what: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(f"{what} needs {package}: pip install 'turnlog[{extra}]'")
