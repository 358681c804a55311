"""``turnlog otel export``: send the runs of the log as OpenTelemetry traces over OTLP/HTTP.

Delivery with ``--follow`` is at least once, and exactly once unless the process dies between
the receiver's acknowledgement and the checkpoint that follows it. Two tracking positions in
the store (capability ``tracking``) make that so:

- ``otel-<consumer>`` is the position of the event that finished the last trace acknowledged;
  traces are sent in the order they finished, so everything finished at or before it was sent;
- ``otel-<consumer>-from`` is where to read again: just before the oldest run still open when
  it was written, so a restart rebuilds that run whole and loses nothing of it.

A restart reads from ``-from``, rebuilds the traces, and sends only those that finished after
``otel-<consumer>``. Span and trace ids are derived from the log, so a trace sent twice (a
crash at the wrong moment, or a one-off export over a followed range) carries the same ids.

SIGINT and SIGTERM stop a follower cleanly: the follow loop is cancelled (a send in flight is
abandoned, unacknowledged, so its run is sent again after a restart), the last line says how
many spans went out and where the checkpoint is, and the exit status is 128 + the signal.
"""

from __future__ import annotations

import argparse
import os
import signal
from collections.abc import Sequence
from datetime import UTC, datetime

import anyio

from turnlog.analytics import SPAN_EVENT_TYPES, SpanView, Trace, semconv_from_env
from turnlog.eventstore import EventStore

from ._command import Command, UserError, add_store_argument
from ._inspect import opened_store
from ._otel import Sender, protocol_of, resolve_endpoint, safe_url

__all__ = ["COMMAND", "select"]

_BATCH = 64
"""Traces per OTLP request of a one-off export (a few hundred spans)."""


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="otel_command", metavar="SUBCOMMAND", required=True)
    export = sub.add_parser(
        "export",
        help="send the runs of the log as traces to an OTLP/HTTP receiver",
        description="Send every finished run of the log (its steps, model calls and tool calls) as "
        "OpenTelemetry spans with the GenAI semantic conventions to an OTLP/HTTP receiver "
        "(Phoenix, Langfuse, Jaeger, Tempo, an OpenTelemetry Collector, ...).",
        epilog="Environment: OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "
        "OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_SERVICE_NAME, "
        "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental (see docs/otel.md).\n"
        "example:\n  turnlog otel export --endpoint http://127.0.0.1:4318 --follow",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store_argument(export, json_flag=False)
    export.add_argument(
        "--endpoint",
        default=None,
        help="base URL of the OTLP/HTTP receiver (v1/traces is added); default: "
        "$OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318",
    )
    export.add_argument(
        "--protocol",
        choices=("http/protobuf", "http/json"),
        default=None,
        help="OTLP encoding (default: $OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)",
    )
    export.add_argument(
        "--since",
        default=None,
        help="only runs that started at or after this global position (a number) or UTC time (ISO 8601)",
    )
    export.add_argument("--branch", default=None, help="only runs of this branch (its id or its name)")
    export.add_argument(
        "--content",
        action="store_true",
        help="include message content (gen_ai.input.messages / output.messages); redacted content never",
    )
    export.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep exporting runs as they end, with a checkpoint in the store",
    )
    export.add_argument(
        "--consumer",
        default="default",
        help="name of the --follow checkpoint (one per receiver; default: default)",
    )


def _since(value: str | None) -> tuple[int, int | None]:
    """``(first position to read, earliest start time in ns or None)``."""
    if value is None:
        return 1, None
    if value.isdigit():
        return max(int(value), 1), None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise UserError(f"--since takes a position (a number) or an ISO 8601 time, not {value!r}") from None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return 1, int(moment.timestamp() * 1_000_000) * 1_000


def select(traces: Sequence[Trace], branch: str | None, since_ns: int | None) -> list[Trace]:
    """The traces of ``branch`` (id or name) that started at or after ``since_ns``."""
    chosen = []
    for trace in traces:
        root = trace.root
        if since_ns is not None and root.start_ns < since_ns:
            continue
        if branch is not None and branch not in (root.branch_id, root.attributes.get("gen_ai.agent.name")):
            continue
        chosen.append(trace)
    return chosen


async def _export_once(store: EventStore, args: argparse.Namespace, sender: Sender) -> None:
    start, since_ns = _since(args.since)
    view = SpanView(content=args.content, semconv=semconv_from_env(os.environ))
    traces: list[Trace] = []
    async for event in store.read_all(start, await store.head(), types=SPAN_EVENT_TYPES):
        traces.extend(view.apply(event))
    chosen = select(traces, args.branch, since_ns)
    sent = 0
    for i in range(0, len(chosen), _BATCH):
        sent += await anyio.to_thread.run_sync(sender.send, chosen[i : i + _BATCH])
    print(f"exported {len(chosen)} runs ({sent} spans) to {safe_url(sender.endpoint)}", flush=True)


class _Progress:
    """What a follower has done so far: spans the receiver acknowledged, and its checkpoint."""

    def __init__(self, checkpoint: int) -> None:
        self.spans = 0
        self.checkpoint = checkpoint


async def _follow(store: EventStore, args: argparse.Namespace, sender: Sender) -> int:
    """Export runs as they end until SIGINT or SIGTERM; return the exit status (128 + signal)."""
    if "tracking" not in store.capabilities:
        raise UserError("--follow keeps its checkpoint in the store, and this store has no tracking")
    done_name = f"otel-{args.consumer}"
    progress = _Progress(await store.tracking_position(done_name) or 0)
    received: list[int] = []
    # The receiver is in place before the first line is printed: whoever waits for that line
    # and then signals is sure to reach it, and not the interpreter's default handler.
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as tg:

            async def stop_on_signal() -> None:
                async for signum in signals:
                    received.append(int(signum))
                    tg.cancel_scope.cancel()
                    return

            tg.start_soon(stop_on_signal)
            await _export_as_they_end(store, args, sender, progress)
    print(f"stopped; {progress.spans} spans exported, checkpoint at {progress.checkpoint}", flush=True)
    return 128 + received[0]


async def _export_as_they_end(
    store: EventStore, args: argparse.Namespace, sender: Sender, progress: _Progress
) -> None:
    """The follow loop: send each trace when its run ends, then move the checkpoints; forever."""
    done_name, from_name = f"otel-{args.consumer}", f"otel-{args.consumer}-from"
    resume = await store.tracking_position(from_name)
    start, since_ns = _since(args.since)
    start = max(start, (resume or 0) + 1)
    view = SpanView(content=args.content, semconv=semconv_from_env(os.environ))
    print(f"following the log from position {start} to {safe_url(sender.endpoint)}", flush=True)
    async for event in store.subscribe(start, types=SPAN_EVENT_TYPES):
        finished = [t for t in view.apply(event) if t.end_position > progress.checkpoint]
        if not finished:
            continue
        chosen = select(finished, args.branch, since_ns)
        # A signal abandons a send in flight (its thread ends by the exporter's own timeout):
        # no checkpoint is written for it, so a restart sends it again, with the same ids.
        spans = await anyio.to_thread.run_sync(sender.send, chosen, abandon_on_cancel=True)
        # Acknowledged: write the checkpoint even if a signal comes now, so that a restart does
        # not send these again (a few milliseconds of local writes).
        with anyio.CancelScope(shield=True):
            progress.spans += spans
            progress.checkpoint = event.position
            await store.save_tracking(done_name, event.position)
            open_from = view.open_from()
            low = (open_from - 1) if open_from is not None else event.position
            if low > (resume or 0):
                await store.save_tracking(from_name, low)
                resume = low
            for trace in chosen:
                _say(trace, spans)


def _say(trace: Trace, spans: int) -> None:
    root = trace.root
    run = root.attributes.get("turnlog.run_id", root.name)
    print(
        f"exported {root.name} {run} ({len(trace.spans)} spans) at position {trace.end_position}", flush=True
    )


async def _main(args: argparse.Namespace) -> int:
    endpoint = resolve_endpoint(args.endpoint, os.environ)
    sender = Sender(endpoint, protocol_of(args.protocol), os.environ)
    try:
        async with opened_store(args.store) as store:
            if args.follow:
                return await _follow(store, args, sender)
            await _export_once(store, args, sender)
            return 0
    finally:
        # Also ends the retry pauses of a send abandoned by a signal, so that its thread (which
        # the interpreter waits for at exit) ends within the exporter's timeout.
        sender.close()


def _run(args: argparse.Namespace) -> int:
    if args.consumer and not all(c.isalnum() or c in "-_." for c in args.consumer):
        raise UserError(f"--consumer takes letters, digits, '-', '_' and '.', not {args.consumer!r}")
    return anyio.run(_main, args)


COMMAND = Command(
    name="otel",
    help="export runs as OpenTelemetry traces over OTLP/HTTP (otel export)",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog otel export --endpoint http://127.0.0.1:4318 --content",
)
