"""``turnlog export``: the log as JSON Lines (the native envelope) or flat Parquet tables.

The output is never the store (its file, ``-wal`` or ``-shm``, also through a symbolic link
or ``$TURNLOG_STORE``) and never replaces an existing file unless ``--force`` is given. It
is written to a private temporary file next to the destination and moved into place only
when complete, so a failed export leaves no partial file and an earlier export untouched.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio

from turnlog.analytics import (
    FACT_TABLES,
    AnalyticsError,
    AnalyticsProjection,
    export_jsonl,
    export_parquet,
)
from turnlog.eventstore import Problem

from ._cmd_stats import add_analytics_arguments, open_projection_args
from ._command import EXIT_FAILED, EXIT_OK, Command, UserError, add_store_argument
from ._inspect import branch_id_of, opened_store
from ._outfile import store_files, written_directory_files, written_file
from ._output import busy
from ._shown import log_damage, warn_damage

__all__ = ["COMMAND"]

_PARQUET_FILES = ("events.parquet", *(f"{t.name.removeprefix('analytics_')}.parquet" for t in FACT_TABLES))


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_store_argument(parser, json_flag=False)
    parser.add_argument(
        "--branch",
        default=None,
        help="only this branch (id, unique id prefix or name): its stream and its runs' streams",
    )
    parser.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl", help="default: jsonl")
    parser.add_argument(
        "--out",
        required=True,
        metavar="PATH",
        help="jsonl: the file to write ('-' for stdout); parquet: the directory to write the tables into",
    )
    parser.add_argument("--force", action="store_true", help="replace files that exist already")
    parser.add_argument(
        "--without-content",
        action="store_true",
        help="leave out conversation content (the fields the event catalogue declares as content): "
        "a file to share for analysis; its hashes no longer match its payloads",
    )
    add_analytics_arguments(parser)


class _Damaged(Exception):
    """The log to export holds events that do not match the hash chain: nothing was written."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(f"{len(problems)} problem(s)")
        self.problems = problems


async def _export(args: argparse.Namespace) -> str:
    url, options = open_projection_args(args)
    protected = store_files(url)
    if options.get("database"):
        protected.append(Path(options["database"]))
    async with opened_store(args.store, upcast=False) as store:
        branch = await branch_id_of(store, args.branch) if args.branch is not None else None
        # An export is a copy others trust without the store: it must not launder altered
        # events into a clean-looking file, so a damaged log is refused before anything is written.
        damaged = await log_damage(store, branch)
        if damaged:
            raise _Damaged(damaged)
        if args.format == "jsonl":
            if args.out == "-":
                await export_jsonl(store, sys.stdout.buffer, branch=branch, content=not args.without_content)
                sys.stdout.flush()
                return ""
            out = Path(args.out)
            with written_file(out, force=args.force, protected=protected) as handle:
                count = await export_jsonl(store, handle, branch=branch, content=not args.without_content)
            return f"{count} events written to {out}"
        directory = Path(args.out)
        with written_directory_files(
            directory, _PARQUET_FILES, force=args.force, protected=protected
        ) as scratch:
            async with AnalyticsProjection(store, **options) as analytics:
                written = await export_parquet(
                    store, analytics, scratch, branch=branch, content=not args.without_content
                )
        return "; ".join(f"{name}: {rows} rows" for name, rows in written.items()) + f" (in {directory})"


def _run(args: argparse.Namespace) -> int:
    try:
        with busy(f"exporting {args.format}"):
            summary = anyio.run(_export, args)
    except _Damaged as exc:
        warn_damage("export", exc.problems)
        print("turnlog export: refused: nothing was written; see 'turnlog verify'", file=sys.stderr)
        return EXIT_FAILED
    except AnalyticsError as exc:  # a price file, a missing extra, where the analytics tables go
        raise UserError(str(exc)) from exc
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        raise UserError(f"cannot write {args.out}: {exc.strerror or exc}") from exc
    if summary:
        print(summary, file=sys.stderr)
    return EXIT_OK


COMMAND = Command(
    name="export",
    help="write the log as JSON Lines (every envelope field) or Parquet event and fact tables",
    description="jsonl writes one recorded event per line with every field (id, stream, version, position,\n"
    "type, schema, data, meta, recorded_at, prev_hash, hash). parquet (pip install 'turnlog[analytics]')\n"
    "writes events.parquet, model_calls.parquet, tool_calls.parquet and runs.parquet into --out.\n"
    "The output is never the store, and an existing file is replaced only with --force; it is\n"
    "written to a private temporary file and moved into place when complete. A log holding\n"
    "events that do not match the hash chain is refused (exit 1): nothing is written.",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog export --format parquet --out ./export --store turnlog.db",
)
