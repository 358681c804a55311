"""``turnlog tail``: print the log, and with ``--follow`` keep printing live events."""

from __future__ import annotations

import argparse

import anyio
import orjson

from turnlog.eventstore import RecordedEvent

from ._command import Command, UserError, add_store_argument
from ._inspect import opened_store

__all__ = ["COMMAND", "event_line"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_store_argument(parser, json_flag=False)
    parser.add_argument(
        "--json",
        action="store_true",
        help="JSON Lines: one JSON object per event (every envelope field), one per line",
    )
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    parser.add_argument("--type", action="append", dest="types", help="only this event type (repeatable)")
    parser.add_argument("--stream-prefix", default=None, help="only streams starting with this")
    parser.add_argument(
        "-n", "--lines", type=int, default=20, help="how many past events to show first (0: only new ones)"
    )


def event_line(event: RecordedEvent) -> str:
    """One line per event: position, time, stream@version, type and a short payload."""
    payload = orjson.dumps(event.data).decode()
    if len(payload) > 100:
        payload = payload[:97] + "..."
    stamp = event.recorded_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return f"{event.position:>8}  {stamp}  {event.stream}@{event.version}  {event.type}  {payload}"


def _envelope(event: RecordedEvent) -> str:
    return orjson.dumps(
        {
            "id": str(event.id),
            "stream": event.stream,
            "version": event.version,
            "position": event.position,
            "type": event.type,
            "schema": event.schema,
            "data": event.data,
            "meta": event.meta,
            "recorded_at": event.recorded_at.isoformat(),
            "prev_hash": event.prev_hash,
            "hash": event.hash,
        }
    ).decode()


async def _tail(args: argparse.Namespace) -> None:
    render = _envelope if args.json else event_line
    async with opened_store(args.store, upcast=False) as store:
        head = await store.head()
        start = 1
        if args.lines >= 0:
            # Find where the last N matching events start by reading backwards.
            async for event in store.read_all(
                backwards=True, types=args.types, stream_prefix=args.stream_prefix, limit=args.lines
            ):
                start = event.position
            if args.lines == 0:
                start = head + 1
        if args.follow:
            async for event in store.subscribe(start, types=args.types, stream_prefix=args.stream_prefix):
                print(render(event), flush=True)
        else:
            async for event in store.read_all(
                start, head, types=args.types, stream_prefix=args.stream_prefix
            ):
                print(render(event))


def _run(args: argparse.Namespace) -> int:
    if args.lines < 0:
        raise UserError(f"-n takes a number of events >= 0, not {args.lines}")
    anyio.run(_tail, args)
    return 0


COMMAND = Command(
    name="tail",
    help="print the last events of the log; --follow keeps printing live ones",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog tail --follow --type run.failed",
)
