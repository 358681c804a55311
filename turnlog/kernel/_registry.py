"""The operation registry: named async operations a session shares with its branches (ADR D2).

A branch outside a session has a registry of its own; including it in a session gives it the
session's, so an operation registered once is visible to every included branch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from turnlog._errors import UsageError

__all__ = ["OperationManager"]


def _is_async(func: Callable[..., Any]) -> bool:
    target = func
    while hasattr(target, "func") and not inspect.isfunction(target):  # functools.partial
        target = target.func
    call = getattr(target, "__call__", None)  # noqa: B004 - an object with an async __call__
    return inspect.iscoroutinefunction(target) or (
        call is not None and not inspect.isfunction(target) and inspect.iscoroutinefunction(call)
    )


class OperationManager:
    """A registry of named async operations.

    Attributes:
        registry: Name -> async callable.
    """

    __slots__ = ("registry",)

    def __init__(self) -> None:
        self.registry: dict[str, Callable[..., Any]] = {}

    def register(self, operation: str, func: Callable[..., Any], update: bool = False) -> None:
        """Register ``func`` under ``operation``.

        Raises:
            UsageError: the name is taken (and ``update`` is false), or ``func`` is not async.
        """
        if operation in self.registry and not update:
            raise UsageError(f"Operation '{operation}' is already registered.")
        if not _is_async(func):
            raise UsageError(f"Operation '{operation}' must be an async function.")
        self.registry[operation] = func
