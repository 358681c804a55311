"""Readers of the CLIs' own session records, for reconciliation after a crash.

Each CLI keeps its own copy of a conversation, written as the conversation goes:

- **Claude Code**: ``<config dir>/projects/<cwd with every character other than a letter
  or digit replaced by "-">/<session id>.jsonl`` (config dir: ``$CLAUDE_CONFIG_DIR``, else
  ``~/.claude``); one JSON line per user message, tool result and finished assistant content
  block (``{"type": "assistant", "message": {...}, "timestamp": ...}``).
- **Codex**: ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl``
  (``CODEX_HOME`` defaults to ``~/.codex``); ``response_item`` lines (messages, function
  calls and their outputs, reasoning) and ``event_msg`` lines (``token_count`` with the
  session's running ``total_token_usage``).
- **Gemini CLI**: ``~/.gemini/tmp/<project>/chats/session-<time>-<id prefix>.json`` (one JSON
  object with ``sessionId`` and ``messages``; a JSON-lines variant is read too).

``read_session`` turns the part of a record written since a given time into ``SessionItem``
objects (text, thinking, tool calls, tool results), in order. Readers are tolerant: a line
or field they do not know is skipped, never an error; a record that cannot be found is
``None``. Everything here is a best effort over files another program owns; the caller
records whether reconciliation happened.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "SessionItem",
    "SessionRecord",
    "cli_home",
    "codex_usage_total",
    "find_session_file",
    "read_session",
    "shown_path",
]


@dataclass(frozen=True, slots=True)
class SessionItem:
    """One thing a CLI's session record holds.

    Attributes:
        kind: ``text``, ``thinking``, ``tool_use`` or ``tool_result``.
        text: The text (text and thinking).
        tool_id: The call id (tool_use, tool_result).
        tool_name: The tool (tool_use).
        tool_input: The arguments (tool_use).
        tool_output: The output (tool_result).
        is_error: An error result.
        at: When the CLI wrote it, when the record says.
    """

    kind: str
    text: str = ""
    tool_id: str | None = None
    tool_name: str | None = None
    tool_input: dict[str, Any] = field(default_factory=dict)
    tool_output: Any = None
    is_error: bool = False
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """The part of a CLI session record written since a point in time.

    Attributes:
        provider: The provider.
        path: The file read.
        items: What it holds, in order.
    """

    provider: str
    path: str
    items: tuple[SessionItem, ...]


def cli_home(provider: str, env: Mapping[str, str]) -> str | None:
    """The directory where ``provider`` keeps its sessions, for a child with environment ``env``."""
    home = env.get("HOME") or os.path.expanduser("~")
    if provider == "claude_code":
        return env.get("CLAUDE_CONFIG_DIR") or os.path.join(home, ".claude")
    if provider == "codex":
        return env.get("CODEX_HOME") or os.path.join(home, ".codex")
    if provider == "gemini":
        base = env.get("GEMINI_CLI_HOME") or home
        return os.path.join(base, ".gemini")
    return None


def _claude_dir_name(cwd: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


def find_session_file(provider: str, home: str, session_id: str, cwd: str | None = None) -> Path | None:
    """The file of session ``session_id`` under ``home`` (see the module docstring), or None."""
    root = Path(home)
    if not session_id or not root.is_dir():
        return None
    if provider == "claude_code":
        if cwd:
            direct = root / "projects" / _claude_dir_name(cwd) / f"{session_id}.jsonl"
            if direct.is_file():
                return direct
        return next(iter(sorted((root / "projects").glob(f"*/{session_id}.jsonl"))), None)
    if provider == "codex":
        return next(iter(sorted((root / "sessions").glob(f"**/rollout-*{session_id}.jsonl"))), None)
    if provider == "gemini":
        for path in sorted((root / "tmp").glob("*/chats/*")):
            if path.suffix in (".json", ".jsonl") and _gemini_session_id(path) == session_id:
                return path
    return None


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    for raw in path.read_bytes().splitlines():
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue  # a torn last line, or something else: skipped
        if isinstance(value, dict):
            yield value


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict) and part.get("text")
        )
    return ""


# ------------------------------------------------------------------------------------- claude


def _claude_items(path: Path) -> Iterator[SessionItem]:
    for line in _lines(path):
        kind = line.get("type")
        message = line.get("message")
        if kind not in ("assistant", "user") or not isinstance(message, dict):
            continue
        at = _time(line.get("timestamp"))
        blocks = message.get("content")
        if not isinstance(blocks, list) or line.get("isApiErrorMessage") or line.get("error"):
            continue
        for block in blocks:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if kind == "assistant" and btype == "text" and block.get("text"):
                yield SessionItem("text", text=str(block["text"]), at=at)
            elif kind == "assistant" and btype == "thinking" and block.get("thinking"):
                yield SessionItem("thinking", text=str(block["thinking"]), at=at)
            elif kind == "assistant" and btype == "tool_use":
                yield SessionItem(
                    "tool_use",
                    tool_id=block.get("id"),
                    tool_name=block.get("name"),
                    tool_input=dict(block.get("input") or {}),
                    at=at,
                )
            elif kind == "user" and btype == "tool_result":
                yield SessionItem(
                    "tool_result",
                    tool_id=block.get("tool_use_id"),
                    tool_output=block.get("content"),
                    is_error=bool(block.get("is_error")),
                    at=at,
                )


# -------------------------------------------------------------------------------------- codex


def _codex_items(path: Path) -> Iterator[SessionItem]:
    for line in _lines(path):
        payload = line.get("payload")
        if line.get("type") != "response_item" or not isinstance(payload, dict):
            continue
        at = _time(line.get("timestamp"))
        ptype = payload.get("type")
        if ptype == "message" and payload.get("role") == "assistant":
            text = _text_of(payload.get("content"))
            if text:
                yield SessionItem("text", text=text, at=at)
        elif ptype == "reasoning":
            summary = payload.get("summary")
            text = _text_of(summary) if isinstance(summary, list) else ""
            if text:
                yield SessionItem("thinking", text=text, at=at)
        elif ptype in ("function_call", "custom_tool_call", "local_shell_call"):
            raw = payload.get("arguments", payload.get("input", payload.get("action")))
            if isinstance(raw, str):
                try:
                    raw = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    raw = {"arguments": raw}
            yield SessionItem(
                "tool_use",
                tool_id=payload.get("call_id") or payload.get("id"),
                tool_name=payload.get("name") or ptype,
                tool_input=raw if isinstance(raw, dict) else {"arguments": raw},
                at=at,
            )
        elif ptype in ("function_call_output", "custom_tool_call_output"):
            output = payload.get("output")
            if isinstance(output, dict):
                output = output.get("content", output)
            yield SessionItem("tool_result", tool_id=payload.get("call_id"), tool_output=output, at=at)


def codex_usage_total(home: str, thread_id: str) -> dict[str, int] | None:
    """The session's running token totals as the rollout last recorded them (None: unknown)."""
    path = find_session_file("codex", home, thread_id)
    if path is None:
        return None
    total: dict[str, int] | None = None
    for line in _lines(path):
        payload = line.get("payload")
        if line.get("type") != "event_msg" or not isinstance(payload, dict):
            continue
        info = payload.get("info") if payload.get("type") == "token_count" else None
        usage = info.get("total_token_usage") if isinstance(info, dict) else None
        if isinstance(usage, dict):
            total = {k: v for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}
    return total


# ------------------------------------------------------------------------------------- gemini


def _gemini_document(path: Path) -> dict[str, Any] | None:
    try:
        value = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        value = None
    if isinstance(value, dict):
        return value
    # A JSON-lines chat: a header line with the session id, then message lines (a later line
    # with the same id updates the message) and ``{"$set": {...}}`` patches of the document.
    lines = list(_lines(path)) if path.is_file() else []
    if not lines:
        return None
    head = next((line for line in lines if "sessionId" in line), {})
    messages: dict[str, dict[str, Any]] = {}
    for index, line in enumerate(lines):
        patch = line.get("$set")
        if isinstance(patch, dict) and isinstance(patch.get("messages"), list):
            messages = {
                str(m.get("id", i)): m for i, m in enumerate(patch["messages"]) if isinstance(m, dict)
            }
        elif line.get("type") in ("user", "gemini", "model"):
            messages[str(line.get("id", f"line-{index}"))] = line
    return {"sessionId": head.get("sessionId"), "messages": list(messages.values())}


def _gemini_session_id(path: Path) -> str | None:
    document = _gemini_document(path)
    value = document.get("sessionId") if document else None
    return value if isinstance(value, str) else None


def _gemini_items(path: Path) -> Iterator[SessionItem]:
    document = _gemini_document(path) or {}
    for message in document.get("messages") or []:
        if not isinstance(message, dict) or message.get("type") not in ("gemini", "model"):
            continue
        at = _time(message.get("timestamp"))
        for thought in message.get("thoughts") or []:
            if isinstance(thought, dict) and thought.get("description"):
                yield SessionItem("thinking", text=str(thought["description"]), at=at)
        for call in message.get("toolCalls") or []:
            if not isinstance(call, dict):
                continue
            yield SessionItem(
                "tool_use",
                tool_id=call.get("id"),
                tool_name=call.get("name"),
                tool_input=dict(call.get("args") or {}),
                at=at,
            )
            if call.get("status") in ("success", "error") or call.get("result") is not None:
                yield SessionItem(
                    "tool_result",
                    tool_id=call.get("id"),
                    tool_output=call.get("resultDisplay", call.get("result")),
                    is_error=call.get("status") == "error",
                    at=at,
                )
        text = _text_of(message.get("content"))
        if text:
            yield SessionItem("text", text=text, at=at)


_READERS = {"claude_code": _claude_items, "codex": _codex_items, "gemini": _gemini_items}


def read_session(
    provider: str, home: str, session_id: str, *, cwd: str | None = None, since: datetime | None = None
) -> SessionRecord | None:
    """What the CLI's record of ``session_id`` holds from ``since`` on (None: no record found).

    Items without a time are kept when ``since`` is None only.
    """
    reader = _READERS.get(provider)
    if reader is None:
        return None
    path = find_session_file(provider, home, session_id, cwd)
    if path is None:
        return None
    try:
        items = [item for item in reader(path) if since is None or (item.at is not None and item.at >= since)]
    except OSError:
        return None
    return SessionRecord(provider, str(path), tuple(items))


def shown_path(path: str, root: str | None = None) -> str:
    """``path`` as the log records it: relative to the CLI's session ``root``, or with ``~``.

    Inside ``root`` the path is given relative to it; elsewhere the home directory is written
    ``~``. The log outlives the machine and travels (exports, imports, shared stores): a user's home
    directory in it says who ran it and where, and is no use to anyone reading it elsewhere.
    """
    if root is not None:
        try:
            inside = os.path.relpath(path, root)
        except ValueError:  # pragma: no cover - another drive (Windows)
            inside = ""
        if inside and not inside.startswith(os.pardir) and not os.path.isabs(inside):
            return inside
    home = os.path.expanduser("~")
    if home not in ("", "/", "~") and (path == home or path.startswith(home.rstrip(os.sep) + os.sep)):
        return "~" + path[len(home.rstrip(os.sep)) :]
    return path
