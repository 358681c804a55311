"""Claude Code as a streaming model: ``claude -p PROMPT --output-format stream-json --verbose``.

Runs with ``--include-partial-messages`` (unless ``partial_messages=False``): Claude Code
prints one ``assistant`` line per *finished* content block, so without the partial
messages a crash mid-block would lose the whole block; with them, every text and thinking
delta is a chunk the moment the CLI prints it.

Line types and what they become:

- ``system`` ``init`` -> ``system`` chunk with ``session_id``, ``model``, ``tools``, ``cwd``;
  other ``system`` subtypes (``api_retry``, ...) -> ``system`` chunk with ``subtype`` and the
  raw ``event`` (no ``session_id`` key, so only ``init`` binds a session); ``status`` lines
  (``requesting`` before each API request) are skipped.
- ``stream_event`` (partial messages): ``text_delta`` -> ``text`` chunk and ``thinking_delta``
  -> ``thinking`` chunk, with ``is_delta`` (and no metadata: deltas are the hot path); the other Messages-API
  events (block starts and stops, ``input_json_delta``, ``message_delta``) make no chunk.
- ``assistant`` -> one chunk per content block, *reconciled* with the deltas streamed for the
  same message and block kind: when the block's text is exactly the deltas, nothing more is
  emitted (no duplicated text); when the deltas are a prefix of it, the rest is a ``text``
  chunk with ``metadata["reconciled"] = "suffix"``; when they disagree, a ``text`` chunk
  holding the whole final block with ``metadata["reconciled"] = "replace"`` and
  ``metadata["streamed"]`` (what the deltas said) -- the assembler then replaces the
  streamed text and records the mismatch on the response. ``tool_use`` blocks come from
  here (their input complete). A synthetic assistant line carrying ``error`` (the CLI's own
  API error prose) is not text: its message is kept for the error.
- ``user`` -> ``tool_result`` chunks for its tool_result blocks.
- ``result`` -> ``result`` chunk (usage, cost, duration, turns, session id); when
  ``is_error`` is true (Claude reports API errors as subtype ``success`` with ``is_error``)
  it is followed by an ``error`` chunk classified from its text and ``api_error_status``.
- ``rate_limit_event`` lines and unknown types are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._subprocess import CLIAgentModel, CLIEventParser, usage_dict
from ._types import StreamChunk

__all__ = ["ClaudeCodeModel"]


class ClaudeCodeModel(CLIAgentModel):
    """Claude Code (the ``claude`` CLI) in print mode with streamed JSON output.

    Args:
        model: The model (``--model``); "" leaves the CLI's default.
        partial_messages: Pass ``--include-partial-messages`` so that text arrives as deltas.
        **kwargs: The ``CLIAgentModel`` arguments.

    Extra per-call options: ``max_turns`` (``--max-turns``, passed as given),
    ``permission_mode`` (``--permission-mode``), ``append_system_prompt``
    (``--append-system-prompt``: guidance added to Claude Code's own system prompt).

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
    system_prompt_option = "append_system_prompt"

    def __init__(self, model: str = "", *, partial_messages: bool = True, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.partial_messages = partial_messages

    def build_args(
        self, prompt: str, *, resume: str | None, model: str, options: Mapping[str, Any]
    ) -> list[str]:
        """``-p PROMPT --output-format stream-json --verbose [--include-partial-messages] [...]``.

        Then ``[--model M] [--resume ID] [--max-turns N] [--permission-mode P]
        [--append-system-prompt TEXT] [extra]``.

        A prompt that starts with ``-`` is passed after ``--`` so it is not read as an option.
        """
        dash = prompt.startswith("-")
        args = ["-p"] if dash else ["-p", prompt]
        args += ["--output-format", "stream-json", "--verbose"]
        if self.partial_messages:
            args.append("--include-partial-messages")
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


@dataclass(slots=True)
class _Streamed:
    """The deltas of one content block (by message id and block index)."""

    kind: str  # "text" or "thinking"
    parts: list[str] = field(default_factory=list)


class _ClaudeParser(CLIEventParser):
    def __init__(self, provider: str, started: float) -> None:
        super().__init__(provider, started)
        self.model: str | None = None
        self.api_error: str | None = None
        self.message_id: str | None = None
        # Streamed blocks not yet matched with their final assistant line, in block order.
        self.streamed: dict[str, dict[int, _Streamed]] = {}

    def feed(self, event: dict[str, Any]) -> list[StreamChunk]:
        kind = event.get("type")
        if kind == "stream_event":
            return self._stream_event(event)
        if kind == "system":
            if event.get("subtype") == "status":
                return []  # "requesting" before each API request: progress, not content
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
            if event.get("subtype") == "api_retry" and isinstance(event.get("error_status"), int):
                self.http_status = event["error_status"]
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

    def _stream_event(self, event: dict[str, Any]) -> list[StreamChunk]:
        raw = event.get("event")
        if not isinstance(raw, dict):
            return []
        etype = raw.get("type")
        if etype == "message_start":
            message = raw.get("message") or {}
            self.message_id = message.get("id") if isinstance(message, dict) else None
            return []
        if etype != "content_block_delta":
            return []
        delta = raw.get("delta") or {}
        dtype = delta.get("type") if isinstance(delta, dict) else None
        if dtype == "text_delta":
            kind, text = "text", delta.get("text")
        elif dtype == "thinking_delta":
            kind, text = "thinking", delta.get("thinking")
        else:
            return []  # input_json_delta, signature_delta, citations: the final block has them
        if not isinstance(text, str) or not text:
            return []
        index = raw.get("index")
        if not isinstance(index, int):
            index = -1
        blocks = self.streamed.setdefault(self.message_id or "", {})
        block = blocks.setdefault(index, _Streamed(kind))
        block.parts.append(text)
        # A delta is the hot path of a stream: no metadata unless it belongs to a subagent.
        if event.get("parent_tool_use_id"):
            meta = {"parent_tool_use_id": event["parent_tool_use_id"]}
            return [StreamChunk(kind, content=text, is_delta=True, metadata=meta)]  # type: ignore[arg-type]
        return [StreamChunk(kind, content=text, is_delta=True)]  # type: ignore[arg-type]

    def _take_streamed(self, message_id: str, kind: str) -> _Streamed | None:
        """The first streamed block of ``kind`` of the message not yet reconciled."""
        blocks = self.streamed.get(message_id)
        if not blocks:
            return None
        for index in sorted(blocks):
            if blocks[index].kind == kind:
                return blocks.pop(index)
        return None

    def _reconciled(self, kind: str, final: str, meta: dict[str, Any]) -> list[StreamChunk]:
        """The chunks a finished text/thinking block adds to what its deltas said."""
        streamed = self._take_streamed(str(meta.get("message_id") or ""), kind)
        if streamed is None:
            return [StreamChunk(kind, content=final, metadata=meta)]  # type: ignore[arg-type]
        said = "".join(streamed.parts)
        if said == final:
            return []
        if final.startswith(said):
            rest = {**meta, "reconciled": "suffix"}
            return [StreamChunk(kind, content=final[len(said) :], metadata=rest)]  # type: ignore[arg-type]
        replace = {**meta, "reconciled": "replace", "streamed": said}
        return [StreamChunk(kind, content=final, metadata=replace)]  # type: ignore[arg-type]

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
                chunks += self._reconciled("text", block.get("text") or "", dict(meta))
            elif btype == "thinking":
                thinking_meta = {**meta, "signature": block.get("signature")}
                chunks += self._reconciled("thinking", block.get("thinking") or "", thinking_meta)
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
        if isinstance(event.get("api_error_status"), int):
            self.http_status = event["api_error_status"]
        meta = {
            "session_id": self.session_id,
            "usage": _usage(usage, event.get("total_cost_usd")),
            "cost_usd": event.get("total_cost_usd"),
            "duration_ms": event.get("duration_ms"),
            "duration_api_ms": event.get("duration_api_ms"),
            "num_turns": event.get("num_turns"),
            "subtype": event.get("subtype"),
            "stop_reason": event.get("stop_reason"),
            "terminal_reason": event.get("terminal_reason"),
            "api_error_status": event.get("api_error_status"),
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


def _usage(usage: dict[str, Any], cost: Any) -> dict[str, Any]:
    """The result's usage as ``Usage`` counts it (cache reads and writes are input tokens).

    The Messages API counts cache reads and writes apart from ``input_tokens``; a Claude Code
    run reads most of its prompt from the cache, so leaving them out would show a fraction of
    the tokens it was charged for.
    """
    read, write = usage.get("cache_read_input_tokens"), usage.get("cache_creation_input_tokens")
    given = usage.get("input_tokens")
    if isinstance(given, int) and not isinstance(given, bool):
        given += sum(v for v in (read, write) if isinstance(v, int) and not isinstance(v, bool))
    return usage_dict(
        given, usage.get("output_tokens"), cost, cache_read_tokens=read, cache_write_tokens=write
    )
