"""Examples in the documentation really run, and print what the documentation says they print.

Every fenced ```python block in docs/*.md whose first line is ``# test: run``, and every
```python block of README.md (its example is whole, so it needs no marker), is executed as a
script in a fresh interpreter, in an empty temporary directory (so an example may create
``turnlog.db`` or other files freely), and then once more in the same directory: a reader runs
an example again, and it must not trip over what its first run left (a taken branch name).
A block that exits non-zero fails the test. Blocks of docs/ without the marker are
illustrations and are not run.

When the prose right after such a block begins with "prints" and a ```text block follows,
that block is the expected standard output, line by line; ``...`` inside an expected line
stands for any text (an id, a time, a duration). Examples import public names only: no
``turnlog.<layer>._private`` module. The error lines that cli.md's Conventions show are run
and compared too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MARKER = "# test: run"
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_OUTPUT = re.compile(r"\s*prints\b[^`]*?^```text[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL | re.I)
_PRIVATE = re.compile(r"^\s*(?:from|import)\s+turnlog(?:\.\w+)*\._\w+", re.MULTILINE)


def runnable_blocks() -> list[tuple[str, str, str | None]]:
    """Every marked block as (id, source, expected output or None), the id naming file and line."""
    found: list[tuple[str, str, str | None]] = []
    for path in [README, *sorted(DOCS.glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            body = match.group(1)
            if path == README or body.lstrip("\n").startswith(MARKER):
                line = text.count("\n", 0, match.start()) + 1
                shown = _OUTPUT.match(text, match.end())
                found.append((f"{path.name}:{line}", body, shown.group(1) if shown else None))
    return found


BLOCKS = runnable_blocks()


def _matches(expected: str, actual: str) -> bool:
    """``actual`` line for line as ``expected`` shows it, ``...`` standing for any text."""
    want, got = expected.rstrip("\n").splitlines(), actual.rstrip("\n").splitlines()
    if len(want) != len(got):
        return False
    for pattern, line in zip(want, got, strict=True):
        regex = ".*".join(re.escape(part) for part in pattern.rstrip().split("..."))
        if not re.fullmatch(regex, line.rstrip()):
            return False
    return True


def test_marker_is_found() -> None:
    """The extractor finds marked blocks (the store docs have some)."""
    assert any(block_id.startswith("eventstore.md:") for block_id, _, _ in BLOCKS)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    """README.md is the map: each page of docs/ has a link there."""
    readme = README.read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)\)", readme))
    pages = {path.name for path in DOCS.glob("*.md")}
    assert pages - linked == set(), "pages of docs/ that README.md does not link"
    assert linked - pages == set(), "README.md links pages that do not exist"


def test_the_readme_example_is_run() -> None:
    """README.md's Python example is among the examples run (it is the first thing a reader tries)."""
    assert any(block_id.startswith("README.md:") for block_id, _, _ in BLOCKS)


def test_some_examples_show_their_output() -> None:
    """The output check is not vacuous: some examples show what they print."""
    assert sum(1 for _, _, shown in BLOCKS if shown is not None) >= 3


@pytest.mark.parametrize(("source", "shown"), [(b, o) for _, b, o in BLOCKS], ids=[i for i, _, _ in BLOCKS])
def test_doc_example_runs(source: str, shown: str | None, tmp_path: Path) -> None:
    assert not _PRIVATE.search(source), "a documentation example imports a private module"
    script = tmp_path / "example.py"
    script.write_text(source, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "TURNLOG_STORE"}
    for run in ("first", "second"):
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, (
            f"example failed on its {run} run in the same directory:\n{source}\n"
            f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        )
        # What a first run prints is what the page shows; a second run only has to work
        # (it may continue what the first one recorded).
        if run == "first" and shown is not None:
            assert _matches(shown, done.stdout), (
                f"the documentation shows\n{shown}\nthe example printed\n{done.stdout}"
            )


def test_output_patterns() -> None:
    assert _matches("run ... ended in ... ms\n", "run 01a2 ended in 12.5 ms\n")
    assert not _matches("ok: 3 events\n", "ok: 4 events\n")
    assert not _matches("one\n", "one\ntwo\n")


def _transcript(text: str) -> list[tuple[str, str]]:
    """``$ command`` lines of a text block, each with the output shown under it."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps and line:
            steps[-1][1].append(line)
    return [(command, "\n".join(shown)) for command, shown in steps]


def test_cli_error_examples_print_what_cli_md_shows(tmp_path: Path) -> None:
    """The error lines the Conventions of cli.md show are the ones the command prints."""
    import shlex

    import anyio

    from turnlog.eventstore import open_store

    async def empty_store() -> None:
        async with open_store(f"sqlite:///{tmp_path / 'demo.db'}") as store:
            await store.head()

    anyio.run(empty_store)
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    conventions = text[text.index("## Conventions") : text.index("\n## ", text.index("## Conventions") + 1)]
    block = re.search(r"^```text\n(.*?)^```", conventions, re.MULTILINE | re.DOTALL)
    assert block is not None
    steps = _transcript(block.group(1))
    assert len(steps) >= 2
    env = {"NO_COLOR": "1", "PATH": "/usr/bin:/bin", "TURNLOG_STORE": "demo.db"}
    for command, shown in steps:
        argv = shlex.split(command)
        assert argv[0] == "turnlog"
        done = subprocess.run(
            [sys.executable, "-m", "turnlog", *argv[1:]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert _matches(shown, done.stdout + done.stderr), (command, shown, done.stdout + done.stderr)
