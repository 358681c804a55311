"""The error tree drawn in docs/errors.md is the tree of the classes, and each error lives where it should.

Every turnlog module is imported first (a module whose optional dependency is missing is
skipped), so that ``TurnlogError.__subclasses__()`` sees every error there is.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import pytest

import turnlog
from turnlog import TurnlogError, UsageError

DOC = Path(__file__).resolve().parents[1] / "docs" / "errors.md"

# Public errors not yet defined in an ``_errors.py``: the two replay errors are being merged
# into one; each maps to the public module that exports it.
NOT_IN_ERRORS_MODULE: dict[str, str] = {}


def _import_all() -> list[ModuleType]:
    modules: list[ModuleType] = [turnlog]
    for info in pkgutil.walk_packages(turnlog.__path__, "turnlog."):
        try:
            modules.append(importlib.import_module(info.name))
        except ImportError as exc:  # an optional extra that is not installed
            if exc.name is None or exc.name.split(".")[0] == "turnlog":
                raise
    return modules


MODULES = _import_all()


def _walk(root: type[BaseException]) -> set[type[BaseException]]:
    found: set[type[BaseException]] = set()
    for sub in root.__subclasses__():
        found.add(sub)
        found |= _walk(sub)
    return found


def _ours(cls: type) -> bool:
    return cls.__module__ == "turnlog" or cls.__module__.startswith("turnlog.")


def _public(cls: type) -> bool:
    return _ours(cls) and not cls.__name__.startswith("_")


PUBLIC = {cls for cls in _walk(TurnlogError) if _public(cls)} | {TurnlogError}
BY_NAME = {cls.__name__: cls for cls in PUBLIC}


def _drawn_parent(cls: type[BaseException]) -> type[BaseException] | None:
    """The first public turnlog error after ``cls`` in its MRO (where the doc draws it)."""
    for base in cls.__mro__[1:]:
        if issubclass(base, TurnlogError) and _public(base):
            return base
    return None


def _also(cls: type[BaseException]) -> set[str]:
    """The other parents a caller can catch ``cls`` by: what the drawn parent does not already give."""
    parent = _drawn_parent(cls)
    given = set(parent.__mro__) if parent is not None else set()
    extra = [
        base
        for base in cls.__mro__[1:]
        if base not in given
        and base not in (Exception, BaseException, object)
        and (_public(base) or base.__module__ == "builtins")
        and issubclass(base, BaseException)
    ]
    # Name only the most specific: UsageError implies ValueError, TimeoutError implies OSError.
    return {b.__name__ for b in extra if not any(o is not b and issubclass(o, b) for o in extra)}


def _doc_tree() -> dict[str, tuple[str | None, set[str]]]:
    """Each class drawn in the tree: its drawn parent and its ``(also ...)`` names."""
    text = DOC.read_text(encoding="utf-8")
    block = re.search(r"<!-- error-tree -->\n```text\n(.*?)^```", text, re.S | re.M)
    assert block, "docs/errors.md has no error tree block"
    tree: dict[str, tuple[str | None, set[str]]] = {}
    stack: list[str] = []
    for line in block.group(1).splitlines():
        match = re.fullmatch(r"([│ ]*(?:[├└]── )?)(\w+)(?: \(also ([\w, ]+)\))?", line.rstrip())
        assert match, f"cannot read tree line {line!r}"
        depth = len(match.group(1)) // 4
        name = match.group(2)
        assert name not in tree, f"{name} is drawn twice"
        del stack[depth:]
        tree[name] = (stack[-1] if stack else None, set(filter(None, (match.group(3) or "").split(", "))))
        stack.append(name)
    return tree


TREE = _doc_tree()


def test_the_doc_draws_exactly_the_public_errors() -> None:
    """Every public error is drawn, and nothing else is."""
    assert set(TREE) == set(BY_NAME), (
        f"not drawn: {sorted(set(BY_NAME) - set(TREE))}; drawn but no such error: {sorted(set(TREE) - set(BY_NAME))}"
    )
    assert len(BY_NAME) == len(PUBLIC), "two public errors share a name"


@pytest.mark.parametrize("name", sorted(TREE))
def test_each_error_is_drawn_under_its_parent(name: str) -> None:
    """The drawn parent and the ``(also ...)`` names are the class's own."""
    cls = BY_NAME[name]
    parent, also = TREE[name]
    drawn = _drawn_parent(cls)
    assert parent == (drawn.__name__ if drawn is not None else None)
    assert also == _also(cls)


@pytest.mark.parametrize("name", sorted(TREE))
def test_each_error_is_described(name: str) -> None:
    """Each error has a row in one of the doc's tables."""
    assert re.search(rf"^\| `{name}` \|", DOC.read_text(encoding="utf-8"), re.M)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_each_error_lives_in_an_errors_module_and_is_exported(name: str) -> None:
    """Defined in a module named ``_errors.py``, and exported by the package that holds it."""
    cls = BY_NAME[name]
    if name in NOT_IN_ERRORS_MODULE:
        layer = importlib.import_module(NOT_IN_ERRORS_MODULE[name])
    else:
        assert cls.__module__.rsplit(".", 1)[-1] == "_errors", f"{name} is defined in {cls.__module__}"
        layer = importlib.import_module(cls.__module__.rsplit(".", 1)[0])
    assert name in layer.__all__, f"{layer.__name__} does not export {name}"
    assert getattr(layer, name) is cls


@pytest.mark.parametrize(
    "module", [m for m in MODULES if m.__name__.endswith("._errors")], ids=lambda m: m.__name__
)
def test_errors_modules_hold_only_turnlog_errors(module: ModuleType) -> None:
    """Every class an ``_errors.py`` defines is a ``TurnlogError``; its package re-exports the root."""
    defined = [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__]
    assert defined, f"{module.__name__} defines no error"
    for cls in defined:
        assert issubclass(cls, TurnlogError), f"{cls.__qualname__} in {module.__name__} is not a TurnlogError"
    package = importlib.import_module(module.__name__.rsplit(".", 1)[0])
    assert "TurnlogError" in package.__all__ and package.TurnlogError is TurnlogError


def test_exceptions_outside_the_tree_are_the_documented_ones() -> None:
    """A public exception that is not a TurnlogError is listed under "Outside the tree"."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("<!-- outside-tree -->", 1)[1]
    listed = set(re.findall(r"`(\w+)`", section))
    outside = {
        cls.__name__
        for module in MODULES
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__ == module.__name__
        and issubclass(cls, BaseException)
        and not issubclass(cls, TurnlogError)
        and not cls.__name__.startswith("_")
    }
    assert outside <= listed, f"not in the tree and not documented: {sorted(outside - listed)}"


def test_usage_error_is_a_value_error_at_the_root() -> None:
    """``except ValueError`` written against the old bare errors still catches a UsageError."""
    assert UsageError.__mro__[1:3] == (TurnlogError, ValueError)
    assert TurnlogError.__module__ == UsageError.__module__ == "turnlog._errors"
