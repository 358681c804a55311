"""A shipped multi-exchange Middle: ask, validate, and re-ask until the answer validates.

``RepairMiddle(max_rounds=3)`` performs up to ``max_rounds`` recorded exchanges through an
inner Middle (``communicate`` by default, called with ``skip_validation=True``). After each
one it parses the answer directly (no reformat request); when that fails, the next exchange
tells the model what was wrong and asks again. All exchanges are in the log, and under
``operate`` they are one run: the Middle is one logical invocation, however many provider
messages it takes.

Example::

    answer = await branch.operate(instruction="Weather in Oslo?", response_format=Weather,
                                  middle=RepairMiddle(max_rounds=3))

When the budget is spent, ``parse_param.handle_validation`` decides: ``raise`` raises
``ResponseParseError``; ``return_value`` returns the last answer's text (``operate`` then
applies its own ``handle_validation``); ``return_none`` returns None.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from turnlog.kernel._errors import ResponseParseError, UsageError
from turnlog.kernel._params import ChatParam, Middle, ParseParam
from turnlog.kernel.operations.parse import parse_direct, target_name

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort

__all__ = ["REPAIR_PROMPT", "RepairMiddle"]

REPAIR_PROMPT = (
    "Your previous answer did not follow the ResponseSchema: {error}. "
    "Answer again with only the JSON object. (Attempt {round} of {rounds}.)"
)


class RepairMiddle:
    """A Middle that re-asks until the answer validates, at most ``max_rounds`` exchanges.

    Args:
        max_rounds: The most exchanges one invocation performs (at least 1).
        inner: The Middle of each exchange (default: ``communicate``); it is called with
            ``skip_validation=True`` and must return the answer text.
    """

    __slots__ = ("inner", "max_rounds")

    def __init__(self, max_rounds: int = 3, *, inner: Middle | None = None) -> None:
        if max_rounds < 1:
            raise UsageError("RepairMiddle needs max_rounds >= 1")
        self.max_rounds = max_rounds
        self.inner = inner

    def _inner(self) -> Middle:
        if self.inner is not None:
            return self.inner
        from turnlog.kernel.operations.communicate import communicate

        return communicate

    async def __call__(
        self,
        branch: BranchPort,
        instruction: Any,
        chat_param: ChatParam,
        parse_param: ParseParam | None = None,
        clear_messages: bool = False,
        skip_validation: bool = False,
    ) -> Any:
        """Run the exchanges; return the parsed value (or the text, without a format)."""
        inner = self._inner()
        text = await inner(branch, instruction, chat_param, None, clear_messages, True)
        if skip_validation or parse_param is None or parse_param.response_format is None:
            return text
        fmt = parse_param.response_format
        for number in range(1, self.max_rounds + 1):
            try:
                return parse_direct(
                    str(text or ""),
                    fmt,
                    fuzzy_match=parse_param.fuzzy_match,
                    threshold=parse_param.similarity_threshold,
                )
            except (ValueError, ValidationError) as exc:
                error = _short(exc)
            if number == self.max_rounds:
                break
            prompt = REPAIR_PROMPT.format(error=error, round=number + 1, rounds=self.max_rounds)
            text = await inner(branch, prompt, chat_param, None, False, True)
        if parse_param.handle_validation == "raise":
            raise ResponseParseError(
                f"no valid {target_name(fmt)} after {self.max_rounds} exchanges: {error}",
                target=target_name(fmt),
            )
        return text if parse_param.handle_validation == "return_value" else None


def _short(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors())
    return str(exc)
