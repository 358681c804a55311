"""Tables on a terminal never split or cut an id, a name or a number, and never leave a column out."""

from __future__ import annotations

import pytest

from turnlog.tools import _output

BRANCH = "01a23ad3-c558-7a11-8f2b-0123456789ab"
MODEL = "claude-sonnet-4-5-20250929-with-a-long-suffix"


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_output, "fancy", lambda stream=None: True)


@pytest.mark.parametrize("width", [80, 100, 120])
def test_branch_ids_and_names_are_whole_at_any_width(
    terminal: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], width: int
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    rows = [[BRANCH, "a-fairly-long-branch-name", 38, f"{BRANCH}@6", "2026-12-02T12:19:36"]]
    _output.print_table(
        ["branch", "name", "version", "forked from", "updated"], rows, keep=("branch", "name")
    )
    out = capsys.readouterr().out
    assert BRANCH in out and "a-fairly-long-branch-name" in out
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= width


def test_model_names_and_numbers_are_whole_and_no_column_is_left_out(
    terminal: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    columns = ["model", "calls", "errors", "error rate", "input tok", "output tok", "cost $", "p50 ms"]
    _output.print_table(columns, [[MODEL, 5, 0, "0.0%", 1740, 184, "0.000990", 118.63]])
    out = capsys.readouterr().out
    assert MODEL in out and "…" not in out
    assert "left out" not in out
    assert "0.000990" in out.split() and "118.63" in out.split()  # numbers on one line each
    assert all(name.split()[0] in out for name in columns)
    assert max(len(line) for line in out.splitlines()) <= 80


def test_prose_wraps_at_spaces_and_keeps_an_id_in_it_whole(
    terminal: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    summary = f"communicate started after a long wait for the model (run {BRANCH}) and more words"
    _output.print_table(["v", "type", "what"], [[1, "run.started", summary]])
    out = capsys.readouterr().out
    assert any(BRANCH in line for line in out.splitlines())
    assert max(len(line) for line in out.splitlines()) <= 100


def test_ids_wider_than_the_terminal_fall_back_to_plain_lines(
    terminal: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "30")
    _output.print_table(["branch", "name"], [[BRANCH, "demo"]], keep=("branch", "name"))
    out = capsys.readouterr().out
    assert BRANCH in out and "demo" in out
