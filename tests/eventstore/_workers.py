"""Child processes for the crash and multi-process proofs (run as ``python _workers.py MODE ...``).

Every line a worker prints on stdout is one JSON object, flushed at once:

- ``{"ready": true}`` once the store is open;
- ``{"ack": [[event_id, stream, version, position], ...]}`` after an append *returned*, so a line
  that reached the parent is an acknowledged append;
- ``{"done": ...}`` with a summary at the end (writers and readers).
"""

from __future__ import annotations

import random
import sys
from contextlib import aclosing
from typing import Any

import anyio
import orjson

from turnlog.eventstore import ConcurrencyError, NewEvent, RecordedEvent, open_store


def emit(obj: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj) + b"\n")
    sys.stdout.buffer.flush()


def _ack_line(ids: list[str], stream: str, version: int, positions: tuple[int, ...]) -> list[list[Any]]:
    first = version - len(ids) + 1
    return [[eid, stream, first + k, pos] for k, (eid, pos) in enumerate(zip(ids, positions, strict=True))]


async def crash_writer(path: str, seed: int) -> None:
    """Append forever: single events, small batches and cross-stream batches, with expected_version."""
    rng = random.Random(seed)
    streams = [f"branch-crash-{k}" for k in range(4)]
    async with open_store(f"sqlite:///{path}") as store:
        versions = {s: await store.stream_version(s) for s in streams}
        emit({"ready": True})
        call = 0
        while True:
            call += 1
            batch_id = f"{seed}-{call}"
            kind = rng.random()
            if kind < 0.8:
                stream = rng.choice(streams)
                n = 1 if kind < 0.4 else rng.randint(2, 6)
                parts = [(stream, n)]
            else:
                a, b = rng.sample(streams, 2)
                parts = [(a, rng.randint(1, 4)), (b, rng.randint(1, 4))]
            total = sum(n for _, n in parts)
            entries = []
            index = 0
            for stream, n in parts:
                events = []
                for _ in range(n):
                    # Sizes up to ~9 KiB: one transaction spans several pages (overflow pages included).
                    body = "x" * rng.choice((10, 200, 3000, 9000))
                    events.append(
                        NewEvent("test.appended", {"body": body}, {"batch": batch_id, "n": total, "i": index})
                    )
                    index += 1
                entries.append((stream, events, versions[stream]))
            if len(entries) == 1:
                stream, events, expected = entries[0]
                results = [await store.append(stream, events, expected_version=expected)]
            else:
                results = await store.append_batch(entries)
            acks: list[list[Any]] = []
            for (stream, events, _), result in zip(entries, results, strict=True):
                versions[stream] = result.version
                acks += _ack_line([str(e.id) for e in events], stream, result.version, result.positions)
            emit({"ack": acks})


async def contended_writer(path: str, wid: int, count: int, nstreams: int) -> None:
    """Append ``count`` events to shared streams, each with the version just read; retry conflicts."""
    rng = random.Random(wid)
    streams = [f"branch-shared-{k}" for k in range(nstreams)]
    retries = 0
    async with open_store(f"sqlite:///{path}") as store:
        emit({"ready": True})
        await anyio.to_thread.run_sync(sys.stdin.readline)  # the start signal
        for i in range(count):
            stream = rng.choice(streams)
            event = NewEvent("test.appended", {"writer": wid, "i": i})
            while True:
                version = await store.stream_version(stream)
                try:
                    result = await store.append(stream, [event], expected_version=version)
                except ConcurrencyError:
                    retries += 1
                    continue
                break
            emit({"ack": [[str(event.id), stream, result.version, result.positions[0]]]})
    emit({"done": {"writer": wid, "retries": retries}})


class _Order:
    """What a reader checks on every event it sees: no position skipped, time never going back."""

    def __init__(self) -> None:
        self.last = 0
        self.last_time: Any = None
        self.count = 0
        self.problems: list[str] = []

    def see(self, event: RecordedEvent) -> None:
        if event.position != self.last + 1:
            self.problems.append(f"saw position {event.position} right after {self.last}")
        if self.last_time is not None and event.recorded_at < self.last_time:
            self.problems.append(f"recorded_at went back at position {event.position}")
        self.last = event.position
        self.last_time = event.recorded_at
        self.count += 1


async def reader(path: str, total: int, mode: str, seconds: float) -> None:
    """Follow the log (``subscribe`` or polling ``read_all``) until ``total`` events were seen."""
    order = _Order()
    async with open_store(f"sqlite:///{path}") as store:
        emit({"ready": True})
        with anyio.fail_after(seconds):
            if mode == "subscribe":
                async with aclosing(store.subscribe(1)) as events:
                    async for event in events:
                        order.see(event)
                        if order.count >= total:
                            break
            else:
                while order.count < total:
                    before = order.count
                    async for event in store.read_all(order.last + 1, limit=500):
                        order.see(event)
                    if order.count == before:
                        await anyio.sleep(0.005)  # nothing new yet: poll again shortly
    emit({"done": {"mode": mode, "count": order.count, "last": order.last, "problems": order.problems}})


def main(argv: list[str]) -> None:
    mode, *rest = argv
    if mode == "crash":
        anyio.run(crash_writer, rest[0], int(rest[1]))
    elif mode == "writer":
        anyio.run(contended_writer, rest[0], int(rest[1]), int(rest[2]), int(rest[3]))
    elif mode == "reader":
        anyio.run(reader, rest[0], int(rest[1]), rest[2], float(rest[3]))
    else:
        raise SystemExit(f"unknown worker mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
