"""The layers of the whole package, and its import graph, checked from the source.

The layers are ``tools -> {testing -> kernel, analytics} -> projections -> eventstore``: a layer
imports only the layers below it, ``kernel`` and ``analytics`` not each other, ``testing`` (the
test doubles and wire fakes a user tests their agent with) sits above the kernel and below the
command line, and the root package (``turnlog/*.py``) imports nothing above itself. Analytics reads the layers below it through their
public names only. No module reaches itself through imports.

Every module is parsed (ast). An import counts when it runs at module level, including under
``if TYPE_CHECKING:`` (a circle a type checker needs is a circle a reader has to hold in their
head); an import inside a function runs later, at call time, so it is no circle at import time
but it still must respect the layers, and no circle may close through it either (a reader
follows a call as readily as an import).

A package's ``__init__`` that re-exports its modules is a node like the others; the implicit
import of a parent package by its children is not an edge (Python does it for every module).
"""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import turnlog

ROOT = Path(turnlog.__file__).parent

LAYERS: dict[str, frozenset[str]] = {
    "": frozenset(),
    "eventstore": frozenset({""}),
    "projections": frozenset({"", "eventstore"}),
    "kernel": frozenset({"", "eventstore", "projections"}),
    "analytics": frozenset({"", "eventstore", "projections"}),
    "testing": frozenset({"", "eventstore", "projections", "kernel"}),
    "tools": frozenset({"", "eventstore", "projections", "kernel", "analytics", "testing"}),
}
"""Each layer (by top-level subpackage; ``""`` is the root package) and the layers it may import."""
SCRIPTS = {"turnlog.__main__": "tools"}
"""Modules Python runs as a script (``python -m turnlog``) and never imports: each sits in the
layer named, since it only hands over to that layer's command line."""


@dataclass(frozen=True, slots=True)
class Edge:
    """One import of a turnlog module by another."""

    source: str
    target: str
    names: tuple[str, ...]
    line: int
    module_level: bool


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _layer(module: str) -> str:
    if module in SCRIPTS:
        return SCRIPTS[module]
    parts = module.split(".")
    if len(parts) == 1 or parts[1] not in LAYERS:
        return ""
    return parts[1]


def _statements(tree: ast.Module) -> list[tuple[ast.stmt, bool]]:
    """Every import statement of ``tree``, with whether it runs at module level."""
    found: list[tuple[ast.stmt, bool]] = []

    def visit(body: list[ast.stmt], top: bool) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.append((node, top))
                continue
            nested_top = top and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                child = getattr(node, field, None)
                if isinstance(child, list):
                    visit([c for c in child if isinstance(c, ast.stmt)], nested_top)
                    for c in child:
                        if isinstance(c, ast.ExceptHandler | ast.match_case):
                            visit(c.body, nested_top)

    visit(tree.body, True)
    return found


def _edges(module: str, path: Path) -> list[Edge]:
    """The turnlog modules ``module`` imports, one edge per (statement, target)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    edges: list[Edge] = []
    for node, top in _statements(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("turnlog"):
                    edges.append(Edge(module, alias.name, (), node.lineno, top))
            continue
        assert isinstance(node, ast.ImportFrom)
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join([*base, node.module] if node.module else base)
        else:
            target = node.module or ""
        if not target.startswith("turnlog"):
            continue
        names = tuple(alias.name for alias in node.names)
        submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
        for sub in submodules:
            edges.append(Edge(module, sub, (), node.lineno, top))
        rest = tuple(n for n in names if f"{target}.{n}" not in MODULES)
        # ``from . import _x`` in a package's module imports the parent implicitly: only _x counts
        if rest or not module.startswith(target + "."):
            edges.append(Edge(module, target, rest, node.lineno, top))
    return edges


EDGES: list[Edge] = [edge for name, path in MODULES.items() for edge in _edges(name, path)]


def _graph(*, function_level: bool = False) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for edge in EDGES:
        if edge.target == edge.source or edge.target not in MODULES:
            continue
        if edge.module_level or function_level:
            graph[edge.source].add(edge.target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_every_kind_of_import() -> None:
    """Module-level, TYPE_CHECKING, relative, absolute and function-level imports are all found."""
    graph = _graph(function_level=True)
    assert "turnlog.kernel._port" in graph["turnlog.kernel.operations.chat"]
    assert "turnlog.kernel._commands" in graph["turnlog.kernel._lifecycle"]
    assert "turnlog.kernel.operations.chat" in graph["turnlog.kernel._verbs"]  # inside a method
    assert "turnlog.eventstore._problem" in _graph()["turnlog.eventstore._errors"]  # TYPE_CHECKING
    assert "turnlog.analytics._queries" in _graph()["turnlog.analytics._projection"]  # from . import _x
    assert "turnlog.analytics" not in _graph()["turnlog.analytics._projection"]  # the implicit parent
    inside = [e for e in EDGES if e.source == "turnlog.eventstore._open" and not e.module_level]
    assert {e.target for e in inside} >= {"turnlog.eventstore._sqlite", "turnlog.eventstore._memory"}


def test_every_module_and_layer_is_seen() -> None:
    assert {_layer(m) for m in MODULES} == set(LAYERS)
    assert len(MODULES) > 150


def test_no_module_imports_a_script() -> None:
    assert [e for e in EDGES if e.target in SCRIPTS] == []


def test_the_finder_finds_a_circle() -> None:
    """The checker itself can fail: a made-up circle is found, a chain is not."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_no_import_circle() -> None:
    """No module reaches itself through imports that run at import time."""
    assert _cycles(_graph()) == []


def test_the_package_has_no_import_circle_even_through_calls() -> None:
    """Imports inside functions count too: no module needs, at call time, one that needs it."""
    assert _cycles(_graph(function_level=True)) == []


def test_operations_do_not_import_the_facade() -> None:
    """Operations see a branch through the port, never through ``_branch``."""
    users = {e.source for e in EDGES if e.target == "turnlog.kernel._branch"}
    assert not [m for m in users if m.startswith("turnlog.kernel.operations")]


@pytest.mark.parametrize("layer", sorted(LAYERS), ids=lambda name: name or "root")
def test_a_layer_imports_only_the_layers_below_it(layer: str) -> None:
    """Every import, at any depth (functions too), points down: the order holds at call time as well."""
    wrong = [
        f"{e.source}:{e.line} imports {e.target}"
        for e in EDGES
        if _layer(e.source) == layer and _layer(e.target) not in LAYERS[layer] | {layer}
    ]
    assert wrong == []


ANALYTICS_BELOW = ("turnlog.eventstore", "turnlog.projections")


def test_analytics_imports_only_public_names_of_the_layers_below() -> None:
    """Analytics names of eventstore and projections only what their ``__all__`` lists."""
    wrong: list[str] = []
    for e in EDGES:
        if _layer(e.source) != "analytics" or not e.target.startswith(ANALYTICS_BELOW):
            continue
        where = f"{e.source}:{e.line} imports {e.target}"
        if e.target not in ANALYTICS_BELOW:
            wrong.append(f"{where}: a private module (import the package's public names)")
            continue
        public = set(importlib.import_module(e.target).__all__)
        wrong.extend(f"{where}: {n!r} is not in {e.target}.__all__" for n in e.names if n not in public)
    assert wrong == []


# ------------------------------------------------------------------------- who writes the store

STORE_WRITES = frozenset(
    {
        "append",
        "append_encoded",
        "append_batch",
        "append_tracked",
        "save_snapshot",
        "delete_snapshots",
        "save_tracking",
        "redact",
        "redact_many",
        "upgrade_chain",
    }
)
"""The methods of ``EventStore`` that change what a store holds."""
ARCHITECTURE = ROOT.parent / "docs" / "architecture.md"


def _store_writes(path: Path) -> set[tuple[str, str]]:
    """Each (module path under turnlog/, method) of a call that writes to a store in ``path``.

    A call ``x.append(...)`` with two arguments or more is a store's (a list's takes one); the
    other names are the store's own.
    """
    found: set[tuple[str, str]] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name = node.func.attr
        if name not in STORE_WRITES or (name == "append" and len(node.args) + len(node.keywords) < 2):
            continue
        found.add((path.relative_to(ROOT).as_posix(), name))
    return found


def _listed_writers() -> set[tuple[str, str]]:
    """The (module, method) pairs of the table in docs/architecture.md "Who writes the store"."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    table = text.split("<!-- store-writers -->", 1)[1].split("<!-- /store-writers -->", 1)[0]
    listed: set[tuple[str, str]] = set()
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        module = cells[0].strip("`")
        listed |= {(module, m) for m in re.findall(r"`(\w+)`", cells[1])}
    return listed


def test_the_writer_finder_finds_a_write() -> None:
    """The checker itself can fail: a store append is found, a list append is not."""
    module = ROOT / "kernel" / "_kernel.py"
    assert (("kernel/_kernel.py", "append")) in _store_writes(module)
    assert ("kernel/_kernel.py", "append") in _listed_writers()


def test_every_writer_of_the_store_is_listed_in_the_architecture() -> None:
    """A module that starts writing to a store (outside eventstore/) must be added to the table."""
    found = {
        write
        for name, path in MODULES.items()
        if _layer(name) != "eventstore"
        for write in _store_writes(path)
    }
    listed = _listed_writers()
    assert sorted(found - listed) == [], "writes to the store not listed in docs/architecture.md"
    assert sorted(listed - found) == [], "listed in docs/architecture.md but no longer written"


def test_only_the_kernel_writes_a_branch_stream() -> None:
    """No module outside the kernel names a ``branch-`` stream in a write (forks go through Branch)."""
    wrong: list[str] = []
    for name, path in MODULES.items():
        if _layer(name) in ("kernel", "eventstore"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in STORE_WRITES - {"save_snapshot", "delete_snapshots", "redact_many"}
                and len(node.args) + len(node.keywords) >= 2
                and "branch-" in ast.unparse(node.args[0])
            ):
                wrong.append(f"{name}:{node.lineno}")
    assert wrong == []
