"""The Chat Completions wire format read back: usage objects and streamed chunks.

All of it is pure (no I/O). ``StreamAssembly`` folds ``chat.completion.chunk`` objects into
one ``chat.completion``: ``OpenAIChatModel`` feeds it the decoded SSE payloads and hands the
pieces it completes (text deltas, finished tool calls) to the caller's chunk sink.
"""

from __future__ import annotations

from typing import Any

import orjson

from ._http import number, scrubbed
from ._secrets import Scrubber
from ._types import ModelResponse, StreamChunk, Usage

__all__ = ["StreamAssembly", "result_chunk", "usage_of"]


def usage_of(raw: Any) -> Usage:
    """The ``Usage`` of a Chat Completions ``usage`` object (empty when there is none)."""
    if not isinstance(raw, dict):
        return Usage()
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    return Usage(
        input_tokens=prompt if isinstance(prompt, int) else None,
        output_tokens=completion if isinstance(completion, int) else None,
        # OpenRouter and LiteLLM report the billed cost in the usage object.
        cost_usd=number(raw.get("cost")),
    )


def result_chunk(answer: ModelResponse) -> StreamChunk:
    """The closing ``result`` chunk of a streamed call: usage, finish reason, served model."""
    return StreamChunk(
        type="result",
        content=answer.text,
        metadata={
            "usage": answer.usage.to_dict(),
            "finish_reason": answer.finish_reason,
            "model": answer.model,
        },
    )


class StreamAssembly:
    """Folds ``chat.completion.chunk`` objects into one ``chat.completion`` object."""

    def __init__(self, model: str) -> None:
        self._model = model
        self.chunks = 0
        self._head: dict[str, Any] = {}
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: Any = None
        self._pieces: list[StreamChunk] = []
        self._emitted_calls = 0
        self._annotations: list[Any] = []

    def add(self, chunk: dict[str, Any]) -> bool:
        """Fold one chunk; True when it carried output (text, refusal or a tool-call fragment)."""
        self.chunks += 1
        if not self._head:
            self._head = {k: chunk[k] for k in ("id", "created", "model", "system_fingerprint") if k in chunk}
        if chunk.get("usage"):
            self._usage = chunk["usage"]
        output = False
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            output = self._add_delta(delta) or output
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
                self._calls_done(len(self._calls))
        return output

    def take_pieces(self, scrub: Scrubber) -> list[StreamChunk]:
        """The chunks completed since the last call (text deltas, finished tool calls)."""
        pieces, self._pieces = self._pieces, []
        return [scrubbed(p, scrub) for p in pieces]

    def _calls_done(self, upto: int) -> None:
        """Tool calls with an index below ``upto`` are complete: one ``tool_use`` chunk each."""
        for index in sorted(self._calls)[self._emitted_calls : upto]:
            call = self._calls[index]
            text = "".join(call["arguments"])
            try:
                arguments = orjson.loads(text) if text.strip() else {}
            except orjson.JSONDecodeError:
                arguments = {"_raw": text}
            self._pieces.append(
                StreamChunk(
                    type="tool_use",
                    tool_name=call["name"],
                    tool_id=call["id"] or None,
                    tool_input=arguments if isinstance(arguments, dict) else {"_raw": text},
                )
            )
            self._emitted_calls += 1

    def _add_delta(self, delta: dict[str, Any]) -> bool:
        output = False
        if delta.get("content"):
            self._text.append(delta["content"])
            self._pieces.append(StreamChunk(type="text", content=delta["content"], is_delta=True))
            output = True
        if delta.get("refusal"):
            self._refusal.append(delta["refusal"])
            output = True
        if isinstance(delta.get("annotations"), list):
            self._annotations.extend(delta["annotations"])
        for fragment in delta.get("tool_calls") or []:
            index = int(fragment.get("index", 0))
            if index not in self._calls:
                self._calls_done(len(self._calls))  # a new call starts: the ones before it are complete
            call = self._calls.setdefault(index, {"id": "", "type": "function", "name": "", "arguments": []})
            call["id"] = fragment.get("id") or call["id"]
            function = fragment.get("function") or {}
            call["name"] = function.get("name") or call["name"]
            call["arguments"].append(function.get("arguments") or "")
            output = True
        return output

    def completion(self) -> dict[str, Any]:
        """The assembled object, shaped like a non-streamed ``chat.completion``."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self._text) if self._text or not self._calls else None,
            "refusal": "".join(self._refusal) if self._refusal else None,
            "annotations": self._annotations,
        }
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": call["type"],
                    "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
                }
                for _, call in sorted(self._calls.items())
            ]
        return {
            **self._head,
            "object": "chat.completion",
            "model": self._head.get("model", self._model),
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
            "usage": self._usage,
        }
