"""Claude Code as a streaming model: ``claude -p PROMPT --output-format stream-json --verbose``.

Line types and what they become:

- ``system`` ``init`` -> ``system`` chunk with ``session_id``, ``model``, ``tools``;
  other ``system`` subtypes -> ``system`` chunk with ``subtype`` and the raw ``event``
  (no ``session_id`` key, so only ``init`` binds a session).
- ``assistant`` -> one chunk per content block: ``thinking``, ``text``, ``tool_use``
  (a ``tool_result`` block -> ``tool_result``). A synthetic assistant line carrying
  ``error`` (the CLI's own API error prose) is not text: its message is kept for the error.
- ``user`` -> ``tool_result`` chunks for its tool_result blocks.
- ``result`` -> ``result`` chunk (usage, cost, duration, turns, session id); when
  ``is_error`` is true it is followed by an ``error`` chunk with the classified ``kind``.
- ``rate_limit_event`` and ``stream_event`` lines, and unknown types, are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._subprocess import CLIAgentModel, CLIEventParser, usage_dict
from ._types import StreamChunk

__all__ = ["ClaudeCodeModel"]


class ClaudeCodeModel(CLIAgentModel):
    """Claude Code (the ``claude`` CLI) in print mode with streamed JSON output.

    Extra per-call options: ``max_turns`` (``--max-turns``, passed as given),
    ``permission_mode`` (``--permission-mode``), ``append_system_prompt``
    (``--append-system-prompt``).

    Example::

        model = ClaudeCodeModel("sonnet")
        async for chunk in model.stream("List the files"):
            print(chunk.type, chunk.content)
    """

    provider = "claude_code"
    env_var = "TURNLOG_CLAUDE_BIN"
    default_executable = "claude"
    option_keys = frozenset(
        {"cwd", "env", "extra_args", "model", "max_turns", "permission_mode", "append_system_prompt"}
    )

    def build_args(
        self, prompt: str, *, resume: str | None, model: str, options: Mapping[str, Any]
    ) -> list[str]:
        """``-p PROMPT --output-format stream-json --verbose [--model M] [--resume ID] [extra]``.

        A prompt that starts with ``-`` is passed after ``--`` so it is not read as an option.
        """
        dash = prompt.startswith("-")
        args = ["-p"] if dash else ["-p", prompt]
        args += ["--output-format", "stream-json", "--verbose"]
        if model:
            args += ["--model", model]
        if resume:
            args += ["--resume", resume]
        if options.get("max_turns") is not None:
            args += ["--max-turns", str(int(options["max_turns"]))]
        if options.get("permission_mode"):
            args += ["--permission-mode", str(options["permission_mode"])]
        if options.get("append_system_prompt"):
            args += ["--append-system-prompt", str(options["append_system_prompt"])]
        args += list(options.get("extra_args", ()))
        if dash:
            args += ["--", prompt]
        return args

    def new_parser(self, started: float) -> CLIEventParser:
        """A parser for one Claude Code run."""
        return _ClaudeParser(self.provider, started)


class _ClaudeParser(CLIEventParser):
    def __init__(self, provider: str, started: float) -> None:
        super().__init__(provider, started)
        self.model: str | None = None
        self.api_error: str | None = None

    def feed(self, event: dict[str, Any]) -> list[StreamChunk]:
        kind = event.get("type")
        if kind == "system":
            return [self._system(event)]
        if kind == "assistant":
            return self._assistant(event)
        if kind == "user":
            return self._user(event)
        if kind == "result":
            return self._result(event)
        return []

    def _system(self, event: dict[str, Any]) -> StreamChunk:
        if event.get("subtype") != "init":
            return StreamChunk("system", metadata={"subtype": event.get("subtype"), "event": event})
        self.session_id = event.get("session_id") or self.session_id
        self.model = event.get("model") or self.model
        return StreamChunk(
            "system",
            metadata={
                "subtype": "init",
                "session_id": self.session_id,
                "model": self.model,
                "tools": event.get("tools") or [],
                "cwd": event.get("cwd"),
                "cli_version": event.get("claude_code_version"),
            },
        )

    def _assistant(self, event: dict[str, Any]) -> list[StreamChunk]:
        message = event.get("message") or {}
        blocks = message.get("content") or []
        if event.get("error") is not None:
            # The CLI's synthetic line: the "text" is its error prose, not a model answer.
            self.api_error = str(event["error"])
            text = " ".join(b.get("text", "") for b in blocks if isinstance(b, dict)).strip()
            self.error_texts.append(text or self.api_error)
            return []
        meta: dict[str, Any] = {"message_id": message.get("id")}
        if event.get("parent_tool_use_id"):
            meta["parent_tool_use_id"] = event["parent_tool_use_id"]
        chunks: list[StreamChunk] = []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if btype == "text":
                chunks.append(StreamChunk("text", content=block.get("text") or "", metadata=dict(meta)))
            elif btype == "thinking":
                chunks.append(
                    StreamChunk(
                        "thinking",
                        content=block.get("thinking") or "",
                        metadata={**meta, "signature": block.get("signature")},
                    )
                )
            elif btype == "tool_use":
                chunks.append(
                    StreamChunk(
                        "tool_use",
                        tool_name=block.get("name"),
                        tool_id=block.get("id"),
                        tool_input=dict(block.get("input") or {}),
                        metadata=dict(meta),
                    )
                )
            elif btype == "tool_result":
                chunks.append(_tool_result(block, None))
        return chunks

    def _user(self, event: dict[str, Any]) -> list[StreamChunk]:
        content = (event.get("message") or {}).get("content")
        if not isinstance(content, list):
            return []  # a plain user text line (e.g. an interruption note)
        raw = event.get("tool_use_result")
        return [
            _tool_result(block, raw)
            for block in content
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]

    def _result(self, event: dict[str, Any]) -> list[StreamChunk]:
        self.finished = True
        self.session_id = event.get("session_id") or self.session_id
        usage = event.get("usage") or {}
        is_error = bool(event.get("is_error"))
        meta = {
            "session_id": self.session_id,
            "usage": usage_dict(
                usage.get("input_tokens"), usage.get("output_tokens"), event.get("total_cost_usd")
            ),
            "cost_usd": event.get("total_cost_usd"),
            "duration_ms": event.get("duration_ms"),
            "duration_api_ms": event.get("duration_api_ms"),
            "num_turns": event.get("num_turns"),
            "subtype": event.get("subtype"),
            "stop_reason": event.get("stop_reason"),
            "terminal_reason": event.get("terminal_reason"),
            "model": self.model,
            "raw_usage": usage,
            "model_usage": event.get("modelUsage"),
            "permission_denials": event.get("permission_denials") or [],
        }
        result_text = event.get("result")
        chunks = [
            StreamChunk(
                "result",
                content=result_text if isinstance(result_text, str) else "",
                is_error=is_error,
                metadata=meta,
            )
        ]
        if is_error:
            errors = [str(e) for e in event.get("errors") or []]
            text = "; ".join(errors) or (result_text if isinstance(result_text, str) else "")
            text = text or (self.error_texts[-1] if self.error_texts else f"result {event.get('subtype')}")
            chunks.append(
                self.error_chunk(
                    text,
                    subtype=event.get("subtype"),
                    terminal_reason=event.get("terminal_reason"),
                    api_error=self.api_error,
                    api_error_status=event.get("api_error_status"),
                )
            )
        return chunks


def _tool_result(block: dict[str, Any], raw: Any) -> StreamChunk:
    meta = {"tool_use_result": raw} if raw is not None else {}
    return StreamChunk(
        "tool_result",
        tool_id=block.get("tool_use_id"),
        tool_output=block.get("content"),
        is_error=bool(block.get("is_error")),
        metadata=meta,
    )
