"""``chat``: one request to the chat model; no message is recorded, the model call is.

Also the shared core of every API verb: build the instruction, gather context providers,
assemble the prompt, call the model and describe the call as a ``model.called`` payload.

Streaming: ``stream=True`` among a verb's keyword arguments (or ``iModel(..., stream=True)``
as the model's default; the default default is not to stream) asks an HTTP provider for a
stream. When the provider can hand over its deltas (``streams_chunks``), each one becomes a
``stream.chunk`` event of the stream ``run-<call_id>`` (``call_id`` of the ``model.called``
event), committed in batches like a CLI run's chunks; with ``stream_persist=True`` each is
first written to the run buffer, so that ``recover`` can record the text of a call cut by a
crash as an interrupted response. The recorded response is the one a plain call records.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

import anyio
import orjson

from turnlog.eventstore import uuid7
from turnlog.kernel._commands import AddMessages
from turnlog.kernel._errors import UsageError
from turnlog.kernel._lifecycle import current_run
from turnlog.kernel._options import check_request_params
from turnlog.kernel._params import ChatParam
from turnlog.kernel.models import (
    ChatModel,
    ChunkSink,
    ModelRequest,
    ModelResponse,
    StreamChunk,
    public_params,
    request_fingerprint,
)
from turnlog.kernel.models._fingerprint import FingerprintMemo
from turnlog.kernel.operations._prepare import assemble, build_instruction, response_schema
from turnlog.projections import AnyMessage, AssistantResponse, Instruction, ModelCalled, Usage

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort

__all__ = ["Exchange", "chat", "exchange"]


def _prepared(model: ChatModel, request: ModelRequest) -> ModelRequest:
    """The request as the model will send it (its default parameters merged in), if it says."""
    prepare = getattr(model, "prepare", None)
    return prepare(request) if callable(prepare) else request


def _json_params(params: Any) -> dict[str, Any]:
    # Parameters are recorded as JSON; a value that is not JSON is recorded as its text.
    recorded: dict[str, Any] = orjson.loads(orjson.dumps(public_params(params), default=str))
    return recorded


@dataclass(frozen=True, slots=True)
class Exchange:
    """One model call made for a verb.

    Attributes:
        instruction: The instruction sent.
        response: The assistant response (None when the call failed).
        called: The ``model.called`` payload describing the call.
        error: The exception the model raised (None on success).
        model_response: What the model returned (None on failure).
    """

    instruction: Instruction
    response: AssistantResponse | None
    called: ModelCalled
    error: Exception | None
    model_response: ModelResponse | None


async def exchange(branch: BranchPort, instruction: Any, param: ChatParam, *, verb: str) -> Exchange:
    """Call the model for ``instruction``; describe the call whether it succeeded or not.

    Nothing is recorded here: the caller decides what to append.
    """
    branch.require_writable()
    model = branch.require_chat_model(param.imodel)
    params = dict(param.imodel_kw)
    stream, persist = _stream_options(model, params)
    owner = current_run(branch.id)  # name the verb the caller called (operate, not its communicate)
    check_request_params(model, params, verb=owner.verb if owner is not None else verb)
    ins = build_instruction(branch, instruction, param)
    report = await branch.gather_context(ins)
    history_version: int | None = None
    history: Sequence[AnyMessage]
    if param.progression is not None:
        history = branch.messages_by_ids(param.progression)
        cached = False
    else:
        history = branch.messages
        cached = True
        # The branch's own view is named by its version (O(1) per call) instead of listing
        # every id again. Before the first write the view is the one version 1 will hold.
        history_version = max(branch.version, 1)
    prompt = assemble(branch.prompt_cache, history, branch.system, ins, report.blocks, cached=cached)
    _, schema_name, wire_format = response_schema(param.response_format)
    tools = [dict(t) for t in param.tool_schemas] or None
    request = ModelRequest(
        messages=prompt.messages,
        params=params,
        tools=tools,
        response_format=wire_format,
        message_ids=prompt.message_ids,
        stream=stream,
    )
    sent = _prepared(model, request)
    # The branch's requests grow by a turn each: the memo hashes only what is new since the last
    memo = branch.prompt_cache.get("fingerprint")
    if memo is None:
        memo = branch.prompt_cache["fingerprint"] = FingerprintMemo()
    run = current_run(branch.id)
    call_id = str(uuid7())
    started = time.perf_counter()
    error: Exception | None = None
    response: ModelResponse | None = None
    try:
        if stream and getattr(model, "streams_chunks", False) is True:
            async with _chunk_sink(branch, call_id, persist) as sink:
                response = await model.invoke(request, on_chunk=sink)  # type: ignore[call-arg]
        else:
            response = await model.invoke(request)
    except Exception as exc:
        error = exc
    latency = (time.perf_counter() - started) * 1000
    called = ModelCalled(
        call_id=call_id,
        provider=str(getattr(model, "provider", "") or ""),
        model=str(getattr(model, "model", "") or ""),
        endpoint=str(getattr(model, "endpoint", "chat/completions")),
        served_model=_served(response, str(getattr(model, "model", "") or "")),
        verb=verb,
        run_id=run.run_id if run is not None else None,
        message_ids=prompt.message_ids if history_version is None else [],
        history_version=history_version,
        instruction_id=ins.id if history_version is not None else None,
        params=_json_params(sent.params),
        tools=[str(t.get("function", {}).get("name", t.get("name", ""))) for t in tools or ()],
        response_format=schema_name,
        fingerprint=request_fingerprint(sent, model=str(getattr(model, "model", "")), memo=memo),
        context_providers=report.fired_names,
        response=response.raw if response is not None else None,
        usage=_usage(response),
        latency_ms=response.latency_ms if response is not None and response.latency_ms > 0 else latency,
        ttft_ms=response.ttft_ms if response is not None else None,
        attempts=max(1, response.attempts if response is not None else getattr(error, "attempts", 1) or 1),
        status="ok" if error is None else "error",
        error_type=type(error).__name__ if error is not None else None,
        error_message=str(error) if error is not None else None,
        stream=stream,
    )
    if response is None:
        return Exchange(ins, None, called, error, None)
    if run is not None:
        run.add_usage(response.usage)
    metadata: dict[str, Any] = {"model_call_id": call_id}
    if response.tool_calls:
        metadata["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments}
            | ({"signature": c.signature} if c.signature is not None else {})
            for c in response.tool_calls
        ]
    if response.reasoning:
        # The provider's signed reasoning must go back with this turn (Anthropic thinking blocks).
        metadata["thinking_blocks"] = list(response.reasoning)
    res = AssistantResponse.create(
        response.text, sender=branch.id, recipient=branch.user or "user", metadata=metadata
    )
    return Exchange(ins, res, called, None, response)


def _stream_options(model: Any, params: dict[str, Any]) -> tuple[bool, bool]:
    """``stream`` and ``stream_persist`` taken out of the call's parameters (else the model's defaults)."""
    defaults = getattr(model, "stream_defaults", None)
    defaults = defaults if isinstance(defaults, dict) else {}
    stream = params.pop("stream", defaults.get("stream", False))
    persist = params.pop("stream_persist", defaults.get("stream_persist", False))
    for name, value in (("stream", stream), ("stream_persist", persist)):
        if not isinstance(value, bool):
            raise UsageError(f"{name} must be True or False, not {value!r}")
    return stream, persist


@contextlib.asynccontextmanager
async def _chunk_sink(branch: BranchPort, call_id: str, persist: bool) -> AsyncIterator[ChunkSink]:
    """A sink recording each chunk as a ``stream.chunk`` event of ``run-<call_id>``.

    With ``persist`` each chunk's line reaches the run buffer before the sink returns; the
    chunks are committed in batches and all of them before the call is described.
    """
    from turnlog.kernel._persist import ChunkLog, RunBuffer, buffer_path, default_persist_dir

    buffer = None
    if persist:
        buffer = RunBuffer(buffer_path(Path(default_persist_dir(branch.store)), branch.id, call_id))
    session = branch.session
    meta = {"branch_id": branch.id, "run_id": call_id, "session_id": session.id if session else None}
    log = ChunkLog(branch.store, call_id, meta, buffer=buffer)

    async def sink(chunk: StreamChunk) -> None:
        log.add(chunk)
        if log.due():
            await log.commit()

    try:
        yield sink
    finally:
        with anyio.CancelScope(shield=True):
            await log.finish()


def _served(response: ModelResponse | None, requested: str) -> str | None:
    served = response.model if response is not None else ""
    return served if served and served != requested else None


def _usage(response: ModelResponse | None) -> Usage:
    return response.usage if response is not None else Usage()


@overload
async def chat(
    branch: BranchPort,
    instruction: Any,
    chat_param: ChatParam,
    return_ins_res_message: Literal[False] = False,
    *,
    verb: str = "chat",
) -> str: ...
@overload
async def chat(
    branch: BranchPort,
    instruction: Any,
    chat_param: ChatParam,
    return_ins_res_message: Literal[True],
    *,
    verb: str = "chat",
) -> tuple[Instruction, AssistantResponse]: ...
async def chat(
    branch: BranchPort,
    instruction: Any,
    chat_param: ChatParam,
    return_ins_res_message: bool = False,
    *,
    verb: str = "chat",
) -> str | tuple[Instruction, AssistantResponse]:
    """Ask the model once without recording any message; the call is recorded as ``model.called``.

    Args:
        branch: The branch whose history is sent.
        instruction: The instruction (an ``Instruction`` or any JSON value).
        chat_param: How to build and send the request.
        return_ins_res_message: Return ``(Instruction, AssistantResponse)`` instead of the text.
        verb: The verb recorded in ``model.called`` (``parse`` for reformat requests).

    Raises:
        Exception: whatever the model raised (after the failed call was recorded).
    """
    done = await exchange(branch, instruction, chat_param, verb=verb)
    await branch.execute(AddMessages((done.called,)), run_id=done.called.run_id)
    if done.error is not None:
        raise done.error
    assert done.response is not None
    if return_ins_res_message:
        return done.instruction, done.response
    return done.response.response
