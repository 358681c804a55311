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


def test_a_redacted_chunk_shows_its_place_and_the_reason() -> None:
    """A chunk erased by forget keeps its seq, type and tool name on the run page."""
    from turnlog.eventstore import MemoryEventStore
    from turnlog.projections import ChunkReceived, redaction_keep
    from turnlog.tools.ui._pages import chunk_view

    async def main() -> dict[str, object]:
        async with MemoryEventStore() as store:
            chunk = ChunkReceived(seq=4, type="tool_use", tool_name="grep", tool_input={"q": SECRET})
            await store.append("run-r", [new_event(chunk)])
            (event,) = [e async for e in store.read_stream("run-r")]
            await store.redact("run-r", 1, reason="gdpr", keep=redaction_keep(event.type, event.data))
            (event,) = [e async for e in store.read_stream("run-r")]
            return chunk_view(event, None)

    view = anyio.run(main)
    assert view["seq"] == 4 and view["type"] == "tool_use" and view["tool"] == "grep"
    assert view["content"] == "[redacted: gdpr]" and SECRET not in repr(view)
