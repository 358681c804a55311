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


def print_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None) -> None:
    """Print ``rows`` under ``columns``: a rich table on a terminal, aligned text elsewhere."""
    if fancy():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for name in columns:
            table.add_column(name)
        for row in rows:
            table.add_row(*(_cell(v) for v in row))
        Console().print(table)
        return
    cells = [[_cell(v) for v in row] for row in rows]
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
