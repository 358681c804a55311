"""`turnlog bench kernel` runs end to end and reports every figure it promises."""

from __future__ import annotations

import json

import pytest

from turnlog.tools._cli import main


@pytest.mark.slow
def test_bench_kernel_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "kernel", "--turns", "4", "--blocks", "2", "--no-lionagi", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["histories"]) == {"0", "100", "500"}
    ours = report["histories"]["500"]["turnlog"]
    assert ours["turns"] == 4 and 0 < ours["best_ms"] <= ours["mean_ms"] * 2
    assert report["lionagi"] == "skipped" and "speedup" not in report
    assert "growth_0_to_500 <= 3" in report["targets"]


@pytest.mark.slow
def test_bench_kernel_histories_and_the_flat_cost_targets(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "bench",
        "kernel",
        "--histories",
        "20,0",
        "--turns",
        "2",
        "--blocks",
        "1",
        "--no-lionagi",
        "--json",
    ]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report["histories"]) == ["0", "20"]
    assert report["growth_0_to_20"] > 0
    assert report["targets"] == {}  # no target is about 20 turns
    with pytest.raises(SystemExit):
        main(["bench", "kernel", "--histories", "0,x"])
