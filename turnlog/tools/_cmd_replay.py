"""``turnlog replay BRANCH``: audit replay, and with ``--execute`` re-run the recorded verbs."""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from turnlog.kernel import AuditReport, ExecuteReport, audit_replay, execute_replay

from ._command import Command, add_store_argument, emit_json
from ._inspect import add_branch_argument, branch_id_of, opened_store
from ._output import busy

__all__ = ["COMMAND"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_branch_argument(parser)
    parser.add_argument(
        "--execute",
        action="store_true",
        help="also re-run the recorded exchanges against the recorded responses and stop at the "
        "first request whose fingerprint differs",
    )
    add_store_argument(parser)


async def _replay(args: argparse.Namespace) -> tuple[AuditReport, ExecuteReport | None]:
    async with opened_store(args.store) as store:
        branch_id = await branch_id_of(store, args.branch)
        audit = await audit_replay(store, branch_id)
        executed = await execute_replay(store, branch_id) if args.execute else None
    return audit, executed


def _execute_view(report: ExecuteReport) -> dict[str, Any]:
    d = report.divergence
    return {
        "ok": report.ok,
        "calls_replayed": report.calls_replayed,
        "calls_skipped": report.calls_skipped,
        "messages_copied": report.messages_copied,
        "divergence": None
        if d is None
        else {
            "call_index": d.call_index,
            "call_id": d.call_id,
            "version": d.version,
            "expected": d.expected,
            "actual": d.actual,
            "difference": d.difference,
        },
        "final_mismatch": report.final_mismatch,
        "stopped_at_redaction": report.stopped_at_redaction,
    }


def _run(args: argparse.Namespace) -> int:
    with busy("replaying from the log"):
        audit, executed = anyio.run(_replay, args)
    ok = audit.ok and (executed is None or executed.ok)
    if args.json:
        emit_json(
            {
                "ok": ok,
                "audit": {
                    "ok": audit.ok,
                    "branch_id": audit.branch_id,
                    "version": audit.version,
                    "snapshots_checked": audit.snapshots_checked,
                    "model_calls": audit.model_calls,
                    "problems": list(audit.problems),
                    "redacted": audit.redacted,
                    "redacted_calls": audit.redacted_calls,
                },
                "execute": _execute_view(executed) if executed else None,
            }
        )
        return 0 if ok else 1
    if audit.ok:
        print(
            f"audit replay matches: branch {audit.branch_id} rebuilt from {audit.events} events "
            f"without calling a model; {audit.snapshots_checked} snapshot(s) agree; hash chain verifies"
        )
        if audit.redacted:
            print(
                f"redacted: {audit.redacted} event(s) ({', '.join(audit.redaction_reasons)}), folded as redacted"
            )
        if audit.redacted_calls:
            print(f"redacted model calls: {audit.redacted_calls} (their answers are erased: not compared)")
    else:
        for problem in audit.problems:
            print(f"MISMATCH {problem}")
    if executed is not None:
        if executed.stopped_at_redaction is not None:
            print(f"STOPPED {executed.stopped_at_redaction}")
        if executed.divergence is not None:
            print(f"DIVERGENCE {executed.divergence}")
        for problem in executed.final_mismatch:
            print(f"MISMATCH {problem}")
        if executed.ok:
            print(
                f"execute replay matches: {executed.calls_replayed} recorded call(s) re-run with identical "
                f"request fingerprints ({executed.calls_skipped} not re-runnable, "
                f"{executed.messages_copied} message(s) recorded without a model call)"
            )
    return 0 if ok else 1


COMMAND = Command(
    name="replay",
    help="audit-replay a branch from its events; --execute re-runs its verbs against recorded responses",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog replay my-branch --execute",
)
