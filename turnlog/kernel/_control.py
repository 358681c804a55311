"""The stop control of ``run()``: a one-shot loop directive set on a branch, polled by the run.

An observer, another task or the consumer itself asks a running stream to stop::

    branch.control("cancel", reason="enough")   # or LoopDirective.CANCEL

``run()`` polls the directive before it hands out each message after the instruction:

- ``cancel``: the run stops cleanly. The provider stream is closed, text still pending is
  recorded (marked ``interrupted``), the model call is recorded and the run ends with
  ``run.ended``; the generator simply finishes.
- ``break``: the run fails with ``LoopBreak`` (``run.failed``, reason ``error``), after the
  same cleanup.
- ``continue``: nothing happens (it clears an earlier directive).

A directive is used once: polling clears it, and the last one set wins. It is in-process
only; nothing is recorded when it is set. A message the run had already recorded when the
directive was seen is in the log but not handed out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from turnlog.kernel._errors import LoopBreak, UsageError

__all__ = ["LoopBreak", "LoopControl", "LoopDirective", "parse_directive", "stop_requested"]


class LoopDirective(StrEnum):
    """What a running loop should do at its next check."""

    CONTINUE = "continue"
    CANCEL = "cancel"
    BREAK = "break"


@dataclass(frozen=True, slots=True)
class LoopControl:
    """A directive waiting to be polled.

    Attributes:
        directive: What to do.
        reason: Why (shown in ``LoopBreak``), when given.
    """

    directive: LoopDirective
    reason: str | None = None


def parse_directive(directive: LoopDirective | str) -> LoopDirective:
    """``directive`` as a ``LoopDirective``.

    Raises:
        UsageError: ``directive`` is not ``continue``, ``cancel`` or ``break``.
    """
    try:
        return LoopDirective(directive)
    except ValueError:
        raise UsageError(f"control() takes 'continue', 'cancel' or 'break', not {directive!r}") from None


def stop_requested(found: LoopControl | None) -> bool:
    """What a polled directive means for a run: True to stop cleanly (cancel); break raises ``LoopBreak``."""
    if found is None or found.directive is LoopDirective.CONTINUE:
        return False
    if found.directive is LoopDirective.BREAK:
        raise LoopBreak(found.reason)
    return True
