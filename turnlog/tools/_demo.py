"""The main job of ``turnlog demo``: every part of turnlog, offline, on one fresh store.

Steps, each printing what happened:

1. ``communicate`` with a structured answer (a pydantic ``response_format``);
2. ``operate`` calling a Python tool that the model asks for (a native tool call);
3. ``ReAct`` in two rounds (a tool call in the first, the answer in the second);
4. a CLI ``run`` with ``stream_persist`` in a child process killed with SIGKILL mid-stream,
   then ``recover`` and a resumed run (``turnlog.tools._demo_stream``);
5. the timeline, the state at an earlier version, a fork from it, an audit replay, the
   analytics totals and the hash-chain verification.

The models are the loopback fake OpenAI server (in-process) and the fake Claude CLI (a real
child process). A verb this build does not have is reported as skipped; the exit status is 0
only when every step that ran succeeded.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, Field

from turnlog.eventstore import EventStore
from turnlog.kernel import Branch, audit_replay, execute_replay, iModel
from turnlog.kernel.models import RetryPolicy
from turnlog.projections import (
    ActionRequest,
    ActionResponse,
    AnyMessage,
    AssistantResponse,
    BranchState,
    Instruction,
    history,
    rebuild,
)

__all__ = ["DEMO_MODEL", "CityFact", "Demo", "StepOutcome", "get_weather", "openai_script", "said"]

DEMO_MODEL = "gpt-4.1-mini"
"""The model name the fake server answers as (priced like the real one by the analytics)."""


class CityFact(BaseModel):
    """The structured answer of step 1."""

    city: str = Field(description="The city's name.")
    country: str = Field(description="The country it is in.")
    population_millions: float = Field(description="Inhabitants, in millions.")


def get_weather(city: str) -> dict[str, Any]:
    """The current weather of a city (a canned answer: the demo is offline).

    Args:
        city: The city's name.
    """
    return {"city": city, "temperature_c": 18, "sky": "light rain"}


_COMMUNICATE = "Which is the largest city of France, and how many people live there?"
_OPERATE = "What is the weather in Paris right now? Use your tools."
_REACT = "Should I take an umbrella for a walk in Lyon today?"


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion}


def openai_script(*, operate: bool, react: bool) -> list[dict[str, Any]]:
    """The fake server's answers, in the order the steps that will run ask for them."""
    script: list[dict[str, Any]] = [
        {
            "text": "```json\n"
            + orjson.dumps({"city": "Paris", "country": "France", "population_millions": 2.1}).decode()
            + "\n```",
            "usage": _usage(212, 31),
            "delay_ms": 40,
        }
    ]
    if operate:
        script.append(
            {
                "tool_calls": [
                    {"id": "call_weather_1", "name": "get_weather", "arguments": {"city": "Paris"}}
                ],
                "usage": _usage(268, 18),
                "delay_ms": 60,
            }
        )
    if react:
        first = {
            "analysis": "I need today's weather in Lyon before I can advise.",
            "planned_actions": [],
            "extension_needed": True,
            "milestone": "weather looked up",
            "action_required": True,
            "action_requests": [{"function": "get_weather", "arguments": {"city": "Lyon"}}],
        }
        second = {
            "analysis": "Light rain at 18 C in Lyon: an umbrella is worth it.",
            "planned_actions": [],
            "extension_needed": False,
            "action_required": False,
            "action_requests": [],
        }
        final = {"answer": "Yes: light rain is expected in Lyon, so take an umbrella."}
        for i, body in enumerate((first, second, final)):
            script.append(
                {
                    "text": "```json\n" + orjson.dumps(body).decode() + "\n```",
                    "usage": _usage(300 + 120 * i, 45),
                    "delay_ms": 50 + 20 * i,
                }
            )
    return script


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What one step did: ``ok``, ``skipped`` (the build lacks a verb) or ``failed``."""

    name: str
    status: Literal["ok", "skipped", "failed"]
    detail: str = ""
    seconds: float = 0.0


@dataclass(slots=True)
class Demo:
    """The state shared by the steps.

    Attributes:
        store: The open store.
        workdir: A directory for the fake CLI's script, state and record, and the run buffers.
        base_url: The fake OpenAI server's ``/v1`` URL.
        store_url: The store's URL, for the child process.
        analytics_db: Where the analytics tables go (None: the store's default analytics database).
        branch: The demo branch (reloaded from the log by each step).
        version_after_communicate: The branch's version after step 1 (time travel goes there).
        fork_id: The branch forked in step 5.
        fork_name: A name no branch has yet, for the fork the next steps suggest.
        outcomes: What each step did, in order.
    """

    store: EventStore
    workdir: Path
    base_url: str
    store_url: str
    analytics_db: Path | None = None
    branch: Branch | None = None
    version_after_communicate: int | None = None
    fork_id: str | None = None
    fork_name: str = "what-if"
    outcomes: list[StepOutcome] = field(default_factory=list)

    # ------------------------------------------------------------------------------ helpers

    def chat_model(self) -> iModel:
        """The fake OpenAI model (one attempt: the fake never fails unless scripted to)."""
        return iModel(
            f"openai/{DEMO_MODEL}",
            base_url=self.base_url,
            api_key="sk-demo-offline",
            retry=RetryPolicy(max_attempts=1),
            temperature=0,
        )

    async def open_branch(self) -> Branch:
        """The demo branch, rebuilt from the log (another process may have written to it)."""
        assert self.branch is not None
        branch = await Branch.load(self.store, self.branch.id, chat_model=self.chat_model())
        branch.register_tools([get_weather])
        self.branch = branch
        return branch

    async def step(self, name: str, body: Callable[[], Awaitable[str | None]]) -> None:
        """Run one step; its printed lines come from ``body``, its outcome is kept."""
        print(f"\n{len(self.outcomes) + 1}. {name}", flush=True)
        started = time.perf_counter()
        try:
            skipped = await body()
        except Exception as exc:
            took = time.perf_counter() - started
            print(f"   FAILED: {type(exc).__name__}: {exc}", flush=True)
            if os.environ.get("TURNLOG_DEBUG", "") not in ("", "0"):
                traceback.print_exc(file=sys.stderr)
            self.outcomes.append(StepOutcome(name, "failed", f"{type(exc).__name__}: {exc}", took))
            return
        took = time.perf_counter() - started
        if skipped:
            print(f"   skipped: {skipped}", flush=True)
            self.outcomes.append(StepOutcome(name, "skipped", skipped, took))
        else:
            self.outcomes.append(StepOutcome(name, "ok", "", took))

    # -------------------------------------------------------------------------------- steps

    async def communicate(self) -> str | None:
        """Step 1: a recorded exchange whose answer is parsed into ``CityFact``."""
        from ._inspect import free_name

        name = await free_name(self.store, "demo")  # an earlier demo in the same store keeps its name
        branch = Branch(
            store=self.store,
            name=name,
            user="you",
            system="You are a concise assistant. Answer with facts only.",
            chat_model=self.chat_model(),
            tools=[get_weather],
            metadata={"created_by": "turnlog demo"},
        )
        self.branch = branch
        print(f"   branch {branch.id} (name {name!r}), model openai/{DEMO_MODEL} on the fake server")
        print(f"   you: {_COMMUNICATE}")
        fact = await branch.communicate(_COMMUNICATE, response_format=CityFact)
        if not isinstance(fact, CityFact):
            raise TypeError(f"expected a CityFact, got {fact!r}")
        print(f"   answer parsed into {fact!r}")
        self.version_after_communicate = branch.version
        print(f"   {_run_line(branch.state, 'communicate')}; the branch is at version {branch.version}")
        return None

    async def operate(self) -> str | None:
        """Step 2: the model asks for ``get_weather``; the call and its result are recorded."""
        if not callable(getattr(Branch, "operate", None)):
            return "operate not available in this build"
        branch = await self.open_branch()
        before = {m.id for m in branch.messages}
        print(f"   you: {_OPERATE}")
        print("   tools offered: get_weather(city)")
        result = await branch.operate(instruction=_OPERATE, actions=True)
        new = [m for m in branch.messages if m.id not in before]
        requests = [m for m in new if isinstance(m, ActionRequest)]
        responses = [m for m in new if isinstance(m, ActionResponse)]
        if not requests or not responses:
            raise AssertionError(f"no tool call was recorded (result: {result!r})")
        for request in requests:
            print(f"   model called {request.content.function}({_args(request.content.arguments)})")
        for response in responses:
            took = response.content.duration_ms
            shown = f" in {took:.1f} ms" if took is not None else ""
            print(f"   tool returned {orjson.dumps(response.content.output).decode()}{shown} (recorded)")
        print(f"   {_run_line(branch.state, 'operate')}")
        return None

    async def react(self) -> str | None:
        """Step 3: ReAct, a tool call in round one and the answer after round two."""
        if not callable(getattr(Branch, "ReAct", None)):
            return "ReAct not available in this build"
        branch = await self.open_branch()
        before = {m.id for m in branch.messages}
        print(f"   you: {_REACT}")
        answer = await branch.ReAct(instruction=_REACT, tools=True, max_extensions=1)
        new = [m for m in branch.messages if m.id not in before]
        rounds = sum(1 for m in new if isinstance(m, AssistantResponse))
        calls = [m for m in new if isinstance(m, ActionRequest)]
        print(
            f"   {rounds} model answers recorded; tools called: {', '.join(_call(c) for c in calls) or 'none'}"
        )
        print(f"   final answer: {answer}")
        print(f"   {_run_line(branch.state, 'ReAct')}")
        return None

    async def stream_crash_recover_resume(self) -> str | None:
        """Step 4: see ``turnlog.tools._demo_stream``."""
        from ._demo_stream import crash_recover_resume

        return await crash_recover_resume(self)

    async def inspect(self) -> str | None:
        """Step 5: timeline, time travel, fork, audit replay, analytics, verify."""
        branch = await self.open_branch()
        await _timeline(self.store, branch.id)
        earlier = self.version_after_communicate
        if earlier is not None:
            past = await rebuild(self.store, branch.id, at_version=earlier)
            now = branch.state
            print(
                f"\n   time travel: the branch at version {earlier} (after step 1) had "
                f"{len(past.messages)} messages and {len(past.runs)} run; now it has "
                f"{len(now.messages)} messages and {len(now.runs)} runs at version {now.version}:"
            )
            for i, message in enumerate(past.messages, 1):
                print(f"     {i}. {said(message)}")
            from ._inspect import free_name

            fork_name = await free_name(self.store, f"{branch.name}-fork")
            fork = await branch.fork(earlier, name=fork_name)
            self.fork_id = fork.id
            self.fork_name = await free_name(self.store, "what-if")
            print(
                f"\n   fork: branch {fork.id} ({fork_name!r}) starts from version {earlier}; its stream "
                f"holds one branch.forked event and references the parent prefix "
                f"({len(fork.messages)} messages, nothing copied)"
            )
        await _audit_replay(self.store, branch)
        await _analytics(self.store, branch.id, self.analytics_db)
        await _verify(self.store)
        return None

    async def run_all(self) -> list[StepOutcome]:
        """Run every step in order; return the outcomes."""
        await self.step("communicate with a structured answer (response_format=CityFact)", self.communicate)
        if self.branch is None or self.branch.version == 0:
            return self.outcomes  # nothing else can run without the branch
        await self.step("operate: the model calls a Python tool", self.operate)
        await self.step("ReAct in two rounds", self.react)
        await self.step(
            "a CLI run with stream_persist, killed with SIGKILL mid-stream, then recover and resume",
            self.stream_crash_recover_resume,
        )
        await self.step("timeline, time travel, fork, audit replay, analytics and verification", self.inspect)
        return self.outcomes


# ------------------------------------------------------------------------------------ printing


def said(message: AnyMessage, width: int = 90) -> str:
    """``who: what`` for one message, on one line."""
    if isinstance(message, Instruction):
        who, text = "you", str(message.content.instruction)
    elif isinstance(message, AssistantResponse):
        who, text = "assistant", message.response
    elif isinstance(message, ActionRequest):
        who, text = "tool call", _call(message)
    elif isinstance(message, ActionResponse):
        who, text = "tool result", orjson.dumps(message.content.output).decode()
    else:
        who, text = message.role, str(message.rendered)
    text = " ".join(text.split())
    if len(text) > width:
        text = text[: width - 3] + "..."
    return f"{who}: {text}"


def _args(arguments: Any) -> str:
    if isinstance(arguments, dict):
        return ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    return repr(arguments)


def _call(request: ActionRequest) -> str:
    return f"{request.content.function}({_args(request.content.arguments)})"


def _run_line(state: BranchState, verb: str) -> str:
    runs = [r for r in state.runs.values() if r.verb == verb]
    if not runs:
        return f"no {verb} run recorded"
    run = runs[-1]
    took = f" after {run.duration_ms:.0f} ms" if run.duration_ms is not None else ""
    usage = run.usage
    tokens = ""
    if usage.input_tokens is not None:
        tokens = f", {usage.input_tokens} -> {usage.output_tokens} tokens"
    return f"run {run.run_id[:13]}... {run.status}{took}{tokens}"


async def _timeline(store: EventStore, branch_id: str) -> None:
    rows = await history(store, branch_id)
    print(f"   timeline of branch {branch_id} (turnlog log):")
    width = max(len(r.type) for r in rows)
    for row in rows:
        print(f"     v{row.version:<3} {row.type:<{width}}  {row.summary}")


async def _audit_replay(store: EventStore, branch: Branch) -> None:
    report = await audit_replay(store, branch.id, live=branch.state)
    if not report.ok:
        raise AssertionError("audit replay does not match: " + "; ".join(report.problems))
    print(
        f"\n   audit replay (turnlog replay; no model called): {report.events} events refolded, "
        f"{report.snapshots_checked} snapshots and the live projection compared, "
        f"{report.model_calls} recorded model calls: replay matches"
    )
    executed = await execute_replay(store, branch.id)
    if not executed.ok:
        raise AssertionError(f"execute replay diverged: {executed.divergence or executed.final_mismatch}")
    print(
        f"   execute replay (turnlog replay --execute): {executed.calls_replayed} recorded calls re-run "
        "through today's prompt assembly against the recorded responses: every request fingerprint "
        "matches"
    )


async def _analytics(store: EventStore, branch_id: str, database: Path | None) -> None:
    from turnlog.analytics import AnalyticsProjection

    # None: the store's default analytics database (beside a SQLite file, see turnlog.analytics)
    async with AnalyticsProjection(store, database=database) as analytics:
        update = await analytics.update()
        rows = [r for r in await analytics.usage("branch") if r.key == branch_id]
        tools = await analytics.tool_usage("branch")
        runs = await analytics.run_usage("branch")
    print(f"\n   analytics (turnlog stats; {update.events} events applied to the fact tables):")
    if not rows:
        raise AssertionError("the analytics projection has no model call of the demo branch")
    row = rows[0]
    cost = f"${row.cost_usd:.6f}" if row.cost_usd is not None else "unknown"
    p50 = row.latency_ms.p50
    p95 = row.latency_ms.p95
    print(
        f"     {row.calls} model calls ({row.errors} failed), {row.input_tokens} input and "
        f"{row.output_tokens} output tokens, cost {cost}, latency p50 {_ms(p50)} p95 {_ms(p95)}"
    )
    for tool in tools:
        if tool.key == branch_id:
            print(f"     {tool.calls} tool calls: {tool.ok} ok, {tool.errors} failed, {tool.denied} denied")
    for run in runs:
        if run.key == branch_id:
            print(f"     {run.runs} runs: {run.ok} ended, {run.failed} failed, {run.running} still open")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


async def _verify(store: EventStore) -> None:
    report = await store.verify()
    if not report.ok:
        for problem in report.problems:
            print(f"     PROBLEM {problem}")
        raise AssertionError(f"verify found {len(report.problems)} problem(s)")
    print(
        f"\n   verify (turnlog verify): ok, {report.events} events in {report.streams} streams; "
        "every hash chain verifies, no version gap"
    )
