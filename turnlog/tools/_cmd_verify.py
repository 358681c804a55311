"""``turnlog verify``: hash chains, version gaps and integrity of a store, and the log's invariants."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from turnlog.eventstore import EventStore, VerifyReport
from turnlog.projections import check_invariants, default_run_dir

from ._command import Command, UserError, add_store_argument, emit_json
from ._inspect import opened_store
from ._output import busy

if TYPE_CHECKING:
    from turnlog.kernel import SnapshotFileError, SnapshotFiles

__all__ = ["COMMAND", "with_invariants"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_store_argument(parser)
    parser.add_argument("--stream", default=None, help="check one stream only")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="SQLite: run PRAGMA quick_check instead of the slower, thorough integrity_check",
    )
    parser.add_argument(
        "--snapshot-files",
        type=Path,
        default=None,
        help="also check the stream_persist snapshot files (*.json) in this directory; default: the "
        "store's run directory (<store file>.runs/), when it exists",
    )


async def _verify(
    value: str | None, stream: str | None, quick: bool, files: Path | None
) -> tuple[VerifyReport, SnapshotFiles | None]:
    async with opened_store(value, upcast=False) as store:
        if stream is not None and await store.stream_version(stream) == 0:
            # a stream that is not there verifies trivially: say so rather than "ok"
            raise UserError(f"no stream {stream!r} in the store (turnlog branches lists the branches)")
        report = await store.verify(stream, quick=quick)
        report = await with_invariants(store, report, stream)
        return report, await _snapshot_files(files or default_run_dir(store), store)


async def _snapshot_files(directory: Path, store: EventStore) -> SnapshotFiles | None:
    """The kernel's check of the snapshot files in ``directory``; None (no kernel loaded) if there are none."""
    folder = anyio.Path(directory)
    if not await folder.is_dir() or not [found async for found in folder.glob("*.json")]:
        return None
    from turnlog.kernel import verify_snapshot_files  # about 0.3 s of CPU: only when there are files

    return await verify_snapshot_files(directory, store)


async def with_invariants(store: EventStore, report: VerifyReport, stream: str | None = None) -> VerifyReport:
    """``report`` with the log's invariants checked too (``"invariants"`` in its checks).

    The hashes prove that nothing changed; the invariants (one terminal per run, after its
    start, no chunk after it, a fork's parent version present) that what was written holds up.
    """
    found = await check_invariants(store, stream)
    return dataclasses.replace(
        report, problems=(*report.problems, *found), checks=(*report.checks, "invariants")
    )


def _run(args: argparse.Namespace) -> int:
    if args.snapshot_files is not None and not args.snapshot_files.is_dir():
        raise UserError(f"--snapshot-files: {args.snapshot_files} is not a directory")
    with busy("verifying hash chains"):
        report, snapshot_files = anyio.run(_verify, args.store, args.stream, args.quick, args.snapshot_files)
    unverified = snapshot_files.unverified if snapshot_files is not None else ()
    if snapshot_files is not None and snapshot_files.problems:
        return _report_files(report, list(snapshot_files.problems), unverified, as_json=args.json)
    ran = [check for check in report.checks if check in ("integrity_check", "quick_check")]
    database = f"; SQLite {ran[0]} ok" if ran else ""
    if args.json:
        emit_json(
            {
                "ok": report.ok,
                "streams": report.streams,
                "events": report.events,
                "snapshots": report.snapshots,
                "checks": list(report.checks),
                "redacted": report.redacted,
                "redaction_reasons": list(report.redaction_reasons),
                "problems": [
                    {"stream": p.stream, "version": p.version, "position": p.position, "what": p.what}
                    for p in report.problems
                ],
                "unverified_snapshot_files": [{"path": path, "why": why} for path, why in unverified],
            }
        )
        return 0 if report.ok else 1
    # A file of the format before digests is not damage, but what it holds was not checked:
    # said before the verdict, so "ok" never stands for it.
    for path, why in unverified:
        print(f"UNVERIFIED snapshot file {path}: {why}")
    if report.ok:
        print(
            f"ok: {report.events:,} events in {report.streams:,} streams{_redactions_note(report)}; "
            f"every hash chain verifies{database}{_unverified_note(unverified)}"
        )
    else:
        for problem in report.problems:
            print(f"PROBLEM {problem}")
        print(f"{len(report.problems)} problem(s) in {report.events} events, {report.streams} streams")
    return 0 if report.ok else 1


def _report_files(
    report: VerifyReport,
    bad_files: list[SnapshotFileError],
    unverified: tuple[tuple[str, str], ...],
    *,
    as_json: bool,
) -> int:
    """Snapshot files that fail their check (with the store's own problems): always exit 1."""
    if as_json:
        emit_json(
            {
                "ok": False,
                "problems": [str(p) for p in report.problems],
                "snapshot_files": [{"path": e.path, "what": str(e)} for e in bad_files],
                "unverified_snapshot_files": [{"path": path, "why": why} for path, why in unverified],
            }
        )
        return 1
    for problem in report.problems:
        print(f"PROBLEM {problem}")
    for error in bad_files:
        print(f"PROBLEM snapshot file {error}")
    for path, why in unverified:
        print(f"UNVERIFIED snapshot file {path}: {why}")
    print(f"{len(report.problems) + len(bad_files)} problem(s), {len(bad_files)} in snapshot files")
    return 1


def _unverified_note(unverified: tuple[tuple[str, str], ...]) -> str:
    """``; 1 snapshot file unverified (older format)`` when some are."""
    if not unverified:
        return ""
    many = len(unverified) != 1
    return f"; {len(unverified)} snapshot file{'s' if many else ''} unverified (older format, listed above)"


def _redactions_note(report: VerifyReport) -> str:
    """``; 12 payloads redacted (3 reasons)`` when the store holds confirmed redactions."""
    if not report.redacted:
        return ""
    reasons = len(report.redaction_reasons)
    return f"; {report.redacted:,} payloads redacted ({reasons} reason{'s' if reasons != 1 else ''})"


COMMAND = Command(
    name="verify",
    help="check hash chains, version gaps, integrity and the log's invariants; non-zero exit on any problem",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog verify --store turnlog.db",
)
