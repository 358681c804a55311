"""Shared steps of the ``test_branch_<cli>.py`` tests: ``Branch.run`` on the real CLIs.

Each step drives a real CLI (from the ``claude_cli`` / ``codex_cli`` / ``gemini_cli``
fixtures) through ``Branch.run`` / ``run_and_collect`` with ``stream_persist=True`` against
the fake upstream, and checks what the log says.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

from turnlog.eventstore import EventStore, open_store
from turnlog.kernel import Branch, recover
from turnlog.kernel.models import ClaudeCodeModel, CLIError, CodexModel, GeminiModel, StreamChunk
from turnlog.projections import ActionRequest, ActionResponse, AssistantResponse, catalogue_upcasters

MODELS = {"claude_code": ClaudeCodeModel, "codex": CodexModel, "gemini": GeminiModel}
CHILD = Path(__file__).parent / "_run_child.py"
# An explicit Gemini model: the default ("auto") sends routing requests to another model first.
MODEL = {"claude_code": "", "codex": "", "gemini": "gemini-2.5-flash"}
TOOL = {
    "claude_code": ("Read", "file_path"),
    "codex": ("exec_command", "cmd"),
    "gemini": ("read_file", "file_path"),
}


def model_of(cli: Any, provider: str, **kwargs: Any) -> Any:
    """The turnlog model running ``cli`` (its executable, hermetic environment and directory)."""
    extra = ["--allowedTools", "Bash,Read"] if provider == "claude_code" else []
    return MODELS[provider](
        MODEL[provider],
        executable=str(cli.executable),
        env=cli.env,
        cwd=str(cli.workdir),
        extra_args=extra,
        **kwargs,
    )


def last_run(branch: Branch) -> Any:
    return list(branch.state.runs.values())[-1]


async def started_event(store: EventStore, branch: Branch, run_id: str) -> dict[str, Any]:
    async for event in store.read_stream(f"branch-{branch.id}"):
        if event.type == "run.started" and event.data["run_id"] == run_id:
            return dict(event.data)
    raise AssertionError(f"no run.started for {run_id}")


async def plain_reply(store: EventStore, cli: Any, upstream: Any, provider: str, tmp: Path) -> Branch:
    """A plain reply: text, usage, the session bound with the directory (also in run.started)."""
    upstream.set_script([{"text": "Hello from the fake upstream.", "times": None}])
    branch = Branch(store=store)
    model = model_of(cli, provider)
    text = await branch.run_and_collect(
        "hello", chat_model=model, stream_persist=True, persist_dir=str(tmp / "runs")
    )
    assert text == "Hello from the fake upstream."
    run = last_run(branch)
    assert run.status == "ended", run.error_message
    assert (run.usage.input_tokens or 0) > 0 and (run.usage.output_tokens or 0) > 0
    session = branch.provider_session(provider, MODEL[provider])
    assert session
    assert branch.state.provider_cwd(provider, MODEL[provider]) == str(cli.workdir)
    assert (await started_event(store, branch, run.run_id))["cwd"] == str(cli.workdir)
    assert not list((tmp / "runs").glob("*.jsonl"))  # the buffer is gone once committed
    return branch


async def tool_call(store: EventStore, cli: Any, upstream: Any, provider: str) -> None:
    """A tool call: request, response, then the answer that used the result."""
    target = cli.workdir / "hello.txt"
    target.write_text("hello world file content 12345\n")
    name, key = TOOL[provider]
    arguments = {key: f"cat {target}"} if provider == "codex" else {key: str(target)}
    upstream.set_script(
        [
            {"tool_calls": [{"name": name, "arguments": arguments}], "match": {"after_tool_result": False}},
            {"text": "The tool said: {tool_result}", "template": True, "match": {"after_tool_result": True}},
        ]
    )
    branch = Branch(store=store)
    answer = await branch.run_and_collect("read the file", chat_model=model_of(cli, provider))
    requests = [m for m in branch.messages if isinstance(m, ActionRequest)]
    responses = [m for m in branch.messages if isinstance(m, ActionResponse)]
    assert len(requests) == 1 and len(responses) == 1
    assert branch.state.response_for(requests[0].id) == responses[0]
    assert answer is not None and "The tool said" in answer
    assert last_run(branch).status == "ended"


async def resume(store: EventStore, cli: Any, upstream: Any, provider: str) -> None:
    """The second run resumes the bound session and sends the instruction as typed."""
    upstream.set_script([{"text": "turns seen: {user_turns}", "template": True, "times": None}])
    branch = Branch(store=store)
    model = model_of(cli, provider)
    await branch.run_and_collect("first question", chat_model=model)
    session = branch.provider_session(provider, MODEL[provider])
    second = await branch.run_and_collect('second "question"', chat_model=model)
    assert branch.provider_session(provider, MODEL[provider]) == session
    assert second is not None and "turns seen: 2" in second
    last = upstream.model_requests()[-1]
    text = json.dumps(last["body"])
    assert 'second \\"question\\"' in text and "Instruction:" not in text
    usage = last_run(branch).usage
    assert usage.input_tokens is not None and usage.input_tokens > 0
    if provider == "codex":
        # turn.completed reports the session's running total: the run counts only its own part.
        called = [e.data async for e in store.read_stream(f"branch-{branch.id}") if e.type == "model.called"]
        first, response = called[0]["usage"], called[-1]["response"]
        assert response["usage_baseline"]["input_tokens"] == first["input_tokens"]
        assert usage.input_tokens == response["raw_usage"]["input_tokens"] - first["input_tokens"]


def processes_with_home(home: Path) -> list[int]:
    """Live processes whose environment has ``HOME=home`` (the CLI and what it started)."""
    wanted = f"HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if wanted in environ.split(b"\0") and stat[stat.rfind(")") + 2] not in "ZX":
            found.append(int(entry.name))
    return found


def buffered_lines(persist: Path) -> int:
    return sum(path.read_bytes().count(b"\n") for path in persist.glob("*.jsonl"))


def buffered_text(persist: Path) -> str:
    text = []
    for path in persist.glob("*.jsonl"):
        raw = path.read_bytes()
        for line in raw[: raw.rfind(b"\n") + 1].splitlines():
            record = json.loads(line)
            if "data" not in record:
                continue  # the header line naming the store, branch and run
            data = record["data"]
            if data["type"] == "text":
                text.append(data.get("content", ""))
    return "".join(text)


async def crash_recover_resume(cli: Any, upstream: Any, provider: str, tmp: Path) -> None:
    """kill -9 of the turnlog process mid-reply, then recover, then resume.

    Nothing the CLI printed more than 0.5 s before the kill is lost, the CLI does not outlive
    the killed process, and the next run resumes the session.
    """
    words = " ".join(f"w{i}" for i in range(60))
    upstream.set_script([{"text": words, "chunk_delay_ms": 150}, {"text": "resumed fine", "times": None}])
    url = f"sqlite:///{tmp / 'crash.db'}"
    persist = tmp / "runs"
    spec = {
        "provider": provider,
        "executable": str(cli.executable),
        "env": cli.env,
        "cwd": str(cli.workdir),
        "store": url,
        "persist": str(persist),
        "model": MODEL[provider],
    }
    proc = await anyio.open_process([sys.executable, str(CHILD), json.dumps(spec)], stderr=None)
    assert proc.stdout is not None
    reader = BufferedByteReceiveStream(proc.stdout)
    try:
        branch_id = (await reader.receive_until(b"\n", 4096)).decode().split()[1]
        with anyio.fail_after(60):
            if provider == "codex":
                # Codex prints an agent message only when it is complete (no deltas): kill it
                # mid-message, once the session has started.
                while not list(persist.glob("*.jsonl")) or not buffered_lines(persist):  # noqa: ASYNC110
                    await anyio.sleep(0.05)
                # ... and once its request reached the upstream (a loaded machine can take more
                # than the second below between the session line and the request)
                while not upstream.model_requests():  # noqa: ASYNC110 - another thread's state
                    await anyio.sleep(0.05)
                await anyio.sleep(1.0)
            else:
                while len(buffered_text(persist).split()) < 4:  # noqa: ASYNC110 - a file, no event
                    await anyio.sleep(0.05)
        printed = buffered_text(persist)  # in the buffer: printed by the CLI before this moment
        await anyio.sleep(0.6)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        await proc.wait()
        await proc.aclose()
    with anyio.move_on_after(5):
        while processes_with_home(cli.home):  # noqa: ASYNC110 - another process's exit has no event
            await anyio.sleep(0.05)
    survivors = processes_with_home(cli.home)
    for pid in survivors:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert survivors == [], "the CLI outlived the killed turnlog process"
    async with open_store(url, upcasters=catalogue_upcasters()) as store:
        report = await recover(store, persist)
        assert [r.closed for r in report.runs] == [True]
        branch = await Branch.load(store, branch_id)
        run = last_run(branch)
        assert (run.status, run.reason) == ("failed", "crashed")
        assert run.recovered is not None and run.recovered["cli_session"] != "unreconciled"
        text = "".join(m.response for m in branch.messages if isinstance(m, AssistantResponse))
        assert text.startswith(printed) and (len(printed) > 0 or provider == "codex")
        model = model_of(cli, provider)
        session = branch.provider_session(provider, MODEL[provider])
        assert session
        answer = await branch.run_and_collect("continue", chat_model=model)
        assert answer == "resumed fine"
        assert last_run(branch).status == "ended"


class KillOnFirstText:
    """Wraps a model: kills the CLI (every process with the CLI's HOME) at its first text chunk."""

    is_cli = True

    def __init__(self, inner: Any, home: Path) -> None:
        self.inner, self.home = inner, home
        self.provider, self.model = inner.provider, inner.model

    async def stream(
        self, prompt: str, *, resume: str | None = None, options: Mapping[str, Any] | None = None
    ) -> AsyncIterator[StreamChunk]:
        killed = False
        async with contextlib.aclosing(self.inner.stream(prompt, resume=resume, options=options)) as chunks:
            async for chunk in chunks:
                if chunk.type == "text" and not killed:
                    killed = True
                    for pid in processes_with_home(self.home):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                yield chunk


async def kill_the_cli(store: EventStore, cli: Any, upstream: Any, provider: str) -> None:
    """The CLI killed mid-reply: the run fails as a crash, the text received is kept."""
    words = " ".join(f"w{i}" for i in range(40))
    upstream.set_script([{"text": words, "chunk_delay_ms": 100}])
    branch = Branch(store=store)
    model = KillOnFirstText(model_of(cli, provider), cli.home)
    try:
        await branch.run_and_collect("count", chat_model=model)
    except CLIError as exc:
        assert exc.kind == "crash", exc
    else:
        raise AssertionError("the run did not fail")
    run = last_run(branch)
    assert run.status == "failed" and run.error_type == "CLIError"
    texts = [m for m in branch.messages if isinstance(m, AssistantResponse)]
    assert all(m.metadata.get("interrupted") for m in texts)


async def upstream_error(
    store: EventStore, cli: Any, upstream: Any, provider: str, status: int, kind: str
) -> None:
    """An upstream error status is classified."""
    upstream.set_script([{"status": status, "times": None, "retry_after": 0}])
    branch = Branch(store=store)
    try:
        await branch.run_and_collect("hello", chat_model=model_of(cli, provider))
    except CLIError as exc:
        assert exc.kind == kind, f"{exc} ({exc.kind})"
        assert "Reading additional input" not in str(exc) and "[STARTUP]" not in str(exc)
    else:
        raise AssertionError("the run did not fail")
    assert last_run(branch).status == "failed"
