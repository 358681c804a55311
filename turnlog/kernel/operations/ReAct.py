"""``ReAct`` and ``ReActStream``: reason, act with tools, extend, then answer.

``ReActStream`` yields, in order:

1. the first analysis: an ``operate`` with ``response_format=ReActAnalysis``, ``reason=True``
   and the tools offered (when there are any); tool calls it asks for run through ``act``;
2. one analysis per extension round, while ``extension_allowed``, budget is left and the
   last analysis says ``extension_needed``;
3. the final answer: an ``operate`` with the caller's ``response_format`` (default
   ``Analysis``) and no tool calls. When that fails with an error, the text of the last
   assistant response is yielded instead.

``max_extensions``: None, 0 or negative means no extension round; above 100 warns and is
clamped to 100. The module (and ``Branch.ReActStream``) default is 0; ``ReAct`` defaults to 3.

Lifecycles: ``ReActStream`` owns none, so each round's ``operate`` records its own run.
``Branch.ReAct`` wraps the whole loop in one observed run; the rounds, running in the same
task on the same branch, are nested in it and record no lifecycle of their own. The
suppression is task-scoped, so ReAct loops in concurrent tasks never suppress each other.
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from turnlog.kernel._errors import ResponseParseError
from turnlog.kernel._params import instruct_value
from turnlog.kernel._removed import check_removed
from turnlog.projections import AssistantResponse

if TYPE_CHECKING:
    from turnlog.kernel._port import VerbPort

__all__ = [
    "ANSWER_PROMPT",
    "CONTINUE_EXT_PROMPT",
    "FIRST_EXT_PROMPT",
    "MAX_EXTENSIONS",
    "Analysis",
    "ReAct",
    "ReActAnalysis",
    "ReActStream",
    "clamp_extensions",
]

MAX_EXTENSIONS = 100
_DISPLAY_ONLY = ("verbose", "verbose_length", "display_as", "verbose_analysis")

FIRST_EXT_PROMPT = (
    "You can take up to {extensions} more rounds of reasoning and tool use before answering. "
    "Set extension_needed to true when you need another round."
)
CONTINUE_EXT_PROMPT = (
    "Continue your analysis with the results above. Rounds left after this one: {extensions}. "
    "Set extension_needed to false when you are ready to give the final answer."
)
ANSWER_PROMPT = "Give the final answer to the original request: {instruction}"


class ReActAnalysis(BaseModel):
    """One round of a ReAct loop."""

    analysis: str = Field(default="", description="Your reasoning in this round.")
    extension_needed: bool = Field(
        default=False, description="True when another round of reasoning or tool use is needed."
    )
    action_strategy: Literal["sequential", "concurrent"] = Field(
        default="concurrent", description="How the requested tool calls should run."
    )


class Analysis(BaseModel):
    """The final answer of a ReAct loop."""

    answer: str | None = Field(default=None, description="The final answer.")


BetweenRounds = Callable[["VerbPort", int], "Awaitable[Any] | Any"]


def clamp_extensions(max_extensions: int | None) -> int:
    """The extension budget: None, 0 or negative is 0; above 100 warns and is 100."""
    if max_extensions is None or max_extensions <= 0:
        return 0
    if max_extensions > MAX_EXTENSIONS:
        warnings.warn(
            f"max_extensions should not exceed {MAX_EXTENSIONS}; defaulting to {MAX_EXTENSIONS}.",
            UserWarning,
            stacklevel=3,
        )
        return MAX_EXTENSIONS
    return max_extensions


def _last_response_text(branch: VerbPort) -> str | None:
    for message in reversed(branch.state.messages):
        if isinstance(message, AssistantResponse):
            return message.response
    return None


def _check_round(analysis: Any, number: int, keep_going: bool) -> bool:
    """Whether the round asks for an extension; a round that did not validate raises."""
    if isinstance(analysis, BaseModel):
        return bool(getattr(analysis, "extension_needed", False))
    if keep_going:
        return True
    raise ResponseParseError(
        f"ReAct round {number} did not produce a ReActAnalysis (got {str(analysis)[:200]!r}); "
        "pass continue_after_failed_response=True to go on anyway",
        target="ReActAnalysis",
    )


async def ReActStream(
    branch: VerbPort,
    instruct: Any = None,
    *,
    instruction: Any = None,
    guidance: Any = None,
    context: Any = None,
    interpret: bool = False,
    interpret_domain: str | None = None,
    interpret_style: str | None = None,
    interpret_sample: str | None = None,
    interpret_model: Any = None,
    interpret_kwargs: Mapping[str, Any] | None = None,
    tools: bool | str | Iterable[str] | None = None,
    response_format: type[BaseModel] | None = None,
    extension_allowed: bool = True,
    max_extensions: int | None = 0,
    response_kwargs: Mapping[str, Any] | None = None,
    analysis_model: Any = None,
    continue_after_failed_response: bool = False,
    between_rounds: BetweenRounds | None = None,
    **operate_kwargs: Any,
) -> AsyncIterator[Any]:
    """Yield each analysis of a ReAct loop, then the final answer (see the module docstring).

    Args:
        branch: The branch the loop records to.
        instruct: A mapping (or object) with instruction/guidance/context.
        instruction: What to do.
        guidance: How to do it.
        context: Extra context.
        interpret: First rewrite the instruction with ``interpret``.
        interpret_domain: Domain hint for ``interpret``.
        interpret_style: Style for ``interpret``.
        interpret_sample: Sample writing for ``interpret``.
        interpret_model: Model for ``interpret``.
        interpret_kwargs: Request parameters for ``interpret``.
        tools: Tools to offer (default: every registered tool; False: none).
        response_format: The final answer's format (default ``Analysis``).
        extension_allowed: Allow extension rounds at all.
        max_extensions: The extension budget (default 0).
        response_kwargs: Extra ``operate`` arguments for the final answer.
        analysis_model: The chat model of the analysis rounds.
        continue_after_failed_response: Go on when a round's answer does not validate.
        between_rounds: Called as ``f(branch, round)`` before each extension round; a
            non-None return value is sent as that round's instruction.
        **operate_kwargs: Passed to every analysis ``operate`` (authorize, action_strategy,
            request parameters, ...). ``verbose``, ``verbose_length`` and ``display_as`` are
            accepted for compatibility and have no effect.
    """
    check_removed("ReActStream", operate_kwargs)
    for name in _DISPLAY_ONLY:  # how a console showed the rounds; nothing to send or record
        operate_kwargs.pop(name, None)
    extensions = clamp_extensions(max_extensions)
    instruction, guidance, context = _instruct_parts(instruct, instruction, guidance, context)
    if interpret:
        instruction = await branch.interpret(
            str(instruction or ""),
            domain=interpret_domain,
            style=interpret_style,
            sample_writing=interpret_sample,
            interpret_model=interpret_model,
            **dict(interpret_kwargs or {}),
        )
    round_kwargs = _round_kwargs(branch, tools, analysis_model, operate_kwargs)
    first = _first_prompt(instruction, extensions if extension_allowed else 0)
    analysis = await branch.operate(instruction=first, guidance=guidance, context=context, **round_kwargs)
    yield analysis
    number = 1
    needed = _check_round(analysis, number, continue_after_failed_response)
    while extension_allowed and extensions > 0 and needed:
        extensions -= 1
        number += 1
        prompt = await _round_prompt(branch, number, extensions, between_rounds)
        analysis = await branch.operate(instruction=prompt, **round_kwargs)
        yield analysis
        needed = _check_round(analysis, number, continue_after_failed_response)
    yield await _final_answer(branch, instruction, response_format, response_kwargs)


def _first_prompt(instruction: Any, extensions: int) -> str:
    """The first round's instruction: the task, and the extension budget when there is one."""
    first = str(instruction) if instruction is not None else ""
    if extensions:
        first = f"{first}\n\n{FIRST_EXT_PROMPT.format(extensions=extensions)}".strip()
    return first


def _instruct_parts(instruct: Any, instruction: Any, guidance: Any, context: Any) -> tuple[Any, Any, Any]:
    """Instruction, guidance and context: each given one, else the ``instruct``'s."""
    return (
        instruction if instruction is not None else instruct_value(instruct, "instruction"),
        guidance if guidance is not None else instruct_value(instruct, "guidance"),
        context if context is not None else instruct_value(instruct, "context"),
    )


def _round_kwargs(
    branch: VerbPort,
    tools: bool | str | Iterable[str] | None,
    analysis_model: Any,
    operate_kwargs: dict[str, Any],
) -> dict[str, Any]:
    """The ``operate`` arguments of every analysis round (a ``ReActAnalysis``, with actions when tools are offered)."""
    use_tools = bool(branch.tools) if tools is None else tools not in (False, [], ())
    round_kwargs: dict[str, Any] = {
        "response_format": ReActAnalysis,
        "reason": True,
        "actions": bool(use_tools),
        "chat_model": analysis_model,
        **operate_kwargs,
    }
    if use_tools and tools is not None and tools is not True:
        round_kwargs["tools"] = tools
    return round_kwargs


async def _round_prompt(
    branch: VerbPort, number: int, extensions: int, between_rounds: BetweenRounds | None
) -> Any:
    """The instruction of extension round ``number``: what ``between_rounds`` returns, else the usual prompt."""
    prompt: Any = CONTINUE_EXT_PROMPT.format(extensions=extensions)
    if between_rounds is None:
        return prompt
    injected = between_rounds(branch, number)
    if hasattr(injected, "__await__"):
        injected = await injected
    return injected if injected is not None else prompt


async def _final_answer(
    branch: VerbPort,
    instruction: Any,
    response_format: type[BaseModel] | None,
    response_kwargs: Mapping[str, Any] | None,
) -> Any:
    """The answer round; when it fails, the last thing the model said is the best answer there is."""
    final_kwargs: dict[str, Any] = {
        "response_format": response_format or Analysis,
        "invoke_actions": False,
        **dict(response_kwargs or {}),
    }
    try:
        return await branch.operate(instruction=ANSWER_PROMPT.format(instruction=instruction), **final_kwargs)
    except Exception:
        return _last_response_text(branch)


async def ReAct(
    branch: VerbPort,
    instruct: Any = None,
    *,
    instruction: Any = None,
    max_extensions: int | None = 3,
    return_analysis: bool = False,
    **kwargs: Any,
) -> Any:
    """Drain ``ReActStream`` (``max_extensions`` default 3) and return the answer.

    Returns:
        ``answer`` of the final object when it has one, else the final object; with
        ``return_analysis``, the list of every analysis and the final object.
    """
    # Clamp here too so that the warning points at the caller of ReAct.
    extensions = clamp_extensions(max_extensions)
    out: list[Any] = []
    stream = ReActStream(branch, instruct, instruction=instruction, max_extensions=extensions, **kwargs)
    try:
        async for item in stream:
            out.append(item)
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    if return_analysis:
        return out
    final = out[-1] if out else None
    if isinstance(final, BaseModel) and "answer" in type(final).model_fields:
        return getattr(final, "answer")  # noqa: B009
    return final
