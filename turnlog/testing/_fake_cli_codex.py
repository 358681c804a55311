"""The fake Codex CLI (``codex exec``): its argv, its ``--json`` event stream, its errors."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from ._fake_cli_runner import (
    ArgvError,
    CLIExit,
    Renderer,
    Run,
    parse_argv,
    random_token,
    uuid7_text,
)

__all__ = ["run_codex"]


class _Codex(Renderer):
    def __init__(self, ctx: Run, thread_id: str, json_mode: bool) -> None:
        super().__init__(ctx)
        self.thread_id = thread_id
        self.json_mode = json_mode
        self.items = 0
        self.last_message = ""

    def emit(self, obj: dict[str, Any]) -> None:
        if self.json_mode:
            self.out.json(obj)

    def _item_id(self) -> str:
        self.items += 1
        return f"item_{self.items - 1}"

    def start(self) -> None:
        self.emit({"type": "thread.started", "thread_id": self.thread_id})
        self.emit({"type": "turn.started"})

    def thinking(self, text: str) -> None:
        self.emit(
            {"type": "item.completed", "item": {"id": self._item_id(), "type": "reasoning", "text": text}}
        )

    def text_block(self, parts: list[str]) -> None:
        # Codex prints an agent_message only when the item completes: one item per text step.
        if self.out.delay > 0:
            time.sleep(self.out.delay * max(len(parts) - 1, 0))
        self.text("".join(parts))

    def text(self, part: str) -> None:
        self.last_message = part
        self.emit(
            {"type": "item.completed", "item": {"id": self._item_id(), "type": "agent_message", "text": part}}
        )

    def tool_use(self, name: str, tool_input: dict[str, Any], tool_id: str | None) -> None:
        if "changes" in tool_input:
            # file_change items are announced only when they complete.
            self.pending.append(
                {"id": self._item_id(), "type": "file_change", "changes": tool_input["changes"]}
            )
            return
        if "command" in tool_input:
            item: dict[str, Any] = {
                "id": self._item_id(),
                "type": "command_execution",
                "command": tool_input["command"],
                "aggregated_output": "",
                "exit_code": None,
                "status": "in_progress",
            }
        else:
            item = {
                "id": self._item_id(),
                "type": "mcp_tool_call",
                "server": str(tool_input.pop("server", "tools")),
                "tool": name,
                "arguments": tool_input,
                "result": None,
                "error": None,
                "status": "in_progress",
            }
        self.pending.append(item)
        self.emit({"type": "item.started", "item": item})

    def take_pending(self, tool_id: str | None) -> dict[str, Any]:
        return self.pending.pop(0) if self.pending else {"id": self._item_id(), "type": "mcp_tool_call"}

    def tool_result(self, call: dict[str, Any], output: Any, is_error: bool) -> None:
        item = dict(call)
        if item["type"] == "command_execution":
            item.update(aggregated_output=str(output), exit_code=1 if is_error else 0)
        elif item["type"] == "mcp_tool_call":
            if is_error:
                item.update(error={"message": str(output)})
            else:
                item.update(
                    result={"content": [{"type": "text", "text": str(output)}], "structured_content": None}
                )
        item["status"] = "failed" if is_error else "completed"
        self.emit({"type": "item.completed", "item": item})

    def warning(self, message: str) -> None:
        self.emit({"type": "error", "message": message})

    def fail(self, kind: str, message: str | None) -> NoReturn:
        request = f"request id: req_{random_token(24)}"
        text = message or {
            "rate_limit": f"exceeded retry limit, last status: 429 Too Many Requests, {request}",
            "auth": "unexpected status 401 Unauthorized: Incorrect API key provided: sk-fa***key., "
            f"url: http://127.0.0.1/v1/responses, {request}",
            "invalid_request": '{"error": {"message": "Invalid request.", "type": "invalid_request_error", '
            '"param": null, "code": null}}',
        }.get(kind, "We\u2019re currently experiencing high demand, which may cause temporary errors.")
        # Every upstream failure: an error event, then turn.failed with the same message.
        self.emit({"type": "error", "message": text})
        self.emit({"type": "turn.failed", "error": {"message": text}})
        if not self.json_mode:
            self.out.err(f"ERROR: {text}")
        raise CLIExit(1)

    def finish(self) -> int:
        # turn.completed usage is a running total for the whole session (resumed runs included).
        totals = self.ctx.session.setdefault("usage_total", {"input_tokens": 0, "output_tokens": 0})
        totals["input_tokens"] += self.ctx.input_tokens
        totals["output_tokens"] += self.ctx.output_tokens
        self.ctx.sessions.save(self.ctx.session)
        self.emit(
            {
                "type": "turn.completed",
                "usage": {
                    "input_tokens": totals["input_tokens"],
                    "cached_input_tokens": 0,
                    "cache_write_input_tokens": 0,
                    "output_tokens": totals["output_tokens"],
                    "reasoning_output_tokens": 0,
                },
            }
        )
        if not self.json_mode:
            self.out.raw(self.last_message)
        return int(self.ctx.script.get("exit_code", 0))


_CODEX_FLAGS = {
    "--json": "json", "--experimental-json": "json", "--skip-git-repo-check": "skip_git",
    "--ephemeral": "ephemeral", "--full-auto": "full_auto", "--oss": "oss", "--last": "last",
    "--dangerously-bypass-approvals-and-sandbox": "bypass",
}  # fmt: skip
_CODEX_VALUES = {
    "-m": "model", "--model": "model", "-s": "sandbox", "--sandbox": "sandbox", "-C": "cd", "--cd": "cd",
    "-c": "config", "--config": "config", "-p": "profile", "--profile": "profile", "-i": "image",
    "--image": "image", "-o": "output_last_message", "--output-last-message": "output_last_message",
    "--output-schema": "output_schema", "--color": "color", "--enable": "enable", "--disable": "disable",
}  # fmt: skip


def _clap_unknown(name: str) -> ArgvError:
    return ArgvError(
        f"error: unexpected argument '{name}' found\n\n"
        f"  tip: to pass '{name}' as a value, use '-- {name}'\n\n"
        "Usage: codex exec [OPTIONS] [PROMPT]\n\nFor more information, try '--help'.",
        2,
    )


def _in_git_repo(path: Path) -> bool:
    return any((p / ".git").exists() for p in [path, *path.parents])


def run_codex(argv: Sequence[str], run: Run) -> int:
    """Validate ``codex exec`` argv like the real CLI, open or resume the thread, play the script."""
    if not argv or argv[0] not in ("exec", "e"):
        raise ArgvError("fake codex: only the exec subcommand is supported", 2)
    opts, positional = parse_argv(argv[1:], flags=_CODEX_FLAGS, values=_CODEX_VALUES, unknown=_clap_unknown)
    if opts.get("sandbox") not in (None, "read-only", "workspace-write", "danger-full-access"):
        raise ArgvError(
            f"error: invalid value '{opts['sandbox']}' for '--sandbox <SANDBOX_MODE>'\n"
            "  [possible values: read-only, workspace-write, danger-full-access]",
            2,
        )
    if opts.get("full_auto"):
        run.out.err("warning: `--full-auto` is deprecated; use `--sandbox workspace-write` instead.")
    resume: str | None = None
    if positional and positional[0] == "resume":
        positional = positional[1:]
        if not opts.get("last"):
            if not positional:
                raise ArgvError(
                    "error: the following required arguments were not provided:\n  <SESSION_ID>", 2
                )
            resume, positional = positional[0], positional[1:]
    if len(positional) > 1:
        raise _clap_unknown(positional[1])
    if not positional or positional[0] in ("", "-"):
        raise ArgvError(
            "No prompt provided. Either specify one as an argument or pipe the prompt into stdin.", 1
        )
    cwd = Path(opts.get("cd") or os.getcwd())
    if not opts.get("skip_git") and not _in_git_repo(cwd.resolve()):
        raise ArgvError("Not inside a trusted directory and --skip-git-repo-check was not specified.", 1)
    run.prompt = positional[0]
    if opts.get("model"):
        run.model = str(opts["model"])
    if opts.get("last"):
        latest = run.sessions.all()
        if not latest:
            raise ArgvError("ERROR: No saved session found. Run `codex` to start a new session.", 1)
        resume = latest[-1]["id"]
    if resume is not None and run.sessions.get(resume) is None:
        raise ArgvError(
            f"ERROR: No saved session found with ID {resume}. "
            "Run `codex resume` without an ID to choose from existing sessions.",
            1,
        )
    thread_id = resume or str(run.script.get("session_id") or uuid7_text())
    run.open_session(thread_id, resumed=resume is not None)
    return run.play(_Codex(run, thread_id, bool(opts.get("json"))))
