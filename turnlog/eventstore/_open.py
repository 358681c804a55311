"""Store URLs: the one parser, the scheme -> backend table, and ``open_store``.

Every store URL is parsed here, and nowhere else: ``parse_store_url`` splits it into a
``StoreURL`` (scheme, location, parameters) with the parser of its scheme, and
``open_store`` hands that to the scheme's factory. A scheme is one row of ``_SCHEMES``; the
messages of ``UnsupportedStoreURL`` list the rows, so they never fall out of date.

Backends load lazily: the SQLite and in-memory modules on first use, and the PostgreSQL one
only when its driver is installed (``pip install 'turnlog[postgres]'``). ``postgres_store_class``
is how ``turnlog.eventstore.PostgresEventStore`` is found.
"""

from __future__ import annotations

import importlib
import os
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple, cast

from ._base import EventStore
from ._errors import UnsupportedStoreURL
from ._upcasting import Upcasters
from ._validation import DEFAULT_MAX_EVENT_BYTES

__all__ = [
    "DEFAULT_STORE_PATH",
    "POSTGRES_EXTRA",
    "StoreURL",
    "open_store",
    "parse_postgres_url",
    "parse_store_url",
    "postgres_store_class",
    "supported_schemes",
]

DEFAULT_STORE_PATH = "./turnlog.db"
"""The store used when neither a URL nor ``$TURNLOG_STORE`` is given."""
POSTGRES_EXTRA = "pip install 'turnlog[postgres]'"
"""What installs the PostgreSQL driver."""

Durability = Literal["normal", "full"]


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


class _Options(NamedTuple):
    """The keyword arguments of ``open_store``, for a factory."""

    upcasters: Upcasters | None
    max_event_bytes: int
    durability: Durability | None
    create: bool


class _Scheme(NamedTuple):
    """One backend: how its URLs are parsed, how its store is made, and an example URL."""

    parse: Callable[[str, str], StoreURL]
    open: Callable[[StoreURL, _Options], EventStore]
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
    entry = _SCHEMES.get(_ALIASES.get(scheme.lower(), scheme.lower()))
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
    return [*_SCHEMES, *_ALIASES]


def open_store(
    url: str | None = None,
    *,
    upcasters: Upcasters | None = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    durability: Durability | None = None,
    create: bool = True,
) -> EventStore:
    """Open the store at ``url`` and return it at once; its methods are coroutines.

    URLs:

    - ``sqlite:///relative/path.db`` and ``sqlite:////absolute/path.db`` (created when missing,
      unless ``create=False``);
    - ``sqlite:///:memory:``: a private SQLite database that lives as long as the store;
    - a SQLite URL may end in ``?durability=full`` (or ``normal``), so that a URL alone, as
      in ``$TURNLOG_STORE`` or ``--store``, can ask for it; any other parameter is refused.
      Its path is percent-decoded (``%3F`` for a ``?`` in a file name);
    - ``memory://``: the pure-Python in-memory store;
    - ``postgresql://...`` or ``postgres://...``: PostgreSQL (needs ``pip install turnlog[postgres]``).

    Without a URL, ``$TURNLOG_STORE`` is used (a URL, or a plain path to a SQLite file), else
    ``./turnlog.db``. A plain path passed as ``url`` is refused: say ``sqlite:///`` explicitly.

    Args:
        url: Where the store is.
        upcasters: Lift old event and snapshot schemas on read.
        max_event_bytes: Size limit of one encoded event.
        durability: ``"normal"`` survives a crash of the process; ``"full"`` survives power
            loss too (SQLite: ``synchronous=FULL``). PostgreSQL is always fully durable.
            Default: the URL's ``durability`` parameter, else ``"normal"``.
        create: Create the store when there is none (the default). Read-only tools pass
            ``create=False``: a SQLite file that does not exist (or holds no tables) or a
            PostgreSQL schema without turnlog's tables then raises ``StoreNotFound`` and
            nothing is created. In-memory stores are always new, so it does not apply to them.

    Raises:
        UnsupportedStoreURL: the URL has no scheme, or one no backend handles, or an unknown
            or conflicting parameter, or PostgreSQL's driver is not installed.
        StoreFormatError: the target exists but is not a turnlog store, or is a newer one.
        StoreNotFound: ``create=False`` and there is no store at the URL (PostgreSQL: raised
            when the store is first used, as every connection error is).

    Example:
        >>> import anyio
        >>> from turnlog.eventstore import NewEvent, open_store
        >>> async def main():
        ...     async with open_store("sqlite:///:memory:") as store:
        ...         await store.append("branch-1", [NewEvent("message.added", {"text": "hi"})])
        ...         return [event.type async for event in store.read_stream("branch-1")]
        >>> anyio.run(main)
        ['message.added']
    """
    options = _Options(upcasters, max_event_bytes, durability, create)
    if url is None:
        url = os.environ.get("TURNLOG_STORE") or DEFAULT_STORE_PATH
        if "://" not in url:
            # a plain path is taken as it is: a "?" in it is part of the file name
            return _open_sqlite(StoreURL(url, "sqlite", url), options)
    parsed = parse_store_url(url)
    return _SCHEMES[parsed.scheme].open(parsed, options)


# -- SQLite ------------------------------------------------------------------------------------

_SQLITE_PARAMETERS = {"durability": ("normal", "full")}


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
                f"{url!r}: unknown SQLite URL parameter {key!r}; the one parameter is durability=normal|full"
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


def _open_sqlite(parsed: StoreURL, options: _Options) -> EventStore:
    from ._sqlite import SQLiteEventStore

    wanted = parsed.params.get("durability")
    if options.durability is not None and wanted is not None and options.durability != wanted:
        raise UnsupportedStoreURL(
            f"{parsed.url!r} asks for durability={wanted}, the caller for durability={options.durability}"
        )
    return SQLiteEventStore(
        parsed.location,
        upcasters=options.upcasters,
        max_event_bytes=options.max_event_bytes,
        durability=options.durability or cast(Durability | None, wanted) or "normal",
        create=options.create,
    )


# -- in memory ---------------------------------------------------------------------------------


def _parse_memory(url: str, rest: str) -> StoreURL:
    if rest not in ("", "/"):
        raise UnsupportedStoreURL(f"{url!r}: the in-memory store takes no path; use memory://")
    return StoreURL(url, "memory", "")


def _open_memory(parsed: StoreURL, options: _Options) -> EventStore:
    from ._memory import MemoryEventStore

    return MemoryEventStore(upcasters=options.upcasters, max_event_bytes=options.max_event_bytes)


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


def postgres_store_class() -> type[EventStore]:
    """``PostgresEventStore``, imported now.

    Raises:
        ImportError: psycopg 3 or psycopg-pool is not installed; the message names the extra.
    """
    try:
        importlib.import_module("psycopg")
        importlib.import_module("psycopg_pool")
        module = importlib.import_module("turnlog.eventstore._postgres")
    except ImportError as exc:
        raise ImportError(f"PostgreSQL stores need the postgres extra: {POSTGRES_EXTRA} ({exc})") from exc
    return cast(type[EventStore], module.PostgresEventStore)


def _open_postgres(parsed: StoreURL, options: _Options) -> EventStore:
    try:
        store_class: Any = postgres_store_class()
    except ImportError as exc:
        raise UnsupportedStoreURL(str(exc)) from exc
    return cast(
        EventStore,
        store_class(
            parsed.url,
            upcasters=options.upcasters,
            max_event_bytes=options.max_event_bytes,
            create=options.create,
        ),
    )


_SCHEMES: dict[str, _Scheme] = {
    "sqlite": _Scheme(_parse_sqlite, _open_sqlite, "sqlite:///path/to/file.db, sqlite:///:memory:"),
    "memory": _Scheme(_parse_memory, _open_memory, "memory://"),
    "postgresql": _Scheme(_parse_postgres, _open_postgres, "postgresql://..."),
}
"""Every backend by scheme: its URL parser, its factory and example URLs."""
_ALIASES = {"postgres": "postgresql"}
"""Other spellings of a scheme."""


def _supported() -> str:
    return ", ".join(entry.example for entry in _SCHEMES.values())
