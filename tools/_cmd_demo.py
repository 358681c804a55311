"""``turnlog demo``: the main job, offline, on a fresh SQLite store (see ``turnlog.tools._demo``)."""

from __future__ import annotations

import argparse
import os
import shlex
import tempfile
import time
from pathlib import Path

import anyio
from turnlog.eventstore import StoreError, open_store
from turnlog.projections import ProjectionError, catalogue_upcasters

from ._command import Command, UserError, sqlite_file, store_url
from ._demo import Demo, openai_script

__all__ = ["COMMAND"]

_BUDGET_S = 30.0


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        default=None,
        help="store URL (sqlite:///path.db, postgresql://...) or a SQLite file path; default: a fresh "
        "SQLite file in a new temporary directory. The demo runs recover on it: give a store no other "
        "process is streaming into",
    )


async def _main(url: str, workdir: Path) -> Demo:
    from turnlog.kernel import Branch

    from ._fake_openai import FakeOpenAIServer

    script = openai_script(
        operate=callable(getattr(Branch, "operate", None)),
        react=callable(getattr(Branch, "ReAct", None)),
    )
    async with FakeOpenAIServer(script) as server, open_store(url, upcasters=catalogue_upcasters()) as store:
        print(f"fake OpenAI server: {server.base_url} (in-process, loopback)")
        print("fake Claude CLI:    python -m turnlog.tools._fake_cli claude (a real child process)")
        demo = Demo(store=store, workdir=workdir, base_url=server.base_url, store_url=url)
        await demo.run_all()
        return demo


def _next_steps(flag: str, demo: Demo) -> list[str]:
    store = f"--store {shlex.quote(flag)}"
    if demo.branch is None or demo.branch.version == 0:
        return [f"turnlog branches {store}", f"turnlog verify {store}"]
    b = demo.branch.id
    # Only a SQLite store keeps the analytics tables in its own file.
    analytics = (
        ""
        if flag.startswith("sqlite:") or "://" not in flag
        else f" --analytics-db {demo.workdir / 'analytics.db'}"
    )
    at = demo.version_after_communicate or 1
    lines = [
        f"turnlog branches {store}",
        f"turnlog log {b} {store}",
        f"turnlog show {b} --at {at} {store}",
        f"turnlog diff {b} {at} {demo.branch.version} {store}",
        f"turnlog fork {b} --at {at} --name what-if {store}",
        f"turnlog replay {b} --execute {store}",
        f"turnlog stats --by verb {store}{analytics}",
        f"turnlog tail --type run.failed {store}",
        f"turnlog verify {store}",
        f"turnlog ui {store}",
    ]
    if demo.fork_id is not None:
        lines.insert(3, f"turnlog show {demo.fork_id} {store}")
    return lines


def _run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="turnlog-demo-"))
    if args.store is None:
        path = workdir / "demo.db"
        url, flag = f"sqlite:///{path}", str(path)
    else:
        url = store_url(args.store)
        flag = args.store
    file = sqlite_file(url)
    shown = str(file) if file is not None else url
    print("turnlog demo: an event-sourced conversation log and its operation kernel, offline\n")
    print(f"store: {shown}")
    # The demo never talks to a real provider; make sure nothing it starts can (loopback only).
    os.environ["TURNLOG_ALLOW_MODEL_REQUESTS"] = "0"
    try:
        demo = anyio.run(_main, url, workdir)
    except (StoreError, ProjectionError) as exc:
        raise UserError(str(exc)) from exc
    took = time.perf_counter() - started
    outcomes = demo.outcomes
    failed = [o for o in outcomes if o.status == "failed"]
    skipped = [o for o in outcomes if o.status == "skipped"]
    ran = len(outcomes) - len(skipped)
    print(f"\n{'FAILED' if failed else 'done'}: {ran - len(failed)} of {ran} steps succeeded", end="")
    print(f", {len(skipped)} skipped" if skipped else "", end="")
    print(f", in {took:.1f} s (budget {_BUDGET_S:.0f} s).")
    for outcome in failed:
        print(f"   failed: {outcome.name}: {outcome.detail}")
    if url.startswith("memory:") or url.endswith(":memory:"):
        print("\nThe in-memory store is gone now; run 'turnlog demo' without --store to keep one to explore.")
        return 1 if failed else 0
    print("\nTry next:")
    for line in _next_steps(flag, demo):
        print(f"   {line}")
    return 1 if failed else 0


COMMAND = Command(
    name="demo",
    help="the main job, offline: verbs, a killed stream recovered and resumed, time travel, replay, stats",
    description="Run every part of turnlog on a fresh SQLite store, offline, against the loopback fake "
    "OpenAI server and the fake Claude CLI: communicate with a structured answer, operate with a tool, "
    "ReAct in two rounds, a CLI run killed with SIGKILL mid-stream then recovered and resumed, and "
    "then the timeline, time travel, a fork, an audit replay, analytics and hash-chain verification.",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog demo",
)
