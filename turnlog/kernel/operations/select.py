"""``select``: ask the model to pick from a list of choices (no Branch facade).

The choices go into the context, the model answers a ``SelectionModel`` through
``Branch.operate`` (one recorded exchange under one run), and the picks are mapped back to
the choice values: exactly, then ignoring case, then by close spelling; picks that match no
choice are dropped, and at most ``max_num_selections`` are kept.

It is an operation module only. To call it by name, register it on a session with the
branch it should run on::

    session.register_operation("select", functools.partial(select, branch))
    picked = await session.run_operation("select", instruction="Pick a color", choices=["red", "blue"])
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from turnlog.kernel._errors import UsageError

if TYPE_CHECKING:
    from turnlog.kernel._port import VerbPort

__all__ = ["SELECT_PROMPT", "Selection", "SelectionModel", "select"]

SELECT_PROMPT = (
    "Select at most {n} of the choices listed in the context. Write each selected choice "
    "exactly as it is listed."
)


class SelectionModel(BaseModel):
    """What the model answers."""

    selected: list[str] = Field(default_factory=list, description="The selected choices, as listed.")


class Selection(BaseModel):
    """The outcome of ``select``.

    Attributes:
        selected: The chosen values (the items of the choices: strings, enum members or keys).
        keys: Their names as listed to the model.
        raw: What the model answered (a ``SelectionModel``, or its text when it did not validate).
    """

    selected: list[Any] = Field(default_factory=list)
    keys: list[str] = Field(default_factory=list)
    raw: Any = None


def _listed(choices: Any) -> tuple[dict[str, Any], Any]:
    """Choice name -> value, and what the model is shown."""
    if isinstance(choices, type) and issubclass(choices, enum.Enum):
        named = {m.name: m for m in choices}
        return named, list(named)
    if isinstance(choices, Mapping):
        named = {str(k): k for k in choices}
        return named, {str(k): v for k, v in choices.items()}
    if isinstance(choices, Sequence) and not isinstance(choices, str):
        named = {}
        for item in choices:
            key = item.name if isinstance(item, enum.Enum) else str(item)
            named[key] = item
        return named, list(named)
    raise UsageError(f"choices must be a list, a mapping or an Enum class, not {type(choices).__name__}")


def _match(pick: str, named: Mapping[str, Any]) -> str | None:
    if pick in named:
        return pick
    folded = {k.casefold(): k for k in named}
    if pick.strip().casefold() in folded:
        return folded[pick.strip().casefold()]
    close = difflib.get_close_matches(pick.strip().casefold(), list(folded), n=1, cutoff=0.8)
    return folded[close[0]] if close else None


async def select(
    branch: VerbPort,
    instruction: Any,
    choices: Any,
    *,
    max_num_selections: int = 1,
    guidance: Any = None,
    context: Any = None,
    **operate_kwargs: Any,
) -> Selection:
    """Ask the model to pick up to ``max_num_selections`` of ``choices``.

    Args:
        branch: The branch that records the exchange.
        instruction: What the selection is for.
        choices: A list (of strings or enum members), a mapping name -> description, or an
            Enum class.
        max_num_selections: How many picks are kept at most.
        guidance: Extra guidance, after the selection prompt.
        context: Extra context, after the choices.
        **operate_kwargs: Passed to ``Branch.operate``.

    Raises:
        UsageError: ``choices`` is empty or of an unsupported type.
    """
    if max_num_selections < 1:
        raise UsageError("max_num_selections must be at least 1")
    named, shown = _listed(choices)
    if not named:
        raise UsageError("select() needs at least one choice")
    prompt = SELECT_PROMPT.format(n=max_num_selections)
    items: list[Any] = [{"choices": shown}]
    if context is not None:
        items.extend(context if isinstance(context, list) else [context])
    raw = await branch.operate(
        instruction=instruction,
        guidance=f"{prompt}\n\n{guidance}" if guidance else prompt,
        context=items,
        response_format=SelectionModel,
        **operate_kwargs,
    )
    picks = raw.selected if isinstance(raw, SelectionModel) else []
    keys: list[str] = []
    for pick in picks:
        key = _match(str(pick), named)
        if key is not None and key not in keys:
            keys.append(key)
    keys = keys[:max_num_selections]
    return Selection(selected=[named[k] for k in keys], keys=keys, raw=raw)
