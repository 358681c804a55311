"""Store URLs: the one parser and the scheme -> parser table.

Every store URL is parsed here, and nowhere else: ``parse_store_url`` splits it into a
``StoreURL`` (scheme, location, parameters) with the parser of its scheme. A scheme is one
row of ``_PARSERS``; the messages of ``UnsupportedStoreURL`` list the rows, so they never
fall out of date. ``_open`` maps the same schemes to their backends.

This module imports no backend, so that a backend may parse its own URLs here
(``parse_postgres_url``) without an import circle through ``open_store``.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ._errors import UnsupportedStoreURL

__all__ = ["StoreURL", "parse_postgres_url", "parse_store_url", "scheme_names", "supported_schemes"]


@dataclass(frozen=True, slots=True)
class StoreURL:
    """A store URL, parsed.

    Attributes:
        url: The URL as given.
        scheme: The backend's scheme, spelled as in ``_SCHEMES`` (``postgres`` becomes
            ``postgresql``).
        location: The SQLite file (percent-decoded; ``":memory:"`` for a private database),
            the PostgreSQL URL without turnlog's own parameters (the libpq conninfo), or ``""``
            for the in-memory store.
        params: The parameters turnlog reads from the URL: ``durability`` for SQLite,
            ``schema`` and ``pool_size`` for PostgreSQL.
    """

    url: str
    scheme: str
    location: str
    params: Mapping[str, str] = field(default_factory=dict)

    @property
    def sqlite_file(self) -> Path | None:
        """The SQLite file this URL names; None for a private in-memory database and other schemes."""
        if self.scheme != "sqlite" or self.location == ":memory:":
            return None
        return Path(self.location)


class _Parser(NamedTuple):
    """How one backend's URLs are parsed, and an example URL for the messages."""

    parse: Callable[[str, str], StoreURL]
    example: str


def parse_store_url(url: str) -> StoreURL:
    """Parse a store URL with the parser of its scheme.

    Raises:
        UnsupportedStoreURL: not a str, no scheme, a scheme no backend handles (the message
            names it and the supported ones), or a malformed location or parameter.
    """
    if not isinstance(url, str):
        raise UnsupportedStoreURL(f"a store URL must be a str, not {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    if not sep:
        if not url.strip():
            raise UnsupportedStoreURL(f"the store URL is empty. Supported: {_supported()}")
        if ":" in url.split("/", 1)[0]:
            hint = "a scheme is followed by '://'"
        else:
            hint = f"for a SQLite file write sqlite:///{url}"
        raise UnsupportedStoreURL(f"{_shown(url)!r} is not a store URL ({hint}). Supported: {_supported()}")
    entry = _PARSERS.get(_ALIASES.get(scheme.lower(), scheme.lower()))
    if entry is None:
        raise UnsupportedStoreURL(
            f"unsupported store URL scheme {scheme!r} in {_shown(url)!r}. Supported: {_supported()}"
        )
    return entry.parse(url, rest)


_PASSWORD = re.compile(r"([^:/@\s]+):([^@/\s]*)@")


def _shown(url: str) -> str:
    """``url`` as an error message may show it: a password in it replaced by ``***``.

    A URL refused here is still a URL someone typed with credentials in it; the message goes
    to terminals and logs, the password must not.
    """
    return _PASSWORD.sub(r"\1:***@", url)


def supported_schemes() -> list[str]:
    """The schemes ``open_store`` handles, aliases included."""
    return [*_PARSERS, *_ALIASES]


# -- SQLite ------------------------------------------------------------------------------------

_SQLITE_PARAMETERS = {"durability": ("normal", "full"), "format": ("2", "3", "4")}


def _parse_sqlite(url: str, rest: str) -> StoreURL:
    location, _, query = rest.partition("?")
    if not location.startswith("/") or location == "/":
        raise UnsupportedStoreURL(
            f"{url!r}: a SQLite URL is sqlite:///relative.db, sqlite:////absolute.db or sqlite:///:memory:"
        )
    params: dict[str, str] = {}
    for key, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        allowed = _SQLITE_PARAMETERS.get(key)
        if allowed is None:
            raise UnsupportedStoreURL(
                f"{url!r}: unknown SQLite URL parameter {key!r}; the parameters are durability=normal|full "
                "and format=2|3|4 (of a store the URL creates)"
            )
        if value not in allowed:
            raise UnsupportedStoreURL(f"{url!r}: {key} must be one of {', '.join(allowed)}, not {value!r}")
        if key in params:
            raise UnsupportedStoreURL(f"{url!r}: {key} is given twice")
        params[key] = value
    # the path is percent-decoded, as in any URL: %3F is a "?" that is part of the name
    path = urllib.parse.unquote(location[1:])
    if not path:
        raise UnsupportedStoreURL(f"{url!r}: the SQLite URL names no file")
    return StoreURL(url, "sqlite", path, params)


# -- in memory ---------------------------------------------------------------------------------


def _parse_memory(url: str, rest: str) -> StoreURL:
    if rest not in ("", "/"):
        raise UnsupportedStoreURL(f"{url!r}: the in-memory store takes no path; use memory://")
    return StoreURL(url, "memory", "")


# -- PostgreSQL --------------------------------------------------------------------------------

_SCHEMA_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")
_POSTGRES_PARAMETERS = ("schema", "pool_size")


def _parse_postgres(url: str, rest: str) -> StoreURL:
    parts = urllib.parse.urlsplit(url)
    params = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in params if k in _POSTGRES_PARAMETERS}
    others = [(k, v) for k, v in params if k not in _POSTGRES_PARAMETERS]
    schema = ours.setdefault("schema", "public")
    if not _SCHEMA_RE.match(schema):
        raise UnsupportedStoreURL(
            f"schema={schema!r} in the store URL: use letters, digits and '_' (at most 63 characters)"
        )
    pool_size = ours.setdefault("pool_size", "10")
    if not pool_size.isdigit() or int(pool_size) < 1:
        raise UnsupportedStoreURL(f"pool_size={pool_size!r} in the store URL must be an int >= 1")
    # quote, not quote_plus: libpq decodes %20 in a URI but keeps "+" as it is.
    conninfo = urllib.parse.urlunsplit(
        (parts.scheme, parts.netloc, parts.path, urllib.parse.urlencode(others, quote_via=urllib.parse.quote),
         parts.fragment)
    )  # fmt: skip
    return StoreURL(url, "postgresql", conninfo, ours)


def parse_postgres_url(url: str) -> tuple[str, str, int]:
    """Split a PostgreSQL store URL into the libpq conninfo, the schema name and the pool size.

    Raises:
        UnsupportedStoreURL: not a PostgreSQL URL, or a malformed ``schema`` or ``pool_size``.
    """
    parsed = parse_store_url(url)
    if parsed.scheme != "postgresql":
        raise UnsupportedStoreURL(f"not a PostgreSQL URL: scheme {parsed.scheme!r}")
    return parsed.location, parsed.params["schema"], int(parsed.params["pool_size"])


# -- the table ---------------------------------------------------------------------------------

_PARSERS: dict[str, _Parser] = {
    "sqlite": _Parser(_parse_sqlite, "sqlite:///path/to/file.db, sqlite:///:memory:"),
    "memory": _Parser(_parse_memory, "memory://"),
    "postgresql": _Parser(_parse_postgres, "postgresql://..."),
}
"""Every backend's URL parser by scheme, with example URLs."""
_ALIASES = {"postgres": "postgresql"}
"""Other spellings of a scheme."""


def scheme_names() -> frozenset[str]:
    """The schemes a URL is parsed for, without aliases (``_open`` has a backend for each)."""
    return frozenset(_PARSERS)


def _supported() -> str:
    return ", ".join(entry.example for entry in _PARSERS.values())
