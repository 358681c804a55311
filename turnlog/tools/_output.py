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


_GAP = 2  # the space between two columns of the table (no vertical rules, padding collapsed)
_TEXT_MIN = 20  # a column of prose that folds still gets this many characters
_WORD = 40  # words up to this long (an id, a name in a summary) are never folded inside
_PROSE = 30  # a column is prose (it may fold) when a cell has a space and is longer than this


def _is_prose(i: int, cells: list[list[str]]) -> bool:
    """Whether column ``i`` holds prose a person reads folded (a summary), not a token to copy."""
    return any(len(row[i]) > _PROSE and " " in row[i].strip() for row in cells)


def _prose_width(name: str, cells: list[list[str]], i: int) -> int:
    """The narrowest a prose column may be: enough for its words up to ``_WORD`` characters.

    An id mentioned in a summary stays whole on one line; only longer runs (a JSON blob) fold.
    """
    words = [len(w) for row in cells for w in row[i].split() if len(w) <= _WORD]
    return max(min(_TEXT_MIN, max([len(name), *(len(row[i]) for row in cells)])), *words, 0)


def _header(name: str, width: int) -> str:
    """A header that fits ``width``: its words on lines of their own when it is wider."""
    return name if len(name) <= width else "\n".join(name.split())


def _token_width(name: str, cells: list[list[str]], i: int) -> int:
    """The width of a column never split: its longest cell, or its header's longest word."""
    return max([max(len(w) for w in name.split() or [""]), *(len(row[i]) for row in cells)])


def _table_width(columns: Sequence[str], cells: list[list[str]], prose: set[int]) -> int:
    """The narrowest table that shows every token whole and every prose column folded."""
    total = _GAP * (len(columns) - 1)
    for i, name in enumerate(columns):
        if i in prose:
            total += _prose_width(name, cells, i)
        else:
            total += _token_width(name, cells, i)
    return total


def _rich_table(
    console: Any, columns: Sequence[str], cells: list[list[str]], prose: set[int], title: str | None
) -> None:
    from rich import box
    from rich.table import Table

    # a rule under the header and no vertical rules: every character of the width goes to
    # the cells, so ids and latency columns still fit whole at 120 columns
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for i, name in enumerate(columns):
        if i in prose:
            table.add_column(name, overflow="fold", min_width=_prose_width(name, cells, i))
        else:
            # ids, numbers, times, names: a person copies or compares them, so they are never
            # split over lines or cut; only the header may take two lines
            width = _token_width(name, cells, i)
            table.add_column(_header(name, width), no_wrap=True, min_width=width)
    for row in cells:
        table.add_row(*row)
    console.print(table)


def _vertical(columns: Sequence[str], cells: list[list[str]], title: str | None, width: int) -> None:
    """One block per row, one ``column  value`` line per cell: for a terminal too narrow for a table.

    Nothing is left out and nothing is cut. A long value wraps under itself at spaces, never
    inside a word or at a hyphen (ids are hyphenated); a word wider than the terminal stays on
    one line, which the terminal then wraps.
    """
    import textwrap

    label = max(len(c) for c in columns)
    room = max(_TEXT_MIN, width - label - 2)
    if title:
        print(title)
    for n, row in enumerate(cells, 1):
        print(f"-- {n} " + "-" * max(0, label - len(str(n))))
        for name, value in zip(columns, row, strict=True):
            lines = textwrap.wrap(value, room, break_on_hyphens=False, break_long_words=False) or [""]
            print(f"{name.ljust(label)}  {lines[0]}")
            for more in lines[1:]:
                print(f"{'':{label}}  {more}")


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
        keep: Columns that must never fold even if they hold spaces (besides every column of
            tokens: ids, names, numbers and times are never split or cut anyway).

    On a terminal, prose columns (summaries) fold; every other cell stays whole on one line.
    When the terminal is too narrow for that table, each row is printed as a block of
    ``column  value`` lines instead, so no column is ever left out.
    """
    cells = [[_cell(v) for v in row] for row in rows]
    if fancy():
        from rich.console import Console

        console = Console()
        kept = {columns.index(name) for name in keep or ()}
        prose = {i for i in range(len(columns)) if i not in kept and _is_prose(i, cells)}
        if _table_width(columns, cells, prose) <= console.width:
            _rich_table(console, columns, cells, prose, title)
        else:
            _vertical(columns, cells, title, console.width)
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
