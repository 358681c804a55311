"""``turnlog bench proxy``: what ``turnlog proxy`` adds to a call, recording every chunk.

The loopback fake upstream (Anthropic Messages) answers in this process; ``turnlog proxy`` runs
as its own process in front of it, recording into a fresh SQLite store, as a user runs it. When
the LiteLLM proxy is installed (``_litellm.find_litellm``) it runs in front of the same fake as
the peer, serving the same ``/v1/messages`` calls. Calls go direct, through ``turnlog proxy``
and through LiteLLM in turn, so all see the same machine load:

- **latency**: a non-streamed call, wall time; the figure is p50(proxy) - p50(direct);
- **ttfb**: a streamed call, time to the first body byte; p50(proxy) - p50(direct);
- **throughput**: one long stream of ``--events`` text deltas, SSE events per second each way.

Each call starts a new conversation (a new branch), as the threading rule would for new
agents. The CPU time each proxy process spends per call (from ``/proc``, Linux) is reported too,
for both kinds of call together and for each, and per event of the long stream: unlike wall
time it does not grow with the load of other processes on the machine.
Targets (issue 25): p50 added latency <= 2 ms, p50 added time to first byte <= 1 ms, and at
most a fifth of LiteLLM's added latency.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx

from turnlog.testing import FakeUpstreamServer
from turnlog.tools._command import emit_json

from ._litellm import MASTER_KEY, find_litellm, running_litellm
from ._options import at_least

__all__ = ["add_arguments", "run"]

TARGETS = {"added_latency_p50_ms": 2.0, "added_ttfb_p50_ms": 1.0, "share_of_litellm": 0.2}
_HEADERS = {"x-api-key": "sk-bench-0123456789", "anthropic-version": "2023-06-01"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--calls", type=at_least(2), default=200, help="calls of each kind, each way (default 200)"
    )
    parser.add_argument(
        "--events",
        type=at_least(10),
        default=2000,
        help="text deltas of the throughput stream (default 2000)",
    )
    parser.add_argument(
        "--server", choices=("h11", "uvicorn"), default="h11", help="turnlog proxy's --server (default h11)"
    )
    parser.add_argument(
        "--no-litellm", action="store_true", help="leave the LiteLLM proxy out even when it is installed"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _body(i: int, *, stream: bool, prompt: str = "bench call") -> dict[str, Any]:
    messages = [{"role": "user", "content": f"{prompt} {i}"}]
    return {"model": "claude-sonnet-4-5", "max_tokens": 50, "messages": messages, "stream": stream}


async def _latency(client: httpx.AsyncClient, base: str, i: int) -> float:
    started = time.perf_counter()
    answer = await client.post(f"{base}/v1/messages", json=_body(i, stream=False))
    answer.raise_for_status()
    return (time.perf_counter() - started) * 1000


async def _ttfb(client: httpx.AsyncClient, base: str, i: int) -> float:
    started = time.perf_counter()
    async with client.stream(
        "POST", f"{base}/v1/messages", json=_body(i, stream=True, prompt="bench stream")
    ) as r:
        first = None
        async for _ in r.aiter_raw():
            if first is None:
                first = (time.perf_counter() - started) * 1000
    assert first is not None
    return first


async def _throughput(client: httpx.AsyncClient, base: str, i: int) -> float:
    started = time.perf_counter()
    events = 0
    body = _body(i, stream=True, prompt="throughput")
    async with client.stream("POST", f"{base}/v1/messages", json=body) as r:
        async for line in r.aiter_lines():
            events += line.startswith("data:")
    return events / (time.perf_counter() - started)


async def _proxy(upstream: str, store: Path, server: str) -> tuple[Any, str]:
    argv = [
        sys.executable,
        "-m",
        "turnlog",
        "proxy",
        "--store",
        str(store),
        "--port",
        "0",
        "--upstream",
        upstream,
        "--server",
        server,
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    process = await anyio.open_process(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert process.stdout is not None
    line = b""
    with anyio.fail_after(60):
        while not line.endswith(b"\n"):
            line += await process.stdout.receive(1)
    return process, line.decode().strip().rsplit(" ", 1)[1]


def _cpu_s(pid: int) -> float | None:
    """The CPU time (user + system) process ``pid`` has used, or None off Linux."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    text = "word " * args.events
    script = [
        {"text": "A short answer of a few words.", "times": None, "match": {"stream": False}},
        {"text": text, "chunk_chars": 5, "times": 3, "match": {"last_user_contains": "throughput"}},
        {"text": "A short streamed answer of a few words.", "times": None},
    ]
    litellm = None if args.no_litellm else find_litellm()
    async with FakeUpstreamServer(script) as fake, AsyncExitStack() as stack:
        process, proxy = await _proxy(fake.base_url, workdir / "bench.db", args.server)
        stack.push_async_callback(_stop, process)
        peers: dict[str, tuple[str, dict[str, str], int | None]] = {
            "direct": (fake.base_url, _HEADERS, None),
            "proxy": (proxy, _HEADERS, process.pid),
        }
        if litellm is not None:
            base = await stack.enter_async_context(running_litellm(litellm, fake.base_url, workdir))
            lite_headers = {**_HEADERS, "x-api-key": MASTER_KEY}
            peers["litellm"] = (base, lite_headers, _pid_listening(base))
        limits = httpx.Limits(max_keepalive_connections=8)
        clients = {
            name: await stack.enter_async_context(httpx.AsyncClient(timeout=60, limits=limits, headers=h))
            for name, (_, h, _) in peers.items()
        }
        for name, client in clients.items():  # warm up: connections, imports, first-call caches
            for i in range(5):
                await _latency(client, peers[name][0], -100 - i)
        figures: dict[str, dict[str, list[float]]] = {}
        pids = {name: pid for name, (_, _, pid) in peers.items() if pid is not None}
        marks = [_cpu_marks(pids)]
        for kind, probe in (("latency", _latency), ("ttfb", _ttfb)):
            runs: dict[str, list[float]] = {name: [] for name in peers}
            for i in range(args.calls):
                for name, (base, _, _) in peers.items():
                    runs[name].append(await probe(clients[name], base, i))
            figures[kind] = runs
            marks.append(_cpu_marks(pids))
        rates = {}
        for k, (name, (base, _, _)) in enumerate(peers.items()):
            rates[name] = await _throughput(clients[name], base, -1 - k)
        marks.append(_cpu_marks(pids))
    cpu = {
        "all": _cpu_spent(marks[0], marks[2], 2 * args.calls),
        "latency": _cpu_spent(marks[0], marks[1], args.calls),
        "ttfb": _cpu_spent(marks[1], marks[2], args.calls),
        "stream_event_us": _cpu_spent(marks[2], marks[3], args.events / 1000),
    }
    return _report(figures, rates, cpu, args)


def _cpu_marks(pids: dict[str, int]) -> dict[str, float | None]:
    return {name: _cpu_s(pid) for name, pid in pids.items()}


def _cpu_spent(
    before: dict[str, float | None], after: dict[str, float | None], per: float
) -> dict[str, float]:
    """Milliseconds of CPU each process spent between two marks, per ``per`` (calls, ...)."""
    out = {}
    for name, start in before.items():
        end = after.get(name)
        if start is not None and end is not None:
            out[name] = (end - start) * 1000 / per
    return out


async def _stop(process: Any) -> None:
    process.terminate()
    await process.wait()


def _pid_listening(base: str) -> int | None:
    """The process that listens on ``base``'s port (from ``/proc``, Linux), for its CPU time."""
    port = int(base.rsplit(":", 1)[1])
    try:
        inodes = set()
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    if os.readlink(f"/proc/{pid}/fd/{fd}").removeprefix("socket:[").rstrip("]") in inodes:
                        return int(pid)
            except OSError:
                continue
    except OSError:
        return None
    return None


def _report(
    figures: dict[str, dict[str, list[float]]],
    rates: dict[str, float],
    cpu: dict[str, dict[str, float]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    out: dict[str, Any] = {"calls": args.calls, "events": args.events, "server": args.server}
    for name, runs in figures.items():
        p50 = {peer: statistics.median(values) for peer, values in runs.items()}
        out[f"{name}_p50_ms"] = {peer: round(v, 3) for peer, v in p50.items()}
        out[f"added_{name}_p50_ms"] = round(p50["proxy"] - p50["direct"], 3)
        if "litellm" in p50:
            out[f"litellm_added_{name}_p50_ms"] = round(p50["litellm"] - p50["direct"], 3)
    out["throughput_events_per_s"] = {k: round(v) for k, v in rates.items()}
    out["cpu_ms_per_call"] = {k: round(v, 2) for k, v in cpu["all"].items()}
    out["cpu_ms_per_call_by_kind"] = {
        kind: {k: round(v, 2) for k, v in cpu[kind].items()} for kind in ("latency", "ttfb")
    }
    out["cpu_us_per_stream_event"] = {k: round(v, 1) for k, v in cpu["stream_event_us"].items()}
    out["targets"] = TARGETS
    return out


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-proxy-") as workdir:
        report = anyio.run(_measure, args, Path(workdir))
    if args.json:
        emit_json(report)
        return 0
    peers = "direct, turnlog proxy" + (" and LiteLLM" if "litellm" in report["latency_p50_ms"] else "")
    print(f"turnlog bench proxy: {args.calls} calls of each kind, {peers} in turn, loopback fake upstream")
    for name in ("latency", "ttfb"):
        p50 = report[f"{name}_p50_ms"]
        added = report[f"added_{name}_p50_ms"]
        target = TARGETS[f"added_{name}_p50_ms"]
        line = f"  {name:<8} p50 direct {p50['direct']:.2f} ms, proxy {p50['proxy']:.2f} ms: +{added:.2f} ms (target <= {target} ms)"
        if "litellm" in p50:
            lite = report[f"litellm_added_{name}_p50_ms"]
            line += f"; LiteLLM {p50['litellm']:.2f} ms: +{lite:.2f} ms"
        print(line)
    rates = report["throughput_events_per_s"]
    print("  stream   events/s: " + ", ".join(f"{k} {v}" for k, v in rates.items()))
    if report["cpu_ms_per_call"]:
        by_kind = report["cpu_ms_per_call_by_kind"]
        print(
            "  cpu      ms per call: "
            + ", ".join(
                f"{k} {v:.2f} (non-streamed {by_kind['latency'][k]:.2f}, streamed {by_kind['ttfb'][k]:.2f})"
                for k, v in report["cpu_ms_per_call"].items()
            )
        )
        print(
            "  cpu      us per event of the long stream: "
            + ", ".join(f"{k} {v:.0f}" for k, v in report["cpu_us_per_stream_event"].items())
        )
    return 0
