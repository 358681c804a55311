"""``turnlog bench ui`` runs end to end on tiny sizes and prints JSON (a smoke test, not a timing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_bench_ui_runs_and_prints_json(tmp_path: Path) -> None:
    args = ["--big", "300", "--scrub", "100", "--branches", "120", "--moves", "5", "--json"]
    proc = subprocess.run(
        [sys.executable, "-m", "turnlog.tools", "bench", "ui", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["branches"] == 122
    assert report["open_cold_ms"] > 0 and report["scrub_p95_ms"] >= report["scrub_p50_ms"]
