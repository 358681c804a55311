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
from turnlog.kernel._port import messages_by_ids
from turnlog.kernel.models import (
    BaseChatModel,
    ChunkSink,
    ModelRequest,
    ModelResponse,
    StreamChunk,
    as_chat_model,
    public_params,
    request_fingerprint,
)
from turnlog.kernel.models._fingerprint import FingerprintMemo
from turnlog.kernel.operations._prepare import Prompt, assemble, build_instruction, response_schema
from turnlog.projections import AnyMessage, AssistantResponse, Instruction, ModelCalled, Usage

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort, ContextReport

__all__ = ["Exchange", "chat", "exchange"]


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

    In steps: prepare the request (``_prepare_call``), call the model (``_call``), describe the
    call (``_describe``) and, when it answered, make the assistant response (``_answer``).
    Nothing is recorded here: the caller decides what to append.
    """
    branch.require_writable()
    model = as_chat_model(branch.models.require_chat(param.imodel))
    call = await _prepare_call(branch, model, instruction, param, verb)
    run = current_run(branch.id)
    call_id = str(uuid7())
    started = time.perf_counter()
    response, error = await _call(branch, model, call, call_id)
    latency = (time.perf_counter() - started) * 1000
    # The branch's requests grow by a turn each: the memo hashes only what is new since the last
    memo = branch.prompt_cache.get("fingerprint")
    if not isinstance(memo, FingerprintMemo):
        memo = branch.prompt_cache["fingerprint"] = FingerprintMemo()
    request = _describe(model, call, call_id, verb, run.run_id if run is not None else None, memo)
    called = ModelCalled(**request, **_outcome(response, error, latency, model.model))
    if response is None:
        return Exchange(call.ins, None, called, error, None)
    if run is not None:
        run.add_usage(response.usage)
    return Exchange(call.ins, _answer(branch, response, call_id), called, None, response)


@dataclass(frozen=True, slots=True)
class _Call:
    """One prepared request: what is sent, and what the ``model.called`` payload says of it."""

    ins: Instruction
    report: ContextReport
    prompt: Prompt
    request: ModelRequest
    sent: ModelRequest
    history_version: int | None
    schema_name: str | None
    persist: bool


async def _prepare_call(
    branch: BranchPort, model: BaseChatModel, instruction: Any, param: ChatParam, verb: str
) -> _Call:
    """The instruction, the context, the history and the request the model gets."""
    params = dict(param.imodel_kw)
    stream, persist = _stream_options(model, params)
    owner = current_run(branch.id)  # name the verb the caller called (operate, not its communicate)
    check_request_params(model, params, verb=owner.verb if owner is not None else verb)
    ins = build_instruction(branch, instruction, param)
    report = await branch.gather_context(ins)
    history_version: int | None = None
    history: Sequence[AnyMessage]
    if param.progression is not None:
        history = messages_by_ids(branch.state, param.progression)
    else:
        # read lazily: assembly renders only the messages it has not seen (O(1) per turn)
        history = branch.state.message_view
        # The branch's own view is named by its version (O(1) per call) instead of listing
        # every id again. Before the first write the view is the one version 1 will hold.
        history_version = max(branch.state.version, 1)
    cached = history_version is not None
    prompt = assemble(branch.prompt_cache, history, branch.state.system, ins, report.blocks, cached=cached)
    _, schema_name, wire_format = response_schema(param.response_format)
    request = ModelRequest(
        messages=prompt.messages,
        params=params,
        tools=[dict(t) for t in param.tool_schemas] or None,
        response_format=wire_format,
        message_ids=prompt.message_ids,
        stream=stream,
    )
    return _Call(ins, report, prompt, request, model.prepare(request), history_version, schema_name, persist)


async def _call(
    branch: BranchPort, model: BaseChatModel, call: _Call, call_id: str
) -> tuple[ModelResponse | None, Exception | None]:
    """The model's response, or the exception it raised; a streamed call's chunks are recorded."""
    try:
        if call.request.stream and model.profile.streams_chunks:
            async with _chunk_sink(branch, call_id, call.persist) as sink:
                return await model.invoke(call.request, on_chunk=sink), None
        return await model.invoke(call.request), None
    except Exception as exc:
        return None, exc


def _describe(
    model: BaseChatModel,
    call: _Call,
    call_id: str,
    verb: str,
    run_id: str | None,
    memo: FingerprintMemo | None = None,
) -> dict[str, Any]:
    """The ``model.called`` fields that describe the request (``_outcome`` adds how it went)."""
    by_version = call.history_version is not None
    return {
        "call_id": call_id,
        "provider": model.provider,
        "model": model.model,
        "endpoint": model.profile.endpoint,
        "verb": verb,
        "run_id": run_id,
        "message_ids": [] if by_version else call.prompt.message_ids,
        "history_version": call.history_version,
        "instruction_id": call.ins.id if by_version else None,
        "params": _json_params(call.sent.params),
        "tools": [
            str(t.get("function", {}).get("name", t.get("name", ""))) for t in call.request.tools or ()
        ],
        "response_format": call.schema_name,
        "fingerprint": request_fingerprint(call.sent, model=model.model, memo=memo),
        "context_providers": call.report.fired_names,
        "stream": call.request.stream,
    }


def _outcome(
    response: ModelResponse | None, error: Exception | None, latency: float, requested: str
) -> dict[str, Any]:
    """The ``model.called`` fields that say how the call went."""
    if response is None:
        return {
            "usage": Usage(),
            "latency_ms": latency,
            "attempts": max(1, getattr(error, "attempts", 1) or 1),
            "status": "error",
            "error_type": type(error).__name__,
            "error_message": str(error),
        }
    return {
        "served_model": _served(response, requested),
        "response": response.raw,
        "usage": response.usage,
        "latency_ms": response.latency_ms if response.latency_ms > 0 else latency,
        "ttft_ms": response.ttft_ms,
        "attempts": max(1, response.attempts),
        "status": "ok",
    }


def _answer(branch: BranchPort, response: ModelResponse, call_id: str) -> AssistantResponse:
    """The assistant response for what the model returned (tool calls and signed reasoning kept)."""
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
    return AssistantResponse.create(
        response.text, sender=branch.id, recipient=branch.state.user or "user", metadata=metadata
    )


def _stream_options(model: BaseChatModel, params: dict[str, Any]) -> tuple[bool, bool]:
    """``stream`` and ``stream_persist`` taken out of the call's parameters (else the model's defaults)."""
    profile = model.profile
    stream = params.pop("stream", profile.stream)
    persist = params.pop("stream_persist", profile.stream_persist)
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
