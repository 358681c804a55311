"""Upcasters: lift stored payloads from an old schema version to the current one on read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from turnlog._errors import UsageError

__all__ = ["Upcaster", "Upcasters"]

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


class Upcasters:
    """A registry of functions that lift one record type from schema ``n`` to ``n + 1``.

    Applies to events (by event type) and to snapshots (by snapshot type). Stored bytes are
    never rewritten: the hash chain keeps verifying the original record.

    Example:
        >>> ups = Upcasters()
        >>> @ups.register("message.added", 1)
        ... def _v1_to_v2(data):
        ...     return {**data, "sender": data.get("sender", "user")}
        >>> ups.upcast("message.added", 1, {"content": "hi"})
        (2, {'content': 'hi', 'sender': 'user'})
    """

    __slots__ = ("_steps",)

    def __init__(self) -> None:
        self._steps: dict[tuple[str, int], Upcaster] = {}

    def register(self, type_: str, from_schema: int) -> Callable[[Upcaster], Upcaster]:
        """Register a function lifting ``type_`` from ``from_schema`` to ``from_schema + 1``."""

        def decorate(fn: Upcaster) -> Upcaster:
            self.add(type_, from_schema, fn)
            return fn

        return decorate

    def add(self, type_: str, from_schema: int, fn: Upcaster) -> None:
        """Register ``fn`` (the non-decorator form of ``register``)."""
        key = (type_, from_schema)
        if key in self._steps:
            raise UsageError(f"an upcaster for {type_!r} schema {from_schema} is already registered")
        self._steps[key] = fn

    def __bool__(self) -> bool:
        return bool(self._steps)

    def upcast(self, type_: str, schema: int, data: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Apply every registered step from ``schema`` upwards; return the new schema and data."""
        steps = self._steps
        while (fn := steps.get((type_, schema))) is not None:
            data = fn(data)
            schema += 1
        return schema, data
