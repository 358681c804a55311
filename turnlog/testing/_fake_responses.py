"""The OpenAI Responses API of the fake upstream: requests read, script entries rendered.

``POST /v1/responses`` answers a ``response`` object, or with ``"stream": true`` the SSE stream
the real API sends (each event an ``event:`` line and a ``data:`` line repeating ``type``, with a
``sequence_number``): ``response.created``, ``response.in_progress``, per output item
``response.output_item.added`` ... ``response.output_item.done`` (a ``reasoning`` item with
``response.reasoning_summary_text.delta``; a ``message`` item with ``response.content_part.added``,
``response.output_text.delta``, ``response.output_text.done``, ``response.content_part.done``; a
``function_call`` item with ``response.function_call_arguments.delta`` / ``.done``), and
``response.completed`` carrying the whole response and its ``usage``. Errors are
``{"error": {"message", "type", "param", "code"}}`` with the real status codes; an in-stream error
is ``response.failed``. This is what Codex (``wire_api = "responses"``) talks to.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ._fake_upstream_script import RequestView, UpstreamEntry, UpstreamError, fill_template
from ._fake_upstream_wire import Reply, fragments
from ._loopback import Frame, dumps, words

__all__ = ["error_reply", "reply", "view"]

_ERRORS = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided: sk-fa***key."),
    403: ("invalid_request_error", None, "You are not allowed to sample from this model."),
    404: (
        "invalid_request_error",
        "model_not_found",
        "The model does not exist or you do not have access to it.",
    ),
    429: ("tokens", "rate_limit_exceeded", "Rate limit reached. Please try again later."),
    500: ("server_error", None, "The server had an error while processing your request."),
    503: ("server_error", None, "The server is overloaded or not ready yet."),
}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "\n".join(
        str(part.get("text", ""))
        for part in parts
        if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text")
    )


def _is_context(text: str) -> bool:
    # Codex sends its environment and instructions as user messages wrapped in one XML-like tag.
    stripped = text.strip()
    return stripped.startswith("<") and stripped.endswith(">")


def view(body: Any) -> RequestView:
    """The request as matching and templates see it."""
    body = body if isinstance(body, dict) else {}
    raw = body.get("input")
    items = [{"type": "message", "role": "user", "content": raw}] if isinstance(raw, str) else list(raw or [])
    items = [i for i in items if isinstance(i, dict)]
    prompts = [
        _text_of(i.get("content"))
        for i in items
        if i.get("role") == "user" and i.get("type", "message") == "message"
    ]
    prompts = [p for p in prompts if not _is_context(p)]
    outputs: list[str] = []
    for item in reversed(items):
        if item.get("type") != "function_call_output":
            break
        output = item.get("output")
        outputs.insert(0, output if isinstance(output, str) else json.dumps(output))
    everything = str(body.get("instructions") or "") + " ".join(
        _text_of(i.get("content")) + str(i.get("output") or "") + str(i.get("arguments") or "") for i in items
    )
    return RequestView(
        api="responses",
        model=str(body.get("model") or ""),
        stream=bool(body.get("stream")),
        has_tools=bool(body.get("tools")),
        last_user_text=prompts[-1] if prompts else "",
        user_turns=len(prompts),
        tool_result="\n".join(outputs) if outputs else None,
        input_words=words(everything) + len(json.dumps(body.get("tools") or [])) // 40,
    )


class _Sequencer:
    def __init__(self) -> None:
        self.number = 0

    def frame(self, kind: str, payload: dict[str, Any], *, paced: bool = False) -> Frame:
        data = {"type": kind, "sequence_number": self.number, **payload}
        self.number += 1
        return Frame(f"event: {kind}\ndata: {dumps(data)}\n\n".encode(), paced)


def reply(entry: UpstreamEntry, request: RequestView, number: int) -> Reply:
    """The answer to a Responses request: JSON, or the SSE stream when the request streams."""
    text = fill_template(entry, request)
    items: list[dict[str, Any]] = []
    if entry.thinking:
        items.append(
            {
                "id": f"rs_fake{number:012d}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": entry.thinking}],
            }
        )
    if text or not (entry.tool_calls or entry.thinking):
        items.append(
            {
                "id": f"msg_fake{number:012d}",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
            }
        )
    for index, call in enumerate(entry.tool_calls):
        items.append(
            {
                "id": f"fc_fake{number:012d}{index:02d}",
                "type": "function_call",
                "status": "completed",
                "arguments": json.dumps(call.arguments, separators=(",", ":")),
                "call_id": call.id or f"call_fake{number:012d}{index:02d}",
                "name": call.name,
            }
        )
    given = entry.usage or {}
    out = words(text) + sum(len(i.get("arguments", "")) // 4 for i in items)
    input_tokens = given.get("input_tokens", max(request.input_words, 1))
    output_tokens = given.get("output_tokens", max(out, 1))
    usage = {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": given.get("cached_tokens", 0)},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": given.get("thinking_tokens", 0)},
        "total_tokens": input_tokens + output_tokens,
    }
    response = {
        "id": f"resp_fake{number:020d}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "model": entry.model or request.model or "gpt-fake",
        "output": items,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }
    headers = {"x-request-id": f"req_fake{number:020d}", **entry.headers}
    if not request.stream:
        return Reply(200, body=response, headers=headers)
    seq = _Sequencer()
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    frames = [
        seq.frame("response.created", {"response": pending}),
        seq.frame("response.in_progress", {"response": pending}),
    ]
    for index, item in enumerate(items):
        frames += _item_frames(seq, index, item, entry)
    tail = [seq.frame("response.completed", {"response": response})]
    error_frame = None
    if entry.stream_error is not None:
        failed = {
            **response,
            "status": "failed",
            "usage": None,
            "error": {
                "code": entry.stream_error.code or "server_error",
                "message": entry.stream_error.message,
            },
        }
        error_frame = seq.frame("response.failed", {"response": failed})
    return Reply(200, frames=frames + tail, headers=headers, error_frame=error_frame, tail=len(tail))


def _item_frames(seq: _Sequencer, index: int, item: dict[str, Any], entry: UpstreamEntry) -> list[Frame]:
    kind = item["type"]
    base = {"output_index": index}
    if kind == "message":
        text = item["content"][0]["text"]
        started = {**item, "status": "in_progress", "content": []}
        part = {"item_id": item["id"], **base, "content_index": 0}
        frames = [
            seq.frame("response.output_item.added", {**base, "item": started}),
            seq.frame(
                "response.content_part.added",
                {**part, "part": {"type": "output_text", "text": "", "annotations": []}},
            ),
        ]
        frames += [
            seq.frame("response.output_text.delta", {**part, "delta": piece, "logprobs": []}, paced=True)
            for piece in fragments(text, entry.chunk_chars)
            if piece
        ]
        frames += [
            seq.frame("response.output_text.done", {**part, "text": text, "logprobs": []}),
            seq.frame("response.content_part.done", {**part, "part": item["content"][0]}),
        ]
    elif kind == "reasoning":
        summary = item["summary"][0]["text"]
        part = {"item_id": item["id"], **base, "summary_index": 0}
        frames = [
            seq.frame("response.output_item.added", {**base, "item": {**item, "summary": []}}),
            seq.frame(
                "response.reasoning_summary_part.added",
                {**part, "part": {"type": "summary_text", "text": ""}},
            ),
        ]
        frames += [
            seq.frame("response.reasoning_summary_text.delta", {**part, "delta": piece}, paced=True)
            for piece in fragments(summary, entry.chunk_chars)
        ]
        frames += [
            seq.frame("response.reasoning_summary_text.done", {**part, "text": summary}),
            seq.frame("response.reasoning_summary_part.done", {**part, "part": item["summary"][0]}),
        ]
    else:
        started = {**item, "status": "in_progress", "arguments": ""}
        frames = [seq.frame("response.output_item.added", {**base, "item": started})]
        frames += [
            seq.frame(
                "response.function_call_arguments.delta",
                {"item_id": item["id"], **base, "delta": piece},
                paced=True,
            )
            for piece in fragments(item["arguments"], entry.chunk_chars or 12)
        ]
        frames.append(
            seq.frame(
                "response.function_call_arguments.done",
                {"item_id": item["id"], **base, "arguments": item["arguments"]},
            )
        )
    frames.append(seq.frame("response.output_item.done", {**base, "item": item}))
    return frames


def error_reply(
    status: int, error: UpstreamError | None, number: int, retry_after: float | None = None
) -> Reply:
    """An error answer with the real API's body shape and headers."""
    kind, code, message = _ERRORS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None, f"HTTP {status}")
    )
    if error is not None:
        kind, code, message = (
            error.type or kind,
            error.code if error.code is not None else code,
            error.message,
        )
    headers = {"x-request-id": f"req_fake{number:020d}"}
    if retry_after is not None:
        headers["retry-after"] = f"{retry_after:g}"
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return Reply(status, body=body, headers=headers)
