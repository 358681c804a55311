"""``turnlog tail``: print the log, and with ``--follow`` keep printing live events."""

from __future__ import annotations

import argparse

import anyio
import orjson

from turnlog.eventstore import EventStore, Problem, RecordedEvent, check_events

from ._command import EXIT_FAILED, EXIT_OK, Command, UserError, add_store_argument
from ._inspect import opened_store
from ._shown import TAMPERED, warn_damage

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


def event_line(event: RecordedEvent, damage: str | None = None) -> str:
    """One line per event: position, time, stream@version, type and a short payload.

    An event that does not match the hash chain (``damage`` says why) is marked ``TAMPERED``.
    """
    payload = orjson.dumps(event.data).decode()
    if len(payload) > 100:
        payload = payload[:97] + "..."
    stamp = event.recorded_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    mark = "" if damage is None else f"{TAMPERED}  "
    return f"{event.position:>8}  {stamp}  {event.stream}@{event.version}  {mark}{event.type}  {payload}"


def _envelope(event: RecordedEvent, damage: str | None = None) -> str:
    extra = {} if damage is None else {"tampered": damage}
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
            **extra,
        }
    ).decode()


async def _damage(store: EventStore, events: list[RecordedEvent], found: list[Problem]) -> dict[int, str]:
    """Position -> what is wrong, for the events about to be printed that fail their check."""
    problems = await check_events(store, events)
    found.extend(problems)
    return {p.position: p.what for p in problems if p.position is not None}


async def _tail(args: argparse.Namespace) -> list[Problem]:
    render = _envelope if args.json else event_line
    found: list[Problem] = []
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
                # each live event is proven as it comes: a few reads, not a walk of the log
                damage = await _damage(store, [event], found)
                print(render(event, damage.get(event.position)), flush=True)
                if damage:
                    warn_damage("tail", found[-len(damage) :])
        else:
            events = [
                e
                async for e in store.read_all(start, head, types=args.types, stream_prefix=args.stream_prefix)
            ]
            damage = await _damage(store, events, found)
            for event in events:
                print(render(event, damage.get(event.position)))
    return found


def _run(args: argparse.Namespace) -> int:
    if args.lines < 0:
        raise UserError(f"-n takes a number of events >= 0, not {args.lines}")
    found = anyio.run(_tail, args)
    if not args.follow:
        warn_damage("tail", found)
    return EXIT_FAILED if found else EXIT_OK


COMMAND = Command(
    name="tail",
    help="print the last events of the log; --follow keeps printing live ones",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog tail --follow --type run.failed",
)
