"""``turnlog recover``: import leftover stream buffers and close the runs a crash left open."""

from __future__ import annotations

import argparse

import anyio

from ._command import Command, add_store_argument, emit_json
from ._inspect import opened_store

__all__ = ["COMMAND"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_store_argument(parser)
    parser.add_argument(
        "--persist-dir",
        default=None,
        help="where stream_persist buffers are (default: STORE.runs/ beside a store file, else ./runs/STORE_ID)",
    )


async def _recover(value: str | None, persist_dir: str | None) -> object:
    from turnlog.kernel import recover

    # recover writes only to runs a store already holds: it never creates a store
    async with opened_store(value) as store:
        return await recover(store, persist_dir)


def _run(args: argparse.Namespace) -> int:
    from turnlog.kernel import RecoveryReport

    report = anyio.run(_recover, args.store, args.persist_dir)
    assert isinstance(report, RecoveryReport)
    # runs whose recovery failed (the others were recovered) and buffers left alone
    failed = report.failed
    skipped = report.skipped
    status = 1 if failed else 0
    if args.json:
        emit_json(report.to_dict())
        return status
    if not report.changed and not report.problems and not failed and not report.live:
        print(f"nothing to recover (buffers searched in {report.persist_dir})")
        return 0
    for run in report.runs:
        what = "closed as crashed" if run.closed else "chunks imported"
        print(
            f"run {run.run_id} (branch {run.branch_id}): {what}; {run.chunks} chunks, "
            f"{run.imported} imported, {run.messages} messages recorded, "
            f"{run.interrupted_text} chars of interrupted text, {run.closed_tools} tool calls closed"
            + (f"; resume session {run.session_id}" if run.session_id else "")
        )
        if run.note:
            print(f"  note: {run.note}")
    for live in report.live:
        print(f"left open, live: {live}")
    for problem in report.problems:
        print(f"problem: {problem}")
    for path in skipped:
        print(f"left as it is: {path}")
    for failure in failed:
        print(f"NOT RECOVERED: {failure}")
    for path in report.torn:
        print(f"torn last line tolerated: {path}")
    for path in report.kept:
        print(f"kept for inspection: {path}")
    print(f"{report.imported} chunk events imported, {len(report.removed)} buffers removed")
    return status


COMMAND = Command(
    name="recover",
    help="import leftover stream buffers and close runs a crash left open",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog recover --store runs.db",
    description=(
        "Find runs that started and never ended and the live buffers of stream_persist runs; "
        "import the buffered chunks (same event ids, so running it twice changes nothing), "
        "record the text received after the last response as an interrupted response, close "
        "tool calls left without a result, and end each such run with run.failed (crashed). "
        "Only runs whose writer is gone are closed: a run whose process still holds its lease "
        "(or its buffer's lock) is left open and listed as live, so it is safe to run any time."
    ),
)
