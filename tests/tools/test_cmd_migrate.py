"""``turnlog migrate --from URL --to URL``."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import anyio
import orjson
import pytest

from turnlog.eventstore import NewEvent, NewSnapshot, RecordedEvent, open_store

main = entry_points(group="console_scripts")["turnlog"].load()  # the installed ``turnlog`` command


def make_store(url: str, events: int = 12) -> None:
    async def fill() -> None:
        async with open_store(url) as store:
            for n in range(events):
                await store.append(f"branch-{n % 3}", [NewEvent("message.added", {"n": n})])
            await store.save_snapshot(NewSnapshot("branch-0", 2, "branch_state", {"n": 2}))

    anyio.run(fill)


def read_log(url: str) -> list[RecordedEvent]:
    async def read() -> list[RecordedEvent]:
        async with open_store(url) as store:
            return [event async for event in store.read_all()]

    return anyio.run(read)


@pytest.mark.postgres
def test_migrate_to_postgres_and_again(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command copies a SQLite store to PostgreSQL; a second run copies nothing."""
    source = f"sqlite:///{tmp_path / 'a.db'}"
    make_store(source)
    assert main(["migrate", "--from", source, "--to", pg_url, "--json"]) == 0
    first = orjson.loads(capsys.readouterr().out)
    assert first == {
        "ok": True,
        "events_copied": 12,
        "events_present": 0,
        "snapshots_copied": 1,
        "head": 12,
        "problems": [],
    }
    assert read_log(pg_url) == read_log(source)
    assert main(["migrate", "--from", source, "--to", pg_url, "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["events_copied"] == 0


def test_migrate_between_files_prints_a_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Plain output says what was copied and that the copy verifies."""
    make_store(f"sqlite:///{tmp_path / 'a.db'}")
    code = main(["migrate", "--from", str(tmp_path / "a.db"), "--to", str(tmp_path / "b.db")])
    out = capsys.readouterr().out
    assert code == 0
    assert "copied 12 events (0 were already there) and 1 snapshots" in out
    assert "ok: the copy verifies (12 events in 3 streams)" in out


def test_missing_source_is_an_error_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped source does not become an empty store copied somewhere."""
    code = main(["migrate", "--from", str(tmp_path / "typo.db"), "--to", str(tmp_path / "b.db")])
    assert code == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "typo.db").exists() and not (tmp_path / "b.db").exists()


def test_foreign_target_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A target holding other events is refused with the reason, exit status 2."""
    make_store(f"sqlite:///{tmp_path / 'a.db'}")
    make_store(f"sqlite:///{tmp_path / 'b.db'}", events=2)
    code = main(["migrate", "--from", str(tmp_path / "a.db"), "--to", str(tmp_path / "b.db")])
    assert code == 2
    assert "not a copy of this source" in capsys.readouterr().err
    assert len(read_log(f"sqlite:///{tmp_path / 'b.db'}")) == 2


def test_same_store_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--from and --to must differ."""
    assert main(["migrate", "--from", str(tmp_path / "a.db"), "--to", str(tmp_path / "a.db")]) == 2
    assert "same store" in capsys.readouterr().err
