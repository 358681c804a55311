"""``turnlog bench storage``: the bytes a conversation turn costs on disk, beside LangGraph's checkpointer.

One conversation of ``--turns`` turns (500 by default; an instruction and an answer of
``--text`` characters each, 200 by default) is written by each peer into a fresh SQLite file:

- **turnlog**: ``Branch.communicate`` with ``turnlog.testing.ScriptedModel`` answering, so the
  store holds what an agent's store holds (messages, model calls, runs, the kernel's snapshots);
- **LangGraph** (``pip install 'turnlog[bench]'``): a one-node ``StateGraph`` with
  ``SqliteSaver``, one ``invoke`` per turn on one thread, in two shapes: ``MessagesState``
  (``add_messages``: every checkpoint holds the whole message list) and ``DeltaChannel``
  (checkpoints hold the new writes, with a full snapshot every 100 updates).

Each peer's figure is its file's size after a WAL checkpoint and ``VACUUM``, per turn. For
turnlog the rows are also split by event type and snapshot type (``length(data) +
length(meta)`` and the other columns' bytes), and the tables with their indexes (``dbstat``)
are given. Both peers' states are read back and must hold every message. With ``--store
postgresql://...`` the same conversation is also written to a fresh PostgreSQL schema and
``pg_total_relation_size`` of its tables is given.

Target (issue 28): turnlog at most 2,048 bytes per turn at 500 turns, events and snapshots
together (the VACUUMed file).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio

from turnlog.tools._command import emit_json

from ._options import at_least

__all__ = ["add_arguments", "run"]

TARGET_BYTES_PER_TURN = 2048


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--turns", type=at_least(2), default=500, help="turns of the conversation (default 500)"
    )
    parser.add_argument(
        "--text",
        type=at_least(1),
        default=200,
        help="characters of each instruction and answer (default 200)",
    )
    parser.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="also write the conversation to this PostgreSQL (postgresql://...), in a schema of its own",
    )
    parser.add_argument("--no-langgraph", action="store_true", help="measure turnlog only")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _question(i: int, size: int) -> str:
    return f"question {i} ".ljust(size, "q")


def _answer(i: int, size: int) -> str:
    return f"answer {i} ".ljust(size, "a")


# ------------------------------------------------------------------------------------------ turnlog


async def _write_turnlog(url: str, turns: int, size: int) -> tuple[str, int]:
    """Write the conversation; return the branch id and how many messages a fresh load shows."""
    from turnlog.eventstore import open_store
    from turnlog.kernel import Branch
    from turnlog.projections import catalogue_upcasters, rebuild
    from turnlog.testing import ScriptedModel

    model = ScriptedModel(*(_answer(i, size) for i in range(turns)))
    async with open_store(url, upcasters=catalogue_upcasters()) as store:
        branch = Branch(store=store, system="You are a benchmark.", chat_model=model)
        for i in range(turns):
            await branch.communicate(_question(i, size))
        model.assert_complete()
        state = await rebuild(store, branch.id)
        return branch.id, len(state.messages)


def _column_bytes(conn: sqlite3.Connection, table: str, payload: tuple[str, ...]) -> tuple[str, str]:
    """SQL sums of a row's payload columns and of its other columns, in stored bytes (about)."""
    columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]

    def size(column: str) -> str:
        # an integer or a float takes at most 8 bytes in a record; text and blobs their length
        return (
            f"(CASE typeof({column}) WHEN 'integer' THEN 8 WHEN 'real' THEN 8 WHEN 'null' THEN 0 "
            f"ELSE length(CAST({column} AS BLOB)) END)"
        )

    inner = " + ".join(size(c) for c in columns if c in payload) or "0"
    outer = " + ".join(size(c) for c in columns if c not in payload and c != "type") or "0"
    return inner, outer


def _rows_by_type(conn: sqlite3.Connection, table: str, turns: int) -> dict[str, dict[str, float]]:
    payload, other = _column_bytes(conn, table, ("data", "meta"))
    out: dict[str, dict[str, float]] = {}
    query = f"SELECT type, COUNT(*), SUM({payload}), SUM({other}) FROM {table} GROUP BY type ORDER BY type"
    for kind, count, inner, outer in conn.execute(query):
        out[str(kind)] = {
            "rows": count,
            "payload_bytes_per_turn": (inner or 0) / turns,
            "other_bytes_per_turn": (outer or 0) / turns,
        }
    return out


def _tables(conn: sqlite3.Connection) -> dict[str, int]:
    """Bytes of each table with its indexes, from ``dbstat`` (empty when SQLite lacks it)."""
    try:
        pages = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall()
    except sqlite3.DatabaseError:
        return {}
    owner = dict(conn.execute("SELECT name, tbl_name FROM sqlite_master"))
    out: dict[str, int] = {}
    for name, size in pages:
        table = owner.get(name, name)
        out[table] = out.get(table, 0) + int(size)
    return out


def _vacuumed(path: Path) -> int:
    """The file's size after folding the WAL in and ``VACUUM`` (what the data needs on disk)."""
    conn = sqlite3.connect(str(path))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return path.stat().st_size


def _turnlog_sqlite(directory: Path, turns: int, size: int, *, compact: bool = False) -> dict[str, Any]:
    """Write the conversation into a SQLite store, default layout (format 2) or compact (format 4)."""
    directory = directory / ("turnlog-compact" if compact else "turnlog")
    directory.mkdir()
    path = directory / "turnlog.db"
    url = f"sqlite:///{path}" + ("?format=4" if compact else "")
    _, messages = anyio.run(_write_turnlog, url, turns, size)
    # anything the store keeps beside its database (snapshot files, buffers) counts too
    beside = sum(
        f.stat().st_size for f in directory.rglob("*") if f.is_file() and not f.name.startswith("turnlog.db")
    )
    file_bytes = _vacuumed(path)
    conn = sqlite3.connect(str(path))
    try:
        # the split by type reads format 2's columns; the compact layout keeps types as numbers
        # and payloads compressed, so only its file and table sizes are reported
        events = {} if compact else _rows_by_type(conn, "events", turns)
        snapshots = {} if compact else _rows_by_type(conn, "snapshots", turns)
        tables = _tables(conn)
    finally:
        conn.close()
    rows = sum(
        r["payload_bytes_per_turn"] + r["other_bytes_per_turn"]
        for t in (events, snapshots)
        for r in t.values()
    )
    return {
        "messages": messages,
        "file_bytes": file_bytes,
        "bytes_per_turn": (file_bytes + beside) / turns,
        "row_bytes_per_turn": rows,
        "files_beside_bytes": beside,
        "events": events,
        "snapshots": snapshots,
        "tables_bytes_per_turn": {name: b / turns for name, b in sorted(tables.items())},
    }


# ------------------------------------------------------------------------------------- PostgreSQL


async def _turnlog_postgres(base: str, turns: int, size: int) -> dict[str, Any]:
    import psycopg
    from psycopg import sql

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    url = base + ("&" if "?" in base else "?") + urlencode({"schema": schema})
    plain = base.split("?", 1)[0]
    try:
        _, messages = await _write_turnlog(url, turns, size)
        async with await psycopg.AsyncConnection.connect(plain, autocommit=True) as conn:
            await conn.execute(sql.SQL("VACUUM FULL {}.events").format(sql.Identifier(schema)))
            await conn.execute(sql.SQL("VACUUM FULL {}.snapshots").format(sql.Identifier(schema)))
            sizes: dict[str, int] = {}
            for table in ("events", "snapshots"):
                cur = await conn.execute(
                    "SELECT pg_total_relation_size(%s::regclass)",
                    (sql.Identifier(schema, table).as_string(conn),),
                )
                row = await cur.fetchone()
                sizes[table] = int(row[0]) if row is not None else 0
    finally:
        async with await psycopg.AsyncConnection.connect(plain, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    return {
        "messages": messages,
        "bytes_per_turn": sum(sizes.values()) / turns,
        "tables_bytes_per_turn": {t: b / turns for t, b in sizes.items()},
    }


# -------------------------------------------------------------------------------------- LangGraph


def _langgraph(directory: Path, turns: int, size: int, *, delta: bool) -> dict[str, Any]:
    from typing import Annotated, TypedDict

    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.channels import DeltaChannel
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.graph.message import _messages_delta_reducer

    # the functional form: the annotation is evaluated here (LangGraph would look its names up
    # in this module's globals, where the lazily imported ones are not)
    delta_state = TypedDict(  # noqa: UP013
        "delta_state", {"messages": Annotated[list[Any], DeltaChannel(_messages_delta_reducer)]}
    )

    count = 0

    def answer(state: Any) -> dict[str, Any]:
        nonlocal count
        count += 1
        return {"messages": [AIMessage(content=_answer(count - 1, size))]}

    builder: Any = StateGraph(delta_state if delta else MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    path = directory / ("langgraph-delta.db" if delta else "langgraph.db")
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        graph = builder.compile(checkpointer=SqliteSaver(conn))
        config: Any = {"configurable": {"thread_id": "t"}}
        for i in range(turns):
            graph.invoke({"messages": [HumanMessage(content=_question(i, size))]}, config)
        messages = len(graph.get_state(config).values["messages"])
    finally:
        conn.close()
    file_bytes = _vacuumed(path)
    conn = sqlite3.connect(str(path))
    try:
        tables = _tables(conn)
    finally:
        conn.close()
    return {
        "messages": messages,
        "file_bytes": file_bytes,
        "bytes_per_turn": file_bytes / turns,
        "tables_bytes_per_turn": {name: b / turns for name, b in sorted(tables.items())},
    }


# ------------------------------------------------------------------------------------------ report


def _measure(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    turns, size = args.turns, args.text
    peers: dict[str, Any] = {
        "turnlog": _turnlog_sqlite(directory, turns, size),
        "turnlog_compact": _turnlog_sqlite(directory, turns, size, compact=True),
    }
    if not args.no_langgraph:
        peers["langgraph"] = _langgraph(directory, turns, size, delta=False)
        peers["langgraph_delta"] = _langgraph(directory, turns, size, delta=True)
    counts = {name: peer["messages"] for name, peer in peers.items()}
    if any(c != 2 * turns for c in counts.values()):
        raise RuntimeError(f"a peer lost messages: {counts} for {turns} turns")
    ours = peers["turnlog"]["bytes_per_turn"]
    compact = peers["turnlog_compact"]["bytes_per_turn"]
    ratios = {
        name: ours / peer["bytes_per_turn"]
        for name, peer in peers.items()
        if name not in ("turnlog", "turnlog_compact")
    }
    ratios["compact_vs_default"] = compact / ours
    if "langgraph_delta" in peers:
        ratios["compact_vs_langgraph_delta"] = compact / peers["langgraph_delta"]["bytes_per_turn"]
    report: dict[str, Any] = {
        "benchmark": "storage",
        "turns": turns,
        "text": size,
        "peers": peers,
        "ratios": ratios,
        "targets": {
            f"turnlog <= {TARGET_BYTES_PER_TURN} B/turn at {turns} turns": ours <= TARGET_BYTES_PER_TURN,
            f"turnlog compact (format 4) <= {TARGET_BYTES_PER_TURN} B/turn at {turns} turns": compact
            <= TARGET_BYTES_PER_TURN,
        },
    }
    if args.store:
        report["postgresql"] = anyio.run(_turnlog_postgres, args.store, turns, size)
    return report


def _print(report: dict[str, Any]) -> None:
    turns = report["turns"]
    print(f"storage: {turns} turns of two {report['text']}-character messages; VACUUMed SQLite file per turn")
    ours = report["peers"]["turnlog"]
    for name, peer in report["peers"].items():
        if name == "turnlog":
            ratio = "   (format 2, the default layout)"
        elif name == "turnlog_compact":
            ratio = f"   (format 4: sqlite:///FILE?format=4) {report['ratios']['compact_vs_default']:.2f}x of format 2"
            if "compact_vs_langgraph_delta" in report["ratios"]:
                ratio += f", {report['ratios']['compact_vs_langgraph_delta']:.2f}x of langgraph_delta"
        else:
            ratio = f"   turnlog/{name} {report['ratios'][name]:.2f}x"
        print(f"  {name:<16} {peer['bytes_per_turn']:>9,.0f} B/turn  ({peer['file_bytes']:,} B){ratio}")
    print("turnlog rows per turn (payload = data + meta; other = the other columns):")
    for table in ("events", "snapshots"):
        for kind, row in ours[table].items():
            print(
                f"  {table:<10} {kind:<22} {row['rows']:>6} rows {row['payload_bytes_per_turn']:>8.0f} "
                f"+ {row['other_bytes_per_turn']:>5.0f} B/turn"
            )
    print(
        f"  {'all rows':<33} {ours['row_bytes_per_turn']:>15,.0f} B/turn (the file adds indexes and free space in pages)"
    )
    tables = ", ".join(f"{t} {b:,.0f}" for t, b in ours["tables_bytes_per_turn"].items())
    print(f"turnlog tables with indexes, B/turn: {tables or 'n/a (no dbstat)'}")
    if ours["files_beside_bytes"]:
        print(f"turnlog files beside the database: {ours['files_beside_bytes']:,} B")
    if "postgresql" in report:
        pg = report["postgresql"]
        tables = ", ".join(f"{t} {b:,.0f}" for t, b in pg["tables_bytes_per_turn"].items())
        print(f"turnlog on PostgreSQL: {pg['bytes_per_turn']:,.0f} B/turn ({tables})")
    for name, ok in report["targets"].items():
        print(f"target {name}: {'met' if ok else 'MISSED'}")


def run(args: argparse.Namespace) -> int:
    if not args.no_langgraph:
        try:
            import langgraph.checkpoint.sqlite  # noqa: F401
        except ImportError:
            print(
                "LangGraph is not installed: pip install 'turnlog[bench]' (or pass --no-langgraph)",
                file=sys.stderr,
            )
            return 2
    with tempfile.TemporaryDirectory(prefix="turnlog-bench-storage-") as tmp:
        report = _measure(args, Path(tmp))
    if args.json:
        emit_json(json.loads(json.dumps(report)))
    else:
        _print(report)
    return 0
