"""Every command, run as a user runs it, against stores that are not there or not stores.

Each command gets a path that does not exist, an empty file, a truncated store, a store with
flipped bytes and a foreign file. Whatever happens, the user sees at most one line on stderr
(``turnlog COMMAND: ...``), never a traceback, and a status that says what went wrong; a
command that only reads creates nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from turnlog.eventstore import open_store
from turnlog.kernel import Branch
from turnlog.testing import ScriptedModel


def turnlog(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"NO_COLOR": "1", "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(
        [sys.executable, "-m", "turnlog", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
        input=stdin,
    )


# Each command as (name, argv with {store} and {out}); read-only ones must create nothing.
COMMANDS: list[tuple[str, list[str]]] = [
    ("verify", ["verify", "--store", "{store}"]),
    ("verify-stream", ["verify", "--stream", "branch-nope", "--store", "{store}"]),
    ("tail", ["tail", "--store", "{store}"]),
    ("recover", ["recover", "--store", "{store}"]),
    ("log", ["log", "demo", "--store", "{store}"]),
    ("show", ["show", "demo", "--store", "{store}"]),
    ("stats", ["stats", "--store", "{store}"]),
    ("export", ["export", "--out", "{out}", "--store", "{store}"]),
    ("branches", ["branches", "--store", "{store}"]),
    ("diff", ["diff", "demo", "1", "2", "--store", "{store}"]),
    ("replay", ["replay", "demo", "--store", "{store}"]),
    ("fork", ["fork", "demo", "--at", "1", "--store", "{store}"]),
    ("migrate", ["migrate", "--from", "{store}", "--to", "{out}"]),
    ("import", ["import", "{store}", "--store", "{out}"]),
    ("redact", ["redact", "demo", "--version", "2", "--reason", "x", "--store", "{store}"]),
    ("forget", ["forget", "demo", "--reason", "x", "--store", "{store}"]),
]


async def _make_store(path: Path) -> None:
    async with open_store(f"sqlite:///{path}") as store:
        branch = Branch(
            store=store, name="demo", system="Be terse.", chat_model=ScriptedModel("Hi!", "Paris.")
        )
        await branch.chat_and_record("hi")
        await branch.communicate("capital of France?")


def _checkpointed(path: Path) -> bytes:
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.read_bytes()


def _missing(path: Path, good: bytes) -> None:
    pass


def _empty(path: Path, good: bytes) -> None:
    path.write_bytes(b"")


def _truncated(path: Path, good: bytes) -> None:
    path.write_bytes(good[: len(good) // 2 + 17])


def _flipped_header(path: Path, good: bytes) -> None:
    data = bytearray(good)
    for i in range(16, 100):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _flipped_pages(path: Path, good: bytes) -> None:
    data = bytearray(good)
    for i in range(4096, len(data), 7):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def _foreign(path: Path, good: bytes) -> None:
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40)


FILES: dict[str, Callable[[Path, bytes], None]] = {
    "missing": _missing,
    "empty": _empty,
    "truncated": _truncated,
    "flipped-header": _flipped_header,
    "flipped-pages": _flipped_pages,
    "foreign": _foreign,
}


@pytest.fixture(scope="module")
def good_store(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    import anyio

    path = tmp_path_factory.mktemp("good") / "good.db"
    anyio.run(_make_store, path)
    return _checkpointed(path)


@pytest.mark.parametrize("kind", list(FILES))
@pytest.mark.parametrize(("name", "argv"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_command_fails_in_one_line_on_a_bad_store(
    good_store: bytes, tmp_path: Path, kind: str, name: str, argv: list[str]
) -> None:
    store, out = tmp_path / "s.db", tmp_path / "out.jsonl"
    if name == "migrate":
        out = tmp_path / "copy.db"
    FILES[kind](store, good_store)
    before = sorted(p.name for p in tmp_path.iterdir())
    done = turnlog(*(a.format(store=store, out=out) for a in argv), cwd=tmp_path)
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr, done.stderr
    assert len(lines) <= 1, done.stderr
    if kind == "flipped-pages" and done.returncode in (0, 1):
        return  # the damage missed what this command reads, or verify reported it: both are fine
    if kind == "empty" and name == "import":  # an empty file is an empty export: it says so
        assert done.returncode == 0 and "nothing to import" in done.stdout and not out.exists()
        return
    assert done.returncode in (2, 3), (done.returncode, done.stdout, done.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"turnlog {argv[0]}: "), done.stderr
    if kind == "missing" and name not in ("import",):
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing created
    if name in ("migrate", "import"):
        assert not out.exists()  # a failed copy leaves no empty store behind


def test_verify_of_a_stream_that_is_not_there_is_not_ok(good_store: bytes, tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    store.write_bytes(good_store)
    done = turnlog("verify", "--stream", "branch-nope", "--store", str(store), cwd=tmp_path)
    assert done.returncode == 2 and "ok" not in done.stdout
    assert "no stream 'branch-nope'" in done.stderr


def test_output_piped_into_head_ends_quietly(good_store: bytes, tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    store.write_bytes(good_store)
    for argv in (["log", "demo"], ["tail", "-n", "50"], ["export", "--out", "-"]):
        shell = f"{sys.executable} -m turnlog {' '.join(argv)} --store {store} | head -1"
        done = subprocess.run(
            ["/bin/sh", "-c", shell],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env={**os.environ, "NO_COLOR": "1"},
        )
        assert done.stderr == "", (argv, done.stderr)
        assert len(done.stdout.splitlines()) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "kernel", "--turns", "0"],
        ["bench", "stream", "--chunks", "0"],
        ["bench", "projections", "--sizes", "abc"],
        ["stats", "--since", "9999-12-31T23:59:59-05:00"],
        ["tail", "-n", "-5"],
        ["show", "demo", "--at-time", ""],
        ["show", "demo", "--at", "99999999"],
        ["log", "demo", "--from", "10", "--to", "2"],
        ["export", "--branch", "nope", "--out", "x.jsonl"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_options_that_cannot_work_are_refused_in_their_own_words(
    good_store: bytes, tmp_path: Path, argv: list[str]
) -> None:
    store = tmp_path / "s.db"
    store.write_bytes(good_store)
    if argv[0] != "bench":
        argv = [*argv, "--store", str(store)]
    done = turnlog(*argv, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "at_version" not in done.stderr and "from_version" not in done.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_an_unexpected_error_is_one_line_with_a_hint_and_debug_shows_the_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from turnlog.tools import _cmd_verify
    from turnlog.tools._cli import main

    async def boom(*args: object) -> None:
        raise RuntimeError("something nobody expected")

    monkeypatch.setattr(_cmd_verify, "_verify", boom)
    assert main(["verify"]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("turnlog verify: unexpected error: RuntimeError: something nobody expected")
    assert "--debug" in err
    with pytest.raises(RuntimeError):
        main(["--debug", "verify"])
    monkeypatch.setenv("TURNLOG_DEBUG", "1")
    with pytest.raises(RuntimeError):
        main(["verify"])


def test_version_everywhere() -> None:
    import turnlog

    assert turnlog.__version__[:1].isdigit()
    for module in ("turnlog", "turnlog.tools"):
        done = subprocess.run(
            [sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0
        assert done.stdout.strip() == f"turnlog {turnlog.__version__}"


@pytest.mark.parametrize("command", ["verify", "tail", "recover", "branches", "stats"])
def test_a_store_from_a_newer_turnlog_is_one_line_and_status_3(
    good_store: bytes, tmp_path: Path, command: str
) -> None:
    import sqlite3

    store = tmp_path / "s.db"
    store.write_bytes(good_store)
    with sqlite3.connect(store) as db:
        db.execute("UPDATE meta SET value = '99' WHERE key = 'format_version'")
    done = turnlog(command, "--store", str(store), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("\n") == 1 and "newer turnlog" in done.stderr


@pytest.mark.parametrize("command", ["verify", "branches", "recover"])
def test_an_unreachable_postgresql_is_one_line_and_status_3(tmp_path: Path, command: str) -> None:
    pytest.importorskip("psycopg")
    done = turnlog(command, "--store", "postgresql://postgres@127.0.0.1:1/nowhere", cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.postgres
@pytest.mark.parametrize("command", ["verify", "tail", "recover", "branches", "stats", "log demo"])
def test_a_postgresql_schema_without_a_store_is_refused_and_not_created(
    tmp_path: Path, command: str, pg_dsn: str, pg_schema: str, pg_url: str
) -> None:
    import psycopg

    dsn, schema, url = pg_dsn, pg_schema, pg_url
    extra = ["--analytics-db", str(tmp_path / "a.db")] if command == "stats" else []
    done = turnlog(*command.split(), "--store", url, *extra, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "no turnlog store" in done.stderr
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", [schema])
        assert found.fetchall() == []
