"""``turnlog otel export`` into a real Arize Phoenix server, read back through Phoenix's own API.

Phoenix lives in a virtual environment of its own (about 140 packages whose pins clash with
turnlog's dev extra): ``$TURNLOG_PHOENIX`` names its ``phoenix`` program, else one on PATH is
used. Without it the tests skip with the reason; with ``TURNLOG_REQUIRE_PHOENIX=1`` (set by
CI, which installs it) they fail instead.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from queue import Empty, Queue
from typing import Any

import anyio
import httpx
import pytest

from ._follow import Follower, record_run
from .test_otel_export import LATEST, otel, stats_usage

# One worker, one Phoenix server for both tests (the fixture is per module, and so per worker):
# two servers starting at once on a loaded 2-core machine have been seen to need over 180 s.
pytestmark = pytest.mark.xdist_group("phoenix")

# Its first start after an install (database migrations, a cold import of ~140 packages) has
# been seen to print nothing for over 180 s on a 2-core machine loaded with other jobs.
_START_WAIT = 420


def _phoenix_program() -> str | None:
    given = os.environ.get("TURNLOG_PHOENIX")
    if given:
        return given if Path(given).exists() else None
    return shutil.which("phoenix")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Phoenix server on loopback with an empty database of its own; yields its base URL."""
    program = _phoenix_program()
    if program is None:
        if os.environ.get("TURNLOG_REQUIRE_PHOENIX") == "1":
            pytest.fail("TURNLOG_REQUIRE_PHOENIX=1 but no phoenix program (set TURNLOG_PHOENIX)")
        pytest.skip(
            "Arize Phoenix is not installed (pip install arize-phoenix in a venv; set TURNLOG_PHOENIX)"
        )
    port = _free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(tmp_path_factory.mktemp("phoenix")),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(_free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    proc = subprocess.Popen(
        [program, "serve"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines: Queue[str] = Queue()
    pump = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or ()], daemon=True)
    pump.start()
    seen: list[str] = []
    try:
        while not any("Application startup complete" in line for line in seen):
            try:
                seen.append(lines.get(timeout=_START_WAIT))
            except Empty:
                pytest.fail(
                    f"Phoenix printed nothing for {_START_WAIT} s while starting:\n" + "".join(seen[-20:])
                )
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        pump.join(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def _spans(base: str, project: str = "default") -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
        reply = httpx.get(f"{base}/v1/projects/{project}/spans", params=params, timeout=30)
        reply.raise_for_status()
        body = reply.json()
        found += body["data"]
        cursor = body.get("next_cursor")
        if not cursor:
            return found


def _await_spans(base: str, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Phoenix stores what it received in the background: ask its API until ``count`` are there."""
    deadline = time.monotonic() + timeout
    while True:
        spans = _spans(base)
        if len(spans) >= count or time.monotonic() > deadline:
            return spans
        time.sleep(0.25)  # Phoenix offers no event to wait on; its API is the only signal


def test_phoenix_returns_every_run_call_and_tool_as_spans_and_a_second_export_adds_nothing(
    phoenix: str, otel_demo_store: Path
) -> None:
    out = otel(otel_demo_store, phoenix, env=LATEST)
    assert out.returncode == 0, out.stderr
    spans = _await_spans(phoenix, 17)
    assert len(spans) == 17
    by_id = {s["context"]["span_id"]: s for s in spans}
    roots = sorted((s for s in spans if s["parent_id"] is None), key=lambda s: s["start_time"])
    assert [r["name"] for r in roots] == [
        "invoke_agent communicate",
        "invoke_agent operate",
        "invoke_agent ReAct",
        "invoke_agent run",
        "invoke_agent run",
    ]
    for span in spans:
        parent = span["parent_id"]
        assert parent is None or by_id[parent]["context"]["trace_id"] == span["context"]["trace_id"]
    react_steps = sorted(
        (s for s in spans if s["parent_id"] == roots[2]["context"]["span_id"]), key=lambda s: s["start_time"]
    )
    assert [s["name"] for s in react_steps] == ["step 1", "step 2", "step 3"]
    inside = sorted(
        (s for s in spans if s["parent_id"] == react_steps[0]["context"]["span_id"]),
        key=lambda s: s["start_time"],
    )
    assert [s["name"] for s in inside] == ["chat gpt-4.1-mini", "execute_tool get_weather"]
    chats = [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "chat"]
    for chat in chats:
        assert chat["attributes"]["gen_ai.provider.name"] in ("openai", "anthropic")
        assert chat["attributes"]["gen_ai.request.model"] == chat["name"].removeprefix("chat ")
    usage = (
        len(chats),
        sum(c["attributes"]["gen_ai.usage.input_tokens"] for c in chats),
        sum(c["attributes"]["gen_ai.usage.output_tokens"] for c in chats),
    )
    assert usage == stats_usage(otel_demo_store)
    tool = inside[1]["attributes"]
    assert tool["gen_ai.tool.name"] == "get_weather" and tool["gen_ai.operation.name"] == "execute_tool"
    failed = [s for s in spans if s["status_code"] == "ERROR"]
    assert [(s["name"], s["attributes"]["error.type"]) for s in failed] == [
        ("invoke_agent run", "ProcessCrashed")
    ]
    again = otel(otel_demo_store, phoenix, env=LATEST)
    assert again.returncode == 0, again.stderr
    assert "17 spans" in again.stdout
    # a duplicate would show within Phoenix's ingestion delay; the same ids keep one copy
    assert len(_await_spans(phoenix, 18, timeout=10)) == 17


def test_follow_into_phoenix_exports_a_later_run_and_a_restart_resends_nothing(
    phoenix: str, demo_copy: Path, demo_last_run: int
) -> None:
    before = len(_spans(phoenix))
    follower = Follower(demo_copy, phoenix)
    try:
        follower.line(f"at position {demo_last_run}")
        anyio.run(record_run, demo_copy, "phoenix-after-start")
        follower.line("phoenix-after-start")
    finally:
        follower.stop()
    follower = Follower(demo_copy, phoenix)
    try:
        follower.line("following the log from position")
        anyio.run(record_run, demo_copy, "phoenix-after-restart")
        sent = follower.line("phoenix-after-restart")
    finally:
        follower.stop()
    assert "(2 spans)" in sent
    # the restarted follower sent only the run recorded after it started
    assert [line for line in follower.seen if line.startswith("exported")] == [sent]
    spans = _await_spans(phoenix, max(before, 17) + 4)
    runs = [s["attributes"].get("turnlog.run_id") for s in spans if s["parent_id"] is None]
    assert runs.count("phoenix-after-start") == 1 and runs.count("phoenix-after-restart") == 1
