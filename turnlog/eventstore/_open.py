"""``open_store``: pick a backend from a URL."""

from __future__ import annotations

import importlib
import os
import urllib.parse
from typing import Literal

from ._base import EventStore
from ._errors import UnsupportedStoreURL
from ._upcasting import Upcasters
from ._validation import DEFAULT_MAX_EVENT_BYTES

__all__ = ["DEFAULT_STORE_PATH", "open_store"]

DEFAULT_STORE_PATH = "./turnlog.db"
"""The store used when neither a URL nor ``$TURNLOG_STORE`` is given."""

_SUPPORTED = "sqlite:///path/to/file.db, sqlite:///:memory:, memory://, postgresql://..."


def open_store(
    url: str | None = None,
    *,
    upcasters: Upcasters | None = None,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    durability: Literal["normal", "full"] | None = None,
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
            or conflicting parameter.
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
    if url is None:
        url = os.environ.get("TURNLOG_STORE") or DEFAULT_STORE_PATH
        if "://" not in url:
            # a plain path is taken as it is: a "?" in it is part of the file name
            return _open_sqlite(url, url, "", upcasters, max_event_bytes, durability, create)
    if not isinstance(url, str):
        raise UnsupportedStoreURL(f"a store URL must be a str, not {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise UnsupportedStoreURL(
            f"{url!r} is not a store URL; for a SQLite file write sqlite:///{url}. Supported: {_SUPPORTED}"
        )
    scheme = scheme.lower()
    if scheme == "sqlite":
        location, _, query = rest.partition("?")
        if not location.startswith("/") or location == "/":
            raise UnsupportedStoreURL(
                f"{url!r}: a SQLite URL is sqlite:///relative.db, sqlite:////absolute.db or sqlite:///:memory:"
            )
        # the path is percent-decoded, as in any URL: %3F is a "?" that is part of the name
        return _open_sqlite(
            url, urllib.parse.unquote(location[1:]), query, upcasters, max_event_bytes, durability, create
        )
    if scheme == "memory":
        from ._memory import MemoryEventStore

        if rest not in ("", "/"):
            raise UnsupportedStoreURL(f"{url!r}: the in-memory store takes no path; use memory://")
        return MemoryEventStore(upcasters=upcasters, max_event_bytes=max_event_bytes)
    if scheme in ("postgresql", "postgres"):
        return _open_postgres(url, upcasters=upcasters, max_event_bytes=max_event_bytes, create=create)
    raise UnsupportedStoreURL(f"unsupported store URL scheme {scheme!r} in {url!r}. Supported: {_SUPPORTED}")


_SQLITE_PARAMETERS = {"durability": ("normal", "full")}


def _open_sqlite(
    url: str,
    path: str,
    query: str,
    upcasters: Upcasters | None,
    max_event_bytes: int,
    durability: Literal["normal", "full"] | None,
    create: bool,
) -> EventStore:
    from ._sqlite import SQLiteEventStore

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
    if not path:
        raise UnsupportedStoreURL(f"{url!r}: the SQLite URL names no file")
    wanted = params.get("durability")
    if durability is not None and wanted is not None and durability != wanted:
        raise UnsupportedStoreURL(
            f"{url!r} asks for durability={wanted}, the caller for durability={durability}"
        )
    return SQLiteEventStore(
        path,
        upcasters=upcasters,
        max_event_bytes=max_event_bytes,
        durability=durability or wanted or "normal",  # type: ignore[arg-type]
        create=create,
    )


def _open_postgres(
    url: str, *, upcasters: Upcasters | None, max_event_bytes: int, create: bool
) -> EventStore:
    # Imported here so that turnlog works without the PostgreSQL driver installed.
    try:
        module = importlib.import_module("turnlog.eventstore._postgres")
    except ImportError as exc:
        raise UnsupportedStoreURL(
            f"PostgreSQL stores need the postgres extra: pip install 'turnlog[postgres]' ({exc})"
        ) from exc
    store_class: type[EventStore] = module.PostgresEventStore
    return store_class(url, upcasters=upcasters, max_event_bytes=max_event_bytes, create=create)  # type: ignore[call-arg]
