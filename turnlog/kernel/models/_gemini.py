"""Gemini CLI as a streaming model: ``gemini -p PROMPT --output-format stream-json``.

Events and what they become:

- ``init`` -> ``system`` chunk with ``session_id`` and ``model`` (``resume`` takes the id).
- ``message`` from the assistant -> ``text`` chunk with ``is_delta``; the echo of the user
  prompt is skipped.
- ``tool_use`` -> ``tool_use``; ``tool_result`` -> ``tool_result`` (``status: "error"`` sets
  ``is_error``; the error message becomes the output when there is no output). The CLI
  reports some successful results with ``"output": ""`` (``read_file`` does): such a result
  is recorded as empty and says so (``metadata["empty_output"]``), it is not the file's text.
- ``error`` (non-fatal: loop detected, blocked, ...) -> ``system`` chunk with
  ``metadata["notice"]`` and ``severity``.
- ``result`` -> ``result`` chunk (usage from ``stats``, duration, tool calls, session id; its
  content is the assistant text after the last tool call); ``status: "error"`` adds an
  ``error`` chunk with the classified ``kind``. The exit status is read by its documented
  meaning (41 auth, 42 input, 53 turn limit, the HTTP status modulo 256 for API errors:
  see ``_cli_errors``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._subprocess import CLIAgentModel, CLIEventParser, usage_dict
from ._types import StreamChunk

__all__ = ["GeminiModel"]


class GeminiModel(CLIAgentModel):
    """Gemini CLI (the ``gemini`` command) in headless mode with streamed JSON output.

    The child's environment gets ``GEMINI_CLI_TRUST_WORKSPACE=true`` unless the caller set
    it: headless runs in an untrusted directory otherwise stop with exit status 55.

    Extra per-call option: ``approval_mode`` (``--approval-mode``: default, auto_edit, yolo).

    Example::

        model = GeminiModel("gemini-2.5-pro")
        async for chunk in model.stream("Summarize README.md"):
            ...
    """

    provider = "gemini"
    env_var = "TURNLOG_GEMINI_BIN"
    default_executable = "gemini"
    option_keys = frozenset({"cwd", "env", "extra_args", "model", "approval_mode"})

    def build_args(
        self, prompt: str, *, resume: str | None, model: str, options: Mapping[str, Any]
    ) -> list[str]:
        """``-p PROMPT --output-format stream-json [-m M] [--resume ID] [extra]``."""
        # A prompt starting with "-" would be read as an option: pass it glued to its flag.
        args = [f"--prompt={prompt}"] if prompt.startswith("-") else ["-p", prompt]
        args += ["--output-format", "stream-json"]
        if model:
            args += ["-m", model]
        if resume:
            args += ["--resume", resume]
        if options.get("approval_mode"):
            args += ["--approval-mode", str(options["approval_mode"])]
        return [*args, *options.get("extra_args", ())]

    def default_env(self) -> dict[str, str]:
        """Trust the workspace (headless runs cannot answer the trust prompt)."""
        return {"GEMINI_CLI_TRUST_WORKSPACE": "true"}

    def new_parser(self, started: float) -> CLIEventParser:
        """A parser for one Gemini CLI run."""
        return _GeminiParser(self.provider, started)


class _GeminiParser(CLIEventParser):
    def __init__(self, provider: str, started: float) -> None:
        super().__init__(provider, started)
        self.model: str | None = None
        self.turn_text: list[str] = []

    def feed(self, event: dict[str, Any]) -> list[StreamChunk]:
        kind = event.get("type")
        if kind == "init":
            self.session_id = event.get("session_id") or self.session_id
            self.model = event.get("model") or self.model
            return [StreamChunk("system", metadata={"session_id": self.session_id, "model": self.model})]
        if kind == "message":
            if event.get("role") != "assistant":
                return []
            text = str(event.get("content") or "")
            self.turn_text.append(text)
            return [StreamChunk("text", content=text, is_delta=bool(event.get("delta")))]
        if kind == "tool_use":
            self.turn_text.clear()
            params = event.get("parameters")
            return [
                StreamChunk(
                    "tool_use",
                    tool_name=event.get("tool_name"),
                    tool_id=event.get("tool_id"),
                    tool_input=dict(params) if isinstance(params, dict) else {},
                )
            ]
        if kind == "tool_result":
            self.turn_text.clear()
            return [_tool_result(event)]
        if kind == "error":
            severity = event.get("severity")
            if severity == "error":
                self.error_texts.append(str(event.get("message") or ""))
            return [StreamChunk("system", metadata={"notice": event.get("message"), "severity": severity})]
        if kind == "result":
            return self._result(event)
        return []

    def _result(self, event: dict[str, Any]) -> list[StreamChunk]:
        self.finished = True
        stats = event.get("stats") or {}
        is_error = event.get("status") == "error"
        chunks = [
            StreamChunk(
                "result",
                content="".join(self.turn_text),
                is_error=is_error,
                metadata={
                    "session_id": self.session_id,
                    # input_tokens counts the cached ones too (``input`` is the rest).
                    "usage": usage_dict(
                        stats.get("input_tokens"),
                        stats.get("output_tokens"),
                        None,
                        cache_read_tokens=stats.get("cached"),
                    ),
                    "cost_usd": None,
                    "duration_ms": stats.get("duration_ms"),
                    "num_turns": None,
                    "tool_calls": stats.get("tool_calls"),
                    "model": self.model,
                    "raw_usage": stats,
                },
            )
        ]
        if is_error:
            error = event.get("error") or {}
            text = str(error.get("message") or "gemini run failed")
            chunks.append(self.error_chunk(text, error_type=error.get("type")))
        return chunks


def _tool_result(event: dict[str, Any]) -> StreamChunk:
    error = event.get("error")
    output = event.get("output")
    if output is None and isinstance(error, dict):
        output = error.get("message")
    meta: dict[str, Any] = {"status": event.get("status"), "error": error}
    if output == "" and event.get("status") != "error":
        meta["empty_output"] = True
        meta["note"] = "the CLI reported this tool result with an empty output"
    return StreamChunk(
        "tool_result",
        tool_id=event.get("tool_id"),
        tool_output=output,
        is_error=event.get("status") == "error",
        metadata=meta,
    )
