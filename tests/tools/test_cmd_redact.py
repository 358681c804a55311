"""``turnlog redact`` and ``turnlog forget`` on a real store file, through the command line."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from turnlog.eventstore import NewEvent, NewSnapshot, SQLiteEventStore, is_redacted, uuid7
from turnlog.projections import (
    ActionRequest,
    ActionResponse,
    BranchCreated,
    ChunkReceived,
    Instruction,
    MessageAdded,
    RunStarted,
    System,
    new_event,
)

SECRET = "Zyx-Personal-9931 alice@example.org"
BRANCH = str(uuid7())
RUN = str(uuid7())


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    env.pop("TURNLOG_STORE", None)
    return subprocess.run(
        [sys.executable, "-m", "turnlog.tools", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _fill(path: Path, filler: int = 0) -> None:
    req = ActionRequest.create("lookup", {"email": SECRET})
    async with SQLiteEventStore(path) as store:
        await store.append(
            f"branch-{BRANCH}",
            [
                new_event(
                    BranchCreated(branch_id=BRANCH, name="mine", system=System.create(f"sys {SECRET}"))
                ),
                new_event(MessageAdded(message=Instruction.create(f"hello, I am {SECRET}"))),
                new_event(MessageAdded(message=req)),
                new_event(
                    MessageAdded(message=ActionResponse.create(req, output=None, error=f"no {SECRET}"))
                ),
                new_event(RunStarted(run_id=RUN, verb="run")),
                *[
                    new_event(MessageAdded(message=Instruction.create(f"filler {n} " + "x" * 500)))
                    for n in range(filler)
                ],
            ],
        )
        await store.append(
            f"run-{RUN}", [new_event(ChunkReceived(seq=1, type="text", content=f"chunk {SECRET}"))]
        )
        await store.save_snapshot(NewSnapshot(f"branch-{BRANCH}", 2, "state.test", {"copy": SECRET}))
        await store.append("other", [NewEvent("note.added", {"text": "unrelated"})])
    runs = Path(str(path) + ".runs")
    runs.mkdir()
    (runs / f"{BRANCH}.{RUN}.jsonl").write_text(f'{{"content": "{SECRET}"}}\n')
    (runs / f"{BRANCH}.json").write_text(f'{{"copy": "{SECRET}"}}')


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    anyio.run(_fill, tmp_path / "t.db")
    stats = _cli("stats", "--store", "t.db", cwd=tmp_path)  # fills the analytics tables
    assert stats.returncode == 0, stats.stderr
    assert _files_holding(tmp_path, SECRET.encode())
    return tmp_path


def test_forget_erases_every_copy_and_the_branch_still_works(store_dir: Path) -> None:
    dry = _cli("forget", "mine", "--reason", "erasure request", "--dry-run", "--store", "t.db", cwd=store_dir)
    assert dry.returncode == 0, dry.stderr
    assert "would redact 5 payload(s)" in dry.stdout and "would purge" in dry.stdout
    assert _files_holding(store_dir, SECRET.encode())  # a dry run changes nothing
    done = _cli("forget", "mine", "--reason", "erasure request", "--store", "t.db", cwd=store_dir)
    assert done.returncode == 0, done.stderr
    assert "redacted 5 payload(s)" in done.stdout
    assert _files_holding(store_dir, SECRET.encode()) == []
    assert _files_holding(store_dir, b"alice@example.org") == []
    verify = _cli("verify", "--store", "t.db", cwd=store_dir)
    assert verify.returncode == 0, verify.stdout
    assert "5 payloads redacted (1 reason)" in verify.stdout
    show = _cli("show", "mine", "--store", "t.db", cwd=store_dir)
    assert show.returncode == 0, show.stderr
    assert "user: [redacted: erasure request]" in show.stdout
    assert "tool call lookup [redacted: erasure request]" in show.stdout
    assert _cli("show", "mine", "--at", "2", "--store", "t.db", cwd=store_dir).returncode == 0
    assert _cli("fork", "mine", "--at", "3", "--store", "t.db", cwd=store_dir).returncode == 0
    replay = _cli("replay", "mine", "--store", "t.db", cwd=store_dir)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "redacted: 4 event(s)" in replay.stdout
    assert _cli("stats", "--store", "t.db", cwd=store_dir).returncode == 0


def test_forget_with_forks_erases_the_forks_own_events(store_dir: Path) -> None:
    fork = _cli("fork", "mine", "--at", "3", "--name", "child", "--store", "t.db", cwd=store_dir)
    assert fork.returncode == 0, fork.stderr

    async def add_to_fork() -> None:
        async with SQLiteEventStore(store_dir / "t.db") as store:
            streams = [s for s, _ in await store.list_streams("branch-") if s != f"branch-{BRANCH}"]
            await store.append(
                streams[0], [new_event(MessageAdded(message=Instruction.create(f"fork {SECRET}")))]
            )

    anyio.run(add_to_fork)
    plain = _cli("forget", "mine", "--reason", "r", "--dry-run", "--store", "t.db", cwd=store_dir)
    assert "would redact 5 payload(s)" in plain.stdout
    done = _cli("forget", "mine", "--forks", "--reason", "r", "--store", "t.db", cwd=store_dir)
    assert done.returncode == 0, done.stderr
    assert "redacted 6 payload(s)" in done.stdout
    assert _files_holding(store_dir, SECRET.encode()) == []
    show = _cli("show", "child", "--store", "t.db", cwd=store_dir)
    assert show.returncode == 0 and "user: [redacted: r]" in show.stdout, show.stdout + show.stderr


def test_redact_one_version_and_retention_by_type(store_dir: Path) -> None:
    one = _cli("redact", "mine", "--version", "2", "--reason", "leak", "--store", "t.db", cwd=store_dir)
    assert one.returncode == 0, one.stderr
    assert "redacted branch-" in one.stdout and "v2 message.added" in one.stdout
    again = _cli("redact", "mine", "--version", "2", "--reason", "leak", "--store", "t.db", cwd=store_dir)
    assert "redacted 0 event(s)" in again.stdout
    chunks = _cli(
        "redact", "--type", "stream.chunk", "--before", "2999-01-01", "--reason", "retention",
        "--store", "t.db", cwd=store_dir,
    )  # fmt: skip
    assert chunks.returncode == 0, chunks.stderr
    assert "redacted 1 event(s)" in chunks.stdout
    missing = _cli("redact", "mine", "--version", "99", "--reason", "x", "--store", "t.db", cwd=store_dir)
    assert missing.returncode != 0 and "no version 99" in missing.stderr
    assert "Traceback" not in missing.stderr
    verify = _cli("verify", "--store", "t.db", cwd=store_dir)
    assert "2 payloads redacted (2 reasons)" in verify.stdout


@pytest.mark.parametrize("delay", [0.3, 0.45, 0.55, 0.65, 0.8, 1.0])
def test_sigkill_during_forget_leaves_the_old_or_the_new_state(tmp_path: Path, delay: float) -> None:
    """A real child process runs forget and is killed at a point of its work (start-up, reads,
    the transaction, the vacuum): the branch is then wholly redacted or not at all, and verifies."""
    path = tmp_path / "k.db"
    anyio.run(_fill, path, 1500)
    forget = ["forget", "mine", "--reason", "erasure", "--store", str(path)]
    child = subprocess.Popen([sys.executable, "-m", "turnlog.tools", *forget], cwd=tmp_path)
    try:
        child.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGKILL)
        child.wait()

    async def check() -> tuple[int, int, bool]:
        async with SQLiteEventStore(path) as store:
            events = [e async for e in store.read_stream(f"branch-{BRANCH}") if e.type == "message.added"]
            report = await store.verify()
            return sum(is_redacted(e.data) for e in events), len(events), report.ok

    redacted, total, ok = anyio.run(check)
    assert ok
    assert redacted in (0, total)


def test_an_unknown_branch_is_one_line(tmp_path: Path) -> None:
    anyio.run(_fill, tmp_path / "t.db")
    shutil.rmtree(tmp_path / "t.db.runs")
    done = _cli("forget", "nope", "--reason", "x", "--store", "t.db", cwd=tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr


def test_export_import_and_migrate_keep_the_redactions(store_dir: Path) -> None:
    assert _cli("forget", "mine", "--reason", "erasure", "--store", "t.db", cwd=store_dir).returncode == 0
    exported = _cli("export", "--store", "t.db", "--out", "all.jsonl", cwd=store_dir)
    assert exported.returncode == 0, exported.stderr
    text = (store_dir / "all.jsonl").read_text()
    assert "turnlog_redacted" in text and SECRET not in text
    imported = _cli("import", "all.jsonl", "--store", "copy.db", cwd=store_dir)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    verify = _cli("verify", "--store", "copy.db", cwd=store_dir)
    assert verify.returncode == 0 and "5 payloads redacted" in verify.stdout, verify.stdout
    migrated = _cli("migrate", "--from", "t.db", "--to", "moved.db", cwd=store_dir)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    verify = _cli("verify", "--store", "moved.db", cwd=store_dir)
    assert verify.returncode == 0 and "5 payloads redacted" in verify.stdout, verify.stdout


def test_upgrade_chain_lets_an_older_store_be_redacted(tmp_path: Path) -> None:
    from turnlog.eventstore import RawEvent, encode_json
    from turnlog.eventstore._encoding import legacy_event_hash

    async def legacy() -> None:
        data = encode_json({"text": SECRET})
        eid = str(uuid7())
        digest = legacy_event_hash("", eid, "notes", 1, "note.added", 1, data, b"{}", 5)
        async with SQLiteEventStore(tmp_path / "old.db") as store:
            await store.import_raw(
                [RawEvent(1, eid, "notes", 1, "note.added", 1, data, b"{}", 5, "", digest)]
            )

    anyio.run(legacy)
    refused = _cli("redact", "--type", "note.added", "--reason", "x", "--store", "old.db", cwd=tmp_path)
    assert refused.returncode != 0 and "legacy chain" in refused.stderr
    upgraded = _cli("redact", "--upgrade-chain", "--store", "old.db", cwd=tmp_path)
    assert upgraded.returncode == 0 and "upgraded 1 stream(s)" in upgraded.stdout, upgraded.stderr
    done = _cli("redact", "--type", "note.added", "--reason", "x", "--store", "old.db", cwd=tmp_path)
    assert done.returncode == 0 and "redacted 1 event(s)" in done.stdout, done.stderr
    assert _files_holding(tmp_path, SECRET.encode()) == []
    assert "1 payloads redacted" in _cli("verify", "--store", "old.db", cwd=tmp_path).stdout
