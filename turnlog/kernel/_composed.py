"""The composed verbs of ``Branch``: act, operate, interpret, ReAct and ReActStream.

Functions of the branch that ``Branch`` binds as its methods, so each signature is written
once, here. Each builds parameter objects and delegates to ``turnlog.kernel.operations.<verb>``
through an import inside the function, so importing Branch loads none of them. ``act`` and
``operate`` need only the ``BranchPort``; ``ReAct`` and ``ReActStream`` call back into
``operate`` and ``interpret``, so they take a ``VerbPort``.

Lifecycles: ``operate`` and ``ReAct`` each own one observed run; ``act``, ``interpret`` and
``ReActStream`` own none (the operate rounds of a bare ``ReActStream`` own theirs).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from turnlog.kernel._lifecycle import observed_run
from turnlog.kernel._model_config import resolve_model
from turnlog.kernel._params import ChatParam, Middle, RunParam, build_chat_param, instruct_value
from turnlog.kernel._removed import check_removed
from turnlog.kernel._tools import ActionParam, Authorize
from turnlog.kernel._verbs import check_format

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort, VerbPort
    from turnlog.projections import ActionResponse

__all__ = ["ReAct", "ReActStream", "act", "interpret", "operate"]


def _check_kwargs(where: str, kwargs: dict[str, Any]) -> None:
    check_removed(where, kwargs)  # before anything is recorded; the message names the guide
    # A caller-supplied operative is always rebuilt from response_format/reason/actions.
    kwargs.pop("operative", None)


async def act(
    branch: BranchPort,
    action_request: Any,
    *,
    strategy: Literal["concurrent", "sequential"] = "concurrent",
    suppress_errors: bool = True,
    authorize: Authorize | None = None,
    tools: Sequence[str] | None = None,
) -> list[ActionResponse]:
    """Run tool calls; record each ActionRequest and its ActionResponse.

    Args:
        branch: The branch (``self`` when called as ``Branch.act``).
        action_request: One request or a list (``ActionRequest`` messages, ``ToolCall``s,
            ``{"function", "arguments"}`` mappings, OpenAI tool-call dicts).
        strategy: ``"concurrent"`` or ``"sequential"``.
        suppress_errors: Record a failing call and go on; when False the error is
            recorded, then raised.
        authorize: A gate (sync or async) asked before each call; a denied call is
            recorded with ``error`` set and ``metadata["denied"] = True``.
        tools: Only these tool names may run (default: every registered tool).

    Returns:
        The ``ActionResponse`` of each call, in request order.
    """
    from turnlog.kernel.operations.act import act as act_operation

    param = ActionParam(
        strategy=strategy,
        suppress_errors=suppress_errors,
        authorize=authorize,
        tools=tuple(tools) if tools is not None else None,
    )
    return await act_operation(branch, action_request, param)


async def operate(
    branch: BranchPort,
    *,
    instruct: Any = None,
    instruction: Any = None,
    guidance: Any = None,
    context: Any = None,
    sender: str | None = None,
    recipient: str | None = None,
    progression: Sequence[str] | None = None,
    chat_model: Any = None,
    invoke_actions: bool = True,
    tool_schemas: Sequence[Mapping[str, Any]] | None = None,
    images: Sequence[str] | None = None,
    image_detail: Literal["low", "high", "auto"] | None = None,
    parse_model: Any = None,
    skip_validation: bool = False,
    tools: bool | str | Iterable[str] | None = None,
    response_format: Any = None,
    actions: bool = False,
    reason: bool = False,
    action_strategy: Literal["concurrent", "sequential"] = "concurrent",
    handle_validation: Literal["raise", "return_value", "return_none"] = "return_value",
    include_token_usage_to_model: bool = False,
    stream_persist: bool = False,
    persist_dir: str | None = None,
    snapshot_dir: str | None = None,
    middle: Middle | None = None,
    clear_messages: bool = False,
    num_parse_retries: int = 3,
    suppress_errors: bool = True,
    authorize: Authorize | None = None,
    **kwargs: Any,
) -> Any:
    """One exchange through a Middle, then validation and tool actions, in one run.

    Args:
        branch: The branch (``self`` when called as ``Branch.operate``).
        instruct: A mapping (or object) with instruction/guidance/context/reason/actions/
            action_strategy, filling what is not passed explicitly.
        instruction: What to ask.
        guidance: How to answer.
        context: Extra context for the instruction.
        sender: Sender of the instruction.
        recipient: Recipient of the instruction.
        progression: Message ids to send as history instead of the branch's.
        chat_model: The model to call (default: the branch's chat model).
        tool_schemas: Tool schemas to send instead of the registered tools' schemas.
        images: Images attached to the instruction.
        image_detail: Detail level of the images.
        parse_model: The model for reformat requests (default: the branch's parse model).
        include_token_usage_to_model: Accepted for compatibility; has no effect.
        stream_persist: For CLI models: record every stream chunk as it arrives.
        persist_dir: For CLI models: where providers keep run files of their own.
        snapshot_dir: For CLI models: where providers keep snapshots of their own.
        response_format: The pydantic model the answer must follow.
        reason: Ask for a ``reason`` field with the answer.
        actions: Offer the branch's tools and run the calls the model asks for.
        tools: Offer these tools (True: all); implies actions.
        invoke_actions: Run the requested calls (False: only return the requests).
        action_strategy: How requested calls run: concurrent or sequential.
        handle_validation: When the answer does not validate: ``raise``,
            ``return_value`` (the raw result) or ``return_none``.
        skip_validation: Return the Middle's raw result.
        middle: The exchange adapter (default: ``run_and_collect`` for CLI models,
            else ``communicate``); called exactly once.
        clear_messages: Ask the Middle to clear the messages first.
        num_parse_retries: Reformat requests allowed when parsing fails.
        suppress_errors: Record failing tool calls and go on.
        authorize: A gate asked before each tool call.
        **kwargs: Request parameters (temperature, timeout, ...).

    Returns:
        An instance of the response type (with ``action_responses`` when actions ran),
        or what ``handle_validation`` decides.
    """
    from turnlog.kernel.operations.operate import default_middle
    from turnlog.kernel.operations.operate import operate as operate_operation

    _check_kwargs("operate", kwargs)
    if instruct is not None:
        instruction = instruction if instruction is not None else instruct_value(instruct, "instruction")
        guidance = guidance if guidance is not None else instruct_value(instruct, "guidance")
        context = context if context is not None else instruct_value(instruct, "context")
        reason = reason or bool(instruct_value(instruct, "reason"))
        actions = actions or bool(instruct_value(instruct, "actions"))
        action_strategy = instruct_value(instruct, "action_strategy") or action_strategy
    branch.require_writable()
    check_format(response_format)  # a format no request can carry: refused before the run
    param: ChatParam = build_chat_param(
        guidance=guidance,
        context=context,
        sender=sender,
        recipient=recipient,
        progression=progression,
        chat_model=chat_model,
        tool_schemas=tool_schemas,
        images=images,
        image_detail=image_detail,
        include_token_usage_to_model=include_token_usage_to_model,
        imodel_kw=kwargs,
    )
    if stream_persist or persist_dir is not None or snapshot_dir is not None:
        param = RunParam.from_chat(
            param, stream_persist=stream_persist, persist_dir=persist_dir, snapshot_dir=snapshot_dir
        )
    action_param = ActionParam(strategy=action_strategy, suppress_errors=suppress_errors, authorize=authorize)
    if middle is None:  # chosen before the run starts: a missing adapter writes nothing
        middle = default_middle(branch, param)
    async with observed_run.using(branch, "operate", param.imodel) as run:
        run.result = await operate_operation(
            branch,
            instruction if instruction is not None else "",
            param,
            response_format=response_format,
            reason=reason,
            actions=actions,
            tools=tools,
            invoke_actions=invoke_actions,
            action_param=action_param,
            handle_validation=handle_validation,
            skip_validation=skip_validation,
            clear_messages=clear_messages,
            middle=middle,
            parse_model=resolve_model(parse_model),
            num_parse_retries=num_parse_retries,
        )
        return run.result


async def interpret(
    branch: BranchPort,
    text: str,
    domain: str | None = None,
    style: str | None = None,
    sample_writing: str | None = None,
    interpret_model: Any = None,
    **kwargs: Any,
) -> str:
    """Rewrite ``text`` into a clearer prompt; no message is recorded (the call is).

    Args:
        branch: The branch (``self`` when called as ``Branch.interpret``).
        text: The user's raw input.
        domain: A domain hint (default ``"general"``).
        style: The desired style (default ``"concise"``).
        sample_writing: An example of the wanted writing.
        interpret_model: The model to use (default: the chat model).
        **kwargs: Request parameters (``temperature`` defaults to 0.1).
    """
    from turnlog.kernel.operations.interpret import interpret as interpret_operation

    return await interpret_operation(
        branch,
        text,
        domain=domain,
        style=style,
        sample_writing=sample_writing,
        interpret_model=interpret_model,
        **kwargs,
    )


async def ReAct(
    branch: VerbPort,
    instruct: Any = None,
    *,
    instruction: Any = None,
    max_extensions: int | None = 3,
    return_analysis: bool = False,
    **kwargs: Any,
) -> Any:
    """Reason and act in rounds, then answer; one run however many rounds.

    Takes the keyword arguments of ``ReActStream`` (tools, response_format,
    extension_allowed, interpret, authorize, ...); ``max_extensions`` defaults to 3.

    Returns:
        The final answer (``answer`` of the final analysis when it has one, else the
        final object); with ``return_analysis``, every analysis and the final one.
    """
    from turnlog.kernel.operations.ReAct import ReAct as react_operation

    _check_kwargs("ReAct", kwargs)
    analysis_model = resolve_model(kwargs.get("analysis_model"))
    async with observed_run.using(branch, "ReAct", analysis_model) as run:
        run.result = await react_operation(
            branch,
            instruct,
            instruction=instruction,
            max_extensions=max_extensions,
            return_analysis=return_analysis,
            **kwargs,
        )
        return run.result


def ReActStream(
    branch: VerbPort,
    instruct: Any = None,
    *,
    instruction: Any = None,
    max_extensions: int | None = 0,
    **kwargs: Any,
) -> AsyncIterator[Any]:
    """Reason and act in rounds, yielding each analysis and then the final answer.

    Owns no lifecycle: each round is an ``operate`` with its own run. ``max_extensions``
    defaults to 0 (no extension round unless asked for); see ``turnlog.kernel.operations.ReAct``.
    """
    from turnlog.kernel.operations.ReAct import ReActStream as react_stream

    _check_kwargs("ReActStream", kwargs)
    return react_stream(branch, instruct, instruction=instruction, max_extensions=max_extensions, **kwargs)
