"""Every layer re-exports exactly its public names, and each of them exists."""

import importlib
import inspect

import pytest

LAYERS = [
    "turnlog.eventstore",
    "turnlog.projections",
    "turnlog.analytics",
    "turnlog.kernel",
    "turnlog.kernel.models",
    "turnlog.testing",
    "turnlog.tools",
    "turnlog.tools.ui",
]


@pytest.mark.parametrize("name", LAYERS)
def test_all_names_exist_and_are_public(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert sorted(exported) == sorted(set(exported)), "duplicates in __all__"
    for attr in exported:
        assert not attr.startswith("_")
        assert getattr(module, attr) is not None
        value = getattr(module, attr)
        if isinstance(value, type) or inspect.isfunction(value):
            assert value.__module__.startswith("turnlog."), f"{attr} comes from {value.__module__}"


@pytest.mark.parametrize("name", LAYERS)
def test_private_modules_declare_all(name: str) -> None:
    import pkgutil

    module = importlib.import_module(name)
    for info in pkgutil.iter_modules(module.__path__):
        if info.name.startswith("_") and not info.ispkg:
            sub = importlib.import_module(f"{name}.{info.name}")
            assert hasattr(sub, "__all__"), f"{name}.{info.name} has no __all__"
