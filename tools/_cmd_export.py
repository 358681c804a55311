"""``turnlog export``: the log as JSON Lines (the native envelope) or flat Parquet tables."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio
from turnlog.eventstore import StoreError, open_store
from turnlog.projections.analytics import AnalyticsError, AnalyticsProjection, export_jsonl, export_parquet

from ._cmd_stats import add_analytics_arguments, open_projection_args
from ._command import Command, UserError, add_store_argument
from ._output import busy

__all__ = ["COMMAND"]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add_store_argument(parser, json_flag=False)
    parser.add_argument("--branch", default=None, help="only this branch (its stream and its runs' streams)")
    parser.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl", help="default: jsonl")
    parser.add_argument(
        "--out",
        required=True,
        metavar="PATH",
        help="jsonl: the file to write ('-' for stdout); parquet: the directory to write the tables into",
    )
    add_analytics_arguments(parser)


async def _export(args: argparse.Namespace) -> str:
    url, options = open_projection_args(args)
    async with open_store(url) as store:
        if args.format == "jsonl":
            if args.out == "-":
                count = await export_jsonl(store, sys.stdout.buffer, branch=args.branch)
                sys.stdout.flush()
                return ""
            with Path(args.out).open("wb") as out:  # noqa: ASYNC230 - a local file, written once
                count = await export_jsonl(store, out, branch=args.branch)
            return f"{count} events written to {args.out}"
        async with AnalyticsProjection(store, **options) as analytics:
            written = await export_parquet(store, analytics, args.out, branch=args.branch)
        return "; ".join(f"{name}: {rows} rows" for name, rows in written.items()) + f" (in {args.out})"


def _run(args: argparse.Namespace) -> int:
    try:
        with busy(f"exporting {args.format}"):
            summary = anyio.run(_export, args)
    except (AnalyticsError, StoreError) as exc:
        raise UserError(str(exc)) from exc
    except OSError as exc:
        raise UserError(f"cannot write {args.out}: {exc.strerror or exc}") from exc
    if summary:
        print(summary, file=sys.stderr)
    return 0


COMMAND = Command(
    name="export",
    help="write the log as JSON Lines (every envelope field) or Parquet event and fact tables",
    description="jsonl writes one recorded event per line with every field (id, stream, version, position,\n"
    "type, schema, data, meta, recorded_at, prev_hash, hash). parquet (pip install 'turnlog[analytics]')\n"
    "writes events.parquet, model_calls.parquet, tool_calls.parquet and runs.parquet into --out.",
    add_arguments=_add_arguments,
    run=_run,
    example="turnlog export --format parquet --out ./export --store turnlog.db",
)
