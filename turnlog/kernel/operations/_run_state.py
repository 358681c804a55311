"""What one CLI run holds while it streams, and how it records messages, bindings and the call.

``run`` (``operations/run.py``) drives the stream; ``_Run`` is its state: the session plan,
the prompt, the chunk log and the assembler, and the commands it issues (``AddMessages``,
``BindProviderSession``) so that every record of a run is made in one place.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from turnlog.eventstore import uuid7
from turnlog.kernel._assembler import StreamAssembler
from turnlog.kernel._commands import AddMessages, BindProviderSession
from turnlog.kernel._context import PromptContext
from turnlog.kernel._lifecycle import RunScope, current_run
from turnlog.kernel._persist import ChunkLog
from turnlog.kernel.models import BaseChatModel, ModelRequest, public_params, request_fingerprint
from turnlog.kernel.operations._cli_prompt import CLIPrompt
from turnlog.kernel.operations._cli_session import SessionPlan
from turnlog.projections import AnyMessage, AssistantResponse, Instruction, MessageAdded, ModelCalled

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort
    from turnlog.kernel.wire._run import RunWire

__all__ = ["VERB", "RunState"]

_log = logging.getLogger("turnlog.kernel.run")

VERB = "run"


def _json(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value, default=str))


@dataclass(slots=True)
class RunState:
    """One run: what it sends, what it has received, and how it records both."""

    branch: BranchPort
    model: BaseChatModel
    run_id: str
    scope: RunScope
    provider: str
    model_name: str
    ins: Instruction
    plan: SessionPlan
    prompt: CLIPrompt
    options: dict[str, Any]
    assembler: StreamAssembler
    started: float
    response_format: str | None = None
    log: ChunkLog | None = None
    first_chunk_at: float | None = None
    bound: str | None = None
    fallback: str | None = None
    context: PromptContext = field(default_factory=PromptContext)
    completed: bool = False
    wire: RunWire | None = None
    """The recorder of the CLI's upstream calls (None: not recorded at the wire)."""
    wire_point: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """Points the CLI's stream options at the recorder."""

    @property
    def lifecycle_id(self) -> str:
        return self.scope.run_id

    def stream_options(self) -> dict[str, Any]:
        options = dict(self.options)
        option = self.model.profile.system_prompt_option
        if self.prompt.system and option and option not in options:
            options[option] = self.prompt.system
        return options

    async def record(self, messages: Sequence[AnyMessage]) -> None:
        if self.log is not None:
            await self.log.commit()  # a message never names chunks the store has not got
        items = tuple(MessageAdded(message=m, run_id=self.lifecycle_id) for m in messages)
        await self.branch.execute(AddMessages(items), run_id=self.lifecycle_id)

    async def bind_session(self) -> None:
        sid = self.assembler.session_id
        if sid is None or sid == self.bound:
            return
        self.bound = sid
        state = self.branch.state
        cwd = self.plan.cwd
        key = (self.provider, self.model_name)
        if state.provider_sessions.get(key) != sid or state.provider_cwds.get(key) != cwd:
            await self.branch.execute(
                BindProviderSession(self.provider, self.model_name, sid, cwd), run_id=self.lifecycle_id
            )

    def called(self, error: BaseException | None, duration_ms: float) -> ModelCalled:
        params: dict[str, Any] = {"resume": self.plan.resume, **self.stream_options()}
        if self.fallback is not None:
            params["resume_fallback"] = self.fallback
        if self.plan.note is not None:
            params["session_note"] = self.plan.note
        if self.wire is not None:
            params["wire_calls"] = self.wire.streams
        request = ModelRequest(messages=[{"role": "user", "content": self.prompt.text}], params=params)
        usage = self.assembler.usage
        return ModelCalled(
            call_id=str(uuid7()),
            provider=self.provider,
            model=self.model_name,
            endpoint="cli",
            verb=VERB,
            run_id=self.lifecycle_id,
            message_ids=[self.ins.id],
            params=_json(public_params(params)),
            response_format=self.response_format,
            context_providers=list(self.context.fired),
            fingerprint=request_fingerprint(request, model=self.model_name),
            response=_json(self.assembler.last_result) if self.assembler.last_result else None,
            usage=usage,
            latency_ms=duration_ms,
            ttft_ms=(self.first_chunk_at - self.started) * 1000 if self.first_chunk_at is not None else None,
            status="ok" if error is None else "error",
            error_type=type(error).__name__ if error is not None else None,
            error_message=str(error) if error is not None else None,
            stream=True,
        )

    async def restore_wire(self) -> None:
        """The text of the last upstream call that crossed the wire and the CLI never printed.

        A CLI killed mid-answer printed part of it (Claude Code, Gemini) or none (Codex
        prints an answer only when it is complete); what reached the wire is recorded as an
        ``AssistantResponse`` marked ``source: "wire"``.
        """
        from turnlog.kernel.wire._run import wire_message, wire_remainder

        assert self.wire is not None
        partial = self.wire.last_partial()
        if partial is None:
            return
        stream, whole = partial
        printed = "".join(
            m.response
            for m in self.branch.state.messages
            if isinstance(m, AssistantResponse) and m.metadata.get("run_id") == self.run_id
        )
        rest = wire_remainder(printed, whole)
        if rest:
            message = wire_message(
                rest,
                stream=stream,
                run_id=self.run_id,
                branch_id=self.branch.id,
                user=self.branch.state.user,
                whole=whole,
            )
            await self.record([message])

    async def finish(self, error: BaseException | None) -> None:
        """Record what is left and the call; runs shielded, on every way out of the stream."""
        duration = (time.perf_counter() - self.started) * 1000
        steps: list[Any] = []
        if error is not None or self.assembler.has_pending_text:
            leftover = self.assembler.flush(interrupted=not self.completed)
            if leftover:
                steps.append(lambda: self.record(leftover))
        if error is not None and self.wire is not None:
            steps.append(self.restore_wire)
        if self.log is not None:
            steps.append(self.log.finish)
        steps.append(
            lambda: self.branch.execute(
                AddMessages((self.called(error, duration),)), run_id=self.lifecycle_id
            )
        )
        for step in steps:
            try:
                await step()
            except Exception as exc:
                if error is None:
                    raise
                _log.warning("run %s: cleanup step failed while %r propagated: %r", self.run_id, error, exc)
        usage = self.assembler.usage
        if self.scope.suppressed:
            outer = current_run(self.branch.id)
            if outer is not None:
                outer.add_usage(usage)
        else:
            self.scope.add_usage(usage)
            self.scope.chunks = self.log.seq if self.log is not None else 0
