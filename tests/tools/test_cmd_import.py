"""``turnlog import``: idempotent, resumable, and refusing altered files before writing."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from turnlog.eventstore import REDACTIONS_STREAM, NewEvent, encode_json, event_hash, open_store
from turnlog.kernel import Branch
from turnlog.testing import ScriptedModel


def turnlog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnlog.tools", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"NO_COLOR": "1", "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture
async def export(tmp_path: Path) -> Path:
    source = tmp_path / "source.db"
    async with open_store(f"sqlite:///{source}") as store:
        for name in ("one", "two"):
            branch = Branch(store=store, name=name, chat_model=ScriptedModel("A.", "B."))
            await branch.chat_and_record("first")
            await branch.communicate("second")
    out = tmp_path / "export.jsonl"
    done = turnlog("export", "--store", str(source), "--format", "jsonl", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def _count(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def test_import_twice_adds_nothing_and_verifies(export: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.db"
    first = turnlog("import", str(export), "--store", str(target), "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["added"] == _count(export)
    second = turnlog("import", str(export), "--store", str(target), "--json")
    # two branches and the streams of their names' claims
    assert json.loads(second.stdout) == {"added": 0, "present": _count(export), "streams": 4}
    assert turnlog("verify", "--store", str(target)).returncode == 0
    assert turnlog("replay", "one", "--execute", "--store", str(target)).returncode == 0


def test_interrupted_import_completes_on_the_next_run(export: Path, tmp_path: Path) -> None:
    lines = export.read_text().splitlines()
    half = tmp_path / "half.jsonl"
    half.write_text("\n".join(lines[: len(lines) // 2]) + "\n")
    target = tmp_path / "target.db"
    assert turnlog("import", str(half), "--store", str(target)).returncode == 0
    rest = json.loads(turnlog("import", str(export), "--store", str(target), "--json").stdout)
    assert rest["added"] + rest["present"] == len(lines)
    assert rest["present"] == len(lines) // 2


def test_altered_file_is_refused_before_writing(export: Path, tmp_path: Path) -> None:
    text = export.read_text().replace('"A."', '"Z."', 1)
    altered = tmp_path / "altered.jsonl"
    altered.write_text(text)
    target = tmp_path / "target.db"
    proc = turnlog("import", str(altered), "--store", str(target))
    assert proc.returncode == 2
    assert "does not match its hash" in proc.stderr
    assert not target.exists()


def test_malformed_line_names_its_number(export: Path, tmp_path: Path) -> None:
    lines = export.read_text().splitlines()
    lines[2] = "{not json"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines))
    proc = turnlog("import", str(bad), "--store", str(tmp_path / "t.db"))
    assert proc.returncode == 2
    assert "line 3" in proc.stderr


async def test_diverged_target_is_refused(export: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.db"
    assert turnlog("import", str(export), "--store", str(target)).returncode == 0
    first = json.loads(export.read_text().splitlines()[0])
    other = tmp_path / "other.db"
    async with open_store(f"sqlite:///{other}") as store:
        from turnlog.eventstore import NewEvent

        await store.append(first["stream"], [NewEvent("branch.created", {"something": "else"})])
    proc = turnlog("import", str(export), "--store", str(other))
    assert proc.returncode == 2
    assert "different event at version 1" in proc.stderr


def _envelopes(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_import_keeps_ids_versions_times_and_hashes(export: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.db"
    assert turnlog("import", str(export), "--store", str(target)).returncode == 0
    again = tmp_path / "again.jsonl"
    assert turnlog("export", "--store", str(target), "--out", str(again)).returncode == 0
    keep = ("id", "stream", "version", "type", "schema", "data", "meta", "recorded_at", "prev_hash", "hash")
    assert [{k: e[k] for k in keep} for e in _envelopes(again)] == [
        {k: e[k] for k in keep} for e in _envelopes(export)
    ]


def test_import_into_a_store_with_other_events_appends_them_after_its_head(
    export: Path, tmp_path: Path
) -> None:
    target = tmp_path / "target.db"
    other = tmp_path / "other.jsonl"
    lines = export.read_text().splitlines()
    first_stream = json.loads(lines[0])["stream"]
    other.write_text("\n".join(x for x in lines if json.loads(x)["stream"] != first_stream) + "\n")
    assert turnlog("import", str(other), "--store", str(target)).returncode == 0
    done = turnlog("import", str(export), "--store", str(target), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["present"] == _count(other)
    assert turnlog("verify", "--store", str(target)).returncode == 0


def test_no_verify_is_gone_and_an_altered_file_is_never_written(export: Path, tmp_path: Path) -> None:
    altered = tmp_path / "altered.jsonl"
    altered.write_text(export.read_text().replace('"A."', '"Z."', 1))
    target = tmp_path / "target.db"
    proc = turnlog("import", str(altered), "--no-verify", "--store", str(target))
    assert proc.returncode == 2 and "--no-verify" in proc.stderr
    assert not target.exists()


def test_a_gap_writes_nothing_and_leaves_no_store(export: Path, tmp_path: Path) -> None:
    lines = export.read_text().splitlines()
    gap = tmp_path / "gap.jsonl"
    gap.write_text("\n".join(lines[:3] + lines[4:]) + "\n")
    target = tmp_path / "target.db"
    proc = turnlog("import", str(gap), "--store", str(target))
    assert proc.returncode == 2 and "jumps from version" in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert not list(tmp_path.glob("target.db*"))


async def test_a_file_the_store_refuses_leaves_no_store_behind(export: Path, tmp_path: Path) -> None:
    # the file verifies on its own, but its first event does not start the stream (a prefix is
    # missing): the store refuses it, and the store the import created is removed again
    lines = export.read_text().splitlines()
    stream = json.loads(lines[0])["stream"]
    tail = [x for x in lines if json.loads(x)["stream"] == stream][2:]
    part = tmp_path / "part.jsonl"
    part.write_text("\n".join(tail) + "\n")
    target = tmp_path / "target.db"
    proc = turnlog("import", str(part), "--store", str(target))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("target.db*"))


@pytest.mark.parametrize("bad_id", ["../../x", "/abs/victim", "01A23AD3-C558-7000-8000-000000000000", "x"])
def test_streams_not_named_by_an_id_are_refused(export: Path, tmp_path: Path, bad_id: str) -> None:
    lines = export.read_text().splitlines()
    stream = json.loads(lines[0])["stream"]
    crafted = tmp_path / "crafted.jsonl"
    crafted.write_text("\n".join(lines).replace(stream, f"branch-{bad_id}") + "\n")
    target = tmp_path / "target.db"
    proc = turnlog("import", str(crafted), "--store", str(target))
    assert proc.returncode == 2 and "not named by an id" in proc.stderr, proc.stderr
    assert not target.exists()


def _forged_record(about: dict[str, object], digest: str) -> str:
    """A redaction record for the event ``about``, hashed and chained as the store would (version 1)."""
    data = {"stream": about["stream"], "version": about["version"], "event_id": about["id"],
            "event_type": about["type"], "data_digest": digest, "meta_digest": None, "reason": "forged",
            "actor": "", "kept": None}  # fmt: skip
    event_id, recorded_at = str(uuid.uuid4()), "2026-01-01T00:00:00+00:00"
    micros = int(datetime.fromisoformat(recorded_at).timestamp()) * 1_000_000
    hashed = event_hash(
        "", event_id, REDACTIONS_STREAM, 1, "store.redacted", 1, encode_json(data), b"{}", micros
    )
    return json.dumps({"id": event_id, "stream": REDACTIONS_STREAM, "version": 1, "position": 999,
                       "type": "store.redacted", "schema": 1, "data": data, "meta": {},
                       "recorded_at": recorded_at, "prev_hash": "", "hash": hashed})  # fmt: skip


def test_a_smuggled_redaction_record_is_refused_and_nothing_is_written(export: Path, tmp_path: Path) -> None:
    """A record of the reserved stream that would not verify is refused before anything is written."""
    lines = export.read_text().splitlines()
    smuggled = tmp_path / "smuggled.jsonl"
    smuggled.write_text("\n".join([*lines, _forged_record(json.loads(lines[0]), "0" * 64)]) + "\n")
    target = tmp_path / "target.db"
    done = turnlog("import", str(smuggled), "--store", str(target))
    assert done.returncode != 0
    assert "redaction records would not verify" in done.stderr and "nothing was imported" in done.stderr
    assert not target.exists()
    assert turnlog("import", str(export), "--store", str(target)).returncode == 0
    again = turnlog("import", str(smuggled), "--store", str(target))  # onto the store holding the rest
    assert again.returncode != 0 and "would not verify" in again.stderr
    assert turnlog("verify", "--store", str(target)).returncode == 0


async def test_an_export_of_a_redacted_store_imports_and_verifies(tmp_path: Path) -> None:
    """Records and markers that verify as a whole are imported, and the copy verifies."""
    source = tmp_path / "source.db"
    async with open_store(f"sqlite:///{source}") as store:
        await store.append("notes", [NewEvent("note.added", {"text": "alice@example.com"}, {"by": "a"})])
        await store.append("notes", [NewEvent("note.added", {"text": "kept"})])
        await store.redact("notes", 1, reason="gdpr", include_meta=True)
    out = tmp_path / "export.jsonl"
    assert turnlog("export", "--store", str(source), "--out", str(out)).returncode == 0
    target = tmp_path / "target.db"
    done = turnlog("import", str(out), "--store", str(target))
    assert done.returncode == 0, done.stderr
    checked = turnlog("verify", "--store", str(target))
    assert checked.returncode == 0, checked.stdout
