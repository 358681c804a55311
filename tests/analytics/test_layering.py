"""Analytics reads the layers below it through their public names only, and nothing above it.

Every module of ``turnlog.analytics`` is parsed (ast, so imports under ``TYPE_CHECKING`` and
inside functions count too): a name imported from ``turnlog.eventstore`` or
``turnlog.projections`` must be in that package's ``__all__``, no private module of theirs
may be imported, and nothing of ``turnlog.kernel`` or ``turnlog.tools``. Inside analytics,
modules import one another without a circle.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import turnlog.analytics as analytics

PACKAGE = Path(analytics.__file__).parent
MODULES = sorted(PACKAGE.glob("*.py"))
BELOW = ("turnlog.eventstore", "turnlog.projections")
ABOVE = ("turnlog.kernel", "turnlog.tools")


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """``(absolute module, names imported from it, line)`` of every import in ``path``."""
    found: list[tuple[str, list[str], int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, [], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = "turnlog.analytics".split(".")
                parent = ".".join(base[: len(base) - node.level + 1])
                module = f"{parent}.{node.module}" if node.module else parent
            else:
                module = node.module or ""
            found.append((module, [alias.name for alias in node.names], node.lineno))
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_analytics_imports_only_public_names_of_the_layers_below(path: Path) -> None:
    for module, names, line in _imports(path):
        where = f"{path.name}:{line} imports {module}"
        assert not module.startswith(ABOVE), f"{where}: analytics must not import the kernel or tools"
        if not module.startswith(BELOW):
            continue
        assert module in BELOW, f"{where}: a private module (import the package's public names)"
        public = set(importlib.import_module(module).__all__)
        for name in names:
            assert name in public, f"{where}: {name!r} is not in {module}.__all__"


def test_every_analytics_module_is_checked() -> None:
    names = {path.stem for path in MODULES}
    assert {"__init__", "_batch", "_database", "_facts", "_projection", "_tables"} <= names


def test_analytics_modules_import_one_another_without_a_circle() -> None:
    graph: dict[str, set[str]] = {}
    for path in MODULES:
        own = "turnlog.analytics" if path.stem == "__init__" else f"turnlog.analytics.{path.stem}"
        edges = graph.setdefault(own, set())
        for module, names, _ in _imports(path):
            if module == "turnlog.analytics":
                edges.update(f"turnlog.analytics.{n}" for n in names if n.startswith("_"))
            elif module.startswith("turnlog.analytics."):
                edges.add(module)
    graph.pop("turnlog.analytics")  # the package re-exports; its modules never import it

    def visit(node: str, trail: tuple[str, ...]) -> None:
        assert node not in trail, f"import circle: {' -> '.join((*trail, node))}"
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, (*trail, node))

    for start in sorted(graph):
        visit(start, ())
