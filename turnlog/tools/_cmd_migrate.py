"""``turnlog migrate``: copy a store to another backend, unchanged, and verify the copy."""

from __future__ import annotations

import argparse
import sys

import anyio

from turnlog.eventstore import MigrateReport, StoreError, StoreNotFound, migrate, open_store

from ._command import Command, UserError, emit_json, sqlite_file, store_url

__all__ = ["COMMAND"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from",
        dest="source",
        required=True,
        help="the store to copy (sqlite:///path.db or postgresql://...)",
    )
    parser.add_argument(
        "--to",
        dest="target",
        required=True,
        help="the store to write: empty, or holding an earlier copy of the same source (then it resumes)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _check_source_exists(url: str) -> None:
    # Opening a SQLite URL creates the file; a mistyped source must not become an empty copy.
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        raise UserError(f"the source store {path} does not exist")


def _compact(url: str) -> str:
    """A SQLite target asks for the newest compact format (4) unless its URL names a format."""
    if not url.startswith("sqlite:") or url == "sqlite:///:memory:":
        return url
    query = url.partition("?")[2]
    if any(part.startswith("format=") for part in query.split("&")):
        return url
    return f"{url}{'&' if query else '?'}format=4"


async def _migrate(source: str, target: str, show_progress: bool) -> MigrateReport:
    def progress(done: int, total: int) -> None:
        print(f"\rcopied {done}/{total} events", end="", file=sys.stderr, flush=True)

    try:
        async with open_store(source, create=False) as src, open_store(_compact(target)) as dst:
            report = await migrate(src, dst, progress=progress if show_progress else None)
    except StoreNotFound as exc:
        raise UserError(f"the source store does not exist: {exc}") from exc
    except StoreError as exc:
        raise UserError(str(exc)) from exc
    if show_progress:
        print(file=sys.stderr)
    return report


def _run(args: argparse.Namespace) -> int:
    source, target = store_url(args.source), store_url(args.target)
    if source == target:
        raise UserError("--from and --to name the same store")
    _check_source_exists(source)
    report = anyio.run(_migrate, source, target, not args.json and sys.stderr.isatty())
    if args.json:
        emit_json(
            {
                "ok": report.ok,
                "events_copied": report.events_copied,
                "events_present": report.events_present,
                "snapshots_copied": report.snapshots_copied,
                "head": report.head,
                "problems": [str(problem) for problem in report.verify.problems],
            }
        )
    else:
        print(
            f"copied {report.events_copied} events ({report.events_present} were already there) and "
            f"{report.snapshots_copied} snapshots; target head {report.head}"
        )
        if report.ok:
            print(f"ok: the copy verifies ({report.verify.events} events in {report.verify.streams} streams)")
        else:
            for problem in report.verify.problems:
                print(f"PROBLEM {problem}")
    return 0 if report.ok else 1


COMMAND = Command(
    name="migrate",
    help="copy a store to another backend (ids, versions, positions, hashes, snapshots) and verify it",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog migrate --from sqlite:///turnlog.db --to postgresql://postgres@127.0.0.1/test",
)
