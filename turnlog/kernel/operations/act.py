"""``act``: run tool calls and record each as an ActionRequest and its ActionResponse.

Steps, per call:

1. The request is normalized to a function name and a JSON object of arguments (bad input
   raises ``UsageError`` before anything is written).
2. The ``ActionRequest`` is recorded (unless it is in the branch already, e.g. one a CLI
   agent stream recorded). With the concurrent strategy all requests are recorded in one
   append before any tool runs; with the sequential one each just before its call.
3. The authorization gate, when there is one, is asked; a denied call never runs and its
   response has ``error`` set and ``metadata["denied"] = True``. A gate that raises denies.
4. The tool runs (arguments validated against its schema); its output is recorded as JSON
   with the call's ``duration_ms``. A tool that raises gives a response with ``error`` set;
   with ``suppress_errors=False`` the error is raised after it was recorded (concurrent:
   after every call finished, the first failure in request order; sequential: at once).
   Each response is recorded as soon as its call finishes, so that a crash loses no finished
   output: with the concurrent strategy the responses are in the order the calls finished
   (each names its call id), while the returned list keeps request order.

Records inside an enclosing run (``operate``, ``ReAct``) carry its run id; ``act`` owns no
lifecycle of its own.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import orjson
from pydantic import BaseModel

from turnlog.eventstore import encode_json
from turnlog.kernel._commands import AddMessages
from turnlog.kernel._errors import UsageError
from turnlog.kernel._lifecycle import current_run
from turnlog.kernel._tools import ActionParam, ToolInvocation, ToolRegistry, UnknownTool, jsonable
from turnlog.kernel.models import ToolCall
from turnlog.projections import ActionRequest, ActionResponse

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort

__all__ = ["act", "normalize_requests"]


@dataclass(frozen=True, slots=True)
class _Call:
    request: ActionRequest
    recorded: bool


def _arguments(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = orjson.loads(value) if value.strip() else {}
        except orjson.JSONDecodeError as exc:
            raise UsageError(f"{where}: arguments are not valid JSON: {exc}") from exc
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if not isinstance(value, Mapping):
        raise UsageError(f"{where}: arguments must be a JSON object, not {type(value).__name__}")
    return dict(jsonable(dict(value)))


def _one(item: Any, where: str) -> tuple[str, dict[str, Any], str | None] | ActionRequest:
    if isinstance(item, ActionRequest):
        return item
    if isinstance(item, ToolCall):
        return item.name, _arguments(item.arguments, where), item.id
    if isinstance(item, BaseModel):
        item = item.model_dump()
    if not isinstance(item, Mapping):
        raise UsageError(
            f"{where}: an action request must be an ActionRequest, a ToolCall or a mapping with "
            f"'function' and 'arguments', not {type(item).__name__}"
        )
    call_id = item.get("id") or item.get("call_id")
    inner = item.get("function")
    if isinstance(inner, Mapping):  # OpenAI wire form {"id", "type": "function", "function": {...}}
        name, args = inner.get("name"), inner.get("arguments")
    else:
        name, args = inner if inner is not None else item.get("name"), item.get("arguments")
    if not isinstance(name, str) or not name:
        raise UsageError(f"{where}: an action request needs a function name, got {item!r}")
    return name, _arguments(args, where), str(call_id) if call_id is not None else None


def normalize_requests(action_request: Any) -> list[tuple[str, dict[str, Any], str | None] | ActionRequest]:
    """Each call of ``action_request`` (one request or a list of them), in order.

    Raises:
        UsageError: an item is not a request, or its arguments are not a JSON object.
    """
    if isinstance(action_request, list | tuple):
        return [_one(item, f"action request #{i}") for i, item in enumerate(action_request)]
    return [_one(action_request, "action request")]


async def _allowed(param: ActionParam, invocation: ToolInvocation) -> tuple[bool, str | None]:
    if param.authorize is None:
        return True, None
    try:
        verdict = param.authorize(invocation)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except Exception as exc:
        return False, f"the gate raised {type(exc).__name__}: {exc}"
    return bool(verdict), None


async def _run_one(
    branch: BranchPort, registry: ToolRegistry, param: ActionParam, request: ActionRequest, run_id: str | None
) -> tuple[ActionResponse, Exception | None]:
    invocation = ToolInvocation(request.function, dict(request.arguments), branch.id, request.id)
    started = time.perf_counter()
    allowed, why = await _allowed(param, invocation)
    error: Exception | None = None
    if not allowed:
        message = "denied by authorization gate" + (f" ({why})" if why else "")
        response = ActionResponse.create(
            request,
            error=message,
            duration_ms=(time.perf_counter() - started) * 1000,
            sender=request.function,
            recipient=branch.id,
            metadata={"denied": True},
        )
    else:
        output: Any = None
        try:
            if param.tools is not None and request.function not in param.tools:
                raise UnknownTool(request.function, param.tools)
            result = jsonable(await registry.match(request.function).call(request.arguments))
            encode_json({"output": result}, what="the tool's result")  # refuses NaN and infinities
            output = result
        except Exception as exc:
            error = exc
        response = ActionResponse.create(
            request,
            output=output,
            error=f"{type(error).__name__}: {error}" if error is not None else None,
            duration_ms=(time.perf_counter() - started) * 1000,
            sender=request.function,
            recipient=branch.id,
        )
    await branch.execute(AddMessages.of([response], run_id=run_id), run_id=run_id)
    return response, error


def _calls(branch: BranchPort, items: Sequence[Any]) -> list[_Call]:
    calls: list[_Call] = []
    for item in items:
        if isinstance(item, ActionRequest):
            calls.append(_Call(item, branch.state.message(item.id) is not None))
            continue
        name, arguments, call_id = item
        request = ActionRequest.create(
            name, arguments, call_id=call_id, sender=branch.id, recipient=branch.state.user or "user"
        )
        calls.append(_Call(request, False))
    return calls


async def act(
    branch: BranchPort, action_request: Any, param: ActionParam | None = None
) -> list[ActionResponse]:
    """Run the tool calls of ``action_request`` and record them; see the module docstring.

    Args:
        branch: The branch whose tools run and which records the calls.
        action_request: One request or a list: ``ActionRequest`` messages, ``ToolCall``s,
            ``{"function", "arguments"}`` mappings (OpenAI's ``{"id", "function": {"name",
            "arguments"}}`` too) or pydantic models with those fields.
        param: Strategy, error handling, gate and tool restriction.

    Returns:
        The ``ActionResponse`` of each call, in request order.

    Raises:
        UsageError: a request is malformed (nothing was written).
        Exception: with ``suppress_errors=False``, the error of a failed call (recorded first).
    """
    param = param or ActionParam()
    branch.require_writable()
    calls = _calls(branch, normalize_requests(action_request))
    registry = ToolRegistry.of(branch.tools)
    run = current_run(branch.id)
    run_id = run.run_id if run is not None else None
    results: list[tuple[ActionResponse, Exception | None] | None] = [None] * len(calls)
    if param.strategy == "sequential":
        for i, call in enumerate(calls):
            if not call.recorded:
                await branch.execute(AddMessages.of([call.request], run_id=run_id), run_id=run_id)
            results[i] = await _run_one(branch, registry, param, call.request, run_id)
            if results[i][1] is not None and not param.suppress_errors:  # type: ignore[index]
                raise results[i][1]  # type: ignore[index, misc]
    else:
        new = [c.request for c in calls if not c.recorded]
        if new:
            await branch.execute(AddMessages.of(new, run_id=run_id), run_id=run_id)

        async def one(i: int, call: _Call) -> None:
            results[i] = await _run_one(branch, registry, param, call.request, run_id)

        async with anyio.create_task_group() as group:
            for i, call in enumerate(calls):
                group.start_soon(one, i, call)
    done = [r for r in results if r is not None]
    if not param.suppress_errors:
        for _, error in done:
            if error is not None:
                raise error
    return [response for response, _ in done]
