"""The kernel's modules import each other without a circle, at runtime or for type checking.

Every import statement counts: module level, inside functions, and under ``TYPE_CHECKING``
(a circle a type checker needs is a circle a reader has to hold in their head). Operations
depend on the branch port (``turnlog.kernel._port``), never on the facade.

A package's ``__init__`` that re-exports its modules is a node like the others; the implicit
import of a parent package by its children is not an edge (Python does it for every module).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import turnlog.kernel

ROOT = Path(turnlog.kernel.__file__).parent
PACKAGE = "turnlog.kernel"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imported(module: str, path: Path, known: set[str]) -> Iterator[str]:
    """The kernel modules ``module`` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            names = [target, *(f"{target}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            if name in known and name != module:
                yield name


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: set(_imported(name, path, known)) for name, path in modules.items()}


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_graph_sees_every_kind_of_import() -> None:
    """The parser finds module-level, function-level and TYPE_CHECKING imports."""
    graph = _graph()
    assert "turnlog.kernel._port" in graph["turnlog.kernel.operations.chat"]
    assert "turnlog.kernel._commands" in graph["turnlog.kernel._lifecycle"]
    assert "turnlog.kernel.operations.chat" in graph["turnlog.kernel._verbs"]  # inside a method


def test_the_kernel_import_graph_is_acyclic() -> None:
    """No module of turnlog.kernel reaches itself through imports."""
    cycle = _find_cycle(_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_operations_do_not_import_the_facade() -> None:
    """Operations see a branch through the port, never through ``_branch``."""
    graph = _graph()
    users = sorted(m for m, deps in graph.items() if "turnlog.kernel._branch" in deps)
    assert not [m for m in users if m.startswith("turnlog.kernel.operations")]
