"""``open_store``: the scheme -> backend table.

``open_store`` parses a URL with ``_url.parse_store_url`` and hands the ``StoreURL`` to the
factory of its scheme (one row of ``_FACTORIES`` per row of the parsers' table).

Backends load lazily: the SQLite and in-memory modules on first use, and the PostgreSQL one
only when its driver is installed (``pip install 'turnlog[postgres]'``). ``postgres_store_class``
is how ``turnlog.eventstore.PostgresEventStore`` is found.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any, Literal, NamedTuple, cast

from ._base import EventStore
from ._errors import UnsupportedStoreURL
from ._upcasting import Upcasters
from ._url import StoreURL, parse_store_url, scheme_names
from ._validation import DEFAULT_MAX_EVENT_BYTES

__all__ = [
    "DEFAULT_STORE_PATH",
    "POSTGRES_EXTRA",
    "open_store",
    "postgres_store_class",
]

DEFAULT_STORE_PATH = "./turnlog.db"
"""The store used when neither a URL nor ``$TURNLOG_STORE`` is given."""
POSTGRES_EXTRA = "pip install 'turnlog[postgres]'"
"""What installs the PostgreSQL driver."""

Durability = Literal["normal", "full"]


class _Options(NamedTuple):
    """The keyword arguments of ``open_store``, for a factory."""

    upcasters: Upcasters | None
    max_event_bytes: int
    durability: Durability | None
    create: bool


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
      in ``$TURNLOG_STORE`` or ``--store``, can ask for it, and in ``format=4`` (or ``3``, ``2``,
      joined by ``&``): the format of a store it creates (``SQLiteEventStore``'s
      ``new_format``); any other parameter is refused.
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
    return _FACTORIES[parsed.scheme](parsed, options)


# -- SQLite ------------------------------------------------------------------------------------


def _open_sqlite(parsed: StoreURL, options: _Options) -> EventStore:
    from ._sqlite import SQLiteEventStore
    from ._sqlite_schema import NEW_STORE_FORMAT

    wanted = parsed.params.get("durability")
    if options.durability is not None and wanted is not None and options.durability != wanted:
        raise UnsupportedStoreURL(
            f"{parsed.url!r} asks for durability={wanted}, the caller for durability={options.durability}"
        )
    fmt = parsed.params.get("format")
    return SQLiteEventStore(
        parsed.location,
        upcasters=options.upcasters,
        max_event_bytes=options.max_event_bytes,
        durability=options.durability or cast(Durability | None, wanted) or "normal",
        create=options.create,
        new_format=NEW_STORE_FORMAT if fmt is None else int(fmt),
    )


# -- in memory ---------------------------------------------------------------------------------


def _open_memory(parsed: StoreURL, options: _Options) -> EventStore:
    from ._memory import MemoryEventStore

    return MemoryEventStore(upcasters=options.upcasters, max_event_bytes=options.max_event_bytes)


# -- PostgreSQL --------------------------------------------------------------------------------


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


_FACTORIES: dict[str, Callable[[StoreURL, _Options], EventStore]] = {
    "sqlite": _open_sqlite,
    "memory": _open_memory,
    "postgresql": _open_postgres,
}
"""Every backend's factory by scheme."""
# a scheme that parses but opens nothing would be a KeyError far from its cause
assert set(_FACTORIES) == scheme_names(), "every parsed scheme needs a factory"
