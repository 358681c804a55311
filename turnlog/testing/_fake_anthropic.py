"""The Anthropic Messages API of the fake upstream: requests read, script entries rendered.

``POST /v1/messages`` (Claude Code adds ``?beta=true``) answers a ``message`` JSON object, or with
``"stream": true`` the SSE stream the real API sends: ``message_start``, per content block
``content_block_start`` / ``content_block_delta`` (``thinking_delta`` + ``signature_delta``,
``text_delta``, ``input_json_delta``) / ``content_block_stop``, a ``ping`` after the first block
start, ``message_delta`` (``stop_reason``, cumulative ``usage``) and ``message_stop``; each event
has an ``event:`` line and a ``data:`` line repeating its ``type``, and there is no ``[DONE]``.
Errors use ``{"type": "error", "error": {"type", "message"}, "request_id"}`` with the real status
codes (401 ``authentication_error``, 429 ``rate_limit_error`` with ``retry-after``, 529
``overloaded_error``...). ``POST /v1/messages/count_tokens`` answers ``{"input_tokens": N}``.
"""

from __future__ import annotations

import json
from typing import Any

from ._fake_upstream_script import RequestView, UpstreamEntry, UpstreamError, fill_template
from ._fake_upstream_wire import Reply, fragments
from ._loopback import Frame, sse, words

__all__ = ["count_tokens", "error_reply", "reply", "view"]

_ERROR_TYPES = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    402: ("billing_error", "Your credit balance is too low to access the Anthropic API."),
    403: ("permission_error", "Your API key does not have permission to use the specified resource."),
    404: ("not_found_error", "The requested resource could not be found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "This request would exceed your organization's rate limit."),
    500: ("api_error", "Internal server error"),
    504: ("timeout_error", "Request timed out"),
    529: ("overloaded_error", "Overloaded"),
}


def _blocks_text(content: Any, *, kinds: tuple[str, ...] = ("text",)) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") in kinds:
            if block.get("type") == "tool_result":
                parts.append(_blocks_text(block.get("content")))
            else:
                parts.append(str(block.get("text", "")))
    return "\n".join(parts)


def _is_tool_result(message: Any) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def view(body: Any) -> RequestView:
    """The request as matching and templates see it."""
    body = body if isinstance(body, dict) else {}
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    users = [m for m in messages if m.get("role") == "user"]
    last = users[-1] if users else {}
    tool_result = _blocks_text(last.get("content"), kinds=("tool_result",)) if _is_tool_result(last) else None
    system = body.get("system")
    system_text = system if isinstance(system, str) else _blocks_text(system)
    all_text = system_text + " ".join(
        _blocks_text(m.get("content"), kinds=("text", "tool_result")) for m in messages
    )
    return RequestView(
        api="anthropic",
        model=str(body.get("model") or ""),
        stream=bool(body.get("stream")),
        has_tools=bool(body.get("tools")),
        last_user_text=_blocks_text(last.get("content")),
        user_turns=sum(1 for m in users if not _is_tool_result(m)),
        tool_result=tool_result,
        input_words=words(all_text) + len(json.dumps(body.get("tools") or [])) // 40,
    )


def count_tokens(body: Any) -> dict[str, Any]:
    """The ``count_tokens`` answer."""
    return {"input_tokens": max(view(body).input_words, 1)}


def _blocks(entry: UpstreamEntry, request: RequestView, number: int) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if entry.thinking:
        blocks.append({"type": "thinking", "thinking": entry.thinking, "signature": f"sig_fake{number:06d}"})
    text = fill_template(entry, request)
    if text or not (entry.tool_calls or entry.thinking):
        blocks.append({"type": "text", "text": text})
    for index, call in enumerate(entry.tool_calls):
        blocks.append(
            {
                "type": "tool_use",
                "id": call.id or f"toolu_fake{number:06d}{index:02d}",
                "name": call.name,
                "input": dict(call.arguments),
            }
        )
    return blocks


def _usage(entry: UpstreamEntry, request: RequestView, blocks: list[dict[str, Any]]) -> dict[str, int]:
    out = sum(
        words(b.get("text", "") or b.get("thinking", "")) + len(json.dumps(b.get("input", {}))) // 4
        for b in blocks
    )
    given = entry.usage or {}
    return {
        "input_tokens": given.get("input_tokens", max(request.input_words, 1)),
        "cache_creation_input_tokens": given.get("cache_creation_input_tokens", 0),
        "cache_read_input_tokens": given.get("cached_tokens", 0),
        "output_tokens": given.get("output_tokens", max(out, 1)),
    }


def reply(entry: UpstreamEntry, request: RequestView, number: int) -> Reply:
    """The answer to a Messages request: JSON, or the SSE stream when the request streams."""
    blocks = _blocks(entry, request, number)
    usage = _usage(entry, request, blocks)
    stop = entry.stop_reason or ("tool_use" if entry.tool_calls else "end_turn")
    message: dict[str, Any] = {
        "id": f"msg_fake{number:020d}",
        "type": "message",
        "role": "assistant",
        "model": entry.model or request.model or "claude-fake",
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {**usage, "service_tier": "standard"},
    }
    headers = {"request-id": f"req_fake{number:020d}", **entry.headers}
    if not request.stream:
        return Reply(200, body=message, headers=headers)
    start = {**message, "content": [], "stop_reason": None, "usage": {**message["usage"], "output_tokens": 1}}
    frames = [sse({"type": "message_start", "message": start}, event="message_start")]
    for index, block in enumerate(blocks):
        frames += _block_frames(index, block, entry)
        if index == 0:
            frames.insert(2, sse({"type": "ping"}, event="ping"))
    tail = [
        sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
            event="message_delta",
        ),
        sse({"type": "message_stop"}, event="message_stop"),
    ]
    return Reply(
        200,
        frames=frames + tail,
        headers=headers,
        error_frame=_stream_error(entry.stream_error) if entry.stream_error else None,
        tail=len(tail),
    )


def _block_frames(index: int, block: dict[str, Any], entry: UpstreamEntry) -> list[Frame]:
    kind = block["type"]
    empty: dict[str, dict[str, Any]] = {
        "text": {"type": "text", "text": ""},
        "thinking": {"type": "thinking", "thinking": "", "signature": ""},
    }
    start = empty.get(kind) or {**block, "input": {}}
    frames = [
        sse(
            {"type": "content_block_start", "index": index, "content_block": start},
            event="content_block_start",
        )
    ]

    def delta(payload: dict[str, Any]) -> Frame:
        return sse(
            {"type": "content_block_delta", "index": index, "delta": payload},
            event="content_block_delta",
            paced=True,
        )

    if kind == "text":
        frames += [
            delta({"type": "text_delta", "text": p}) for p in fragments(block["text"], entry.chunk_chars) if p
        ]
    elif kind == "thinking":
        frames += [
            delta({"type": "thinking_delta", "thinking": p})
            for p in fragments(block["thinking"], entry.chunk_chars)
        ]
        frames.append(delta({"type": "signature_delta", "signature": block["signature"]}))
    else:
        arguments = json.dumps(block["input"], separators=(",", ":"))
        frames.append(delta({"type": "input_json_delta", "partial_json": ""}))
        frames += [
            delta({"type": "input_json_delta", "partial_json": p})
            for p in fragments(arguments, entry.chunk_chars or 12)
        ]
    frames.append(sse({"type": "content_block_stop", "index": index}, event="content_block_stop"))
    return frames


def _stream_error(error: UpstreamError) -> Frame:
    body = {"type": "error", "error": {"type": error.type or "overloaded_error", "message": error.message}}
    return sse(body, event="error")


def error_reply(
    status: int, error: UpstreamError | None, number: int, retry_after: float | None = None
) -> Reply:
    """An error answer with the real API's body shape and headers."""
    kind, message = _ERROR_TYPES.get(
        status, ("api_error" if status >= 500 else "invalid_request_error", f"HTTP {status}")
    )
    if error is not None:
        kind, message = error.type or kind, error.message
    request_id = f"req_fake{number:020d}"
    headers = {
        "request-id": request_id,
        "x-should-retry": "true" if status in (408, 409, 429) or status >= 500 else "false",
    }
    if retry_after is not None:
        headers["retry-after"] = f"{retry_after:g}"
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}
    return Reply(status, body=body, headers=headers)
