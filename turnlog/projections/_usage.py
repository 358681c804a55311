"""Usage: token counts and cost of a model call or a run, one type for providers and events.

Providers report it (``turnlog.kernel.models.Usage`` is this class), ``model.called``,
``run.ended`` and ``run.failed`` store it, and the fold keeps it per run: one frozen pydantic
model, so no hand conversion sits between a response and the event that records it. Its JSON
form (``model_dump(mode="json")``) is the stored payload, unchanged from when the event schema
had its own copy of the type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

__all__ = ["Usage"]


class Usage(BaseModel):
    """Token usage and cost; each field None when unknown (never a made-up zero).

    Positional arguments are accepted in field order, so ``Usage(10, 2, None)`` reads as it did
    when this was a dataclass.

    Example:
        >>> Usage(10, 2) + Usage(5, None, 0.01)
        Usage(input_tokens=15, output_tokens=2, cost_usd=0.01)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int | None = None
    """Prompt tokens."""
    output_tokens: int | None = None
    """Completion tokens."""
    cost_usd: float | None = None
    """Cost in US dollars."""

    if TYPE_CHECKING:
        # what type checkers see; the real __init__ is set below the class
        def __init__(
            self,
            input_tokens: int | None = None,
            output_tokens: int | None = None,
            cost_usd: float | None = None,
        ) -> None: ...

    def __add__(self, other: Usage) -> Usage:
        """The sum; a field unknown on one side takes the other side's value."""

        def add(a: Any, b: Any) -> Any:
            return b if a is None else a if b is None else a + b

        return Usage(
            add(self.input_tokens, other.input_tokens),
            add(self.output_tokens, other.output_tokens),
            add(self.cost_usd, other.cost_usd),
        )

    @classmethod
    def from_reported(cls, reported: Mapping[str, Any]) -> Usage:
        """The usage a stream chunk or a recorded call reports as a JSON object.

        Reads ``input_tokens``, ``output_tokens`` and ``cost_usd``; a value of the wrong type
        (a string, a bool, a fraction of a token) counts as unknown instead of failing the run.
        """

        def tokens(value: Any) -> int | None:
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        def cost(value: Any) -> float | None:
            return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

        return cls(
            tokens(reported.get("input_tokens")),
            tokens(reported.get("output_tokens")),
            cost(reported.get("cost_usd")),
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON object of the three fields (the stored form)."""
        return self.model_dump(mode="json")


_FIELDS = ("input_tokens", "output_tokens", "cost_usd")


def _init(self: Usage, *args: int | float | None, **fields: Any) -> None:
    """``Usage(input_tokens, output_tokens, cost_usd)``: positional arguments name the fields in order.

    Keywords go to pydantic as they are, so an unknown or invalid field is a ValidationError
    like any other.
    """
    if len(args) > len(_FIELDS):
        raise TypeError(f"Usage takes at most {len(_FIELDS)} positional arguments, got {len(args)}")
    for name, value in zip(_FIELDS, args, strict=False):
        if name in fields:
            raise TypeError(f"Usage got {name!r} twice")
        fields[name] = value
    BaseModel.__init__(self, **fields)


# Set after the class is built, on purpose: pydantic then compiles Usage as a model without a
# custom __init__, so validating stored usage (every model.called, run.ended and run.failed
# the fold reads) stays in pydantic-core instead of calling back into Python twice. Only a
# direct call ``Usage(...)`` runs ``_init``. Should pydantic ever rebuild the model, it would
# see the custom __init__ and take the slower path, with the same results.
Usage.__init__ = _init  # type: ignore[method-assign]
