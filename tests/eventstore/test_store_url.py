"""Store URLs: one parser, one scheme table, and the lazily imported PostgreSQL backend."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import turnlog.eventstore
from turnlog.eventstore import UnsupportedStoreURL, open_store, parse_store_url


def test_each_scheme_parses_to_its_backend_and_location() -> None:
    """sqlite, memory and postgresql URLs parse to their scheme, location and parameters."""
    assert parse_store_url("sqlite:///a%3Fb.db?durability=full").location == "a?b.db"
    assert parse_store_url("sqlite:///a.db?durability=full").params == {"durability": "full"}
    assert parse_store_url("sqlite:////abs/x.db").sqlite_file == Path("/abs/x.db")
    assert parse_store_url("sqlite:///:memory:").sqlite_file is None
    assert parse_store_url("MEMORY://").scheme == "memory"
    pg = parse_store_url("postgres://u:pw@h:5/db?schema=s1&sslmode=require")
    assert (pg.scheme, pg.location) == ("postgresql", "postgres://u:pw@h:5/db?sslmode=require")
    assert pg.params == {"schema": "s1", "pool_size": "10"} and pg.sqlite_file is None


@pytest.mark.parametrize("url", ["mysql://h/db", "redis://x", "file:///x.db"])
def test_an_unknown_scheme_names_itself_and_the_supported_ones(url: str) -> None:
    """The error names the scheme it got and every scheme there is."""
    with pytest.raises(UnsupportedStoreURL) as info:
        open_store(url)
    message = str(info.value)
    assert repr(url.partition("://")[0]) in message
    assert all(example in message for example in ("sqlite:///", "memory://", "postgresql://"))
    assert isinstance(info.value, ValueError)


def test_a_plain_path_is_refused_with_the_url_to_write() -> None:
    """A path without a scheme is not guessed at: the error says how to write it."""
    with pytest.raises(UnsupportedStoreURL, match=r"sqlite:///notes\.db"):
        open_store("notes.db")


def test_postgres_store_is_exported_lazily() -> None:
    """PostgresEventStore is a public name of turnlog.eventstore, loaded on first use."""
    from turnlog.eventstore import PostgresEventStore

    assert PostgresEventStore.__name__ == "PostgresEventStore"
    assert "PostgresEventStore" in turnlog.eventstore.__all__


def test_postgres_store_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without psycopg, importing PostgresEventStore raises ImportError naming the extra."""
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ImportError, match=r"pip install 'turnlog\[postgres\]'"):
        _ = turnlog.eventstore.PostgresEventStore
    with pytest.raises(ImportError, match=r"turnlog\[postgres\]"):
        from turnlog.eventstore import PostgresEventStore  # noqa: F401


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchStore'"):
        _ = turnlog.eventstore.NoSuchStore  # type: ignore[attr-defined]


@pytest.mark.parametrize("url", ["postgress://ann:s3cret-pw@db.example/prod", "sqlite:/ann:s3cret-pw@x"])
def test_a_refused_url_never_shows_its_password(url: str) -> None:
    """The message of a refused URL goes to terminals and logs: the password is masked."""
    with pytest.raises(UnsupportedStoreURL) as caught:
        parse_store_url(url)
    assert "s3cret-pw" not in str(caught.value)
    assert "ann:***@" in str(caught.value)


def test_an_empty_url_is_named_as_such() -> None:
    with pytest.raises(UnsupportedStoreURL, match="the store URL is empty"):
        parse_store_url("  ")
