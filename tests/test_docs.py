"""Examples in the documentation really run.

Every fenced ```python block in docs/*.md whose first line is ``# test: run`` is executed as a
script in a fresh interpreter, in an empty temporary directory (so an example may create
``turnlog.db`` or other files freely). A block that exits non-zero fails the test. Blocks
without the marker are illustrations and are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
MARKER = "# test: run"
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def runnable_blocks() -> list[tuple[str, str]]:
    """Every marked block as (id, source), the id naming the file and line."""
    found: list[tuple[str, str]] = []
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            body = match.group(1)
            if body.lstrip("\n").startswith(MARKER):
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{path.name}:{line}", body))
    return found


BLOCKS = runnable_blocks()


def test_marker_is_found() -> None:
    """The extractor finds marked blocks (the store docs have some)."""
    assert any(block_id.startswith("eventstore.md:") for block_id, _ in BLOCKS)


@pytest.mark.parametrize("source", [b for _, b in BLOCKS], ids=[i for i, _ in BLOCKS])
def test_doc_example_runs(source: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(source, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "TURNLOG_STORE"}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (
        f"example failed:\n{source}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
