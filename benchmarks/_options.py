"""Argument types of the benchmark options: a count that is not a positive number is refused.

``argparse`` turns the ``ValueError`` of a type into one usage line and exit status 2, so
``turnlog bench kernel --turns 0`` says what is wrong instead of failing half-way.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Literal

__all__ = ["Durability", "add_format", "at_least", "positive_float", "sizes", "sqlite_url"]

Durability = Literal["normal", "full"]
"""The values of ``--durability``: SQLite's ``synchronous`` level for every SQLite peer."""


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an int that is ``low`` or more."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be {low} or more, not {value}")
        return value

    parse.__name__ = "int"
    return parse


def positive_float(text: str) -> float:
    """An argparse type: a finite float above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number above 0, not {text}")
    return value


def sizes(text: str) -> str:
    """An argparse type: comma-separated whole numbers of 2 or more (kept as the text)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise argparse.ArgumentTypeError("give at least one size, e.g. 10000,100000")
    for part in parts:
        if not part.isdigit() or int(part) < 2:
            raise argparse.ArgumentTypeError(f"{part!r} is not a size (a whole number of 2 or more)")
    return text


def add_format(parser: argparse.ArgumentParser) -> None:
    """``--format``: the layout of the SQLite stores the benchmark creates (default: the store's own)."""
    parser.add_argument(
        "--format",
        type=int,
        choices=(2, 3, 4),
        default=None,
        help="SQLite store format to create: 2 (text layout), 3 or 4 (compact: zlib, zstd); default: a new store's default",
    )


def sqlite_url(path: object, format_version: int | None) -> str:
    """The URL of a SQLite store at ``path``, created in ``format_version`` when one is given."""
    return f"sqlite:///{path}" + ("" if format_version is None else f"?format={format_version}")
