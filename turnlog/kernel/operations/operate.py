"""``operate``: one Middle exchange, then outer validation and tool actions.

Steps:

1. The response type: the caller's ``response_format``, extended when ``reason`` or actions
   are asked for into an *operative* model with ``reason``, ``action_required`` and
   ``action_requests`` fields (its response twin adds ``action_responses``).
2. Tool schemas: with ``actions`` (or ``tools``) the branch's tools (or the named ones) are
   offered, natively in the request and listed in the instruction.
3. The Middle is called exactly once: the given one, else ``run_and_collect`` for a CLI
   model, else ``communicate``. It records what it exchanges; ``operate`` appends nothing
   around it. The Middle receives a ``ParseParam`` whose ``handle_validation`` is
   ``return_value`` (it hands back the text when parsing fails) so that ``operate`` applies
   the caller's ``handle_validation`` once, here.
4. ``skip_validation``: the Middle's result is returned as it is.
5. A result that is not of the response type: ``raise`` raises ``ResponseParseError``,
   ``return_value`` returns it, ``return_none`` returns None. An answer made only of native
   tool calls (OpenAI ``tool_calls``, empty text) is read as an operative asking for them.
6. Actions (``invoke_actions``): the requests of the structured answer plus the native tool
   calls the exchange recorded run through ``act``; the responses are merged into the
   result (``action_responses`` of the model, or of a dict).

The Branch facade runs all of it inside one observed run (one ``run.started`` and one
terminal event, however many exchanges the Middle performs).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, create_model

from turnlog.kernel._errors import ResponseParseError, UsageError
from turnlog.kernel._params import ChatParam, Middle, ParseParam, RunParam, build_parse_param
from turnlog.kernel._tools import ActionParam, ToolRegistry
from turnlog.kernel.models import as_chat_model
from turnlog.projections import ActionRequest, ActionResponse, AssistantResponse

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort

__all__ = [
    "ActionRequestModel",
    "ActionResponseModel",
    "HandleValidation",
    "Reason",
    "default_middle",
    "is_cli_model",
    "operate",
    "operative_models",
]

HandleValidation = Literal["raise", "return_value", "return_none"]


class Reason(BaseModel):
    """The model's reasoning about its answer."""

    title: str | None = None
    content: str | None = None
    confidence_score: float | None = Field(default=None, description="0 to 1: how sure the answer is.")


class ActionRequestModel(BaseModel):
    """A tool call asked for in a structured answer."""

    function: str = Field(description="The name of a tool listed under Tools.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Arguments for the tool.")


class ActionResponseModel(BaseModel):
    """The outcome of a tool call, merged into an operate result."""

    function: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    output: Any = None
    error: str | None = None


@functools.cache
def operative_models(
    base: type[BaseModel] | None, reason: bool, actions: bool
) -> tuple[type[BaseModel], type[BaseModel]]:
    """The request model (what the model answers) and its response twin (plus responses)."""
    fields: dict[str, Any] = {}
    if reason:
        fields["reason"] = (Reason | None, Field(default=None, description="Why you answer this way."))
    if actions:
        fields["action_required"] = (
            bool,
            Field(default=False, description="True when tools must be called before the answer is final."),
        )
        fields["action_requests"] = (
            list[ActionRequestModel],
            Field(default_factory=list, description="Tool calls to make, when action_required."),
        )
    name = base.__name__ if base is not None else "Operative"
    request = create_model(name, __base__=base or BaseModel, **fields)
    response = create_model(
        name,
        __base__=request,
        action_responses=(list[ActionResponseModel], Field(default_factory=list)),
    )
    return request, response


def is_cli_model(model: object) -> bool:
    """True for a CLI agent model (driven by streams, not by request/response calls): its profile says."""
    return model is not None and as_chat_model(model).profile.is_cli


def default_middle(branch: BranchPort, chat_param: ChatParam) -> Middle:
    """``run_and_collect`` for CLI models (or a ``RunParam``), else ``communicate``."""
    model = chat_param.imodel if chat_param.imodel is not None else branch.models.chat
    if isinstance(chat_param, RunParam) or is_cli_model(model):
        from turnlog.kernel.operations.run import run_and_collect

        return run_and_collect
    from turnlog.kernel.operations.communicate import communicate

    return communicate


def _model_class(fmt: Any) -> type[BaseModel] | None:
    if isinstance(fmt, BaseModel):
        return type(fmt)
    if isinstance(fmt, type) and issubclass(fmt, BaseModel):
        return fmt
    return None


def _all_optional(model: type[BaseModel]) -> bool:
    return all(not f.is_required() for f in model.model_fields.values())


def _native_calls(branch: BranchPort, before: set[str]) -> list[dict[str, Any]]:
    """Tool calls the model made natively in the exchange, not yet run by the Middle."""
    new = [m for m in branch.state.messages if m.id not in before]
    answered = {m.content.call_id for m in new if isinstance(m, ActionRequest) and m.content.call_id}
    calls: list[dict[str, Any]] = []
    for message in new:
        if isinstance(message, AssistantResponse):
            native = message.metadata.get("tool_calls")
            for call in native if isinstance(native, list) else ():
                if isinstance(call, Mapping) and call.get("id") not in answered:
                    calls.append(dict(call))
    return calls


def _structured_requests(result: Any) -> list[Any]:
    if isinstance(result, BaseModel):
        return list(getattr(result, "action_requests", None) or [])
    if isinstance(result, Mapping):
        return list(result.get("action_requests") or [])
    return []


def _response_models(responses: Sequence[ActionResponse]) -> list[ActionResponseModel]:
    return [
        ActionResponseModel(
            function=r.function, arguments=dict(r.content.arguments), output=r.output, error=r.error
        )
        for r in responses
    ]


def _merge(result: Any, response_model: type[BaseModel] | None, responses: list[ActionResponseModel]) -> Any:
    if isinstance(result, BaseModel) and response_model is not None:
        values = {name: getattr(result, name) for name in type(result).model_fields}
        return response_model(**values, action_responses=responses)
    if isinstance(result, Mapping):
        return {**result, "action_responses": [r.model_dump() for r in responses]}
    return result


def _tool_schemas(
    branch: BranchPort, chat_param: ChatParam, tools: bool | str | Iterable[str] | None
) -> tuple[dict[str, Any], ...]:
    if chat_param.tool_schemas:
        return tuple(dict(t) for t in chat_param.tool_schemas)
    names: bool | str | Iterable[str] = True if tools is None else tools
    return tuple(ToolRegistry.of(branch.tools).schemas(names))


async def operate(
    branch: BranchPort,
    instruction: Any,
    chat_param: ChatParam,
    *,
    response_format: Any = None,
    reason: bool = False,
    actions: bool = False,
    tools: bool | str | Iterable[str] | None = None,
    invoke_actions: bool = True,
    action_param: ActionParam | None = None,
    handle_validation: HandleValidation = "return_value",
    skip_validation: bool = False,
    clear_messages: bool = False,
    middle: Middle | None = None,
    parse_model: Any = None,
    num_parse_retries: int = 3,
) -> Any:
    """Run one Middle exchange and the outer validation and actions; see the module docstring.

    In steps: plan the exchange (``_plan``: the operative models, the request's format and
    tools, the parse parameters), run the Middle, validate its answer (``_validated``: native
    tool calls may stand in for it) and invoke the actions it asks for (``_invoke_actions``).

    Raises:
        UsageError: a bad parameter (nothing was written).
        ResponseParseError: the answer did not validate and ``handle_validation="raise"``.
    """
    _check_handling(handle_validation)
    plan = _plan(branch, chat_param, response_format, reason, actions, tools)
    parse_param = None
    if not skip_validation:
        parse_param = _parse_param(branch, plan, response_format, parse_model, num_parse_retries)
    chosen = middle if middle is not None else default_middle(branch, plan.chat_param)
    before = {m.id for m in branch.state.messages}
    result = await chosen(branch, instruction, plan.chat_param, parse_param, clear_messages, skip_validation)
    if skip_validation:
        return result
    native = _native_calls(branch, before) if plan.use_tools else []
    result, from_native, valid = _validated(result, plan, native, handle_validation)
    if not valid:
        return None
    if not (invoke_actions and plan.use_tools):
        return result
    requests = native if from_native else _structured_requests(result) + native
    return await _invoke_actions(branch, requests, action_param, result, plan.response_model)


def _check_handling(handle_validation: str) -> None:
    """Refuse a ``handle_validation`` that is none of the three (before anything is written)."""
    if handle_validation not in ("raise", "return_value", "return_none"):
        raise UsageError(
            f"handle_validation must be raise, return_value or return_none, not {handle_validation!r}"
        )


@dataclass(frozen=True, slots=True)
class _Plan:
    """What one operate exchange asks for: the operative models, the target and the request."""

    use_tools: bool
    request_model: type[BaseModel] | None
    response_model: type[BaseModel] | None
    target: Any
    chat_param: ChatParam


def _plan(
    branch: BranchPort,
    chat_param: ChatParam,
    response_format: Any,
    reason: bool,
    actions: bool,
    tools: bool | str | Iterable[str] | None,
) -> _Plan:
    """The operative models (with reason and action fields), the target and the request's tools and format."""
    use_tools = actions or (tools is not None and tools is not False)
    request_model, response_model, target = _operatives(response_format, reason, use_tools)
    updates: dict[str, Any] = {}
    if use_tools:
        updates["tool_schemas"] = _tool_schemas(branch, chat_param, tools)
    if target is not None:
        updates["response_format"] = target
    if updates:
        chat_param = chat_param.with_updates(**updates)
    return _Plan(use_tools, request_model, response_model, target, chat_param)


def _parse_param(
    branch: BranchPort, plan: _Plan, response_format: Any, parse_model: Any, num_parse_retries: int
) -> ParseParam | None:
    """How the Middle parses the answer into the target (None without a target)."""
    if plan.target is None:
        return None
    # A bare operative (no caller format) is not worth reformat requests: free text
    # or native tool calls are read as they are.
    retries = num_parse_retries if response_format is not None else 0
    return build_parse_param(
        branch.models,
        plan.target,
        parse_model=parse_model,
        handle_validation="return_value",
        max_retries=retries,
    )


def _operatives(
    response_format: Any, reason: bool, use_tools: bool
) -> tuple[type[BaseModel] | None, type[BaseModel] | None, Any]:
    """``(request model, response model, target)``: the operatives when reason or tools are asked for."""
    base = _model_class(response_format)
    if not (reason or use_tools):
        return None, None, base or response_format
    if response_format is not None and base is None:
        raise UsageError("reason= and actions= need response_format to be a pydantic model class")
    request_model, response_model = operative_models(base, reason, use_tools)
    return request_model, response_model, request_model


def _validated(
    result: Any, plan: _Plan, native: list[dict[str, Any]], handle_validation: HandleValidation
) -> tuple[Any, bool, bool]:
    """``(result, from_native, valid)``: the answer, or an operative made of the native tool calls.

    Raises:
        ResponseParseError: the answer is not the target and ``handle_validation="raise"``.
    """
    target = plan.target
    if not isinstance(target, type) or isinstance(result, target):
        return result, False, True
    request_model = plan.request_model
    if native and request_model is not None and _all_optional(request_model):
        asked = [ActionRequestModel(function=c["name"], arguments=c.get("arguments") or {}) for c in native]
        return request_model(action_required=True, action_requests=asked), True, True
    if handle_validation == "raise":
        shown = str(result)[:200]
        raise ResponseParseError(
            f"Failed to parse LLM response into {target.__name__!r}. Received (truncated): {shown!r}. "
            "Hint: ask for the JSON object only, or use a repair Middle.",
            target=target.__name__,
        )
    return result, False, handle_validation != "return_none"


async def _invoke_actions(
    branch: BranchPort,
    requests: list[Any],
    action_param: ActionParam | None,
    result: Any,
    response_model: type[BaseModel] | None,
) -> Any:
    """Run the requested actions and merge their responses into the answer (no request: the answer)."""
    if not requests:
        return result
    from turnlog.kernel.operations.act import act

    responses = await act(branch, requests, action_param)
    return _merge(result, response_model, _response_models(responses))
