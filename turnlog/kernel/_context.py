"""Context providers: text gathered before a request and injected into it, never recorded.

A provider is an object with ``async provide(branch, instruction) -> str | None`` (or a
bare async function of the same shape). The registry calls them in registration order,
keeps within a token budget by dropping the lowest priority first, and reports which fired
and which failed (a provider that raises, or returns anything but text, fails alone: the
others still render). The verbs, ``run`` included, put the kept blocks into the request
(after the system text) and list the names that fired in ``model.called.context_providers``.
The text never becomes a message::

    async def today(branch, instruction):
        return "Today is Tuesday."

    branch.providers.register(today, priority=10, max_tokens=50)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from turnlog._errors import UsageError

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort

__all__ = [
    "ContextProvider",
    "ContextProviderRegistry",
    "PromptContext",
    "ProviderReport",
    "count_tokens",
    "prompt_context",
]

_log = logging.getLogger("turnlog.kernel")


def count_tokens(text: str) -> int:
    """The token estimate used for budgets: one token per four characters, rounded up."""
    return math.ceil(len(text) / 4)


@runtime_checkable
class ContextProvider(Protocol):
    """Something that contributes text to a request."""

    async def provide(self, branch: BranchPort, instruction: Any) -> str | None:
        """Return the text to inject for this request, or None to contribute nothing."""
        ...


ProviderFunction = Callable[["BranchPort", Any], Awaitable["str | None"]]


@dataclass(frozen=True, slots=True)
class _Registered:
    name: str
    call: ProviderFunction
    priority: int
    max_tokens: int | None
    order: int


@dataclass(frozen=True, slots=True)
class ProviderReport:
    """What the providers contributed to one request.

    Attributes:
        blocks: The kept texts, in registration order.
        fired: ``{"provider_name", "tokens"}`` for each kept block.
        skipped: Names of providers left out (over their own limit, over budget, or not run).
        failed: Names of providers that raised (the turn went on without them).
    """

    blocks: tuple[str, ...] = ()
    fired: tuple[dict[str, Any], ...] = ()
    skipped: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()

    @property
    def fired_names(self) -> list[str]:
        """Names of the providers whose text was injected."""
        return [f["provider_name"] for f in self.fired]


@dataclass(slots=True)
class ContextProviderRegistry:
    """Context providers of one branch, with a total token budget.

    Attributes:
        budget: The most tokens all kept blocks may use together.
    """

    budget: int = 2000
    _providers: list[_Registered] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self._providers)

    @property
    def names(self) -> list[str]:
        """Registered provider names, in registration order."""
        return [p.name for p in self._providers]

    def register(
        self,
        provider: ContextProvider | ProviderFunction,
        *,
        priority: int = 0,
        max_tokens: int | None = None,
        name: str | None = None,
    ) -> None:
        """Register ``provider``; a higher ``priority`` survives a tight budget longer.

        Raises:
            ValueError: the name is taken already.
        """
        call: ProviderFunction
        if isinstance(provider, ContextProvider):
            call = provider.provide
            default_name = type(provider).__name__
        else:
            call = provider
            default_name = getattr(provider, "__name__", type(provider).__name__)
        name = name or default_name
        if name in self.names:
            raise UsageError(f"a context provider named {name!r} is registered already")
        self._providers.append(_Registered(name, call, priority, max_tokens, len(self._providers)))

    def unregister(self, name: str) -> None:
        """Remove the provider registered as ``name``."""
        self._providers = [p for p in self._providers if p.name != name]

    def skip_all(self) -> ProviderReport:
        """The report of a turn that ran no provider."""
        return ProviderReport(skipped=tuple(self.names))

    async def gather(self, branch: BranchPort, instruction: Any) -> ProviderReport:
        """Run every provider, then keep what fits.

        A provider that raises, or returns anything but a string or None, is reported as
        failed; the others are unaffected.
        """
        got: list[tuple[_Registered, str, int]] = []
        skipped: list[str] = []
        failed: list[str] = []
        for provider in self._providers:
            # Fail open: whatever goes wrong with one provider (it raises, returns something
            # that is not text, or an object whose truth test raises) is that provider's
            # failure; the others still render and the turn goes on.
            try:
                text = _checked(await provider.call(branch, instruction))
                tokens = count_tokens(text) if text else 0
            except Exception:
                _log.exception("context provider %r failed; the turn goes on without it", provider.name)
                failed.append(provider.name)
                continue
            if not text:
                continue
            if provider.max_tokens is not None and tokens > provider.max_tokens:
                skipped.append(provider.name)
                continue
            got.append((provider, text, tokens))
        # Over budget, drop the lowest priority first (the latest registered among equals).
        by_rank = sorted(got, key=lambda g: (g[0].priority, -g[0].order))
        total = sum(g[2] for g in got)
        dropped: set[str] = set()
        for provider, _, tokens in by_rank:
            if total <= self.budget:
                break
            dropped.add(provider.name)
            skipped.append(provider.name)
            total -= tokens
        kept = [g for g in got if g[0].name not in dropped]
        return ProviderReport(
            blocks=tuple(text for _, text, _ in kept),
            fired=tuple({"provider_name": p.name, "tokens": t} for p, _, t in kept),
            skipped=tuple(skipped),
            failed=tuple(failed),
        )


def _checked(text: object) -> str | None:
    """The provider's text; anything but ``str`` or None is that provider's error."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise TypeError(f"a context provider must return str or None, not {type(text).__name__}")
    return str.__str__(text)  # a str subclass cannot smuggle in an odd __bool__ or __len__


@dataclass(frozen=True, slots=True)
class PromptContext:
    """What the context providers add to a prompt that is one text (a CLI agent's).

    Attributes:
        text: The kept blocks joined by blank lines (empty when none was kept).
        fired: Names of the providers whose text was kept (``model.called.context_providers``).
    """

    text: str = ""
    fired: tuple[str, ...] = ()

    def prepend(self, prompt: str) -> str:
        """``prompt`` with the provider text in front (unchanged when there is none)."""
        return f"{self.text}\n\n{prompt}" if self.text else prompt


async def prompt_context(branch: BranchPort, instruction: Any) -> PromptContext:
    """Gather the branch's context providers for one text prompt (``run``), as the API verbs do.

    The same rules apply: providers run only when the branch has a system message, a failing
    provider fails alone, the budget keeps the highest priorities. Nothing is recorded here.
    """
    report = await branch.gather_context(instruction)
    return PromptContext("\n\n".join(report.blocks), tuple(report.fired_names))
