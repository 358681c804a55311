"""``run()`` records each real CLI's upstream calls at the wire (``kernel/wire/_run.py``).

Each real CLI runs under ``Branch.run`` against the fake upstream; turnlog's recorder sits
between them on loopback. Every upstream call is recorded with its stream events, a CLI
killed mid-answer loses no text that reached the wire (Codex prints none of an unfinished
answer), Gemini's ``read_file`` output is recorded from the request the CLI sends back, and
``record_wire=False`` records no call.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from turnlog.eventstore import EventStore, open_store
from turnlog.kernel import Branch, recover
from turnlog.kernel.models import CLIError
from turnlog.kernel.wire import read_wire_calls
from turnlog.projections import AssistantResponse, catalogue_upcasters

from . import branchkit as kit

CLI_FIXTURES = {"claude_code": "claude_cli", "codex": "codex_cli", "gemini": "gemini_cli"}
FILE_TEXT = "hello world file content 12345\n"


@pytest.fixture(params=sorted(CLI_FIXTURES))
def provider(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def cli(provider: str, request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(CLI_FIXTURES[provider])


async def _run_called(store: EventStore, branch: Branch, run_id: str) -> dict[str, Any]:
    async for event in store.read_stream(f"branch-{branch.id}"):
        if event.type == "model.called" and event.data["run_id"] == run_id and event.data["verb"] == "run":
            return dict(event.data)
    raise AssertionError(f"no model.called of run {run_id}")


async def _wire_events(store: EventStore, stream: str) -> list[Any]:
    return [event async for event in store.read_stream(stream)]


async def test_every_upstream_call_is_recorded_with_its_chunks(
    store: EventStore, cli: Any, upstream: Any, provider: str
) -> None:
    target = cli.workdir / "hello.txt"
    target.write_text(FILE_TEXT)
    name, key = kit.TOOL[provider]
    arguments = {key: f"cat {target}"} if provider == "codex" else {key: str(target)}
    upstream.set_script(
        [
            {"tool_calls": [{"name": name, "arguments": arguments}], "match": {"after_tool_result": False}},
            {"text": "The tool said: {tool_result}", "template": True, "match": {"after_tool_result": True}},
        ]
    )
    branch = Branch(store=store)
    answer = await branch.run_and_collect("read the file", chat_model=kit.model_of(cli, provider))
    assert answer is not None and "The tool said" in answer
    run = kit.last_run(branch)
    calls = await read_wire_calls(store, run.run_id)
    # every model call the upstream got (the CLI's own small ones too) passed the recorder
    model_calls = [r for r in list(upstream.requests) if r["operation"] not in (None, "count_tokens")]
    assert len(calls) == len(model_calls) and len(upstream.model_requests()) == 2
    # every call is closed; what the upstream refused is recorded as refused (the fake
    # upstream holds Claude Code to the real API's thinking-block rule, which it retries around)
    assert all(call.status is not None for call in calls) and calls[-1].status == "ok", calls
    assert "The tool said" in calls[-1].text
    called = await _run_called(store, branch, run.run_id)
    assert called["params"]["wire_calls"] == [call.stream for call in calls]
    for call in calls:
        events = await _wire_events(store, call.stream)
        closing = events[-1]
        assert closing.type == "model.called" and closing.data["verb"] == "wire"
        assert closing.data["run_id"] == run.run_id and closing.data["latency_ms"] > 0
        if closing.data["status"] != "ok":
            assert closing.data["error_type"].startswith("HTTP 4"), closing.data
            continue
        assert closing.data["ttft_ms"] is not None or not closing.data["stream"]
        assert (closing.data["usage"]["output_tokens"] or 0) > 0
        chunks = [e for e in events[:-1] if e.data.get("metadata", {}).get("source") != "request"]
        assert bool(chunks) == closing.data["stream"]  # a streamed answer, event by event
        assert all(e.data["metadata"]["wire"] for e in chunks)
        # the exact SSE text of each stream event, as forwarded to the CLI
        assert all("data:" in e.data["metadata"]["sse"] for e in chunks if "sse" in e.data["metadata"])
    # the branch holds the run's own model.called only: the run's usage is counted once
    verbs = [
        e.data["verb"] async for e in store.read_stream(f"branch-{branch.id}") if e.type == "model.called"
    ]
    assert verbs == ["run"]


def _kill_cli(home: Path) -> None:
    for pid in kit.processes_with_home(home):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def test_cli_killed_mid_answer_loses_no_text_that_reached_the_wire(
    store: EventStore, cli: Any, upstream: Any, provider: str
) -> None:
    # The upstream holds the rest of the stream (one word every 0.4 s) while the CLI is killed.
    words = " ".join(f"w{i}" for i in range(40))
    upstream.set_script([{"text": words, "chunk_delay_ms": 400}])
    branch = Branch(store=store)
    seen: list[str] = []

    async def kill_after_three_words() -> None:
        async for event in store.subscribe(types=["stream.chunk"], stream_prefix="run-"):
            data = event.data
            if data.get("metadata", {}).get("wire") and data.get("type") == "text":
                seen.append(data["content"])
                if len("".join(seen).split()) >= 3:
                    _kill_cli(cli.home)
                    return

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(kill_after_three_words)
            with pytest.raises(CLIError):
                await branch.run_and_collect("count", chat_model=kit.model_of(cli, provider))
            tg.cancel_scope.cancel()
    assert len("".join(seen).split()) >= 3
    report = await recover(store)
    assert not report.failed
    branch = await Branch.load(store, branch.id)
    run = kit.last_run(branch)
    assert run.status == "failed"
    calls = await read_wire_calls(store, run.run_id)
    cut = [call for call in calls if call.status != "ok"]
    assert cut[-1].status == "cancelled" and cut[-1].text.startswith("".join(seen))
    responses = [m for m in branch.messages if isinstance(m, AssistantResponse)]
    text = "".join(m.response for m in responses)
    assert cut[-1].text in text
    assert not words.startswith(text) or len(text) < len(words)  # the rest never came
    restored = [m for m in responses if m.metadata.get("source") == "wire"]
    if provider == "codex":  # Codex prints no part of an unfinished answer: all of it is the wire's
        assert [m.response for m in restored] == [cut[-1].text]
    assert all(m.metadata["interrupted"] and m.metadata["wire_stream"] == cut[-1].stream for m in restored)


async def test_turnlog_killed_mid_answer_recover_restores_the_wire_text(
    cli: Any, upstream: Any, provider: str, tmp_path: Path
) -> None:
    """kill -9 of the process running ``run()`` (and so of its recorder) mid-answer, then recover."""
    words = " ".join(f"w{i}" for i in range(40))
    upstream.set_script([{"text": words, "chunk_delay_ms": 400}])
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    spec = {
        "provider": provider,
        "executable": str(cli.executable),
        "env": cli.env,
        "cwd": str(cli.workdir),
        "store": url,
        "persist": str(tmp_path / "runs"),
        "model": kit.MODEL[provider],
    }
    async with open_store(url, upcasters=catalogue_upcasters()) as store:
        seen: list[str] = []
        proc = await anyio.open_process([sys.executable, str(kit.CHILD), json.dumps(spec)])
        try:
            with anyio.fail_after(60):
                async for event in store.subscribe(types=["stream.chunk"], stream_prefix="run-"):
                    data = event.data
                    if data.get("metadata", {}).get("wire") and data.get("type") == "text":
                        seen.append(data["content"])
                        if len("".join(seen).split()) >= 3:
                            break
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
            await proc.wait()
            await proc.aclose()
        with anyio.move_on_after(5):
            while kit.processes_with_home(cli.home):  # noqa: ASYNC110 - another process's exit has no event
                await anyio.sleep(0.05)
        _kill_cli(cli.home)
        report = await recover(store, tmp_path / "runs")
        assert [r.closed for r in report.runs] == [True]
        run_id = report.runs[0].run_id
        calls = await read_wire_calls(store, run_id)
        cut = [call for call in calls if call.status != "ok"]
        assert cut and cut[-1].status == "crashed", calls
        assert cut[-1].text.startswith("".join(seen))
        branch = await Branch.load(store, report.runs[0].branch_id)
        text = "".join(m.response for m in branch.messages if isinstance(m, AssistantResponse))
        assert cut[-1].text in text
        assert kit.last_run(branch).recovered["wire_text"] == len(text) - len(
            "".join(
                m.response
                for m in branch.messages
                if isinstance(m, AssistantResponse) and m.metadata.get("source") != "wire"
            )
        )


async def test_gemini_read_file_output_is_recorded_from_the_request(
    store: EventStore, gemini_cli: Any, upstream: Any
) -> None:
    target = gemini_cli.workdir / "hello.txt"
    target.write_text(FILE_TEXT)
    upstream.set_script(
        [
            {
                "tool_calls": [{"name": "read_file", "arguments": {"file_path": str(target)}}],
                "match": {"after_tool_result": False},
            },
            {"text": "Read it.", "match": {"after_tool_result": True}},
        ]
    )
    branch = Branch(store=store)
    await branch.run_and_collect("read the file", chat_model=kit.model_of(gemini_cli, "gemini"))
    run = kit.last_run(branch)
    outputs = []
    for call in await read_wire_calls(store, run.run_id):
        for event in await _wire_events(store, call.stream):
            data = event.data
            if data.get("type") == "tool_result" and data["metadata"].get("source") == "request":
                outputs.append(data)
    assert len(outputs) == 1, outputs
    assert FILE_TEXT.strip() in json.dumps(outputs[0]["tool_output"])
    assert outputs[0]["tool_id"]


async def test_record_wire_false_records_no_wire_call(
    store: EventStore, cli: Any, upstream: Any, provider: str
) -> None:
    upstream.set_script([{"text": "Hello from the fake upstream."}])
    branch = Branch(store=store)
    text = await branch.run_and_collect("hello", chat_model=kit.model_of(cli, provider), record_wire=False)
    assert text == "Hello from the fake upstream."
    run = kit.last_run(branch)
    assert await read_wire_calls(store, run.run_id) == []
    assert "wire_calls" not in (await _run_called(store, branch, run.run_id))["params"]
    assert await store.list_streams(f"run-{run.run_id}-wire-") == []
