"""``turnlog bench stream``: chunks per second through ``run()``, beside lionagi's ``run()``.

One in-process stream of pre-built text chunks (no subprocess) is consumed by:

- turnlog ``run(stream_persist=True)``: every chunk a ``stream.chunk`` event, its line in the
  live buffer before it is processed (durable against a crash of the process), commits
  batched into a SQLite store file;
- turnlog ``run(stream_persist=False)``: the same events, without the buffer;
- the raw cost of the chunk events alone (numbered, with ids, validated and encoded once as
  the store will take them, never stored), and of the same plus their buffer lines (one
  ``os.write`` per envelope line): the difference is what the buffer costs per chunk;
- lionagi 0.36 ``Branch.run()`` on the same chunks, when it is importable (it keeps no chunk).

Both receive the chunks at the provider boundary, where a CLI parser would emit them:
turnlog's ``model.stream`` and lionagi's ``endpoint.stream`` yield the pre-built chunks, so
each library's own per-chunk path above that boundary runs in full.

Each peer runs ``--repeat`` times in this one process; the best time counts. Ratios are
turnlog's rate over lionagi's. Rates are given twice: by elapsed time, and by the CPU time of
the process (every thread) over the same span, which moves less when other jobs share the
cores.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

import anyio

from turnlog.tools._command import emit_json

from ._options import at_least, positive_float

__all__ = ["PrebuiltStream", "add_arguments", "run"]


class PrebuiltStream:
    """A CLI-like streaming model that yields pre-built chunks (no process, no I/O).

    Args:
        chunks: What every ``stream`` call yields.
    """

    provider = "bench"
    model = "prebuilt"
    is_cli = True

    def __init__(self, chunks: list[Any]) -> None:
        self.chunks = chunks

    def stream(
        self, prompt: str, *, resume: str | None = None, options: Mapping[str, Any] | None = None
    ) -> AsyncIterator[Any]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[Any]:
        for chunk in self.chunks:
            yield chunk


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``turnlog bench stream``."""
    parser.add_argument(
        "--chunks", type=at_least(1), default=50_000, help="text chunks per stream (default 50000)"
    )
    parser.add_argument(
        "--repeat", type=at_least(1), default=3, help="runs per peer; the best counts (default 3)"
    )
    parser.add_argument(
        "--batch-chunks", type=at_least(1), default=1024, help="chunks per store commit (default 1024)"
    )
    parser.add_argument(
        "--batch-ms", type=positive_float, default=50.0, help="ms between store commits (default 50)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _texts(n: int) -> list[str]:
    return [f"tok{i} " for i in range(n)]


class _Span:
    """Elapsed and process CPU seconds from ``start()`` to ``stop()``."""

    __slots__ = ("_cpu", "_wall")

    def start(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def stop(self) -> tuple[float, float]:
        return time.perf_counter() - self._wall, time.process_time() - self._cpu


async def _turnlog(
    directory: Path, texts: list[str], persist: bool, batch_chunks: int, batch_ms: float
) -> tuple[float, float]:
    from turnlog.eventstore import open_store
    from turnlog.kernel import Branch, PersistOptions
    from turnlog.kernel.models import StreamChunk
    from turnlog.projections import catalogue_upcasters

    # Text deltas as the CLI parsers emit them (Claude Code's partial messages, Gemini).
    model = PrebuiltStream([StreamChunk("text", content=t, is_delta=True) for t in texts])
    _settle()
    url = f"sqlite:///{directory / 'bench.db'}"
    options = PersistOptions(batch_chunks=batch_chunks, batch_ms=batch_ms)
    async with open_store(url, upcasters=catalogue_upcasters()) as store:
        branch = await Branch(store=store, chat_model=None).save()
        span = _Span()
        span.start()
        count = 0
        async for _ in branch.run(
            "go",
            chat_model=model,
            stream_persist=persist,
            persist_dir=directory / "runs",
            persist_options=options,
        ):
            count += 1
        elapsed = span.stop()
        run = next(iter(branch.state.runs.values()))
        if run.chunks != len(texts) or count != 2:
            raise RuntimeError(
                f"bench stream: expected {len(texts)} chunks and 2 messages, got {run.chunks}/{count}"
            )
        if list((directory / "runs").glob("*.jsonl")):
            raise RuntimeError("bench stream: a buffer was left behind")
    return elapsed


def _settle() -> None:
    """Collect garbage once the pre-built input exists, before the clock starts.

    The input is tens of thousands of chunk objects alive at once, as no real stream has them;
    made just before a peer runs, they would set off full collections of the garbage collector
    inside the timed part (in whichever peer runs then), which is not a cost of either library.
    """
    gc.collect()


def _buffer_only(directory: Path, texts: list[str], buffered: bool = True) -> tuple[float, float]:
    from turnlog.eventstore import MemoryEventStore
    from turnlog.kernel._persist import ChunkLog, RunBuffer
    from turnlog.kernel.models import StreamChunk

    chunks = [StreamChunk("text", content=t, is_delta=True) for t in texts]
    _settle()
    buffer = RunBuffer(directory / "raw.jsonl") if buffered else None
    # numbering, event ids, encoding and envelope lines as a run makes them; nothing is committed
    log = ChunkLog(MemoryEventStore(), "r", {"run_id": "r"}, buffer=buffer)
    span = _Span()
    span.start()
    for chunk in chunks:
        log.add(chunk)
    elapsed = span.stop()
    if buffer is not None:
        buffer.remove()
    return elapsed


def _lionagi_available() -> str | None:
    try:
        import lionagi  # noqa: F401
        from lionagi.version import __version__
    except ImportError:
        return None
    return str(__version__)


async def _lionagi(directory: Path, texts: list[str], persist: bool) -> tuple[float, float]:
    import logging

    from lionagi import Branch as LBranch
    from lionagi import iModel as LModel
    from lionagi.service.types.stream_chunk import StreamChunk as LChunk

    logging.getLogger("lionagi").setLevel(logging.ERROR)
    chunks = [LChunk(type="text", content=t) for t in texts]
    _settle()
    model = LModel(provider="claude_code", model="sonnet")

    async def prebuilt(request: Any = None, **_: Any) -> AsyncIterator[Any]:
        for chunk in chunks:
            yield chunk

    # The chunks enter where the CLI parser would emit them (the endpoint's stream), as ours
    # enter at the model's stream: everything above that boundary runs, no subprocess below it.
    # setattr: the peer's endpoint is replaced on purpose, whatever its declared type.
    setattr(model.endpoint, "stream", prebuilt)  # noqa: B010
    branch = LBranch(chat_model=model)
    kwargs: dict[str, Any] = (
        {"stream_persist": True, "persist_dir": str(directory / "lionagi")} if persist else {}
    )
    span = _Span()
    span.start()
    out = [m async for m in branch.run("go", **kwargs)]
    elapsed = span.stop()
    if len(out) != 2:
        raise RuntimeError(f"bench stream: lionagi yielded {len(out)} messages")
    return elapsed


def _measure(
    peers: dict[str, Callable[[Path], tuple[float, float]]], repeat: int
) -> dict[str, tuple[float, float]]:
    """Best elapsed and best CPU time of each peer over ``repeat`` rounds, taking turns in a round."""
    best = dict.fromkeys(peers, (float("inf"), float("inf")))
    for _ in range(repeat):
        for name, make in peers.items():
            with tempfile.TemporaryDirectory(prefix="turnlog-bench-stream-") as tmp:
                gc.collect()
                wall, cpu = make(Path(tmp))
                best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    return best


def run(args: argparse.Namespace) -> int:
    """Run the benchmark; print the rates and ratios (or JSON)."""
    n = int(args.chunks)
    texts = _texts(n)
    repeat = max(1, int(args.repeat))
    persist_name = "turnlog run(stream_persist=True)"
    peers: dict[str, Callable[[Path], tuple[float, float]]] = {
        persist_name: lambda d: _run_async(_turnlog(d, texts, True, args.batch_chunks, args.batch_ms)),
        "turnlog run(stream_persist=False)": lambda d: _run_async(
            _turnlog(d, texts, False, args.batch_chunks, args.batch_ms)
        ),
        "chunk events made, not stored (no buffer)": lambda d: _buffer_only(d, texts, False),
        "chunk events + buffer lines (os.write each)": lambda d: _buffer_only(d, texts),
    }
    version = _lionagi_available()
    lionagi_name = f"lionagi {version} run()"
    if version is not None:
        peers[lionagi_name] = lambda d: _run_async(_lionagi(d, texts, False))
        peers[f"lionagi {version} run(stream_persist=True)"] = lambda d: _run_async(_lionagi(d, texts, True))
    times = _measure(peers, repeat)
    rows = {name: n / wall for name, (wall, _) in times.items()}
    cpu_rows = {name: n / max(cpu, 1e-9) for name, (_, cpu) in times.items()}
    lionagi_rate = rows.get(lionagi_name)
    lionagi_cpu = cpu_rows.get(lionagi_name)
    ratio = rows[persist_name] / lionagi_rate if lionagi_rate else None
    cpu_ratio = cpu_rows[persist_name] / lionagi_cpu if lionagi_cpu else None
    if args.json:
        emit_json(
            {
                "chunks": n,
                "repeat": repeat,
                "batch_chunks": args.batch_chunks,
                "batch_ms": args.batch_ms,
                "chunks_per_s": rows,
                "chunks_per_cpu_s": cpu_rows,
                "lionagi": version,
                "ratio_persist_vs_lionagi": ratio,
                "cpu_ratio_persist_vs_lionagi": cpu_ratio,
                "cpus": os.cpu_count(),
            }
        )
        return 0
    print(f"stream: {n} text chunks through run(), best of {repeat} interleaved rounds")
    print(f"  {'':<45} {'chunks/s':>12} {'':<14} {'per CPU s':>12}")
    for name, rate in rows.items():
        rel = f"  {rate / lionagi_rate:5.2f}x lionagi" if lionagi_rate else ""
        cpu = cpu_rows[name]
        cpu_rel = f"  {cpu / lionagi_cpu:5.2f}x" if lionagi_cpu else ""
        print(f"  {name:<45} {rate:>12,.0f}{rel:<16} {cpu:>10,.0f}{cpu_rel}")
    if version is None:
        print("  lionagi: not installed (pip install 'lionagi==0.36.*' to compare)")
    elif ratio is not None:
        print(f"ratio: turnlog with every chunk durable = {ratio:.2f}x lionagi run() (target >= 1.0x)")
        if cpu_ratio is not None:
            print(f"       by CPU time: {cpu_ratio:.2f}x")
    return 0


def _run_async(coro: Coroutine[Any, Any, tuple[float, float]]) -> tuple[float, float]:
    async def main() -> tuple[float, float]:
        return await coro

    return anyio.run(main)
