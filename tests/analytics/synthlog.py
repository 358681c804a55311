"""A synthetic event log with a realistic mix, for the analytics tests and ``turnlog bench analytics``.

Runs with instructions, model calls, assistant responses, tool rounds, stream chunks on run
streams and failures, drawn from a seeded random generator so that a seed gives the same log.
The benchmark (``benchmarks/_analytics.py``) loads this file from the checkout.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

from turnlog.eventstore import ANY, NewEvent, uuid7
from turnlog.projections import ActionRequest, ActionResponse, AssistantResponse, Instruction

__all__ = ["SyntheticLog"]

_MODELS = [
    ("openai", "gpt-4o-mini"),
    ("openai", "gpt-4o"),
    ("anthropic", "claude-sonnet-4-20250514"),
    ("claude_code", "claude-opus-4"),
    ("gemini_cli", "gemini-2.5-flash"),
    ("local", "llama-3.1-8b"),
]
_TOOLS = ["search", "read_file", "write_file", "run_tests", "fetch_url"]
_VERBS = ["chat", "communicate", "operate", "ReAct", "run"]
_ERRORS = ["RateLimitError", "ProviderTimeout", "ProviderHTTPError"]


class SyntheticLog:
    """Makes event batches: branch turns with runs, model calls, tools, chunks and failures."""

    def __init__(self, seed: int, start: datetime) -> None:
        self.rng = random.Random(seed)
        self.clock = start
        self.instruction = Instruction.create("Summarise the failing tests and propose a fix.").to_dict()
        self.assistant = AssistantResponse.create(
            "The failure comes from a stale fixture; here is a patch."
        ).to_dict()
        request = ActionRequest.create("search", {"query": "fixture teardown", "limit": 5})
        self.request = request.to_dict()
        self.response = ActionResponse.create(request, output={"hits": 3}, duration_ms=12.5).to_dict()

    def _message(self, template: dict[str, Any], **content: Any) -> dict[str, Any]:
        message = dict(template)
        message["id"] = str(uuid7())
        if content:
            message["content"] = {**template["content"], **content}
        return message

    def turn(self, branch: str) -> list[tuple[str, list[NewEvent], Any]]:
        """One run on ``branch``: about 5-16 events on the branch and its run stream."""
        rng = self.rng
        provider, model = rng.choice(_MODELS)
        verb = rng.choice(_VERBS)
        run_id = str(uuid7())
        meta = {"branch_id": branch, "run_id": run_id}
        events = [
            NewEvent(
                "run.started",
                {"run_id": run_id, "verb": verb, "parent_run_id": None, "provider": provider, "model": model},
                meta,
            ),
            NewEvent("message.added", {"message": self._message(self.instruction), "run_id": run_id}, meta),
        ]
        chunks: list[NewEvent] = []
        tokens_in = tokens_out = 0
        failed = False
        for round_ in range(1 + (rng.random() < 0.3)):
            stream = rng.random() < 0.5
            error = rng.random() < 0.04
            t_in, t_out = rng.randint(200, 4000), 0 if error else rng.randint(20, 800)
            tokens_in, tokens_out = tokens_in + t_in, tokens_out + t_out
            latency = round(rng.lognormvariate(6.5, 0.6), 3)
            events.append(
                NewEvent(
                    "model.called",
                    self._call(provider, model, verb, run_id, t_in, t_out, latency, stream, error),
                    meta,
                )
            )
            if error:
                failed = True
                break
            if stream:
                chunks.extend(
                    NewEvent(
                        "stream.chunk",
                        {"seq": seq, "type": "text", "content": "tok ", "is_delta": True},
                        meta,
                    )
                    for seq in range(1, rng.randint(3, 12))
                )
            if round_ == 0 and rng.random() < 0.3:
                denied = rng.random() < 0.05
                tool_error = None if rng.random() < 0.9 else "TimeoutError: tool took too long"
                response = self._message(
                    self.response,
                    function=rng.choice(_TOOLS),
                    duration_ms=round(rng.uniform(1, 900), 3),
                    error="denied by policy" if denied else tool_error,
                )
                if denied:
                    response["metadata"] = {"denied": True}
                events.append(
                    NewEvent(
                        "message.added", {"message": self._message(self.request), "run_id": run_id}, meta
                    )
                )
                events.append(NewEvent("message.added", {"message": response, "run_id": run_id}, meta))
        events.append(
            NewEvent("message.added", {"message": self._message(self.assistant), "run_id": run_id}, meta)
        )
        usage = {"input_tokens": tokens_in, "output_tokens": tokens_out, "cost_usd": None}
        duration = round(rng.uniform(300, 9000), 3)
        if failed:
            data = {"run_id": run_id, "verb": verb, "duration_ms": duration, "usage": usage}
            data.update(error_type=rng.choice(_ERRORS), error_message="provider failed", reason="error")
            end = NewEvent("run.failed", {**data, "recovered": None}, meta)
        else:
            data = {"run_id": run_id, "verb": verb, "duration_ms": duration, "usage": usage}
            end = NewEvent("run.ended", {**data, "chunks": len(chunks) or None}, meta)
        events.append(end)
        entries: list[tuple[str, list[NewEvent], Any]] = [(f"branch-{branch}", events, ANY)]
        if chunks:
            entries.append((f"run-{run_id}", chunks, ANY))
        return entries

    def _call(
        self,
        provider: str,
        model: str,
        verb: str,
        run_id: str,
        t_in: int,
        t_out: int,
        latency: float,
        stream: bool,
        error: bool,
    ) -> dict[str, Any]:
        rng = self.rng
        return {
            "call_id": str(uuid7()),
            "provider": provider,
            "model": model,
            "endpoint": "chat/completions",
            "verb": verb,
            "run_id": run_id,
            "message_ids": [str(uuid7())],
            "params": {"temperature": 0.2},
            "tools": ["search"],
            "response_format": None,
            "fingerprint": f"{rng.getrandbits(256):064x}",
            "context_providers": [],
            "response": None if error else {"id": "chatcmpl-1", "choices": [{"finish_reason": "stop"}]},
            "usage": {
                "input_tokens": t_in,
                "output_tokens": t_out,
                "cost_usd": 0.0 if provider == "claude_code" else None,
            },
            "latency_ms": latency,
            "ttft_ms": round(latency * rng.uniform(0.1, 0.4), 3) if stream else None,
            "attempts": 1 + (rng.random() < 0.05),
            "status": "error" if error else "ok",
            "error_type": rng.choice(_ERRORS) if error else None,
            "error_message": "upstream said no" if error else None,
            "stream": stream,
        }
