"""Every reader checks what it shows: a payload altered on disk is marked, never shown as the record."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from queue import Empty, Queue

import pytest

from turnlog.eventstore import open_store
from turnlog.kernel import Branch
from turnlog.testing import ScriptedModel
from turnlog.tools._cli import main

FORGED = "Lyon (forged)"


@pytest.fixture
async def store(tmp_path: Path) -> str:
    """A branch (chat, communicate) and a fork of it; then one answer altered with plain sqlite3."""
    path = tmp_path / "t.db"
    async with open_store(f"sqlite:///{path}") as opened:
        branch = Branch(
            store=opened, name="demo", system="Be terse.", chat_model=ScriptedModel("Hello!", "Paris.")
        )
        await branch.chat_and_record("hi")
        await branch.communicate("capital of France?")
        await branch.fork(name="child")
    conn = sqlite3.connect(path)
    with conn:
        (stream, version, data) = conn.execute(
            "SELECT stream, version, data FROM events WHERE type = 'message.added' AND CAST(data AS TEXT) LIKE '%Paris.%'"
        ).fetchone()
        forged = bytes(data).replace(b"Paris.", FORGED.encode())
        conn.execute("UPDATE events SET data = ? WHERE stream = ? AND version = ?", (forged, stream, version))
    conn.close()
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def _marked(out: str) -> list[str]:
    return [line for line in out.splitlines() if "TAMPERED" in line]


def test_show_marks_the_altered_message_and_exits_1(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "show", "demo", "--store", store)
    assert status == 1
    assert any(FORGED in line for line in _marked(out)), out
    assert not any("Hello!" in line for line in _marked(out))
    assert "TAMPERED" in err and "altered" in err
    # the fork stands on the parent's events: its view is marked too
    status, out, err = run(capsys, "show", "child", "--store", store)
    assert status == 1 and any(FORGED in line for line in _marked(out))
    status, out, _ = run(capsys, "show", "demo", "--json", "--store", store)
    assert status == 1 and json.loads(out)["tampered"][0]["what"].startswith("hash does not match")
    # before the altered version, nothing shown stands on it
    assert run(capsys, "show", "demo", "--at", "4", "--store", store)[0] == 0


def test_log_marks_the_altered_event(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "log", "demo", "--store", store)
    assert status == 1 and "TAMPERED" in err
    [line] = _marked(out)
    assert FORGED in line
    status, out, _ = run(capsys, "log", "demo", "--json", "--store", store)
    flagged = [e for e in json.loads(out)["events"] if e["tampered"]]
    assert status == 1 and len(flagged) == 1 and FORGED in flagged[0]["summary"]
    assert run(capsys, "log", "demo", "--to", "4", "--store", store)[0] == 0


def test_diff_marks_the_altered_message(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "diff", "demo", "1", "9", "--store", store)
    assert status == 1 and "TAMPERED" in err
    assert any(line.startswith("+ TAMPERED") and FORGED in line for line in out.splitlines()), out
    assert run(capsys, "diff", "demo", "1", "4", "--store", store)[0] == 0


def test_tail_marks_the_altered_event(store: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "tail", "-n", "100", "--store", store)
    assert status == 1 and "TAMPERED" in err
    [line] = _marked(out)
    assert "Lyon" in line
    status, out, _ = run(capsys, "tail", "-n", "100", "--json", "--store", store)
    flagged = [e for e in map(json.loads, out.splitlines()) if "tampered" in e]
    assert status == 1 and len(flagged) == 1


def test_export_refuses_and_writes_nothing(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_file = tmp_path / "out.jsonl"
    status, out, err = run(capsys, "export", "--store", store, "--out", str(out_file))
    assert status == 1 and "TAMPERED" in err and "nothing was written" in err
    assert not out_file.exists()
    status, out, err = run(capsys, "export", "--store", store, "--out", "-")
    assert status == 1 and out == ""


def test_a_sound_store_is_shown_unmarked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The check is no alarm: the same commands on a store nobody touched exit 0 without a mark."""
    path = tmp_path / "ok.db"

    async def make() -> None:
        async with open_store(f"sqlite:///{path}") as opened:
            branch = Branch(store=opened, name="demo", chat_model=ScriptedModel("Paris."))
            await branch.communicate("capital?")

    import anyio

    anyio.run(make)
    for args in (["show", "demo"], ["log", "demo"], ["diff", "demo", "1", "2"], ["tail"]):
        status, out, err = run(capsys, *args, "--store", str(path))
        assert status == 0 and "TAMPERED" not in out + err, (args, err)
    status, _, _ = run(capsys, "export", "--store", str(path), "--out", str(tmp_path / "x.jsonl"))
    assert status == 0


def test_show_exit_status_in_a_real_process(store: str) -> None:
    """As a user runs it: a separate process, its exit status and its stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "turnlog", "show", "demo", "--store", store],
        capture_output=True,
        text=True,
        timeout=60,
        env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 1 and "TAMPERED" in proc.stdout and "TAMPERED" in proc.stderr


def test_tail_follow_marks_an_altered_event_as_it_prints_it(store: str) -> None:
    """``tail --follow`` checks each event it prints, the past ones and the live ones alike."""
    args = [sys.executable, "-m", "turnlog", "tail", "--follow", "-n", "100", "--store", store]
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        lines: Queue[str] = Queue()
        pumps = [
            threading.Thread(target=lambda p=pipe: [lines.put(line) for line in p], daemon=True)
            for pipe in (proc.stdout, proc.stderr)
        ]
        for pump in pumps:
            pump.start()
        seen: list[str] = []
        try:
            while not (
                any(FORGED in s and "TAMPERED" in s for s in seen) and any("turnlog tail:" in s for s in seen)
            ):
                seen.append(lines.get(timeout=30))
        except Empty:
            raise AssertionError(f"no TAMPERED line and warning within 30 s: {seen}") from None
        finally:
            proc.terminate()
            # the pumps end at the pipes' end of file; leaving the block first would close the
            # pipes under them (ValueError: I/O operation on closed file, in their threads)
            proc.wait(timeout=30)
            for pump in pumps:
                pump.join(timeout=30)
    assert sum("TAMPERED" in s and FORGED in s for s in seen) == 1
