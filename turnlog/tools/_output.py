"""Terminal output: rich tables and highlighted JSON on a TTY, plain text otherwise."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["busy", "fancy", "print_table"]


def fancy(stream: TextIO | None = None) -> bool:
    """True when output should be decorated: a TTY, ``NO_COLOR`` unset, rich importable."""
    out = stream or sys.stdout
    if os.environ.get("NO_COLOR") is not None or not out.isatty():
        return False
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if value != int(value) else f"{value:,.0f}"
    return str(value)


_PADDING = 3  # a rich column's left and right padding and its border
_NARROWEST = 6  # a column that is allowed to wrap still needs this many characters


def _fitting(columns: Sequence[str], cells: list[list[str]], keep: set[int], width: int) -> list[int] | None:
    """The indexes of the columns to show: every kept one, others from the left while they fit.

    Kept columns (ids, names) are shown whole, never cut; another column may wrap, but needs
    at least a few characters, so at a narrow width the last ones are left out. None when
    the kept columns alone are wider than ``width`` (then no table can show them whole).
    """

    def need(i: int) -> int:
        longest = max([len(columns[i]), *(len(row[i]) for row in cells)])
        return (longest if i in keep else min(longest, _NARROWEST)) + _PADDING

    total = 1 + sum(need(i) for i in keep)
    if total > width:
        return None
    shown = set(keep)
    for i in range(len(columns)):
        if i in keep:
            continue
        if total + need(i) > width:
            break
        shown.add(i)
        total += need(i)
    return sorted(shown)


def _rich_table(
    console: Any,
    columns: Sequence[str],
    cells: list[list[str]],
    kept: set[int],
    shown: list[int],
    title: str | None,
) -> None:
    from rich.table import Table

    table = Table(title=title)
    for i in shown:
        longest = max([len(columns[i]), *(len(row[i]) for row in cells)])
        if i in kept:
            table.add_column(columns[i], no_wrap=True, min_width=longest)
        else:
            table.add_column(columns[i], overflow="fold")
    for row in cells:
        table.add_row(*(row[i] for i in shown))
    console.print(table)
    hidden = [columns[i] for i in range(len(columns)) if i not in shown]
    if hidden:
        console.print(f"({', '.join(hidden)} left out at this width; --json has every column)")


def print_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    title: str | None = None,
    keep: Sequence[str] | None = None,
) -> None:
    """Print ``rows`` under ``columns``: a rich table on a terminal, aligned text elsewhere.

    Args:
        columns: The column headers.
        rows: The cells, row by row.
        title: A line above the table.
        keep: Columns never cut (ids, names: a person copies them); default the first one.
            On a terminal too narrow for every column, other columns wrap, and the ones that
            still do not fit are left out (and named below the table); plain output has them all.
    """
    cells = [[_cell(v) for v in row] for row in rows]
    if fancy():
        from rich.console import Console

        console = Console()
        kept = {columns.index(name) for name in (keep if keep is not None else columns[:1])}
        shown = _fitting(columns, cells, kept, console.width)
        if shown is not None:
            _rich_table(console, columns, cells, kept, shown, title)
            return
    widths = [len(c) for c in columns]
    for row in cells:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(value))
    if title:
        print(title)
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


@contextmanager
def busy(message: str) -> Iterator[None]:
    """Show a spinner with ``message`` on a terminal while long work runs; nothing elsewhere."""
    if not fancy(sys.stderr):
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(message):
        yield
