"""Usage: token counts and cost of a model call or a run, one type for providers and events.

Providers report it (``turnlog.kernel.models.Usage`` is this class), ``model.called``,
``run.ended`` and ``run.failed`` store it, and the fold keeps it per run: one frozen pydantic
model, so no hand conversion sits between a response and the event that records it. Its JSON
form (``model_dump(mode="json")``) is the stored payload. The cache counts are stored only when
known, so a call without them stores what it stored before they existed (schema 1 of
``model.called``, ``run.ended`` and ``run.failed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Usage"]


class Usage(BaseModel):
    """Token usage and cost; each field None when unknown (never a made-up zero).

    Positional arguments are accepted in field order for the first three, so
    ``Usage(10, 2, None)`` reads as it did when this was a dataclass; the cache counts are
    keywords. ``input_tokens`` counts every prompt token, the cached ones included: the cache
    counts say how many of them were read from or written to the provider's prompt cache (they
    are priced apart).

    Example:
        >>> Usage(10, 2) + Usage(5, None, 0.01)
        Usage(input_tokens=15, output_tokens=2, cost_usd=0.01)
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    NONE: ClassVar[Usage]
    """``Usage()``, every field unknown: the one instance the schemas' defaults share.

    A default factory would build a Usage for every payload validated without one, and for
    every field compared against its default when a payload is stored without its defaults
    (``model.called``, ``run.ended``, a snapshot's runs); a frozen instance can be shared.
    """

    input_tokens: int | None = None
    """Prompt tokens."""
    output_tokens: int | None = None
    """Completion tokens."""
    cost_usd: float | None = None
    """Cost in US dollars."""
    # Left out of the stored form while unknown: a payload without cache counts stays
    # byte-identical to the one written before they existed.
    cache_read_tokens: int | None = Field(default=None, exclude_if=lambda value: value is None)
    """Prompt tokens read from the provider's prompt cache (part of ``input_tokens``)."""
    cache_write_tokens: int | None = Field(default=None, exclude_if=lambda value: value is None)
    """Prompt tokens written to the prompt cache (Anthropic's cache creation; part of
    ``input_tokens``). OpenAI and Gemini report cache reads only."""

    if TYPE_CHECKING:
        # what type checkers see; the real __init__ is set below the class
        def __init__(
            self,
            input_tokens: int | None = None,
            output_tokens: int | None = None,
            cost_usd: float | None = None,
            *,
            cache_read_tokens: int | None = None,
            cache_write_tokens: int | None = None,
        ) -> None: ...

    def __repr_args__(self) -> Any:
        # The cache counts only when known: most calls have none, and the repr stays short.
        for name, value in super().__repr_args__():
            if value is not None or name not in _CACHE_FIELDS:
                yield name, value

    def __eq__(self, other: object) -> bool:
        # Two Usages are equal when their fields are. pydantic's general __eq__ (generic
        # origins, private attributes, extras: none of which a Usage has) costs several
        # microseconds, and storing model.called or a snapshot's runs without their defaults
        # compares each usage with the default.
        if type(self) is Usage and type(other) is Usage:
            return self.__dict__ == other.__dict__
        return super().__eq__(other)

    def __add__(self, other: Usage) -> Usage:
        """The sum; a field unknown on one side takes the other side's value."""

        def add(a: Any, b: Any) -> Any:
            return b if a is None else a if b is None else a + b

        return Usage(
            add(self.input_tokens, other.input_tokens),
            add(self.output_tokens, other.output_tokens),
            add(self.cost_usd, other.cost_usd),
            cache_read_tokens=add(self.cache_read_tokens, other.cache_read_tokens),
            cache_write_tokens=add(self.cache_write_tokens, other.cache_write_tokens),
        )

    @classmethod
    def from_reported(cls, reported: Mapping[str, Any]) -> Usage:
        """The usage a stream chunk or a recorded call reports as a JSON object.

        Reads ``input_tokens``, ``output_tokens``, ``cost_usd``, ``cache_read_tokens`` and
        ``cache_write_tokens``; a value of the wrong type
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
            cache_read_tokens=tokens(reported.get("cache_read_tokens")),
            cache_write_tokens=tokens(reported.get("cache_write_tokens")),
        )

    def to_dict(self) -> dict[str, Any]:
        """The stored form: the three fields, and the cache counts when known."""
        return self.model_dump(mode="json")


_FIELDS = ("input_tokens", "output_tokens", "cost_usd")
_CACHE_FIELDS = ("cache_read_tokens", "cache_write_tokens")


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
Usage.NONE = Usage()
