"""Shared test configuration: hermetic by default (no real provider can be reached)."""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from hypothesis import settings

# Property tests assert behaviour, not speed: a 2-core CI machine under load must not fail
# one because an example took longer than Hypothesis' default 200 ms deadline.
settings.register_profile("turnlog", deadline=None)
settings.load_profile("turnlog")

# Hundreds of tests start ``python -m turnlog ...`` in a child process. With
# PYTHONDONTWRITEBYTECODE set (some shells and sandboxes set it), every child compiled turnlog
# from source again: about 0.2 s of CPU each. Children (and this process) keep their bytecode in
# one cache outside the source tree instead, so the tree stays clean and each module is
# compiled once; CPython checks each cached file against its source as usual.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    _PYCACHE = Path(tempfile.gettempdir()) / f"turnlog-tests-pycache-{os.getuid()}"
    os.environ["PYTHONPYCACHEPREFIX"] = str(_PYCACHE)
    sys.pycache_prefix = str(_PYCACHE)
    sys.dont_write_bytecode = False

# Real providers are blocked in tests: only loopback fakes are allowed.
os.environ.setdefault("TURNLOG_ALLOW_MODEL_REQUESTS", "0")
os.environ.pop("OPENAI_API_KEY", None)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- PostgreSQL ----------------------------------------------------------------------------

PG_DSN_VARIABLE = "TURNLOG_TEST_PG_DSN"
"""The environment variable naming the PostgreSQL server the tests may use (``postgresql://...``)."""


def pg_dsn_or_skip() -> str:
    """The server's DSN; skip without one, and fail without one under ``CI=true``.

    In CI a missing server is a broken setup, not a reason to pass with every PostgreSQL
    test skipped.
    """
    dsn = os.environ.get(PG_DSN_VARIABLE, "")
    if not dsn:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{PG_DSN_VARIABLE} is not set and CI=true: the PostgreSQL tests must run in CI")
        pytest.skip(f"{PG_DSN_VARIABLE} is not set: no PostgreSQL server to test against")
    pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    return dsn


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """The PostgreSQL server's DSN (``$TURNLOG_TEST_PG_DSN``); the one check of it.

    Without it the test is skipped with the reason, or fails when ``CI=true``.
    """
    return pg_dsn_or_skip()


def pg_url_for(dsn: str, **params: str) -> str:
    """``dsn`` with query parameters added (``schema=...``, ``application_name=...``)."""
    return dsn + ("&" if "?" in dsn else "?") + urlencode(params)


@pytest.fixture
def pg_schema(pg_dsn: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL schema name, dropped after the test."""
    import psycopg

    name = f"t_{uuid.uuid4().hex}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def pg_url(pg_dsn: str, pg_schema: str) -> str:
    """A store URL on the server, in a schema of its own (``pg_schema``), dropped after the test."""
    return pg_url_for(pg_dsn, schema=pg_schema)
