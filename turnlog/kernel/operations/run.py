"""``run`` and ``run_and_collect``: a recorded CLI agent stream (the canonical CLI ``Middle``).

``run`` is an async generator. In order, it:

1. refuses a model that is not a CLI agent (``ValueError`` naming the CLI providers; there is
   no fallback to ``communicate``);
2. decides which provider session to resume and from which directory (``_cli_session``) and
   what the CLI is told (``_cli_prompt``: the instruction as typed, guidance through the CLI's
   system-prompt option, the history only when there is no session to resume);
3. opens the run (``observed_run``: ``run.started`` with provider, model and directory),
   records the instruction (``AddMessages``) and yields it;
4. streams from the model, recording every chunk as a ``stream.chunk`` event of
   ``run-<run_id>`` (with ``stream_persist`` its line reaches the live buffer before the
   chunk is processed) and applying the chunk rules (``StreamAssembler``), recording and
   yielding the messages they make; a resume the CLI answers with "session not found" falls
   back once to a new session primed with the history;
5. on every way out closes the provider stream, commits the chunks, records the text still
   pending (marked ``interrupted`` when the run did not end normally) and the call
   (``model.called``); ``observed_run`` then records exactly one of ``run.ended`` /
   ``run.failed``, and with ``stream_persist`` the final branch snapshot is written.

Consumer abandonment (``break`` then ``aclose()``) ends with ``run.ended``; an error, a
timeout or a cancellation with ``run.failed``. Inside another run of the same branch (a
ReAct loop) the lifecycle events are left to the enclosing run, the rest is unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from turnlog.eventstore import uuid7
from turnlog.kernel._assembler import StreamAssembler
from turnlog.kernel._commands import AddMessages, ClearMessages
from turnlog.kernel._context import prompt_context
from turnlog.kernel._control import stop_requested
from turnlog.kernel._errors import ResponseParseError, UsageError
from turnlog.kernel._lifecycle import observed_run
from turnlog.kernel._options import check_request_params
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
    BaseChatModel,
    CLIError,
    ProviderError,
    ProviderTimeout,
    StreamChunk,
    as_chat_model,
    cli_agent_of,
)
from turnlog.kernel.models._cli_errors import classify_stream_error
from turnlog.kernel.operations._cli_prompt import cli_prompt
from turnlog.kernel.operations._cli_session import SessionPlan, plan_session
from turnlog.kernel.operations._prepare import build_instruction, response_schema
from turnlog.kernel.operations._run_state import VERB, RunState
from turnlog.projections import (
    AnyMessage,
    AssistantResponse,
    MessageAdded,
)

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort

__all__ = [
    "CLI_HINT",
    "StreamAssembler",
    "classify_stream_error",
    "run",
    "run_and_collect",
    "streaming_model",
]

_log = logging.getLogger("turnlog.kernel.run")

CLI_HINT = (
    "Use one of the CLI providers: claude_code, codex, gemini "
    "(e.g. chat_model=iModel('claude_code/sonnet')); run() has no fallback to communicate()."
)


def streaming_model(model: object) -> BaseChatModel:
    """``model`` (seen through the contract) when it is a CLI agent; else ``ValueError`` with a hint."""
    if model is None:
        raise UsageError(
            f"run operation only supports CLI endpoints, but the branch has no chat model. {CLI_HINT}"
        )
    contract = as_chat_model(model)
    if not contract.profile.is_cli:
        provider = contract.provider or type(model).__name__
        raise UsageError(
            f"run operation only supports CLI endpoints, but got provider={provider!r}. {CLI_HINT}"
        )
    return contract


async def run(
    branch: BranchPort,
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
            bound provider session, ``imodel_kw["cwd"]`` the working directory, other
            ``imodel_kw`` keys are the model's stream options.
        persist: Batching of chunk commits and buffer fsync.

    Raises:
        ValueError: the model is not a CLI agent (on the first iteration).
        CLIError: an error chunk, or the CLI failed; ``kind`` classifies it.
        ProviderTimeout: the deadline passed (a ``TimeoutError``).
    """
    branch.require_writable()
    if param.imodel is not None:
        branch.models.use_chat(param.imodel)  # run() replaces the branch's model, as the facade says
    model = streaming_model(branch.models.chat)
    options = dict(param.imodel_kw)
    check_request_params(model, options, verb="run")  # a misspelt option never reaches the CLI
    timeout = options.pop("timeout", None)
    provider, model_name = model.provider, model.model
    plan = plan_session(branch, provider, model_name, options, model.profile.cwd, options.pop("resume", None))
    ins = build_instruction(branch, instruction, param)
    if branch.state.message(ins.id) is not None:
        raise UsageError(f"instruction {ins.id} is recorded in branch {branch.id} already; pass a new one")
    context = await prompt_context(branch, ins)  # providers' text: in the guidance, never recorded
    prompt = cli_prompt(
        branch.state.messages,
        branch.state.system,
        ins,
        resume=plan.resume,
        system_option=model.profile.system_prompt_option,
        extra_guidance=(context.text,),
    )
    if plan.note is not None:
        # Recorded in model.called (params["session_note"]) and said by `turnlog recover`, its
        # documented place; a warning here interrupted every resume's output (the demo's).
        _log.info("run on branch %s: %s", branch.id, plan.note)
    snapshot_dir: Path | None = None
    try:
        async with observed_run(
            branch, VERB, provider=provider or None, model=model_name or None, cwd=plan.cwd
        ) as scope:
            run_id = str(uuid7()) if scope.suppressed else scope.run_id
            state = RunState(
                branch=branch,
                model=model,
                run_id=run_id,
                scope=scope,
                provider=provider,
                model_name=model_name,
                ins=ins,
                plan=plan,
                prompt=prompt,
                options=options,
                assembler=StreamAssembler(branch_id=branch.id, user=branch.state.user, run_id=run_id),
                started=time.perf_counter(),
                response_format=response_schema(param.response_format)[1],
                fallback=plan.fallback,
                context=context,
            )
            await branch.execute(
                AddMessages((MessageAdded(message=ins, run_id=scope.run_id),)), run_id=scope.run_id
            )
            yield ins
            error: BaseException | None = None
            try:
                snapshot_dir = await _open_log(state, param, persist)
                async with _wire(state, param.record_wire):
                    async with contextlib.aclosing(_stream(state, timeout)) as messages:
                        async for message in messages:
                            if stop_requested(branch.poll_control()):  # branch.control("cancel"): a clean end
                                break
                            yield message
            except GeneratorExit:
                raise  # the consumer stopped: a clean end
            except BaseException as exc:
                error = exc
                raise
            finally:
                with anyio.CancelScope(shield=True):
                    await state.finish(error)
    finally:
        if snapshot_dir is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await write_snapshot_file(
                        snapshot_path(snapshot_dir, branch.id), branch.state, store=branch.store
                    )
                except Exception as exc:
                    _log.warning("run on branch %s: final snapshot failed: %r", branch.id, exc)


async def _open_log(state: RunState, param: RunParam, persist: PersistOptions | None) -> Path | None:
    """The run's chunk log (with its live buffer under ``stream_persist``); the snapshot directory."""
    branch = state.branch
    session = branch.session
    meta = {"branch_id": branch.id, "run_id": state.run_id}
    if session is not None:
        meta["session_id"] = session.id
    buffer = None
    snapshot_dir = None
    if param.stream_persist:
        persist_dir = Path(param.persist_dir) if param.persist_dir else default_persist_dir(branch.store)
        snapshot_dir = Path(param.snapshot_dir) if param.snapshot_dir else persist_dir
        await write_snapshot_file(snapshot_path(snapshot_dir, branch.id), branch.state, store=branch.store)
        opts = persist or PersistOptions()
        buffer = RunBuffer(buffer_path(persist_dir, branch.id, state.run_id), fsync=opts.fsync)
    state.log = ChunkLog(branch.store, state.run_id, meta, buffer=buffer, options=persist)
    return snapshot_dir


@contextlib.asynccontextmanager
async def _wire(state: RunState, record: bool) -> AsyncIterator[None]:
    """The recorder at the wire for this run's CLI (``kernel/wire/_run.py``), while it streams.

    Off with ``record_wire=False``, and for a model that is not one of the CLI providers or
    whose upstream cannot be redirected (``wire_target``: e.g. Codex signed in with ChatGPT but
    with an ``openai_base_url`` of no API the recorder knows).
    """
    cli = cli_agent_of(state.model) if record else None
    target = None
    if cli is not None:
        from turnlog.kernel.wire._run import wire_target

        opts = state.stream_options()
        target = wire_target(
            state.provider, cli.child_env(opts), cli.child_cwd(opts), cli.child_extra_args(opts)
        )
    if target is None:
        yield
        return
    from turnlog.kernel.wire._run import recording_wire

    async with recording_wire(state.branch.store, state.branch.id, state.run_id, target) as (wire, url):
        state.wire, state.wire_point = wire, (lambda options: target.options(url, options))
        yield


def _deadline(timeout: Any) -> float | None:
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
        return anyio.current_time() + float(timeout)
    return None


async def _stream(state: RunState, limit: Any) -> AsyncGenerator[AnyMessage, None]:
    """The messages of the run, with one fallback to a new session when a resume is refused."""
    deadline = _deadline(limit)
    produced_any = False
    while True:
        options = state.stream_options()
        if state.wire_point is not None:
            options = state.wire_point(options)  # the CLI's API calls go through the recorder
        iterator = state.model.stream(state.prompt.text, resume=state.plan.resume, options=options or None)
        primary: BaseException | None = None
        try:
            async for message in _attempt(state, iterator, deadline, limit):
                produced_any = True
                yield message
            return
        except CLIError as exc:
            primary = exc
            if exc.kind != "session_not_found" or state.plan.resume is None or produced_any:
                raise
        except BaseException as exc:
            primary = exc
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await _close(iterator, primary)
        _fall_back(state, "session_not_found")


def _fall_back(state: RunState, reason: str) -> None:
    """Retry as a new provider session primed with the branch history (recorded in the run)."""
    previous = state.plan.resume
    _log.warning(
        "run %s: %s session %s was not found; starting a new session primed with the branch history",
        state.run_id,
        state.provider,
        previous,
    )
    plan = state.plan
    state.plan = SessionPlan(None, plan.cwd, reason, previous, plan.note)
    state.fallback = reason
    state.prompt = cli_prompt(
        [m for m in state.branch.state.messages if m.id != state.ins.id],
        state.branch.state.system,
        state.ins,
        resume=None,
        system_option=state.model.profile.system_prompt_option,
        extra_guidance=(state.context.text,),
    )
    marker = StreamChunk("system", metadata={"resume_fallback": reason, "previous_session": previous})
    assert state.log is not None
    state.log.add(marker)
    state.assembler.feed(state.log.seq, marker)


async def _attempt(
    state: RunState, iterator: AsyncIterator[StreamChunk], deadline: float | None, limit: Any
) -> AsyncGenerator[AnyMessage, None]:
    assembler = state.assembler
    assert state.log is not None
    while True:
        produced, ended = await _segment(state, state.log, iterator, deadline, limit)
        if produced:
            await state.record(produced)
            for message in produced:
                yield message
        if assembler.error is not None:
            bad = assembler.error
            raise classify_stream_error(
                bad.content, bad.metadata, provider=state.provider, model=state.model_name
            )
        if ended:
            break
    state.completed = True
    final = assembler.flush()
    if final:
        await state.record(final)
        for message in final:
            yield message


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


async def _segment(
    state: RunState, log: ChunkLog, iterator: AsyncIterator[StreamChunk], deadline: float | None, limit: Any
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
                raise classify_stream_error(
                    str(exc), provider=state.provider, model=state.model_name
                ) from exc
        else:
            found = await _next_chunk(iterator, deadline, limit, state.provider, state.model_name)
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


# -------------------------------------------------------------------------------- run_and_collect


async def run_and_collect(
    branch: BranchPort,
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
        await branch.execute(ClearMessages())
    texts: list[str] = []
    async with contextlib.aclosing(run(branch, instruction, RunParam.from_chat(chat_param))) as stream:
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
