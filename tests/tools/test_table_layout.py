"""The inspection commands on a terminal of 80 and 120 columns: ids and numbers whole, no column dropped.

Run on the store ``turnlog demo`` leaves (the store the issue was seen on), with rich forced on
as on a real terminal and the width set through ``COLUMNS``, as a terminal sets it.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from turnlog.tools import _output
from turnlog.tools._cli import main

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The demo store, with the ids of its branches and runs read from ``--json`` output."""
    path = tmp_path_factory.mktemp("layout") / "turnlog-demo.db"
    done = subprocess.run(
        [sys.executable, "-m", "turnlog", "demo", "--store", str(path)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        streams = [s for (s,) in conn.execute("SELECT DISTINCT stream FROM events")]
    finally:
        conn.close()
    return {
        "store": str(path),
        "branches": [s.removeprefix("branch-") for s in streams if s.startswith("branch-")],
        "runs": [s.removeprefix("run-") for s in streams if s.startswith("run-")],
    }


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_output, "fancy", lambda stream=None: True)


def _run(capsys: pytest.CaptureFixture[str], demo: dict[str, object], *args: str) -> list[str]:
    status = main([*args, "--store", str(demo["store"])])
    out = ANSI.sub("", capsys.readouterr().out)
    assert status == 0, out
    return out.splitlines()


def _ids_on_lines(lines: list[str]) -> set[str]:
    return {m.group(0) for line in lines for m in UUID.finditer(line)}


@pytest.mark.parametrize("width", [80, 120])
def test_branches_show_whole_ids_and_the_fork_origin(
    terminal: None,
    demo: dict[str, object],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    width: int,
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    lines = _run(capsys, demo, "branches")
    branches = set(demo["branches"])  # type: ignore[arg-type]
    assert branches <= _ids_on_lines(lines)
    assert any(re.search(UUID.pattern + r"@6", line) for line in lines)  # "forked from" whole: id@version
    assert max(map(len, lines)) <= width
    if width == 120:  # wide enough for a table: one row per branch
        assert sum(1 for line in lines if UUID.match(line)) == len(branches)


@pytest.mark.parametrize("width", [80, 120])
def test_stats_keep_every_number_whole_and_the_latency_columns(
    terminal: None,
    demo: dict[str, object],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    width: int,
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    text = "\n".join(lines := _run(capsys, demo, "stats"))
    assert re.search(r"(^|\s)0\.000990(\s|$)", text, re.M)  # the cost, never 0.00099 / 0 over two lines
    assert re.search(r"(^|\s)0\.001900(\s|$)", text, re.M)
    for header in ("p50", "p95", "p99", "ttft"):  # latency is the point of stats: never left out
        assert header in text
    assert "left out" not in text
    assert max(map(len, lines)) <= width
    if width == 120:
        assert any(line.startswith("gpt-4.1-mini ") for line in lines)  # a table row, not a block
    tools = "\n".join(_run(capsys, demo, "stats", "--by", "tool"))
    assert "get_weather" in tools and "p99" in tools


@pytest.mark.parametrize("width", [80, 120])
def test_log_keeps_ids_in_its_summaries_whole(
    terminal: None,
    demo: dict[str, object],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    width: int,
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    branch = str(demo["branches"][0])  # type: ignore[index]
    lines = _run(capsys, demo, "log", branch)
    assert set(demo["runs"]) <= _ids_on_lines(lines)  # each run id, as "run.started" names it, on one line
    assert max(map(len, lines)) <= width
    assert "left out" not in "\n".join(lines)


@pytest.mark.parametrize("width", [80, 120])
def test_show_diff_and_tail_print_whole_run_ids(
    terminal: None,
    demo: dict[str, object],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    width: int,
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    branch = str(demo["branches"][0])  # type: ignore[index]
    runs = set(demo["runs"])  # type: ignore[arg-type]
    shown = _run(capsys, demo, "show", branch)
    run_lines = [line for line in shown if line.strip().startswith("run ")]
    assert run_lines and all(UUID.search(line) for line in run_lines)
    assert runs <= _ids_on_lines(run_lines)
    diffed = _run(capsys, demo, "diff", branch, "1", "30")
    assert all(UUID.search(line) for line in diffed if line.startswith("~ run "))
    tail = _run(capsys, demo, "tail", "-n", "5")
    assert len(tail) == 5 and all(UUID.search(line) for line in tail)


def test_piping_into_head_ends_quietly(demo: dict[str, object]) -> None:
    """``turnlog log X | head -1``: the reader goes away; no traceback, no error line."""
    for args in (["log", str(demo["branches"][0])], ["tail", "-n", "50"], ["stats"]):  # type: ignore[index]
        command = [sys.executable, "-m", "turnlog", *args, "--store", str(demo["store"])]
        done = subprocess.run(
            f"{' '.join(command)} | head -1", shell=True, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0 and len(done.stdout.splitlines()) == 1
        assert "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr
