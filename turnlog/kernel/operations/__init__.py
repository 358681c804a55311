"""turnlog.kernel.operations: one module per verb; Branch methods import them lazily.

``RepairMiddle`` (the shipped Middle that asks again when an answer does not parse) is
importable from here; it is loaded on first use, like the verbs.
"""

from typing import Any

__all__ = ["RepairMiddle"]


def __getattr__(name: str) -> Any:
    if name == "RepairMiddle":
        from turnlog.kernel.operations._repair import RepairMiddle

        return RepairMiddle
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
