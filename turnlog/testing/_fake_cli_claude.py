"""The fake Claude Code CLI (``claude -p``): its argv, its text/json/stream-json output, its errors."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Sequence
from typing import Any, NoReturn

from ._fake_cli_runner import (
    ArgvError,
    CLIExit,
    Renderer,
    Run,
    now_iso,
    parse_argv,
    random_token,
)

__all__ = ["run_claude"]


class _Claude(Renderer):
    """Claude Code's stream-json: one ``assistant`` line per finished content block.

    With ``--include-partial-messages`` each API message is also streamed as ``stream_event``
    lines carrying the Messages API events (``message_start``, ``content_block_start``, the
    ``*_delta`` events, ``content_block_stop`` after the block's ``assistant`` line,
    ``message_delta``, ``message_stop``), after a ``system/status`` ``requesting`` line. The
    script key ``chunk_lines`` restores the fake's former framing (one ``assistant`` line per
    text part), which the real CLI never prints.
    """

    def __init__(self, ctx: Run, sid: str, fmt: str, partial: bool) -> None:
        super().__init__(ctx)
        self.sid = sid
        self.fmt = fmt
        self.partial = partial
        self.msg_id = "msg_01" + random_token(22)
        self.turns = 1
        self.last_texts: list[str] = []
        self.open_message = False
        self.blocks = 0
        self.used_tool = False

    def emit(self, obj: dict[str, Any]) -> None:
        if self.fmt == "stream-json":
            self.out.json(obj)
        elif obj["type"] == "result":
            if self.fmt == "json":
                self.out.json(obj)
            else:
                self.out.raw(str(obj.get("result", "")))

    def _usage(self) -> dict[str, Any]:
        return {
            "input_tokens": self.ctx.input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": self.ctx.output_tokens,
            "service_tier": "standard",
        }

    def _event(self, event: dict[str, Any]) -> None:
        if self.partial:
            self.emit(
                {
                    "type": "stream_event",
                    "event": event,
                    "session_id": self.sid,
                    "parent_tool_use_id": None,
                    "uuid": str(uuid.uuid4()),
                }
            )

    def _begin_message(self) -> None:
        if self.open_message:
            return
        self.open_message = True
        self.blocks = 0
        self.used_tool = False
        if self.partial:
            self.emit(
                {
                    "type": "system",
                    "subtype": "status",
                    "status": "requesting",
                    "uuid": str(uuid.uuid4()),
                    "session_id": self.sid,
                }
            )
        start: dict[str, Any] = {
            "id": self.msg_id,
            "type": "message",
            "role": "assistant",
            "model": self.ctx.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**self._usage(), "output_tokens": 1},
        }
        self._event({"type": "message_start", "message": start})

    def _end_message(self) -> None:
        if not self.open_message:
            return
        self.open_message = False
        stop = "tool_use" if self.used_tool else "end_turn"
        self._event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": self.ctx.output_tokens},
            }
        )
        self._event({"type": "message_stop"})

    def _block(self, block: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        """One content block: its stream events (when partial) around its ``assistant`` line."""
        self._begin_message()
        index = self.blocks
        self.blocks += 1
        empty = {
            "text": {"type": "text", "text": ""},
            "thinking": {"type": "thinking", "thinking": "", "signature": ""},
        }.get(block["type"], {**block, "input": {}})
        self._event({"type": "content_block_start", "index": index, "content_block": empty})
        for delta in deltas:
            if self.partial:
                self._event({"type": "content_block_delta", "index": index, "delta": delta})
            elif self.out.delay > 0:
                time.sleep(self.out.delay)  # the CLI receives the delta but prints nothing yet
        self._assistant(block)
        self._event({"type": "content_block_stop", "index": index})

    def _assistant(self, block: dict[str, Any]) -> None:
        message = {
            "id": self.msg_id,
            "type": "message",
            "role": "assistant",
            "model": self.ctx.model,
            "content": [block],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self._usage(),
            "context_management": None,
        }
        self.emit(
            {
                "type": "assistant",
                "message": message,
                "parent_tool_use_id": None,
                "session_id": self.sid,
                "uuid": str(uuid.uuid4()),
                "timestamp": now_iso(),
            }
        )

    def start(self) -> None:
        self.emit(
            {
                "type": "system",
                "subtype": "init",
                "cwd": os.getcwd(),
                "session_id": self.sid,
                "tools": ["Task", "Bash", "Glob", "Grep", "Read", "Edit", "Write", "TodoWrite"],
                "mcp_servers": [],
                "model": self.ctx.model,
                "permissionMode": self.ctx.script.get("_permission_mode", "default"),
                "slash_commands": ["compact", "context", "cost", "init", "review"],
                "apiKeySource": "ANTHROPIC_API_KEY",
                "claude_code_version": "2.1.332",
                "output_style": "default",
                "agents": ["general-purpose", "Explore", "Plan"],
                "skills": [],
                "plugins": [],
                "uuid": str(uuid.uuid4()),
            }
        )

    def thinking(self, text: str) -> None:
        signature = "Eq" + random_token(30)
        block = {"type": "thinking", "thinking": text, "signature": signature}
        self._block(
            block,
            [
                {"type": "thinking_delta", "thinking": text},
                {"type": "signature_delta", "signature": signature},
            ],
        )

    def text(self, part: str) -> None:
        self.text_block([part])

    def text_block(self, parts: list[str]) -> None:
        if self.ctx.script.get("chunk_lines"):
            for part in parts:
                self.last_texts.append(part)
                self._begin_message()
                self._assistant({"type": "text", "text": part})
            return
        whole = "".join(parts)
        self.last_texts.append(whole)
        self._block({"type": "text", "text": whole}, [{"type": "text_delta", "text": p} for p in parts if p])

    def tool_use(self, name: str, tool_input: dict[str, Any], tool_id: str | None) -> None:
        call = {"id": tool_id or "toolu_01" + random_token(22), "name": name, "input": tool_input}
        self.pending.append(call)
        arguments = json.dumps(tool_input, separators=(",", ":"))
        pieces = [arguments[i : i + 12] for i in range(0, len(arguments), 12)]
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in ["", *pieces]]
        self._block({"type": "tool_use", **call}, deltas)
        self.used_tool = True

    def tool_result(self, call: dict[str, Any], output: Any, is_error: bool) -> None:
        self._end_message()
        block: dict[str, Any] = {"tool_use_id": call["id"], "type": "tool_result", "content": output}
        if is_error:
            block["is_error"] = True
        raw: Any = (
            {"stdout": output, "stderr": "", "interrupted": False, "isImage": False}
            if isinstance(output, str) and not is_error
            else (f"Error: {output}" if is_error else output)
        )
        self.emit(
            {
                "type": "user",
                "message": {"role": "user", "content": [block]},
                "parent_tool_use_id": None,
                "session_id": self.sid,
                "uuid": str(uuid.uuid4()),
                "timestamp": now_iso(),
                "tool_use_result": raw,
            }
        )
        # The next assistant line answers a new API call: new message id, one more turn.
        self.turns += 1
        self.msg_id = "msg_01" + random_token(22)
        self.last_texts = []

    def warning(self, message: str) -> None:
        self.out.err(message)

    def _result(self, **fields: Any) -> dict[str, Any]:
        elapsed = self.ctx.elapsed_ms()
        cost = self.ctx.script.get("cost_usd")
        if cost is None:
            cost = round(self.ctx.input_tokens * 3e-6 + self.ctx.output_tokens * 15e-6, 7)
        base: dict[str, Any] = {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "api_error_status": None,
            "duration_ms": elapsed,
            "duration_api_ms": int(elapsed * 0.9),
            "num_turns": self.turns,
            "result": "".join(self.last_texts),
            "stop_reason": "end_turn",
            "session_id": self.sid,
            "total_cost_usd": cost,
            "usage": {
                **self._usage(),
                "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
            },
            "modelUsage": {
                self.ctx.model: {
                    "inputTokens": self.ctx.input_tokens,
                    "outputTokens": self.ctx.output_tokens,
                    "cacheReadInputTokens": 0,
                    "cacheCreationInputTokens": 0,
                    "webSearchRequests": 0,
                    "costUSD": cost,
                    "contextWindow": 200000,
                    "maxOutputTokens": 64000,
                }
            },
            "permission_denials": [],
            "terminal_reason": "completed",
            "uuid": str(uuid.uuid4()),
        }
        base.update(fields)
        return {k: v for k, v in base.items() if v is not _DROP}

    def fail(self, kind: str, message: str | None) -> NoReturn:
        if kind == "max_turns":
            self.emit(
                self._result(
                    subtype="error_max_turns",
                    is_error=True,
                    result=_DROP,
                    stop_reason="tool_use",
                    terminal_reason="max_turns",
                    errors=[message or f"Reached maximum number of turns ({self.turns})"],
                )
            )
            raise CLIExit(1)
        code, status, default = {
            "auth": ("authentication_failed", 401, "Invalid API key · Fix external API key"),
            "rate_limit": (
                "rate_limit",
                429,
                "API Error: Request rejected (429) · This request would exceed your organization's rate limit.",
            ),
            "invalid_request": ("unknown", 400, "API Error: 400 Invalid request."),
            "overloaded": (
                "server_error",
                529,
                "API Error: 529 Overloaded. This is a server-side issue, usually temporary.",
            ),
        }.get(kind, ("server_error", 500, "API Error: 500 Internal server error"))
        text = message or default
        self.emit(
            {
                "type": "assistant",
                "message": {
                    "id": str(uuid.uuid4()),
                    "model": "<synthetic>",
                    "role": "assistant",
                    "stop_reason": "stop_sequence",
                    "stop_sequence": "",
                    "type": "message",
                    "usage": {"input_tokens": 0, "output_tokens": 0},
                    "content": [{"type": "text", "text": text}],
                },
                "parent_tool_use_id": None,
                "session_id": self.sid,
                "uuid": str(uuid.uuid4()),
                "timestamp": now_iso(),
                "error": code,
                "is_api_error_message": True,
                "api_error_status": status,
            }
        )
        self.emit(
            self._result(
                is_error=True,
                result=text,
                stop_reason="stop_sequence",
                total_cost_usd=0,
                api_error_status=status,
                terminal_reason="api_error",
            )
        )
        raise CLIExit(1)

    def finish(self) -> int:
        self._end_message()
        self.emit(self._result())
        return int(self.ctx.script.get("exit_code", 0))


_DROP = object()

_CLAUDE_FLAGS = {
    "-p": "print", "--print": "print", "--verbose": "verbose", "-c": "continue", "--continue": "continue",
    "--fork-session": "fork_session", "--include-partial-messages": "partial",
    "--dangerously-skip-permissions": "skip_permissions", "--replay-user-messages": "replay", "-d": "debug",
    "--debug": "debug",
}  # fmt: skip
_CLAUDE_VALUES = {
    "--output-format": "output_format", "--input-format": "input_format", "--model": "model",
    "--session-id": "session_id", "--max-turns": "max_turns", "--permission-mode": "permission_mode",
    "--append-system-prompt": "append_system_prompt", "--system-prompt": "system_prompt",
    "--allowedTools": "allowed_tools", "--disallowedTools": "disallowed_tools", "--max-budget-usd": "budget",
    "--add-dir": "add_dir", "--mcp-config": "mcp_config", "--settings": "settings", "--effort": "effort",
}  # fmt: skip


def run_claude(argv: Sequence[str], run: Run) -> int:
    """Validate ``claude`` argv like the real CLI, open or resume the session, play the script."""
    out = run.out
    opts, positional = parse_argv(
        argv,
        flags=_CLAUDE_FLAGS,
        values=_CLAUDE_VALUES,
        optional={"-r": "resume", "--resume": "resume"},
        unknown=lambda name: ArgvError(f"error: unknown option '{name}'", 1),
    )
    fmt = opts.get("output_format", "text")
    if not opts.get("print"):
        raise ArgvError("fake claude: only print mode (-p) is supported", 1)
    if fmt not in ("text", "json", "stream-json"):
        raise ArgvError(
            f"error: option '--output-format <format>' argument '{fmt}' is invalid. "
            "Allowed choices are text, json, stream-json.",
            1,
        )
    if fmt == "stream-json" and not opts.get("verbose"):
        raise ArgvError("Error: When using --print, --output-format=stream-json requires --verbose", 1)
    if opts.get("partial") and fmt != "stream-json":
        raise ArgvError(
            "Error: --include-partial-messages requires --print and --output-format=stream-json.", 1
        )
    if len(positional) > 1:
        raise ArgvError(f"error: too many arguments. Expected 1 argument but got {len(positional)}.", 1)
    if not positional or not positional[0].strip():
        raise ArgvError(
            "Error: Input must be provided either through stdin or as a prompt argument when using --print", 1
        )
    if opts.get("resume") is True:
        raise ArgvError("Error: --resume requires a session id when used with --print", 1)
    run.prompt = positional[0]
    if opts.get("model"):
        run.model = str(opts["model"])
    if opts.get("permission_mode"):
        run.script["_permission_mode"] = opts["permission_mode"]
    resume = opts.get("resume")
    if resume is None and opts.get("continue"):
        # --continue picks the most recent conversation of the current directory.
        here = [d for d in run.sessions.all() if d.get("cwd") == os.getcwd()]
        resume = here[-1]["id"] if here else None
    if resume is not None and run.sessions.get(str(resume)) is None:
        missing = f"No conversation found with session ID: {resume}"
        if fmt != "text":
            out.json(
                {
                    "type": "result",
                    "subtype": "error_during_execution",
                    "duration_ms": 0,
                    "duration_api_ms": 0,
                    "is_error": True,
                    "num_turns": 0,
                    "session_id": resume,
                    "total_cost_usd": 0,
                    "usage": {"input_tokens": 0, "output_tokens": 0},
                    "modelUsage": {},
                    "permission_denials": [],
                    "uuid": str(uuid.uuid4()),
                    "errors": [missing],
                }
            )
        out.err(missing)
        return 1
    if resume is not None and not opts.get("fork_session"):
        sid = str(resume)
    else:
        sid = str(opts.get("session_id") or run.script.get("session_id") or uuid.uuid4())
    run.open_session(sid, resumed=resume is not None and not opts.get("fork_session"))
    return run.play(_Claude(run, sid, fmt, bool(opts.get("partial"))))
