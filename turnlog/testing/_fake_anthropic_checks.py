"""The request rules of the real Messages API, checked by the fake upstream before it answers.

A request the real API refuses is refused here too, with its status (400), its error type
(``invalid_request_error``) and the wording of its message, so that a client's request bug
shows in the tests instead of on the first real call:

- ``model``, ``max_tokens`` and a non-empty ``messages`` list are required; a top-level field
  the API does not know is refused (requests with ``?beta=true`` or an ``anthropic-beta``
  header may carry beta fields, so they skip that one rule);
- a message's role is ``user``, ``assistant`` or ``system``;
- each ``tool_result`` answers a ``tool_use`` of the assistant turn right before it, and each
  ``tool_use`` is answered in the next message;
- with ``thinking`` enabled, an assistant turn whose tool calls are being answered starts
  with its ``thinking`` / ``redacted_thinking`` block (signature included);
- Claude 4.1 and later take ``temperature`` or ``top_p``, not both.
"""

from __future__ import annotations

import re
from typing import Any

from ._fake_upstream_script import UpstreamError

__all__ = ["FIELDS", "problem"]

#: The top-level fields of a Messages request (``anthropic-version: 2023-06-01`` and the 2.x SDK).
FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "metadata",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "tools",
        "tool_choice",
        "thinking",
        "service_tier",
        "container",
        "inference_geo",
        "output_config",
        "cache_control",
    }
)
_ROLES = ("user", "assistant", "system")
_LATER_CLAUDE = re.compile(r"claude-(?:opus-|sonnet-|haiku-)?(\d+)(?:-(\d{1,2}))?(?:-|$|@)")


def _invalid(message: str) -> UpstreamError:
    return UpstreamError(type="invalid_request_error", message=message)


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _ids(message: dict[str, Any], kind: str, key: str) -> list[str]:
    return [str(b.get(key)) for b in _blocks(message) if b.get("type") == kind]


def problem(body: Any, *, beta: bool = False) -> UpstreamError | None:
    """What the real API would refuse in ``body`` (None: nothing)."""
    if not isinstance(body, dict):
        return _invalid("The request body is not valid JSON.")
    if not beta:
        for name in body:
            if name not in FIELDS:
                return _invalid(f"{name}: Extra inputs are not permitted")
    for name in ("model", "max_tokens", "messages"):
        if name not in body:
            return _invalid(f"{name}: Field required")
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return _invalid("messages: at least one message is required")
    return _roles(messages) or _tool_pairs(messages) or _thinking(body, messages) or _sampling(body)


def _roles(messages: list[Any]) -> UpstreamError | None:
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in _ROLES:
            return _invalid(f"messages.{i}.role: Input should be 'user', 'assistant' or 'system'")
        if role == "assistant" and _ids(message, "tool_result", "tool_use_id"):
            return _invalid(f"messages.{i}: `tool_result` blocks can only be in `user` messages")
    return None


def _tool_pairs(messages: list[dict[str, Any]]) -> UpstreamError | None:
    for i, message in enumerate(messages):
        results = _ids(message, "tool_result", "tool_use_id")
        before = messages[i - 1] if i else {}
        asked = _ids(before, "tool_use", "id") if before.get("role") == "assistant" else []
        stray = [r for r in results if r not in asked]
        if stray:
            return _invalid(
                f"messages.{i}.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{stray[0]}. Each `tool_result` block must have a corresponding `tool_use` block in "
                "the previous message."
            )
        if message.get("role") == "assistant":
            calls = _ids(message, "tool_use", "id")
            after = messages[i + 1] if i + 1 < len(messages) else None
            answered = _ids(after, "tool_result", "tool_use_id") if after is not None else []
            missing = [c for c in calls if c not in answered]
            if calls and after is not None and missing:
                return _invalid(
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                    f"after: {missing[0]}. Each `tool_use` block must have a corresponding `tool_result` "
                    "block in the next message."
                )
    return None


def _thinking(body: dict[str, Any], messages: list[dict[str, Any]]) -> UpstreamError | None:
    thinking = body.get("thinking")
    if not (isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")):
        return None
    last = messages[-1]
    if not _ids(last, "tool_result", "tool_use_id") or len(messages) < 2:
        return None
    i = len(messages) - 2
    blocks = _blocks(messages[i])
    first = blocks[0] if blocks else {}
    if first.get("type") == "thinking" and first.get("signature"):
        return None
    if first.get("type") == "redacted_thinking" and first.get("data"):
        return None
    found = first.get("type", "nothing")
    return _invalid(
        f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{found}`. "
        "When `thinking` is enabled, a final `assistant` message must start with a thinking block "
        "(preceeding the lastmost set of `tool_use` and `tool_result` blocks)."
    )


def _sampling(body: dict[str, Any]) -> UpstreamError | None:
    if "temperature" not in body or "top_p" not in body:
        return None
    found = _LATER_CLAUDE.search(str(body.get("model") or ""))
    if found is None or (int(found.group(1)), int(found.group(2) or 0)) < (4, 1):
        return None
    return _invalid("`temperature` and `top_p` cannot both be specified for this model. Please use only one.")
