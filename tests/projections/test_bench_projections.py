"""``turnlog bench projections`` runs end to end on tiny sizes and reports every figure."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys


def test_bench_projections_runs_and_reports_json(tmp_path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "turnlog.tools._cli",
            "bench",
            "projections",
            "--sizes",
            "300,600",
            "--queries",
            "20",
            "--cold-queries",
            "3",
            "--snapshot-every",
            "50",
            "--run-heavy",
            "2500",
            "--dir",
            str(tmp_path),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [s["events"] for s in report["sizes"]] == [300, 600]
    for size in report["sizes"]:
        assert size["fold_events_per_s"] > 0 and size["rebuild_events_per_s"] > 0
        assert size["time_travel_cached_ms"]["n"] == 20
        assert size["time_travel_store_snapshots_ms"]["n"] == 3
        assert size["time_travel_session_ms"]["n"] == 20 and size["time_travel_session_first_ms"] > 0
        assert size["fold_second_pass_events_per_s"] > 0 and size["snapshots_written"] == size["events"] // 50
    if importlib.util.find_spec("eventsourcing") is not None:
        for size in report["sizes"]:
            peer = size["eventsourcing"]
            assert peer["replay_events_per_s"] > 0 and peer["time_travel_ms"]["n"] == 3
            assert peer["rebuild_vs_replay"] > 0
    heavy = report["run_heavy"]
    assert heavy["events"] == 2500 and heavy["runs"] == 625
    full, deltas = heavy["variants"]["1"], heavy["variants"]["16"]
    assert deltas["snapshot_payload_bytes"] < full["snapshot_payload_bytes"]
    assert full["session_ms"]["p50"] > 0 and deltas["session_ms"]["p50"] > 0
    assert len(set(json.dumps(v["session_ms"]) for v in heavy["variants"].values())) == 2
    assert set(report["checks"]) >= {
        "fold_rate_met",
        "p95_met",
        "flat_met",
        "p95_session_met",
        "flat_session_met",
    }
