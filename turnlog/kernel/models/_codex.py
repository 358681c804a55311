"""OpenAI Codex as a streaming model: ``codex exec --json ... -- PROMPT``.

Events and what they become:

- ``thread.started`` -> ``system`` chunk with ``session_id`` (the thread id; ``resume`` takes it).
- ``item.completed`` ``agent_message`` -> ``text``; ``reasoning`` -> ``thinking``.
- Tool items (``command_execution`` as tool ``shell``, ``file_change`` as ``apply_patch``,
  ``mcp_tool_call`` under its tool name, ``web_search``, ``collab_tool_call``): ``tool_use``
  when the item starts (or when it completes, if it never announced a start) and
  ``tool_result`` when it completes; a failed or declined item sets ``is_error``
  (declined also ``metadata["denied"]``).
- ``item.completed`` ``error`` (a non-fatal notice) and top-level ``error`` events
  (retried transient failures such as ``Reconnecting...``) -> ``system`` chunks with
  ``metadata["notice"]``: they do not end the turn, the exit status decides.
  The shape ``{"type": "error", "error": {}}`` is an ``error`` chunk with ``benign_eos``.
- ``turn.completed`` -> ``result`` chunk (usage, turns, wall-clock duration, session id,
  the last agent message as content); ``turn.failed`` -> ``error`` chunk.

Usage: ``turn.completed`` reports the *running total of the session*, not of the turn. The
usage of a run is that total minus the total the session's rollout file recorded before the
run started (read from ``CODEX_HOME/sessions`` when resuming); ``raw_usage`` keeps the
running total and ``usage_baseline`` the total subtracted (``None`` with
``usage_basis: "cumulative"`` when a resumed session's baseline could not be read).

Granularity: ``exec --json`` prints an ``agent_message`` or ``reasoning`` item only when it
is complete (no text deltas exist in this mode; ``item.updated`` is only used for to-do
lists), and a tool item when it starts and when it completes. A crash of this process
therefore loses at most the agent message or reasoning item in progress, which the CLI has
not printed yet either; the parent-death guard stops the CLI with this process, so it does
not finish the message behind the log's back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import orjson

from ._cli_sessions import codex_usage_total
from ._subprocess import CLIAgentModel, CLIEventParser, usage_dict
from ._types import StreamChunk

__all__ = ["CodexModel"]

_TOOL_ITEMS = frozenset(
    {"command_execution", "file_change", "mcp_tool_call", "web_search", "collab_tool_call"}
)


class CodexModel(CLIAgentModel):
    """OpenAI Codex (the ``codex`` CLI) in ``exec --json`` mode.

    Args:
        model: The model (``-m``); "" leaves the CLI's default.
        skip_git_repo_check: Pass ``--skip-git-repo-check`` (codex otherwise refuses to run
            outside a git repository).
        **kwargs: The ``CLIAgentModel`` arguments.

    Extra per-call options: ``sandbox`` (``-s``: read-only, workspace-write, danger-full-access),
    ``developer_instructions`` (``-c developer_instructions=...``: guidance added to Codex's own
    instructions).

    Example::

        model = CodexModel("gpt-5-codex")
        async for chunk in model.stream("Fix the failing test", resume=thread_id):
            ...
    """

    provider = "codex"
    env_var = "TURNLOG_CODEX_BIN"
    default_executable = "codex"
    option_keys = frozenset({"cwd", "env", "extra_args", "model", "sandbox", "developer_instructions"})
    system_prompt_option = "developer_instructions"

    def __init__(self, model: str = "", *, skip_git_repo_check: bool = True, **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.skip_git_repo_check = skip_git_repo_check

    def build_args(
        self, prompt: str, *, resume: str | None, model: str, options: Mapping[str, Any]
    ) -> list[str]:
        """``exec --json [-m M] [--skip-git-repo-check] [extra] [resume THREAD_ID] -- PROMPT``."""
        args = ["exec", "--json"]
        if model:
            args += ["-m", model]
        if self.skip_git_repo_check:
            args.append("--skip-git-repo-check")
        if options.get("sandbox"):
            args += ["-s", str(options["sandbox"])]
        if options.get("developer_instructions"):
            value = orjson.dumps(str(options["developer_instructions"])).decode()
            args += ["-c", f"developer_instructions={value}"]
        args += list(options.get("extra_args", ()))
        if resume:
            args += ["resume", resume]
        return [*args, "--", prompt]

    def new_parser(self, started: float) -> CLIEventParser:
        """A parser for one Codex run."""
        return _CodexParser(self.provider, started)

    async def before_spawn(self, parser: CLIEventParser, *, resume: str | None, home: str | None) -> None:
        """On resume, read the session's running usage total so the run's own can be derived."""
        assert isinstance(parser, _CodexParser)
        parser.resumed = resume is not None
        if resume is not None and home is not None:
            parser.baseline = await anyio.to_thread.run_sync(codex_usage_total, home, resume)


class _CodexParser(CLIEventParser):
    def __init__(self, provider: str, started: float) -> None:
        super().__init__(provider, started)
        self.turns = 0
        self.last_text = ""
        self.open_tools: set[str] = set()
        self.resumed = False
        self.baseline: dict[str, int] | None = None

    def feed(self, event: dict[str, Any]) -> list[StreamChunk]:
        kind = event.get("type")
        if kind == "thread.started":
            self.session_id = event.get("thread_id") or self.session_id
            return [
                StreamChunk("system", metadata={"session_id": self.session_id, "thread_id": self.session_id})
            ]
        if kind == "turn.started":
            self.turns += 1
            return []
        if kind == "item.started":
            return self._started(event.get("item") or {})
        if kind == "item.completed":
            return self._completed(event.get("item") or {})
        if kind == "turn.completed":
            return [self._turn_completed(event)]
        if kind == "turn.failed":
            self.finished = True
            error = event.get("error") or {}
            text = (error.get("message") if isinstance(error, dict) else None) or "turn failed"
            return [self.error_chunk(text, event=event)]
        if kind == "error":
            return [self._error(event)]
        return []  # item.updated, item.plan.delta, request_user_input, unknown types

    def _error(self, event: dict[str, Any]) -> StreamChunk:
        if event.get("error") == {} and not any(k in event for k in ("code", "message", "status")):
            self.finished = True
            return StreamChunk("error", content="", metadata={"benign_eos": True, "event": event})
        message = event.get("message") or f"CLI error event without a message: {event}"
        self.error_texts.append(str(message))
        return StreamChunk("system", metadata={"notice": message, "event": "error"})

    def _started(self, item: dict[str, Any]) -> list[StreamChunk]:
        if item.get("type") not in _TOOL_ITEMS or item.get("type") == "file_change":
            return []
        self.open_tools.add(str(item.get("id")))
        return [_tool_use(item)]

    def _completed(self, item: dict[str, Any]) -> list[StreamChunk]:
        itype = item.get("type")
        meta = {"item_id": item.get("id")}
        if itype == "agent_message":
            self.last_text = item.get("text") or ""
            return [StreamChunk("text", content=self.last_text, metadata=meta)]
        if itype == "reasoning":
            return [StreamChunk("thinking", content=item.get("text") or "", metadata=meta)]
        if itype == "error":
            return [StreamChunk("system", metadata={"notice": item.get("message"), "event": "item.error"})]
        if itype not in _TOOL_ITEMS:
            return []  # todo_list, plan, unknown item types
        chunks = [] if str(item.get("id")) in self.open_tools else [_tool_use(item)]
        self.open_tools.discard(str(item.get("id")))
        chunks.append(_tool_result(item))
        return chunks

    def _turn_completed(self, event: dict[str, Any]) -> StreamChunk:
        self.finished = True
        usage = event.get("usage") or {}
        meta: dict[str, Any] = {"session_id": self.session_id}
        # input_tokens counts the cached ones too (OpenAI's convention, and Usage's).
        keys = ("input_tokens", "output_tokens", "cached_input_tokens", "cache_write_input_tokens")
        if self.resumed and self.baseline is None:
            run_in, run_out, read, write = (usage.get(key) for key in keys)
            meta["usage_basis"] = "cumulative"  # the session's earlier runs are included
        else:
            base = self.baseline or {}
            run_in, run_out, read, write = (_minus(usage.get(key), base.get(key)) for key in keys)
        meta.update(
            {
                "usage": usage_dict(run_in, run_out, None, cache_read_tokens=read, cache_write_tokens=write),
                "cost_usd": None,
                "duration_ms": self.elapsed_ms(),
                "num_turns": max(self.turns, 1),
                "raw_usage": usage,
                "usage_baseline": self.baseline,
            }
        )
        return StreamChunk("result", content=self.last_text, metadata=meta)


def _minus(total: Any, base: Any) -> int | None:
    if not isinstance(total, int) or isinstance(total, bool):
        return None
    if isinstance(base, int) and not isinstance(base, bool) and 0 <= base <= total:
        return total - base
    return total


def _tool_name(item: dict[str, Any]) -> str:
    itype = item.get("type")
    if itype == "command_execution":
        return "shell"
    if itype == "file_change":
        return "apply_patch"
    if itype in ("mcp_tool_call", "collab_tool_call"):
        return str(item.get("tool") or itype)
    return str(itype)


def _tool_use(item: dict[str, Any]) -> StreamChunk:
    itype = item.get("type")
    if itype == "command_execution":
        tool_input: dict[str, Any] = {"command": item.get("command")}
    elif itype == "file_change":
        tool_input = {"changes": item.get("changes") or []}
    elif itype == "mcp_tool_call":
        args = item.get("arguments")
        tool_input = dict(args) if isinstance(args, dict) else {"arguments": args}
    elif itype == "web_search":
        tool_input = {"query": item.get("query")}
    else:
        tool_input = {"prompt": item.get("prompt")}
    meta: dict[str, Any] = {"item_type": itype}
    if item.get("server"):
        meta["server"] = item["server"]
    return StreamChunk(
        "tool_use", tool_name=_tool_name(item), tool_id=item.get("id"), tool_input=tool_input, metadata=meta
    )


def _tool_result(item: dict[str, Any]) -> StreamChunk:
    itype = item.get("type")
    status = item.get("status")
    is_error = status in ("failed", "declined")
    meta: dict[str, Any] = {"item_type": itype, "status": status}
    if itype == "command_execution":
        output: Any = item.get("aggregated_output")
        exit_code = item.get("exit_code")
        meta["exit_code"] = exit_code
        is_error = is_error or exit_code not in (None, 0)
    elif itype == "file_change":
        output = "; ".join(f"{c.get('kind')}: {c.get('path')}" for c in item.get("changes") or [])
    elif itype == "mcp_tool_call":
        error = item.get("error")
        output = (
            item.get("result") if not error else (error.get("message") if isinstance(error, dict) else error)
        )
        is_error = is_error or bool(error)
    else:
        output = item.get("action") if itype == "web_search" else item.get("agents_states")
    if status == "declined":
        meta["denied"] = True
    return StreamChunk(
        "tool_result", tool_id=item.get("id"), tool_output=output, is_error=is_error, metadata=meta
    )
