"""``turnlog otel export`` against a real OTLP/HTTP receiver that decodes with the official protobuf classes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import anyio
import pytest

from ._follow import Follower, record_run
from ._receiver import Received, Receiver

LATEST = {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}
KIND_INTERNAL, KIND_CLIENT = 1, 3
STATUS_OK, STATUS_ERROR = 1, 2


def otel(
    store: Path, endpoint: str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``turnlog otel export`` once and return what it did."""
    args = [
        sys.executable,
        "-m",
        "turnlog.tools",
        "otel",
        "export",
        "--store",
        str(store),
        "--endpoint",
        endpoint,
    ]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [*args, *extra], capture_output=True, text=True, timeout=60, env={**full_env, **(env or {})}
    )


def exported(
    store: Path, receiver: Receiver, *extra: str, env: dict[str, str] | None = None
) -> list[Received]:
    before = len(receiver.spans)
    out = otel(store, receiver.url, *extra, env=env)
    assert out.returncode == 0, out.stderr
    return receiver.spans[before:]


def children(spans: list[Received], parent: Received) -> list[Received]:
    return sorted((s for s in spans if s.parent_id == parent.span_id), key=lambda s: s.start_ns)


def stats_usage(store: Path) -> tuple[int, int, int]:
    out = subprocess.run(
        [sys.executable, "-m", "turnlog.tools", "stats", "--store", str(store), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["usage"]
    return (
        sum(r["calls"] for r in rows),
        sum(r["input_tokens"] for r in rows),
        sum(r["output_tokens"] for r in rows),
    )


def test_the_demo_runs_arrive_as_traces_with_parents_names_and_genai_attributes(
    otel_demo_store: Path, receiver: Receiver
) -> None:
    spans = exported(otel_demo_store, receiver, env=LATEST)
    roots = [s for s in spans if s.parent_id == ""]
    assert [r.name for r in roots] == [
        "invoke_agent communicate",
        "invoke_agent operate",
        "invoke_agent ReAct",
        "invoke_agent run",
        "invoke_agent run",
    ]
    ids = {s.span_id for s in spans}
    assert len(ids) == len(spans)
    for span in spans:
        assert span.parent_id == "" or span.parent_id in ids, span.name
        assert span.end_ns >= span.start_ns
        assert span.resource["service.name"] == "turnlog" and span.scope == "turnlog"
        assert span.trace_id == next(r.trace_id for r in roots if _root_of(spans, span) is r)
    branch = roots[0].attributes["gen_ai.conversation.id"]
    react = roots[2]
    assert react.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert react.attributes["gen_ai.agent.name"] == "demo"
    assert react.attributes["gen_ai.provider.name"] == "openai"
    steps = children(spans, react)
    assert [s.name for s in steps] == ["step 1", "step 2", "step 3"]
    assert [c.name for c in children(spans, steps[0])] == ["chat gpt-4.1-mini", "execute_tool get_weather"]
    for step in steps:
        for inner in children(spans, step):
            assert step.start_ns <= inner.start_ns and inner.end_ns <= step.end_ns <= react.end_ns
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(chats) == 6
    for chat in chats:
        assert chat.kind == KIND_CLIENT and chat.status_code == STATUS_OK
        attrs = chat.attributes
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.request.model"] == chat.name.removeprefix("chat ")
        assert attrs["gen_ai.response.model"]
        assert attrs["gen_ai.conversation.id"] == branch
        assert "gen_ai.system" not in attrs  # the latest conventions replace it
    weather = next(
        s for s in spans if s.name == "execute_tool get_weather" and _root_of(spans, s) is roots[1]
    )
    assert weather.kind == KIND_INTERNAL
    assert weather.attributes["gen_ai.tool.name"] == "get_weather"
    assert weather.attributes["gen_ai.tool.call.id"] == "call_weather_1"
    assert chats[1].attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)


def _root_of(spans: list[Received], span: Received) -> Received:
    by_id = {s.span_id: s for s in spans}
    while span.parent_id:
        span = by_id[span.parent_id]
    return span


def test_usage_on_the_spans_equals_turnlog_stats(otel_demo_store: Path, receiver: Receiver) -> None:
    spans = exported(otel_demo_store, receiver)
    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    got = (
        len(chats),
        sum(s.attributes["gen_ai.usage.input_tokens"] for s in chats),
        sum(s.attributes["gen_ai.usage.output_tokens"] for s in chats),
    )
    assert got == stats_usage(otel_demo_store)
    # each run's own usage is on its span, and the calls inside add up to it
    for root in (s for s in spans if s.parent_id == "" and "gen_ai.usage.input_tokens" in s.attributes):
        inside = [c for c in chats if _root_of(spans, c) is root]
        assert (
            sum(c.attributes["gen_ai.usage.input_tokens"] for c in inside)
            == root.attributes["gen_ai.usage.input_tokens"]
        )


def test_a_crashed_run_is_an_error_span_with_its_error_type(
    otel_demo_store: Path, receiver: Receiver
) -> None:
    spans = exported(otel_demo_store, receiver)
    failed = [s for s in spans if s.status_code == STATUS_ERROR]
    assert [s.name for s in failed] == ["invoke_agent run"]
    assert failed[0].attributes["error.type"] == "ProcessCrashed"
    assert failed[0].attributes["turnlog.failure_reason"] == "crashed"
    assert "closed by recovery" in failed[0].status_message
    assert failed[0].attributes["turnlog.chunks"] == 10
    assert [c.name for c in children(spans, failed[0])] == ["execute_tool Bash"]


def test_the_default_conventions_are_v1_36_and_the_opt_in_selects_the_latest(
    otel_demo_store: Path, receiver: Receiver
) -> None:
    old = exported(otel_demo_store, receiver, "--content")
    new = exported(
        otel_demo_store,
        receiver,
        "--content",
        env={"OTEL_SEMCONV_STABILITY_OPT_IN": "http,gen_ai_latest_experimental"},
    )
    old_chat = next(s for s in old if s.name.startswith("chat "))
    new_chat = next(s for s in new if s.name.startswith("chat "))
    assert (
        old_chat.attributes["gen_ai.system"] == "openai" and "gen_ai.provider.name" not in old_chat.attributes
    )
    assert (
        new_chat.attributes["gen_ai.provider.name"] == "openai" and "gen_ai.system" not in new_chat.attributes
    )
    assert [name for name, _ in old_chat.events] == ["gen_ai.user.message", "gen_ai.choice"]
    assert "gen_ai.input.messages" not in old_chat.attributes
    messages = json.loads(new_chat.attributes["gen_ai.input.messages"])
    assert messages[0]["role"] == "user" and "largest city of France" in messages[0]["parts"][0]["content"]
    answer = json.loads(new_chat.attributes["gen_ai.output.messages"])
    assert answer[0]["role"] == "assistant" and "Paris" in answer[0]["parts"][0]["content"]


def test_no_content_leaves_without_content(otel_demo_store: Path, receiver: Receiver) -> None:
    spans = exported(otel_demo_store, receiver, env=LATEST)
    everything = b"".join(receiver.bodies)
    for text in (b"largest city of France", b"umbrella", b"Paris right now", b"light rain"):
        assert text not in everything
    for span in spans:
        assert not {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments"} & set(
            span.attributes
        )
        assert not [
            name for name, _ in span.events if name.startswith("gen_ai.") and name != "gen_ai.first_token"
        ]


def test_a_redacted_message_is_never_exported(demo_copy: Path, receiver: Receiver) -> None:
    secret = b"I need today's weather in Lyon before I can advise."
    before = exported(demo_copy, receiver, "--content", env=LATEST)
    assert secret in b"".join(receiver.bodies)  # it is there before the redaction
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "turnlog.tools",
            "redact",
            "demo",
            "--version",
            "17",
            "--reason",
            "gdpr",
            "--store",
            str(demo_copy),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    receiver.bodies.clear()
    for env in (LATEST, {}):
        after = exported(demo_copy, receiver, "--content", env=env)
        assert [s.span_id for s in after] == [s.span_id for s in before]  # the spans stay, the content goes
    everything = b"".join(receiver.bodies)
    assert secret not in everything and b"before I can advise" not in everything


def test_exporting_twice_gives_the_same_ids(otel_demo_store: Path, receiver: Receiver) -> None:
    first = exported(otel_demo_store, receiver)
    second = exported(otel_demo_store, receiver)
    assert [(s.trace_id, s.span_id, s.parent_id, s.name) for s in first] == [
        (s.trace_id, s.span_id, s.parent_id, s.name) for s in second
    ]


def test_headers_service_name_and_json_follow_the_standard_variables(
    otel_demo_store: Path, receiver: Receiver
) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20t0ken,x-team=agents",
        "OTEL_SERVICE_NAME": "support-bot",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
    }
    protobuf = exported(otel_demo_store, receiver, "--protocol", "http/protobuf", env=env)
    assert {s.resource["service.name"] for s in protobuf} == {"support-bot"}
    assert (
        receiver.headers[-1]["authorization"] == "Bearer t0ken" and receiver.headers[-1]["x-team"] == "agents"
    )
    out = otel(otel_demo_store, receiver.url, env=env)
    assert out.returncode == 0, out.stderr
    assert "t0ken" not in out.stdout + out.stderr
    body = receiver.json_bodies[-1]
    got = [s for r in body["resourceSpans"] for sc in r["scopeSpans"] for s in sc["spans"]]
    assert [(s["traceId"], s["spanId"], s["name"]) for s in got] == [
        (s.trace_id, s.span_id, s.name) for s in protobuf
    ]


def test_an_unreachable_receiver_fails_with_one_line_and_no_credentials(otel_demo_store: Path) -> None:
    out = otel(otel_demo_store, "http://user:s3cret@127.0.0.1:9", env={"OTEL_EXPORTER_OTLP_TIMEOUT": "2"})
    assert out.returncode == 1
    assert "ExportFailed" in out.stderr and "127.0.0.1:9" in out.stderr
    assert "s3cret" not in out.stderr + out.stdout


def test_since_and_branch_choose_runs(otel_demo_store: Path, receiver: Receiver) -> None:
    spans = exported(otel_demo_store, receiver, "--since", "14")
    assert [s.name for s in spans if s.parent_id == ""] == [
        "invoke_agent ReAct",
        "invoke_agent run",
        "invoke_agent run",
    ]
    assert exported(otel_demo_store, receiver, "--branch", "demo-fork") == []
    assert len([s for s in exported(otel_demo_store, receiver, "--branch", "demo") if s.parent_id == ""]) == 5


# ----------------------------------------------------------------------------------- --follow


def test_follow_exports_new_runs_and_a_restart_resends_nothing(
    demo_copy: Path, receiver: Receiver, demo_last_run: int, demo_head: int
) -> None:
    follower = Follower(demo_copy, receiver.url)
    try:
        receiver.wait_for(17)
        follower.line(f"at position {demo_last_run}")  # the demo's last run, checkpointed
        anyio.run(record_run, demo_copy, "run-after-start")
        sent = follower.line("run-after-start")
        receiver.wait_for(19)
    finally:
        stopped = follower.stop(signal.SIGTERM)
    checkpoint = sent.split()[-1]
    assert stopped == f"stopped; 19 spans exported, checkpoint at {checkpoint}\n"
    anyio.run(record_run, demo_copy, "run-while-stopped")
    follower = Follower(demo_copy, receiver.url)
    try:
        start = int(follower.line("following the log from position").split()[5])
        assert start > demo_head + 3  # after the demo and the run recorded while it ran
        follower.line("run-while-stopped")
        anyio.run(record_run, demo_copy, "run-after-restart")
        follower.line("run-after-restart")
        spans = receiver.wait_for(23)
    finally:
        follower.stop()
    assert len(spans) == 23
    assert Counter(s.span_id for s in spans).most_common(1)[0][1] == 1  # nothing was sent twice
    runs = [s.attributes.get("turnlog.run_id") for s in spans if s.parent_id == ""]
    assert runs[-3:] == ["run-after-start", "run-while-stopped", "run-after-restart"]


def test_a_signal_during_a_send_stops_the_follower_without_a_checkpoint(
    demo_copy: Path, receiver: Receiver, demo_last_run: int
) -> None:
    """SIGTERM while the receiver has not answered: the send is abandoned, nothing is checkpointed,
    the follower says so and exits with 143 (its thread ends by the export timeout, 2 s here);
    a restart sends those runs again."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        silent.settimeout(60)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        follower = Follower(demo_copy, url, env={"OTEL_EXPORTER_OTLP_TIMEOUT": "2"})
        try:
            follower.line("following the log from position 1")
            conn, _ = silent.accept()
            with conn:
                assert conn.recv(4096).startswith(b"POST /v1/traces")  # a send in flight, unanswered
                stopped = follower.stop(signal.SIGTERM)
        finally:
            if follower.proc.poll() is None:
                follower.proc.kill()
    assert stopped == "stopped; 0 spans exported, checkpoint at 0\n"
    restarted = Follower(demo_copy, receiver.url)
    try:
        assert "from position 1 " in restarted.line("following the log from position")
        restarted.line(f"at position {demo_last_run}")
        assert len(receiver.wait_for(17)) == 17
    finally:
        assert restarted.stop() == f"stopped; 17 spans exported, checkpoint at {demo_last_run}\n"


@pytest.mark.postgres
def test_follow_on_postgresql_keeps_its_checkpoint_there(
    demo_copy: Path, pg_url: str, receiver: Receiver, demo_last_run: int
) -> None:
    migrate = [sys.executable, "-m", "turnlog.tools", "migrate", "--from", str(demo_copy), "--to", pg_url]
    out = subprocess.run(migrate, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    follower = Follower(pg_url, receiver.url)
    try:
        follower.line(f"at position {demo_last_run}")
        anyio.run(record_run, pg_url, "pg-after-start")
        follower.line("pg-after-start")
    finally:
        follower.stop()
    follower = Follower(pg_url, receiver.url)
    try:
        follower.line("following the log from position")
        anyio.run(record_run, pg_url, "pg-after-restart")
        sent = follower.line("pg-after-restart")
    finally:
        follower.stop()
    assert [line for line in follower.seen if line.startswith("exported")] == [sent]
    spans = receiver.wait_for(21)
    assert len(spans) == 21 and len({s.span_id for s in spans}) == 21
