"""The analytics package re-exports exactly its public names, each defined inside turnlog."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import turnlog.analytics as analytics


def test_every_exported_name_exists_and_is_ours() -> None:
    assert sorted(analytics.__all__) == sorted(set(analytics.__all__))
    for name in analytics.__all__:
        value = getattr(analytics, name)
        if isinstance(value, type) or inspect.isfunction(value):
            assert value.__module__.startswith("turnlog.analytics."), name


def test_private_modules_declare_all() -> None:
    for info in pkgutil.iter_modules(analytics.__path__):
        module = importlib.import_module(f"turnlog.analytics.{info.name}")
        assert hasattr(module, "__all__"), info.name


def test_analytics_imports_nothing_from_the_kernel_or_tools() -> None:
    for info in pkgutil.iter_modules(analytics.__path__):
        source = inspect.getsource(importlib.import_module(f"turnlog.analytics.{info.name}"))
        assert "turnlog.kernel" not in source and "turnlog.tools" not in source, info.name
