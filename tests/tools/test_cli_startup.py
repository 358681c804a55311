"""``turnlog --help`` and ``--version`` load no command; ``turnlog COMMAND`` loads only its own.

The command table in ``turnlog.tools._cli`` repeats each command's one-line help so that the
top-level help needs no command module; these tests keep the copy equal to the module's.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from turnlog.eventstore import open_store
from turnlog.projections import AssistantResponse, BranchCreated, Instruction, MessageAdded, new_event
from turnlog.tools import _cli

TOOLS = Path(_cli.__file__).parent

# Run in a fresh interpreter: which turnlog modules did the command line load?
PROBE = """
import json, sys
from turnlog.tools._cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exit:
    status = exit.code
print(json.dumps({"status": status, "modules": sorted(m for m in sys.modules if m.startswith("turnlog"))}))
"""


def _loaded(*argv: str) -> tuple[int, list[str], str]:
    env = {**os.environ, "PYTHONPATH": str(TOOLS.parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    report = json.loads(done.stdout.splitlines()[-1])
    return report["status"], report["modules"], done.stdout


def test_the_table_names_every_command_module_once() -> None:
    on_disk = {f"turnlog.tools.{p.stem}" for p in TOOLS.glob("_cmd_*.py")}
    listed = [module for module, _ in _cli._COMMANDS.values()]
    assert sorted(listed) == sorted(on_disk)


@pytest.mark.parametrize("name", list(_cli._COMMANDS))
def test_the_table_help_is_the_command_help(name: str) -> None:
    module, help_text = _cli._COMMANDS[name]
    command = importlib.import_module(module).COMMAND
    assert (command.name, command.help) == (name, help_text)


@pytest.mark.parametrize("argv", [["--help"], ["--version"], [], ["no-such-command"]])
def test_top_level_loads_no_command_and_no_layer(argv: list[str]) -> None:
    status, modules, out = _loaded(*argv)
    assert status in (0, 2), out
    heavy = [
        m
        for m in modules
        if m.startswith(
            ("turnlog.tools._cmd_", "turnlog.kernel", "turnlog.projections", "turnlog.eventstore")
        )
    ]
    assert heavy == [], heavy


def test_help_still_lists_every_command() -> None:
    status, _, out = _loaded("--help")
    assert status == 0
    for name, (_, help_text) in _cli._COMMANDS.items():
        assert name in out
        assert help_text.split()[0] in out


def test_help_before_a_command_still_lists_every_command() -> None:
    """``turnlog --help show`` prints the top-level help, which lists every command."""
    status, _, out = _loaded("--help", "show")
    assert status == 0
    for name in _cli._COMMANDS:
        assert name in out


def test_a_command_loads_its_own_module_only() -> None:
    status, modules, out = _loaded("show", "--help")
    assert status == 0, out
    assert "--at" in out
    commands = [m for m in modules if m.startswith("turnlog.tools._cmd_")]
    assert commands == ["turnlog.tools._cmd_show"]


def _filled_store(path: Path) -> None:
    async def fill() -> None:
        async with open_store(f"sqlite:///{path}") as store:
            await store.append(
                "branch-b1",
                [
                    new_event(BranchCreated(branch_id="b1", name="demo")),
                    new_event(MessageAdded(message=Instruction.create("hello"))),
                    new_event(MessageAdded(message=AssistantResponse.create("hi"))),
                ],
            )

    anyio.run(fill)


def _show_at_in_a_fresh_process(tmp_path: Path) -> tuple[list[str], list[str]]:
    """``show demo --at 2`` on a small store in a fresh interpreter: its lines and every module it loaded."""
    store = tmp_path / "s.db"
    _filled_store(store)
    probe = PROBE.replace('if m.startswith("turnlog")', "")  # every module, sqlite_utils too
    env = {**os.environ, "PYTHONPATH": str(TOOLS.parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", probe, "show", "demo", "--at", "2", "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["status"] == 0, done.stdout + done.stderr
    return done.stdout.splitlines()[:-1], report["modules"]


def test_show_at_a_version_by_name_runs_without_the_kernel(tmp_path: Path) -> None:
    """``show NAME --at N`` resolves the name and reads the state with the lower layers only."""
    shown, modules = _show_at_in_a_fresh_process(tmp_path)
    assert "(demo) at version 2" in shown[0]
    assert [line.split(".", 1)[1].strip() for line in shown[1:]] == ["user: hello"]  # not the answer
    assert [m for m in modules if m.startswith("turnlog.kernel")] == []
    # opening an existing store needs no sqlite-utils (about 70 ms of import): only creating one does
    assert "sqlite_utils" not in modules
    assert "turnlog.projections" in modules


# Modules that ``show --at`` must not import: the HTTP client and the model wiring (kernel
# only), the memory backend, the store copier and the append batcher (writes only), and the
# event loop (a SQLite store is read by ``run_inline``: about a quarter of the process).
NOT_FOR_A_READ = [
    "asyncio",
    "anyio",
    "sniffio",
    "httpx",
    "sqlite_utils",
    "turnlog.kernel",
    "turnlog.eventstore._memory",
    "turnlog.eventstore._migrate",
    "turnlog.eventstore._group_commit",
    "turnlog.eventstore._postgres",
    "difflib",  # the "did you mean" of a branch name that matched nothing
]


def test_show_at_imports_nothing_a_read_does_not_need(tmp_path: Path) -> None:
    """``show NAME --at N`` on a SQLite store loads none of ``NOT_FOR_A_READ`` (start-up time)."""
    _, modules = _show_at_in_a_fresh_process(tmp_path)
    loaded = [m for m in modules if m.startswith(tuple(NOT_FOR_A_READ))]
    assert loaded == []


# The commands that read a store: none of them needs the kernel (about 0.8 s of CPU to import)
READ_COMMANDS = [
    ["show", "demo", "--at", "2"],
    ["verify"],
    ["tail"],
    ["branches"],
    ["log", "demo"],
    ["diff", "demo", "1", "3"],
]


@pytest.mark.parametrize("argv", READ_COMMANDS, ids=lambda argv: argv[0])
def test_read_commands_load_no_kernel(tmp_path: Path, argv: list[str]) -> None:
    store = tmp_path / "s.db"
    _filled_store(store)
    status, modules, out = _loaded(*argv, "--store", str(store))
    assert status == 0, out
    assert [m for m in modules if m.startswith("turnlog.kernel")] == []


def test_verify_loads_the_kernel_to_check_snapshot_files_when_there_are_some(tmp_path: Path) -> None:
    """The snapshot files in the run directory are still checked: the kernel is loaded for them."""
    store = tmp_path / "s.db"
    _filled_store(store)
    runs = tmp_path / "s.db.runs"
    runs.mkdir()
    (runs / "not-a-snapshot.json").write_text("{}")
    status, modules, out = _loaded("verify", "--store", str(store))
    assert status == 1, out
    assert "PROBLEM snapshot file" in out and "not-a-snapshot.json" in out
    assert "turnlog.kernel" in modules


def test_verify_looks_for_snapshot_files_where_the_kernel_writes_them(tmp_path: Path) -> None:
    from turnlog.eventstore import MemoryEventStore
    from turnlog.kernel._run_buffer import default_persist_dir
    from turnlog.projections import default_run_dir as run_dir

    async def both() -> None:
        async with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
            assert run_dir(store) == default_persist_dir(store) == tmp_path.resolve() / "s.db.runs"
        memory = MemoryEventStore()
        assert run_dir(memory) == default_persist_dir(memory)

    anyio.run(both)


def test_options_before_the_command_still_work() -> None:
    status, modules, out = _loaded("--debug", "verify", "--help")
    assert status == 0, out
    assert "turnlog.tools._cmd_verify" in modules


def test_bench_startup_times_each_command_against_a_bare_python(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    _filled_store(store)
    args = ["bench", "startup", "--runs", "1", "--store", str(store), "--at", "2", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "turnlog", *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report["rows"]) == {"python -c pass", "version", "help", "show --at", "verify"}
    for row in report["rows"].values():
        assert row["wall_s"] > 0 and row["x_python"] > 0
    assert report["rows"]["python -c pass"]["x_python"] == 1.0
    assert len(report["targets"]) == 3
