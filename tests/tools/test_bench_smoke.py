"""Every ``turnlog bench`` command runs end to end on tiny sizes and prints JSON.

These are smoke tests of the benchmark programs (they must not rot), not timings.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SMALL = {
    "append": ["--single", "30", "--batches", "2", "--batch", "50", "--repeat", "1"],
    "subscribe": ["--writers", "2", "--rate", "20", "--seconds", "1", "--burst", "20", "--pg", ""],
    # --run-heavy: the run-heavy branch defaults to 100k events (tests/projections covers it small)
    "projections": ["--sizes", "300", "--queries", "5", "--cold-queries", "2", "--run-heavy", "0"],
    "kernel": ["--turns", "5", "--blocks", "1", "--no-lionagi"],
    "stream": ["--chunks", "300", "--repeat", "1"],
    "analytics": ["--events", "2000", "--new", "100", "--repeat", "1"],
    "writers": ["--events", "24", "--procs", "1,2", "--tasks", "1,8", "--pg", ""],
    "otel": ["--events", "2000", "--repeat", "1"],
    # --no-litellm: LiteLLM takes half a minute to start (tests/tools/test_proxy_litellm.py runs it)
    "proxy": ["--calls", "2", "--events", "10", "--no-litellm"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SMALL))
def test_bench_runs_and_prints_json(name: str, tmp_path: object) -> None:
    args = [sys.executable, "-m", "turnlog.tools", "bench", name, *SMALL[name], "--json"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=240, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert isinstance(report, dict) and report


def test_bench_finds_the_checkouts_benchmarks() -> None:
    """From a checkout, ``turnlog bench`` loads ``benchmarks/`` beside the package, by its path."""
    from turnlog.tools import _cmd_bench

    found = _cmd_bench.benchmarks_dir()
    assert found is not None and (found.parent / "turnlog").is_dir()
    assert set(_cmd_bench.BENCHMARKS) <= {p.stem.lstrip("_") for p in found.glob("_*.py")}


def test_bench_without_a_checkout_says_it_needs_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An installed wheel has no ``benchmarks/``: one line says what is missing, exit status 2."""
    from turnlog.tools import _cmd_bench
    from turnlog.tools._cli import main

    monkeypatch.setattr(_cmd_bench, "benchmarks_dir", lambda: None)
    assert main(["bench", "append", "--json"]) == 2
    err = capsys.readouterr().err
    assert "turnlog bench runs from a source checkout" in err and "benchmarks/" in err


@pytest.mark.slow
@pytest.mark.postgres
def test_bench_append_on_postgresql_runs_the_psycopg_peer(
    pg_dsn: str, pg_schema: str, tmp_path: object
) -> None:
    """``--store postgresql://...``: the raw psycopg peer, CPU per event, both targets judged, scratch schemas dropped."""
    import psycopg

    from tests.conftest import pg_url_for

    url = pg_url_for(pg_dsn, schema=pg_schema)
    args = [
        sys.executable,
        "-m",
        "turnlog.tools",
        "bench",
        "append",
        *SMALL["append"],
        "--store",
        url,
        "--json",
    ]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=240, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    ours, raw = report["results"]["ours single"], report["results"]["raw psycopg single"]
    assert ours["events"] == raw["events"] == 30
    assert ours["cpu_ms_per_event"] > 0 and raw["cpu_ms_per_event"] > 0
    assert report["ratios"]["single_vs_psycopg"] > 0
    targets = report["targets"]
    assert set(targets) == {"single_vs_psycopg", "single_cpu_ms"}
    assert all(isinstance(target["met"], bool) for target in targets.values())
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        left = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", [f"{pg_schema}_bench_"]
        ).fetchall()
    assert left == [], "a scratch schema was left behind"
