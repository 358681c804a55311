"""``turnlog bench storage`` writes the same conversation with both peers and splits turnlog's bytes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite")


def test_both_peers_keep_every_message_and_the_bytes_add_up() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "turnlog", "bench", "storage", "--turns", "4", "--text", "50", "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    peers = report["peers"]
    assert {p["messages"] for p in peers.values()} == {8}  # four instructions, four answers
    ours = peers["turnlog"]
    assert ours["events"]["message.added"]["rows"] == 8
    assert ours["events"]["model.called"]["rows"] == 4
    assert ours["bytes_per_turn"] == pytest.approx(ours["file_bytes"] / 4)
    for name in ("langgraph", "langgraph_delta"):
        assert report["ratios"][name] == pytest.approx(ours["bytes_per_turn"] / peers[name]["bytes_per_turn"])
    # the compact layout holds the same conversation and is judged too (at 4 turns its extra
    # tables' pages outweigh what it saves: its dictionary is trained after 64 events)
    compact = peers["turnlog_compact"]
    assert compact["bytes_per_turn"] == pytest.approx(compact["file_bytes"] / 4)
    assert report["ratios"]["compact_vs_default"] == pytest.approx(
        compact["bytes_per_turn"] / ours["bytes_per_turn"]
    )
    assert len(report["targets"]) == 2
