"""HTML building blocks. Every recorded string goes through ``h`` (escape) before it is shown.

Pages are plain server-rendered HTML: no template engine, no inline script, no inline
style. The shipped ``app.js`` adds the scrubber keys, live updates and charts.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

import orjson

__all__ = ["attr_json", "fmt_ms", "fmt_time", "h", "layout", "link", "pretty_json", "q", "table"]


def h(value: object) -> str:
    """``value`` as text that HTML shows literally (quotes escaped too: safe in attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


def q(path: str, **params: object) -> str:
    """A URL path with its query string (None values dropped), escaped for an attribute."""
    given = {k: v for k, v in params.items() if v is not None}
    return h(f"{path}?{urlencode(given)}" if given else path)


def seg(value: str) -> str:
    """One path segment, percent-encoded."""
    return quote(value, safe="")


def link(href: str, text: object, cls: str = "") -> str:
    """An anchor; ``href`` must be escaped already (``q``), ``text`` is escaped here."""
    klass = f' class="{cls}"' if cls else ""
    return f'<a href="{href}"{klass}>{h(text)}</a>'


def pretty_json(value: Any) -> str:
    """Indented JSON of a recorded value, escaped."""
    try:
        text = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str).decode()
    except TypeError:
        text = repr(value)
    return h(text)


def attr_json(value: Any) -> str:
    """JSON for a ``data-`` attribute (escaped)."""
    return h(orjson.dumps(value, default=str).decode())


def fmt_time(moment: datetime | None) -> str:
    """A UTC time with milliseconds."""
    return "" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def fmt_ms(value: float | None) -> str:
    """Milliseconds, or a dash."""
    return "-" if value is None else f"{value:.0f} ms"


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "") -> str:
    """A table; the cells are HTML already (escape them with ``h``)."""
    head = "".join(f"<th>{h(x)}</th>" for x in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


_NAV = (
    ("/", "Branches"),
    ("/forks", "Forks"),
    ("/search", "Search"),
    ("/verify", "Verify"),
    ("/analytics", "Analytics"),
    ("/tail", "Live tail"),
)


def layout(title: str, body: str, *, store: str, writes: bool, page: str = "") -> str:
    """A whole page around ``body`` (HTML); ``title`` and ``store`` are escaped here."""
    nav = "".join(f'<a href="{path}">{h(name)}</a>' for path, name in _NAV)
    mode = "writes allowed" if writes else "read-only"
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{h(title)} · turnlog</title>"
        '<link rel="icon" href="data:,"><link rel="stylesheet" href="/static/app.css">'
        '<script src="/static/app.js" defer></script>'
        f'</head><body data-page="{h(page)}">'
        f'<header><a class="brand" href="/">turnlog</a><nav>{nav}</nav>'
        f'<span class="store" title="store">{h(store)} · {mode}</span></header>'
        f"<main>{body}</main></body></html>"
    )
