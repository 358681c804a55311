"""``turnlog demo``: the main job, offline, on ``./turnlog-demo.db`` or ``--store`` (see ``turnlog.tools._demo``)."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
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
DEFAULT_STORE = "turnlog-demo.db"
"""The demo's store when no ``--store`` is given: a file in the current directory."""


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        default=None,
        help=f"store URL (sqlite:///path.db, postgresql://...) or a SQLite file path; default: "
        f"./{DEFAULT_STORE} (created when missing). The demo adds its own branches and touches nothing "
        "else, so an existing store keeps what it holds",
    )


async def _main(url: str, workdir: Path, analytics_db: Path | None) -> Demo:
    from turnlog.kernel import Branch
    from turnlog.testing import FakeOpenAIServer

    script = openai_script(
        operate=callable(getattr(Branch, "operate", None)),
        react=callable(getattr(Branch, "ReAct", None)),
    )
    async with FakeOpenAIServer(script) as server, open_store(url, upcasters=catalogue_upcasters()) as store:
        print(f"fake OpenAI server: {server.base_url} (in-process, loopback)")
        print("fake Claude CLI:    python -m turnlog.testing._fake_cli claude (a real child process)")
        demo = Demo(
            store=store, workdir=workdir, base_url=server.base_url, store_url=url, analytics_db=analytics_db
        )
        await demo.run_all()
        return demo


def _next_steps(flag: str, demo: Demo) -> list[str]:
    store = f"--store {shlex.quote(flag)}"
    if demo.branch is None or demo.branch.version == 0:
        return [f"turnlog branches {store}", f"turnlog verify {store}"]
    b = demo.branch.id
    analytics = "" if demo.analytics_db is None else f" --analytics-db {shlex.quote(str(demo.analytics_db))}"
    at = demo.version_after_communicate or 1
    lines = [
        f"turnlog branches {store}",
        f"turnlog log {b} {store}",
        f"turnlog show {b} --at {at} {store}",
        f"turnlog diff {b} {at} {demo.branch.version} {store}",
        f"turnlog fork {b} --at {at} --name {shlex.quote(demo.fork_name)} {store}",
        f"turnlog replay {b} --execute {store}",
        f"turnlog stats --by verb {store}{analytics}",
        f"turnlog tail --type run.failed {store}",
        f"turnlog verify {store}",
        f"turnlog ui {store}",
    ]
    if demo.fork_id is not None:
        lines.insert(3, f"turnlog show {demo.fork_id} {store}")
    return lines


def _where_turnlog_is() -> str | None:
    """A hint when the ``turnlog`` the next steps name is not the one on PATH (a fresh venv)."""
    here = Path(sys.executable).parent / "turnlog"
    found = shutil.which("turnlog")
    if not here.is_file() or (found is not None and Path(found).resolve() == here.resolve()):
        return None
    try:
        shown = here.relative_to(Path.cwd())
    except ValueError:
        shown = here
    return (
        f"turnlog is not on your PATH: run these as {shown} ..., or first "
        f"'source {shown.parent / 'activate'}'"
    )


def _run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.store is None:
        path = Path(DEFAULT_STORE).resolve()
        url, flag = f"sqlite:///{path}", DEFAULT_STORE
    else:
        url = store_url(args.store)
        flag = args.store
    file = sqlite_file(url)
    shown = str(file) if file is not None else url
    # Every store has a default analytics database (turnlog.analytics), which `turnlog stats` finds too.
    analytics_db: Path | None = None
    print("turnlog demo: an event-sourced conversation log and its operation kernel, offline\n")
    print(f"store: {shown}")
    # The demo never talks to a real provider; make sure nothing it starts can (loopback only).
    os.environ["TURNLOG_ALLOW_MODEL_REQUESTS"] = "0"
    # Scratch space (the fake CLI's state, the run buffer, the child's log): removed at the end.
    workdir = Path(tempfile.mkdtemp(prefix="turnlog-demo-"))
    try:
        demo = anyio.run(_main, url, workdir, analytics_db)
    except (StoreError, ProjectionError) as exc:
        raise UserError(str(exc)) from exc
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
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
    hint = _where_turnlog_is()
    if hint:
        print(f"   ({hint})")
    for line in _next_steps(flag, demo):
        print(f"   {line}")
    return 1 if failed else 0


COMMAND = Command(
    name="demo",
    help="the main job, offline: verbs, a killed stream recovered and resumed, time travel, replay, stats",
    description="Run every part of turnlog on a SQLite store (./turnlog-demo.db unless --store), offline, against the loopback fake "
    "OpenAI server and the fake Claude CLI: communicate with a structured answer, operate with a tool, "
    "ReAct in two rounds, a CLI run killed with SIGKILL mid-stream then recovered and resumed, and "
    "then the timeline, time travel, a fork, an audit replay, analytics and hash-chain verification. "
    "The demo adds its own branches and touches nothing else in the store; it leaves no temporary files.",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog demo",
)
