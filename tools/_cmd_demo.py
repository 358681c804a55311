"""``turnlog demo``: the event store in five steps, offline, on a fresh SQLite file.

It appends a short conversation to a branch stream (catalogue events, validated on the way
in), reads it back, shows the branch as it was at an earlier version (time travel is reading
up to a version), runs ``verify`` over the hash chains and ends with commands to try next.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import anyio
from turnlog.eventstore import RecordedEvent, StoreError, open_store, uuid7
from turnlog.projections import (
    AssistantResponse,
    BranchCreated,
    Instruction,
    MessageAdded,
    System,
    decode_event,
    new_event,
)

from ._command import Command, UserError

__all__ = ["COMMAND"]

_TURNS = (
    ("What is an event store?", "An append-only log: every change is an event, and state is folded from it."),
    (
        "So can I see this chat as it was before?",
        "Yes: read the stream up to an earlier version and fold it.",
    ),
)
_SUGGESTED = ("verify", "log", "show", "tail", "stats")


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        default=None,
        help="store URL (sqlite:///path.db, memory://, postgresql://...) or a SQLite file path; "
        "default: a fresh SQLite file in a new temporary directory",
    )


def _describe(event: RecordedEvent) -> str:
    data = decode_event(event)
    if isinstance(data, BranchCreated):
        system = data.system.rendered if data.system is not None else "-"
        return f"branch created, name={data.name!r}, system prompt: {system}"
    if isinstance(data, MessageAdded):
        message = data.message
        text = message.content.instruction if isinstance(message, Instruction) else message.rendered
        return f"{message.role:>9}: {text}"
    return event.type


async def _demo(url: str, shown: str) -> None:
    branch_id = str(uuid7())
    stream = f"branch-{branch_id}"
    meta = {"branch_id": branch_id, "actor": "turnlog demo"}
    events = [
        new_event(
            BranchCreated(branch_id=branch_id, name="demo", user="you", system=System.create("Be concise.")),
            meta=meta,
        )
    ]
    for question, answer in _TURNS:
        events.append(new_event(MessageAdded(message=Instruction.create(question, sender="you")), meta=meta))
        events.append(new_event(MessageAdded(message=AssistantResponse.create(answer)), meta=meta))

    async with open_store(url) as store:
        print(f"store: {shown}")
        print(f"\n1. append: {len(events)} events to stream {stream}, one atomic append")
        result = await store.append(stream, events, expected_version=0)
        first, final = result.positions[0], result.positions[-1]
        print(f"   stream version {result.version}, global positions {first}..{final}")

        print("\n2. read back:")
        async for event in store.read_stream(stream):
            print(f"   v{event.version} {event.type:<14} {_describe(event)}")

        earlier = result.version - 2
        print(f"\n3. time travel: the branch as it was at version {earlier} (before the second question)")
        async for event in store.read_stream(stream, to_version=earlier):
            print(f"   v{event.version} {_describe(event)}")
        last = await anext(aiter(store.read_stream(stream, backwards=True, limit=1)))

        print("\n4. verify:")
        report = await store.verify()
        if not report.ok:
            for problem in report.problems:
                print(f"   PROBLEM {problem}")
            raise UserError(f"verify found {len(report.problems)} problem(s) in {shown}")
        streams = f"{report.streams} stream" + ("s" if report.streams != 1 else "")
        print(f"   ok: {report.events} events in {streams}; every hash chain verifies")
        print(f"   the chain of {stream} ends in {last.hash[:16]}... (SHA-256 over every event before it)")


def _available_commands() -> set[str]:
    from ._cli import _commands

    return {command.name for command in _commands()}


def _run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.store is None:
        path = Path(tempfile.mkdtemp(prefix="turnlog-demo-")) / "demo.db"
        url, shown, flag = f"sqlite:///{path}", str(path), str(path)
    else:
        url = args.store if "://" in args.store else f"sqlite:///{args.store}"
        shown = flag = args.store
    print("turnlog demo: an append-only, hash-chained conversation log (offline)\n")
    try:
        anyio.run(_demo, url, shown)
    except StoreError as exc:
        raise UserError(str(exc)) from exc
    print(f"\ndone in {time.perf_counter() - started:.2f} s. Try next:")
    if not url.startswith("memory:"):  # an in-memory store is gone once the demo ends
        available = _available_commands()
        for name in _SUGGESTED:
            if name in available:
                print(f"   turnlog {name} --store {flag}")
    print("   turnlog bench append")
    if url.startswith("sqlite:///") and not url.endswith(":memory:"):
        query = "SELECT position, stream, version, type FROM events"
        print(f"   sqlite3 {url.removeprefix('sqlite:///')} '{query}'")
    return 0


COMMAND = Command(
    name="demo",
    help="append, read, time-travel and verify a short conversation on a fresh store (offline)",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog demo",
)
