"""``turnlog bench otel``: spans built (and encoded for OTLP) per second, against the raw read rate.

The store is the synthetic agent log of ``bench analytics`` (branches of runs with model
calls, tool calls, streamed chunks and failures). Measured on the same events:

- raw read: ``read_all`` of every event the span view reads;
- build: ``SpanView.apply`` over those events, already read (spans/s and events/s);
- encode: the spans as the SDK's ``ReadableSpan`` and the OTLP protobuf request bytes the
  exporter would send (when ``turnlog[otel]`` is installed): what an export costs before the
  network.

Rates are per second of CPU time of the process (reading runs the store's worker thread too),
so that a loaded machine does not distort them. Target: at least 50,000 spans/s built.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import orjson

from turnlog.analytics import SPAN_EVENT_TYPES, SpanView, Trace
from turnlog.eventstore import RecordedEvent, SQLiteEventStore

from ._analytics import build_store
from ._options import at_least

__all__ = ["add_arguments", "run"]

_TARGET_SPANS_PER_S = 50_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``turnlog bench otel``."""
    parser.add_argument("--events", type=at_least(100), default=100_000, help="events in the synthetic store")
    parser.add_argument("--repeat", type=at_least(1), default=3, help="repetitions (the best is kept)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


# CPU time of this process (every thread): on a shared machine the wall time also counts
# the wait for a core, which says nothing about turnlog.
_clock = time.process_time


async def _read(store: SQLiteEventStore) -> tuple[list[RecordedEvent], float]:
    started = _clock()
    events = [e async for e in store.read_all(types=SPAN_EVENT_TYPES)]
    return events, _clock() - started


def _build(events: list[RecordedEvent]) -> tuple[list[Trace], float]:
    started = _clock()
    view = SpanView()
    traces = [t for e in events for t in view.apply(e)]
    return traces, _clock() - started


def _encode(traces: list[Trace]) -> tuple[int, float] | None:
    try:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.sdk.resources import Resource
    except ImportError:
        return None
    from turnlog.tools._otel import readable_spans

    started = _clock()
    size = 0
    for i in range(0, len(traces), 64):
        spans = readable_spans(traces[i : i + 64], Resource.create({"service.name": "turnlog-bench"}))
        size += len(encode_spans(spans).SerializeToString())
    return size, _clock() - started


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-otel-") as folder:
        path = Path(folder) / "store.db"
        total = await build_store(path, args.events)
        reads, builds, encodes = [], [], []
        async with SQLiteEventStore(path) as store:
            for _ in range(args.repeat):
                events, seconds = await _read(store)
                reads.append(seconds)
                traces, seconds = _build(events)
                builds.append(seconds)
                encoded = _encode(traces)
                if encoded is not None:
                    encodes.append(encoded)
    spans = sum(len(t.spans) for t in traces)
    read, build = min(reads), min(builds)
    result: dict[str, Any] = {
        "events": total,
        "events_read": len(events),
        "traces": len(traces),
        "spans": spans,
        "raw_read_events_per_s": round(len(events) / read),
        "build_events_per_s": round(len(events) / build),
        "build_spans_per_s": round(spans / build),
        "target_spans_per_s": _TARGET_SPANS_PER_S,
        "target_met": spans / build >= _TARGET_SPANS_PER_S,
    }
    if encodes:
        size, seconds = min(encodes, key=lambda e: e[1])
        result["encode_spans_per_s"] = round(spans / seconds)
        result["otlp_bytes"] = size
    return result


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and print its figures (``--json`` for machine-readable output)."""
    result = anyio.run(_bench, args)
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
        return 0
    r = result
    print(
        f"store: {r['events']:,} events, {r['events_read']:,} read by the span view -> {r['traces']:,} traces, {r['spans']:,} spans"
    )
    print(f"raw read_all:        {r['raw_read_events_per_s']:>12,} events/s")
    print(
        f"span view build:     {r['build_events_per_s']:>12,} events/s  {r['build_spans_per_s']:>12,} spans/s"
    )
    if "encode_spans_per_s" in r:
        print(f"SDK spans + OTLP:    {r['encode_spans_per_s']:>12,} spans/s  ({r['otlp_bytes']:,} bytes)")
    print(f"target >= {_TARGET_SPANS_PER_S:,} spans/s built: {'yes' if r['target_met'] else 'NO'}")
    return 0
