"""``run`` and ``run_and_collect``: a recorded CLI agent stream (the canonical CLI ``Middle``).

``run`` is an async generator. In order, it:

1. refuses a model that is not a CLI agent (``ValueError`` naming the CLI providers; there is
   no fallback to ``communicate``);
2. records the instruction and ``run.started`` in one append, then yields the instruction;
3. streams from the model, resuming the provider session bound to the branch;
4. records every chunk as a ``stream.chunk`` event of ``run-<run_id>`` (with ``stream_persist``
   its line reaches the live buffer before the chunk is processed) and applies the chunk
   rules (``StreamAssembler``), recording and yielding the messages they make;
5. on every way out closes the provider stream, commits the chunks, records the text still
   pending (marked ``interrupted`` when the run did not end normally), records the call
   (``model.called``) and exactly one of ``run.ended`` / ``run.failed``, and with
   ``stream_persist`` writes the final branch snapshot and removes the buffer.

Consumer abandonment (``break`` then ``aclose()``) ends with ``run.ended``; an error, a
timeout or a cancellation with ``run.failed``. Inside another run of the same branch (a
ReAct loop) the lifecycle events are left to the enclosing run, the rest is unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import anyio
import orjson
from turnlog.eventstore import uuid7
from turnlog.kernel._context import prompt_context
from turnlog.kernel._control import stop_requested
from turnlog.kernel._errors import ResponseParseError, UsageError
from turnlog.kernel._kernel import BindProviderSession
from turnlog.kernel._lifecycle import current_run, failure_reason
from turnlog.kernel._params import ChatParam, ParseParam, RunParam
from turnlog.kernel._persist import (
    ChunkLog,
    PersistOptions,
    RunBuffer,
    buffer_path,
    default_persist_dir,
    snapshot_path,
    write_snapshot_file,
)
from turnlog.kernel.models import (
    CLIError,
    ModelRequest,
    ProviderError,
    ProviderTimeout,
    StreamChunk,
    Usage,
    public_params,
    request_fingerprint,
)
from turnlog.kernel.models._subprocess import classify_cli_failure
from turnlog.kernel.operations._prepare import assemble, build_instruction, response_schema
from turnlog.projections import (
    ActionRequest,
    ActionResponse,
    AnyMessage,
    AssistantResponse,
    EventData,
    Instruction,
    MessageAdded,
    ModelCalled,
    RunEnded,
    RunFailed,
    RunStarted,
    UsageData,
)

if TYPE_CHECKING:
    from turnlog.kernel._branch import Branch

__all__ = [
    "CLI_HINT",
    "StreamAssembler",
    "classify_stream_error",
    "run",
    "run_and_collect",
    "streaming_model",
]

_log = logging.getLogger("turnlog.kernel.run")

VERB = "run"
CLI_HINT = (
    "Use one of the CLI providers: claude_code, codex, gemini "
    "(e.g. chat_model=iModel('claude_code/sonnet')); run() has no fallback to communicate()."
)
_CONTEXT = re.compile(
    r"context[\s._-]?(window|length)[\s._-]?(exceeded|too\s+long)|prompt is too long|maximum context",
    re.IGNORECASE,
)


# ------------------------------------------------------------------------------------ commands


@dataclass(frozen=True, slots=True)
class _Append:
    """Append these payloads to the branch as one atomic batch (they mean the same anywhere)."""

    reorderable: ClassVar[bool] = True
    items: tuple[EventData, ...]

    def build(self, state: Any) -> Sequence[EventData]:
        return self.items


# ------------------------------------------------------------------------------------- checks


def streaming_model(model: Any) -> Any:
    """``model`` when it is a CLI agent that can stream; else ``ValueError`` with a hint."""
    if model is None:
        raise ValueError(
            f"run operation only supports CLI endpoints, but the branch has no chat model. {CLI_HINT}"
        )
    is_cli = getattr(model, "is_cli", None)
    if is_cli is False or not callable(getattr(model, "stream", None)):
        provider = getattr(model, "provider", type(model).__name__)
        raise ValueError(
            f"run operation only supports CLI endpoints, but got provider={provider!r}. {CLI_HINT}"
        )
    return model


def classify_stream_error(
    text: str | None, metadata: Mapping[str, Any] | None = None, *, provider: str = "", model: str = ""
) -> CLIError:
    """The error an ``error`` chunk means: a ``CLIError`` whose ``kind`` says what went wrong.

    ``kind`` is the chunk's own classification when it has one, else it is found from the
    text: ``auth``, ``rate_limit`` (usage limits, quotas), ``context`` (the context window
    is exceeded), ``session_not_found``, ``usage`` or ``unknown``. Empty text becomes
    ``"(empty error)"``.
    """
    message = (text or "").strip() or "(empty error)"
    meta = metadata or {}
    kind = meta.get("kind") if isinstance(meta.get("kind"), str) else None
    if _CONTEXT.search(message):
        kind = "context"
    elif kind in (None, "unknown"):
        kind = classify_cli_failure([message], provider=provider)
    return CLIError(message, kind=kind or "unknown", provider=provider, model=model)


# ---------------------------------------------------------------------------------- assembler


def _error_text(output: Any) -> str:
    if isinstance(output, str) and output.strip():
        return output
    if output is None or output == "" or output == []:
        return "the tool reported an error"
    return orjson.dumps(output, default=str).decode()


class StreamAssembler:
    """The chunk rules of ``run``, as a pure state machine (no I/O).

    ``feed(seq, chunk)`` returns the messages the chunk completes, in order:

    - ``system`` with ``metadata["session_id"]``: sets ``session_id`` (nothing is returned);
    - ``thinking`` / ``text``: accumulated (non-empty content only);
    - ``tool_use``: the pending text as an ``AssistantResponse``, then an ``ActionRequest``;
    - ``tool_result`` matching a pending request: an ``ActionResponse`` (``error`` set for an
      error result); an unmatched one makes nothing (it stays a chunk event);
    - ``result``: its metadata goes on the next response, its usage into ``usage``;
    - ``error``: with ``benign_eos`` sets ``finished``; else the pending text is returned and
      ``error`` holds the chunk.

    ``unanswered`` holds every request no result has answered (also one whose call id a later
    call reused), by message id.

    Every message carries ``metadata["run_id"]`` and ``metadata["chunk_range"]`` (first and
    last seq it was built from). ``recover`` replays the same rules; ``existing`` maps
    ``(kind, first_seq, last_seq)`` to messages already recorded, which are then returned
    instead of new ones (so links point at the recorded requests).

    Args:
        branch_id: Sender of responses, recipient of tool results.
        user: Recipient of responses (default ``"user"``).
        run_id: The run the chunks belong to.
        existing: Messages already recorded for this run, by kind and chunk range.
    """

    def __init__(
        self,
        *,
        branch_id: str,
        user: str | None,
        run_id: str,
        existing: Mapping[tuple[str, int, int], AnyMessage] | None = None,
    ) -> None:
        self.branch_id = branch_id
        self.user = user or "user"
        self.run_id = run_id
        self.existing = dict(existing or {})
        self.thinking: list[str] = []
        self.text: list[str] = []
        self.first_seq: int | None = None
        self.last_seq: int | None = None
        self.result_meta: dict[str, Any] = {}
        self.usage = Usage()
        self.pending_requests: dict[str, ActionRequest] = {}
        self.unanswered: dict[str, ActionRequest] = {}
        self.session_id: str | None = None
        self.finished = False
        self.error: StreamChunk | None = None
        self.chunks = 0

    @property
    def has_pending_text(self) -> bool:
        """True when text waits to be flushed."""
        return bool(self.text)

    def _meta(self, first: int, last: int, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"run_id": self.run_id, "chunk_range": [first, last]}
        if extra:
            meta.update(extra)
        return meta

    def _known(self, kind: str, first: int, last: int) -> AnyMessage | None:
        return self.existing.get((kind, first, last))

    def feed(self, seq: int, chunk: StreamChunk) -> list[AnyMessage]:
        """Apply one chunk; return the messages it completes."""
        self.chunks += 1
        kind = chunk.type
        if kind == "text":
            if chunk.content:
                self.text.append(chunk.content)
                if self.first_seq is None:
                    self.first_seq = seq
                self.last_seq = seq
            return []
        if kind == "thinking":
            if chunk.content:
                self.thinking.append(chunk.content)
                if self.first_seq is None:
                    self.first_seq = seq
            return []
        if kind == "system":
            sid = chunk.metadata.get("session_id")
            if isinstance(sid, str) and sid:
                self.session_id = sid
            return []
        if kind == "tool_use":
            return [*self.flush(), self._request(seq, chunk)]
        if kind == "tool_result":
            response = self._response(seq, chunk)
            return [response] if response is not None else []
        if kind == "result":
            self._result(chunk)
            return []
        if kind == "error":
            if chunk.metadata.get("benign_eos"):
                self.finished = True
                return []
            self.error = chunk
            return self.flush()
        return []

    def _request(self, seq: int, chunk: StreamChunk) -> ActionRequest:
        found = self._known("ActionRequest", seq, seq)
        if isinstance(found, ActionRequest):
            request = found
        else:
            request = ActionRequest.create(
                chunk.tool_name or "",
                chunk.tool_input or {},
                call_id=chunk.tool_id,
                sender=self.branch_id,
                recipient=self.user,
                metadata=self._meta(seq, seq),
            )
        if chunk.tool_id:
            # a second call reusing an id takes the results from then on; the first stays unanswered
            self.pending_requests[chunk.tool_id] = request
        self.unanswered[request.id] = request
        return request

    def _response(self, seq: int, chunk: StreamChunk) -> ActionResponse | None:
        request = self.pending_requests.pop(chunk.tool_id, None) if chunk.tool_id else None
        if request is None:
            return None
        self.unanswered.pop(request.id, None)
        found = self._known("ActionResponse", seq, seq)
        if isinstance(found, ActionResponse):
            return found
        return ActionResponse.create(
            request,
            output=chunk.tool_output,
            error=_error_text(chunk.tool_output) if chunk.is_error else None,
            sender=self.user,
            recipient=self.branch_id,
            metadata=self._meta(seq, seq, {"is_error": True} if chunk.is_error else None),
        )

    def _result(self, chunk: StreamChunk) -> None:
        meta = chunk.metadata
        if meta:
            self.result_meta.update(meta)
        usage = meta.get("usage") if meta else None
        if isinstance(usage, Mapping):
            self.usage = self.usage + Usage(
                _int(usage.get("input_tokens")),
                _int(usage.get("output_tokens")),
                _float(usage.get("cost_usd")),
            )
        sid = meta.get("session_id") if meta else None
        if isinstance(sid, str) and sid and self.session_id is None:
            self.session_id = sid

    def flush(self, *, interrupted: bool = False) -> list[AnyMessage]:
        """The pending text as an ``AssistantResponse`` (empty list when there is none).

        Thinking without text is kept for the next flush.
        """
        if not self.text:
            return []
        first = self.first_seq if self.first_seq is not None else 0
        last = self.last_seq if self.last_seq is not None else first
        extra: dict[str, Any] = {}
        if self.thinking:
            extra["thinking"] = "\n".join(self.thinking)
        if self.result_meta:
            extra["model_response"] = _json(self.result_meta)
        if interrupted:
            extra["interrupted"] = True
        text = "".join(self.text)
        self.text, self.thinking, self.result_meta = [], [], {}
        self.first_seq = self.last_seq = None
        found = self._known("AssistantResponse", first, last)
        if found is not None:
            return [found]
        return [
            AssistantResponse.create(
                text, sender=self.branch_id, recipient=self.user, metadata=self._meta(first, last, extra)
            )
        ]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _json(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value, default=str))


# ------------------------------------------------------------------------------------- the run


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("text"))
    return str(content)


def _prompt(branch: Branch, ins: Instruction, resume: str | None) -> str:
    """The prompt text: the instruction alone when a provider session resumes, else the history."""
    if resume:
        return _text_of(ins.to_chat()["content"])
    prompt = assemble(branch._live.cache, branch.messages, branch.system, ins)
    return "\n\n".join(_text_of(m.get("content")) for m in prompt.messages)


def _deadline(timeout: Any) -> float | None:
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
        return anyio.current_time() + float(timeout)
    return None


async def _next_chunk(
    iterator: AsyncIterator[StreamChunk], deadline: float | None, limit: Any, provider: str, model: str
) -> StreamChunk | None:
    """The next chunk (None at the end), within the run's deadline; failures classified once."""
    try:
        if deadline is None:
            return await iterator.__anext__()
        remaining = deadline - anyio.current_time()
        if remaining <= 0:
            raise TimeoutError
        with anyio.fail_after(remaining):
            return await iterator.__anext__()
    except StopAsyncIteration:
        return None
    except ProviderError:
        raise
    except TimeoutError as exc:
        raise ProviderTimeout(
            f"run() stream timeout exceeded ({limit} s)", provider=provider, model=model
        ) from exc
    except RuntimeError as exc:
        raise classify_stream_error(str(exc), provider=provider, model=model) from exc


async def _close(iterator: AsyncIterator[StreamChunk] | None, primary: BaseException | None) -> None:
    """Close the provider stream; a failure to close never replaces the primary error."""
    aclose = getattr(iterator, "aclose", None)
    if aclose is None:
        return
    try:
        await aclose()
    except Exception as exc:
        _log.warning("run: closing the provider stream failed: %r", exc)
    except BaseException as exc:
        if primary is None:
            raise
        _log.warning("run: closing the provider stream raised %r while %r propagated", exc, primary)


def _usage(usage: Usage) -> UsageData:
    return UsageData(
        input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, cost_usd=usage.cost_usd
    )


@dataclass(slots=True)
class _Run:
    """Everything the cleanup of one run needs."""

    branch: Branch
    run_id: str
    lifecycle_id: str
    suppressed: bool
    provider: str
    model: str
    prompt: str
    resume: str | None
    options: dict[str, Any]
    ins: Instruction
    started: float
    assembler: StreamAssembler
    persist: bool
    persist_dir: Path | None = None
    snapshot_dir: Path | None = None
    log: ChunkLog | None = None
    first_chunk_at: float | None = None
    bound: str | None = None
    response_format: str | None = None
    completed: bool = False
    context_providers: tuple[str, ...] = ()

    async def record(self, messages: Sequence[AnyMessage]) -> None:
        if self.log is not None:
            await self.log.commit()  # a message never names chunks the store has not got
        items = tuple(MessageAdded(message=m, run_id=self.lifecycle_id) for m in messages)
        await self.branch._execute(_Append(items), run_id=self.lifecycle_id)

    async def bind_session(self) -> None:
        sid = self.assembler.session_id
        if sid is None or sid == self.bound:
            return
        self.bound = sid
        if self.branch.provider_session(self.provider, self.model) != sid:
            await self.branch._execute(
                BindProviderSession(self.provider, self.model, sid), run_id=self.lifecycle_id
            )

    def called(self, error: BaseException | None, duration_ms: float) -> ModelCalled:
        params = {"resume": self.resume, **self.options}
        request = ModelRequest(messages=[{"role": "user", "content": self.prompt}], params=params)
        return ModelCalled(
            call_id=str(uuid7()),
            provider=self.provider,
            model=self.model,
            endpoint="cli",
            verb=VERB,
            run_id=self.lifecycle_id,
            message_ids=[self.ins.id],
            params=_json(public_params(params)),
            response_format=self.response_format,
            context_providers=list(self.context_providers),
            fingerprint=request_fingerprint(request, model=self.model),
            response=_json(self.assembler.result_meta) if self.assembler.result_meta else None,
            usage=_usage(self.assembler.usage),
            latency_ms=duration_ms,
            ttft_ms=(self.first_chunk_at - self.started) * 1000 if self.first_chunk_at is not None else None,
            status="ok" if error is None else "error",
            error_type=type(error).__name__ if error is not None else None,
            error_message=str(error) if error is not None else None,
            stream=True,
        )

    async def finish(self, error: BaseException | None) -> None:
        """Cleanup and the terminal events; runs shielded, on every way out."""
        duration = (time.perf_counter() - self.started) * 1000
        steps: list[Any] = []
        if error is not None or self.assembler.has_pending_text:
            leftover = self.assembler.flush(interrupted=not self.completed)
            if leftover:
                steps.append(lambda: self.record(leftover))
        if self.log is not None:
            log = self.log
            steps.append(log.finish)
        for step in steps:
            try:
                await step()
            except Exception as exc:
                if error is None:
                    raise
                _log.warning("run %s: cleanup step failed while %r propagated: %r", self.run_id, error, exc)
        chunks = self.log.seq if self.log is not None else 0
        if self.suppressed:
            outer = current_run(self.branch.id)
            if outer is not None:
                outer.add_usage(self.assembler.usage)
            items: tuple[EventData, ...] = (self.called(error, duration),)
        elif error is None:
            items = (
                self.called(None, duration),
                RunEnded(
                    run_id=self.lifecycle_id,
                    verb=VERB,
                    duration_ms=duration,
                    usage=_usage(self.assembler.usage),
                    chunks=chunks,
                ),
            )
        else:
            items = (
                self.called(error, duration),
                RunFailed(
                    run_id=self.lifecycle_id,
                    verb=VERB,
                    duration_ms=duration,
                    usage=_usage(self.assembler.usage),
                    error_type=type(error).__name__,
                    error_message=str(error) or type(error).__name__,
                    reason=failure_reason(error),
                ),
            )
        extras = {"error": error} if error is not None else {"result": None}
        try:
            await self.branch._execute(_Append(items), run_id=self.lifecycle_id, extras=extras, terminal=True)
        except Exception as exc:
            if error is None:
                raise
            _log.warning("run %s: recording the end failed while %r propagated: %r", self.run_id, error, exc)
        if self.persist and self.snapshot_dir is not None:
            try:
                await write_snapshot_file(snapshot_path(self.snapshot_dir, self.branch.id), self.branch.state)
            except Exception as exc:
                if error is None:
                    raise
                _log.warning("run %s: final snapshot failed while %r propagated: %r", self.run_id, error, exc)


async def run(
    branch: Branch,
    instruction: Any,
    param: RunParam,
    *,
    persist: PersistOptions | None = None,
) -> AsyncGenerator[AnyMessage, None]:
    """Stream a CLI agent turn; yield the instruction, then each message the chunks make.

    Args:
        branch: The branch to record to.
        instruction: An ``Instruction`` or any JSON value.
        param: The run parameters; ``imodel_kw["timeout"]`` (a positive number of seconds) is
            one absolute deadline for the whole stream, ``imodel_kw["resume"]`` overrides the
            bound provider session, other ``imodel_kw`` keys are the model's stream options.
        persist: Batching of chunk commits and buffer fsync.

    Raises:
        ValueError: the model is not a CLI agent (on the first iteration).
        CLIError: an error chunk, or the CLI failed; ``kind`` classifies it.
        ProviderTimeout: the deadline passed (a ``TimeoutError``).
    """
    branch._check_writable()
    if param.imodel is not None:
        branch._chat_model = param.imodel  # run() replaces the branch's model, as the facade says
    model = streaming_model(branch._chat_model)
    options = dict(param.imodel_kw)
    timeout = options.pop("timeout", None)
    resume = options.pop("resume", None)
    provider = str(getattr(model, "provider", "") or "")
    model_name = str(getattr(model, "model", "") or "")
    if resume is None:
        resume = branch.provider_session(provider, model_name)
    ins = build_instruction(branch, instruction, param)
    if branch.state.message(ins.id) is not None:
        raise UsageError(f"instruction {ins.id} is recorded in branch {branch.id} already; pass a new one")
    context = await prompt_context(branch, ins)  # providers' text: in the prompt, never recorded
    prompt = context.prepend(_prompt(branch, ins, resume))
    outer = current_run(branch.id)
    run_id = str(uuid7())
    lifecycle_id = outer.run_id if outer is not None else run_id
    items: tuple[EventData, ...] = (MessageAdded(message=ins, run_id=lifecycle_id),)
    if outer is None:
        items += (RunStarted(run_id=run_id, verb=VERB, provider=provider or None, model=model_name or None),)
    started = time.perf_counter()
    state = _Run(
        branch=branch,
        run_id=run_id,
        lifecycle_id=lifecycle_id,
        suppressed=outer is not None,
        provider=provider,
        model=model_name,
        prompt=prompt,
        resume=resume,
        options=options,
        ins=ins,
        started=started,
        assembler=StreamAssembler(branch_id=branch.id, user=branch.user, run_id=run_id),
        persist=param.stream_persist,
        response_format=response_schema(param.response_format)[1],
        context_providers=context.fired,
    )
    error: BaseException | None = None
    try:
        await branch._execute(_Append(items), run_id=lifecycle_id)
        yield ins
        async with contextlib.aclosing(_stream(state, model, param, persist, timeout)) as messages:
            async for message in messages:
                if stop_requested(branch):  # branch.control("cancel"): a clean end
                    break
                yield message
    except GeneratorExit:
        raise  # the consumer stopped: a clean end
    except BaseException as exc:
        error = exc
        raise
    finally:
        # A start that was recorded gets its terminal, even when what followed it was cancelled.
        if branch.state.message(ins.id) is not None:
            with anyio.CancelScope(shield=True):
                await state.finish(error)


async def _stream(
    state: _Run, model: Any, param: RunParam, persist: PersistOptions | None, limit: Any
) -> AsyncGenerator[AnyMessage, None]:
    branch = state.branch
    deadline = _deadline(limit)
    meta = {"branch_id": branch.id, "run_id": state.run_id, **_session_meta(branch)}
    buffer = None
    if param.stream_persist:
        state.persist_dir = (
            Path(param.persist_dir) if param.persist_dir else default_persist_dir(branch.store)
        )
        state.snapshot_dir = Path(param.snapshot_dir) if param.snapshot_dir else state.persist_dir
        await write_snapshot_file(snapshot_path(state.snapshot_dir, branch.id), branch.state)
        opts = persist or PersistOptions()
        buffer = RunBuffer(buffer_path(state.persist_dir, branch.id, state.run_id), fsync=opts.fsync)
    log = state.log = ChunkLog(branch.store, state.run_id, meta, buffer=buffer, options=persist)
    assembler = state.assembler
    iterator = model.stream(state.prompt, resume=state.resume, options=state.options or None)
    primary: BaseException | None = None
    try:
        while True:
            produced, ended = await _segment(state, log, iterator, deadline, limit)
            if produced:
                await state.record(produced)
                for message in produced:
                    yield message
            if assembler.error is not None:
                bad = assembler.error
                raise classify_stream_error(
                    bad.content, bad.metadata, provider=state.provider, model=state.model
                )
            if ended:
                break
        state.completed = True
        final = assembler.flush()
        if final:
            await state.record(final)
            for message in final:
                yield message
    except BaseException as exc:
        primary = exc
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await _close(iterator, primary)


async def _segment(
    state: _Run, log: ChunkLog, iterator: AsyncIterator[StreamChunk], deadline: float | None, limit: Any
) -> tuple[list[AnyMessage], bool]:
    """Read chunks until some make messages, an error arrives or the stream ends.

    Returns the messages made (the caller records and yields them) and whether the stream is
    over. Batches are committed as they fall due.
    """
    assembler = state.assembler
    next_chunk = iterator.__anext__
    while True:
        if deadline is None:
            # The common case inlined (one call less per chunk); same rules as _next_chunk.
            try:
                chunk = await next_chunk()
            except StopAsyncIteration:
                return [], True
            except ProviderError:
                raise
            except RuntimeError as exc:
                raise classify_stream_error(str(exc), provider=state.provider, model=state.model) from exc
        else:
            found = await _next_chunk(iterator, deadline, limit, state.provider, state.model)
            if found is None:
                return [], True
            chunk = found
        if state.first_chunk_at is None:
            state.first_chunk_at = time.perf_counter()
        log.add(chunk)  # the buffer line is written before the chunk is processed
        produced = assembler.feed(log.seq, chunk)
        if assembler.session_id is not None and assembler.session_id != state.bound:
            await state.bind_session()
        if produced or assembler.error is not None:
            return produced, False
        if assembler.finished:
            return [], True
        if log.due():
            await log.commit()


def _session_meta(branch: Branch) -> dict[str, Any]:
    session = branch.session
    return {"session_id": session.id} if session is not None else {}


# -------------------------------------------------------------------------------- run_and_collect


def _as_run_param(chat_param: ChatParam) -> RunParam:
    if isinstance(chat_param, RunParam):
        return chat_param
    fields = {f.name: getattr(chat_param, f.name) for f in dataclasses.fields(ChatParam)}
    return RunParam(**fields)


async def run_and_collect(
    branch: Branch,
    instruction: Any,
    chat_param: ChatParam,
    parse_param: ParseParam | None = None,
    clear_messages: bool = False,
    skip_validation: bool = False,
) -> Any:
    """Consume ``run`` and return its answer: the CLI ``Middle``.

    Clears first when asked, joins the non-empty assistant responses of the run with a blank
    line, returns None when none arrived, and parses once, after collection, when a
    response format is given (and validation is not skipped).

    Raises:
        ResponseParseError: the collected text does not parse into the requested format.
    """
    from turnlog.kernel.operations.parse import parse, target_name

    if clear_messages:
        await branch.clear_messages()
    texts: list[str] = []
    async with contextlib.aclosing(run(branch, instruction, _as_run_param(chat_param))) as stream:
        async for message in stream:
            if isinstance(message, AssistantResponse) and message.response:
                texts.append(message.response)
    if not texts:
        return None
    full = "\n\n".join(texts)
    if skip_validation or parse_param is None or parse_param.response_format is None:
        return full
    try:
        return await parse(branch, full, parse_param)
    except ValueError as exc:
        fmt = parse_param.response_format
        raise ResponseParseError(
            f"Failed to parse run output into {target_name(fmt)}: {exc}", target=target_name(fmt)
        ) from exc
