"""``turnlog bench proxy``: what ``turnlog proxy`` adds to a call, recording every chunk.

The loopback fake upstream (Anthropic Messages) answers in this process; ``turnlog proxy`` runs
as its own process in front of it, recording into a fresh SQLite store, as a user runs it.
Calls go direct and through the proxy alternately, so both see the same machine load:

- **latency**: a non-streamed call, wall time; the figure is p50(proxy) - p50(direct);
- **ttfb**: a streamed call, time to the first body byte; p50(proxy) - p50(direct);
- **throughput**: one long stream of ``--events`` text deltas, SSE events per second each way.

Each call starts a new conversation (a new branch), as the threading rule would for new
agents. Targets (issue 25): p50 added latency <= 2 ms, p50 added time to first byte <= 1 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from turnlog.testing import FakeUpstreamServer
from turnlog.tools._command import emit_json

from ._options import at_least

__all__ = ["add_arguments", "run"]

TARGETS = {"added_latency_p50_ms": 2.0, "added_ttfb_p50_ms": 1.0}
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
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _body(i: int, *, stream: bool, prompt: str = "bench call") -> dict[str, Any]:
    messages = [{"role": "user", "content": f"{prompt} {i}"}]
    return {"model": "claude-sonnet-4-5", "max_tokens": 50, "messages": messages, "stream": stream}


async def _latency(client: httpx.AsyncClient, base: str, i: int) -> float:
    started = time.perf_counter()
    answer = await client.post(f"{base}/v1/messages", json=_body(i, stream=False), headers=_HEADERS)
    answer.raise_for_status()
    return (time.perf_counter() - started) * 1000


async def _ttfb(client: httpx.AsyncClient, base: str, i: int) -> float:
    started = time.perf_counter()
    async with client.stream(
        "POST", f"{base}/v1/messages", json=_body(i, stream=True), headers=_HEADERS
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
    async with client.stream("POST", f"{base}/v1/messages", json=body, headers=_HEADERS) as r:
        async for line in r.aiter_lines():
            events += line.startswith("data:")
    return events / (time.perf_counter() - started)


async def _proxy(upstream: str, store: Path) -> tuple[Any, str]:
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
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    process = await anyio.open_process(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert process.stdout is not None
    line = b""
    with anyio.fail_after(60):
        while not line.endswith(b"\n"):
            line += await process.stdout.receive(1)
    return process, line.decode().strip().rsplit(" ", 1)[1]


async def _measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    text = "word " * args.events
    script = [
        {"text": "A short answer of a few words.", "times": None, "match": {"stream": False}},
        {"text": text, "chunk_chars": 5, "times": 2, "match": {"last_user_contains": "throughput"}},
        {"text": "A short streamed answer of a few words.", "times": None},
    ]
    async with FakeUpstreamServer(script) as fake:
        process, proxy = await _proxy(fake.base_url, workdir / "bench.db")
        try:
            limits = httpx.Limits(max_keepalive_connections=4)
            async with httpx.AsyncClient(timeout=60, limits=limits) as client:
                figures: dict[str, dict[str, list[float]]] = {"latency": {}, "ttfb": {}}
                for name, probe in (("latency", _latency), ("ttfb", _ttfb)):
                    direct, proxied = [], []
                    for i in range(args.calls):
                        direct.append(await probe(client, fake.base_url, i))
                        proxied.append(await probe(client, proxy, i))
                    figures[name] = {"direct": direct, "proxy": proxied}
                rates = {
                    "direct": await _throughput(client, fake.base_url, -1),
                    "proxy": await _throughput(client, proxy, -2),
                }
        finally:
            process.terminate()
            await process.wait()
    return _report(figures, rates, args)


def _report(
    figures: dict[str, dict[str, list[float]]], rates: dict[str, float], args: argparse.Namespace
) -> dict[str, Any]:
    out: dict[str, Any] = {"calls": args.calls, "events": args.events}
    for name, runs in figures.items():
        direct, proxied = statistics.median(runs["direct"]), statistics.median(runs["proxy"])
        out[f"{name}_p50_ms"] = {"direct": round(direct, 3), "proxy": round(proxied, 3)}
        out[f"added_{name}_p50_ms"] = round(proxied - direct, 3)
    out["throughput_events_per_s"] = {k: round(v) for k, v in rates.items()}
    out["targets"] = TARGETS
    return out


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-proxy-") as workdir:
        report = anyio.run(_measure, args, Path(workdir))
    if args.json:
        emit_json(report)
        return 0
    print(f"turnlog bench proxy: {args.calls} calls of each kind each way, loopback fake upstream")
    for name in ("latency", "ttfb"):
        p50 = report[f"{name}_p50_ms"]
        added = report[f"added_{name}_p50_ms"]
        target = TARGETS[f"added_{name}_p50_ms"]
        print(
            f"  {name:<8} p50 direct {p50['direct']:.2f} ms, proxy {p50['proxy']:.2f} ms: +{added:.2f} ms (target <= {target} ms)"
        )
    rates = report["throughput_events_per_s"]
    print(
        f"  stream   {rates['direct']} events/s direct, {rates['proxy']} events/s through the proxy (recording each)"
    )
    return 0
