"""``turnlog tail --follow`` prints events appended by another process, live and in order."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from queue import Empty, Queue

import anyio

from turnlog.eventstore import NewEvent, open_store


def _reader(pipe: object, lines: Queue[str]) -> None:
    for line in pipe:  # type: ignore[attr-defined]
        lines.put(line)


def _append(path: Path, stream: str, numbers: range) -> None:
    async def go() -> None:
        async with open_store(f"sqlite:///{path}") as store:
            for n in numbers:
                await store.append(stream, [NewEvent("message.added", {"n": n})])

    anyio.run(go)


def test_follow_prints_live_events_from_another_process(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    _append(path, "branch-a", range(1))
    args = [sys.executable, "-m", "turnlog.tools", "tail", "--follow", "--json", "--store", str(path)]
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as proc:
        lines: Queue[str] = Queue()
        pump = threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True)
        pump.start()
        try:
            assert json.loads(lines.get(timeout=30))["position"] == 1
            _append(path, "branch-b", range(1, 6))
            seen = [json.loads(lines.get(timeout=30)) for _ in range(5)]
        except Empty:
            raise AssertionError("tail --follow printed nothing within 30 s") from None
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            pump.join(timeout=30)  # before the block closes the pipe under it
    assert [e["position"] for e in seen] == [2, 3, 4, 5, 6]
    assert [e["data"]["n"] for e in seen] == [1, 2, 3, 4, 5]
    assert all(e["hash"] and e["stream"] == "branch-b" for e in seen)


def test_type_filter_and_line_count(tmp_path: Path) -> None:
    path = tmp_path / "t.db"

    async def fill() -> None:
        async with open_store(f"sqlite:///{path}") as store:
            for n in range(6):
                await store.append("s", [NewEvent("run.started" if n % 2 else "message.added", {"n": n})])

    anyio.run(fill)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "turnlog.tools",
            "tail",
            "-n",
            "2",
            "--type",
            "run.started",
            "--json",
            "--store",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["data"]["n"] for line in out.stdout.splitlines()] == [3, 5]
