"""``turnlog bench timetravel`` reads the same past state from both peers and prints the ratio."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite")


def test_both_peers_read_the_middle_turn_in_fresh_processes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "turnlog", "bench", "timetravel", "--sizes", "6", "--rounds", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    row = report["rows"]["6"]
    assert row["messages"] == 6  # three turns of the six: an instruction and an answer each
    for peer in ("turnlog", "langgraph"):
        assert 0 < row[peer]["p50_ms"] <= row[peer]["p95_ms"]
    assert row["ratio_p50"] == pytest.approx(row["turnlog"]["p50_ms"] / row["langgraph"]["p50_ms"])
    assert len(report["targets"]) == 2
