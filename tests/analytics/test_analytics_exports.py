"""Every analytics module declares its names, and none reaches into the kernel or tools."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import turnlog.analytics as analytics


def test_private_modules_declare_all() -> None:
    for info in pkgutil.iter_modules(analytics.__path__):
        module = importlib.import_module(f"turnlog.analytics.{info.name}")
        assert hasattr(module, "__all__"), info.name


def test_analytics_imports_nothing_from_the_kernel_or_tools() -> None:
    for info in pkgutil.iter_modules(analytics.__path__):
        source = inspect.getsource(importlib.import_module(f"turnlog.analytics.{info.name}"))
        assert "turnlog.kernel" not in source and "turnlog.tools" not in source, info.name
