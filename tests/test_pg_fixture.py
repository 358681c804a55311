"""The one PostgreSQL fixture (``pg_dsn`` in tests/conftest.py): a skip with its reason, a failure in CI.

Run in a child pytest, so that the environment of the check is the test's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
A_PG_TEST = f"{TESTS / 'eventstore' / 'test_store_id.py'}::test_postgres_store_keeps_its_id"


def _run(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("TURNLOG_TEST_PG_DSN", "CI")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", A_PG_TEST],
        env={**clean, **env},
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_a_server_a_pg_test_is_skipped_with_the_reason() -> None:
    done = _run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout
    assert "TURNLOG_TEST_PG_DSN is not set: no PostgreSQL server to test against" in done.stdout


def test_without_a_server_in_ci_a_pg_test_fails() -> None:
    done = _run(CI="true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "TURNLOG_TEST_PG_DSN is not set and CI=true" in done.stdout
    assert "1 error" in done.stdout and " skipped" not in done.stdout.splitlines()[-1]


def test_with_a_server_a_pg_test_runs(pg_dsn: str) -> None:
    done = _run(TURNLOG_TEST_PG_DSN=pg_dsn, CI="true")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_no_test_module_checks_the_dsn_itself() -> None:
    """The DSN is checked in one place (``pg_dsn_or_skip``): no module has its own copy of the skip."""
    copies = [
        path.relative_to(TESTS).as_posix()
        for path in TESTS.rglob("*.py")
        if path.name not in ("conftest.py", "test_pg_fixture.py")
        and (
            'environ.get("TURNLOG_TEST_PG_DSN"' in (text := path.read_text(encoding="utf-8"))
            or "TURNLOG_TEST_PG_DSN is not set" in text
        )
    ]
    assert copies == []
