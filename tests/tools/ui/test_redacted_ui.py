"""The web UI on a store holding redactions: branches keep their names, pages show the markers."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import anyio

from turnlog.eventstore import NewEvent, SQLiteEventStore, uuid7
from turnlog.projections import BranchCreated, Instruction, MessageAdded, new_event

from ._support import serve

SECRET = "Ui-Personal-4471 carol@example.com"


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def test_the_ui_shows_a_forgotten_branch_by_name_without_its_content(tmp_path: Path) -> None:
    branch = str(uuid7())
    path = tmp_path / "r.db"

    async def fill() -> None:
        async with SQLiteEventStore(path) as store:
            await store.append(
                f"branch-{branch}",
                [
                    new_event(BranchCreated(branch_id=branch, name="private")),
                    new_event(MessageAdded(message=Instruction.create(f"I am {SECRET}"))),
                ],
            )
            await store.append("other", [NewEvent("note.added", {"n": 1})])

    anyio.run(fill)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "turnlog.tools",
            "forget",
            "private",
            "--reason",
            "gdpr",
            "--store",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for served in serve(path):
        index = _get(served.url + "/")
        assert "private" in index
        for suffix in ("", "/conversation", "/replay"):
            page = _get(f"{served.url}/branches/{branch}{suffix}")
            assert SECRET not in page and "carol@example.com" not in page
        assert "redacted" in _get(f"{served.url}/branches/{branch}/conversation")
