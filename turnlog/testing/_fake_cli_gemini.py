"""The fake Gemini CLI (``gemini -p``): its argv, its text/json/stream-json output, its errors."""

from __future__ import annotations

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

__all__ = ["run_gemini"]


class _Gemini(Renderer):
    def __init__(self, ctx: Run, sid: str, fmt: str) -> None:
        super().__init__(ctx)
        self.sid = sid
        self.fmt = fmt
        self.texts: list[str] = []

    def emit(self, obj: dict[str, Any]) -> None:
        if self.fmt == "stream-json":
            self.out.json({"type": obj.pop("type"), "timestamp": now_iso(), **obj})

    def _stats(self, *, zero: bool = False) -> dict[str, Any]:
        i, o = (0, 0) if zero else (self.ctx.input_tokens, self.ctx.output_tokens)
        per_model = {"total_tokens": i + o, "input_tokens": i, "output_tokens": o, "cached": 0, "input": i}
        return {
            **per_model,
            "duration_ms": 0 if zero else self.ctx.elapsed_ms(),
            "tool_calls": 0 if zero else self.ctx.tool_calls,
            "models": {} if zero else {self.ctx.model: per_model},
        }

    def start(self) -> None:
        self.emit({"type": "init", "session_id": self.sid, "model": self.ctx.model})
        self.emit({"type": "message", "role": "user", "content": self.ctx.prompt})

    def text(self, part: str) -> None:
        self.texts.append(part)
        self.emit({"type": "message", "role": "assistant", "content": part, "delta": True})

    def tool_use(self, name: str, tool_input: dict[str, Any], tool_id: str | None) -> None:
        call = {"id": tool_id or f"{name}-{int(time.time() * 1000)}-{random_token(12)}", "name": name}
        self.pending.append(call)
        self.emit({"type": "tool_use", "tool_name": name, "tool_id": call["id"], "parameters": tool_input})

    def tool_result(self, call: dict[str, Any], output: Any, is_error: bool) -> None:
        if is_error:
            self.emit(
                {
                    "type": "tool_result",
                    "tool_id": call["id"],
                    "status": "error",
                    "error": {"type": "tool_execution_error", "message": str(output)},
                }
            )
        else:
            self.emit(
                {"type": "tool_result", "tool_id": call["id"], "status": "success", "output": str(output)}
            )

    def warning(self, message: str) -> None:
        self.emit({"type": "error", "severity": "warning", "message": message})

    def fail(self, kind: str, message: str | None) -> NoReturn:
        """A fatal error: one ``result`` with ``status: "error"``, then the documented exit status.

        Configuration errors exit with their own codes (41 auth, 53 turn limit); an API error
        exits with its HTTP status mod 256 (400 -> 144, 401 -> 145, 429 -> 173, 500 -> 244).
        """
        error_type, code, default = {
            "auth": (
                "FatalAuthenticationError",
                41,
                "Failed to login. Message: Request had invalid authentication",
            ),
            "max_turns": (
                "FatalTurnLimitedError",
                53,
                "Reached max session turns for this session. Increase the number of turns by specifying "
                "maxSessionTurns in settings.json.",
            ),
            "rate_limit": (
                "unknown",
                429 % 256,
                "[API Error: Resource has been exhausted (e.g. check quota).]\nPlease wait and try again "
                "later. To increase your limits, request a quota increase through AI Studio, or switch to "
                "another /auth method",
            ),
            "bad_key": (
                "unknown",
                400 % 256,
                '[API Error: {"error":{"code":400,"message":"API key not valid. Please pass a valid API key.",'
                '"status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo",'
                '"reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}]',
            ),
            "unauthenticated": (
                "unknown",
                401 % 256,
                '[API Error: {"error":{"code":401,"message":"Request had invalid authentication credentials.",'
                '"status":"UNAUTHENTICATED"}}]',
            ),
            "invalid_request": (
                "unknown",
                400 % 256,
                '[API Error: {"error":{"code":400,"message":"Request contains an invalid argument.",'
                '"status":"INVALID_ARGUMENT"}}]',
            ),
        }.get(
            kind,
            (
                "unknown",
                500 % 256,
                '[API Error: {"error":{"code":500,"message":"An internal error has occurred.","status":"INTERNAL"}}]',
            ),
        )
        text = message or default
        self.emit(
            {
                "type": "result",
                "status": "error",
                "error": {"type": error_type, "message": text},
                "stats": self._stats(zero=True),
            }
        )
        if self.fmt != "stream-json" or error_type == "unknown":
            self.out.err(f"Error when talking to Gemini API {text}" if error_type == "unknown" else text)
        raise CLIExit(code)

    def finish(self) -> int:
        self.emit({"type": "result", "status": "success", "stats": self._stats()})
        if self.fmt == "json":
            self.out.json({"session_id": self.sid, "response": "".join(self.texts), "stats": self._stats()})
        elif self.fmt == "text":
            self.out.raw("".join(self.texts))
        return int(self.ctx.script.get("exit_code", 0))


_GEMINI_FLAGS = {
    "-y": "yolo", "--yolo": "yolo", "-d": "debug", "--debug": "debug", "--skip-trust": "skip_trust",
    "-s": "sandbox", "--sandbox": "sandbox", "--screen-reader": "screen_reader",
}  # fmt: skip
_GEMINI_VALUES = {
    "-p": "prompt", "--prompt": "prompt", "-m": "model", "--model": "model", "-o": "output_format",
    "--output-format": "output_format", "-r": "resume", "--resume": "resume",
    "--approval-mode": "approval_mode",
    "--include-directories": "include_directories", "-e": "extensions", "--extensions": "extensions",
}  # fmt: skip


def run_gemini(argv: Sequence[str], run: Run) -> int:
    """Validate ``gemini`` argv like the real CLI, open or resume the session, play the script."""
    opts, positional = parse_argv(
        argv,
        flags=_GEMINI_FLAGS,
        values=_GEMINI_VALUES,
        unknown=lambda name: ArgvError(f"Unknown argument: {name.lstrip('-')}", 1),
    )
    fmt = opts.get("output_format", "text")
    if fmt not in ("text", "json", "stream-json"):
        raise ArgvError(
            f'Invalid values:\n  Argument: output-format, Given: "{fmt}", '
            'Choices: "text", "json", "stream-json"',
            1,
        )
    if opts.get("approval_mode") not in (None, "default", "auto_edit", "yolo", "plan"):
        raise ArgvError(f'Invalid values:\n  Argument: approval-mode, Given: "{opts["approval_mode"]}"', 1)
    prompt = opts.get("prompt") or " ".join(positional)
    if not prompt.strip():
        raise ArgvError("fake gemini: interactive mode is not supported; pass -p PROMPT", 42)
    trusted = os.environ.get("GEMINI_CLI_TRUST_WORKSPACE") == "true" or opts.get("skip_trust")
    if not trusted:
        raise ArgvError(
            "Gemini CLI is not running in a trusted directory. To proceed, either use `--skip-trust`, "
            "set the `GEMINI_CLI_TRUST_WORKSPACE=true` environment variable, or trust this directory "
            "in interactive mode.",
            55,
        )
    run.prompt = prompt
    if opts.get("model"):
        run.model = str(opts["model"])
    resume = opts.get("resume")
    found: dict[str, Any] | None = None
    if resume is not None:
        sessions = run.sessions.all()
        if resume == "latest":
            found = sessions[-1] if sessions else None
        elif str(resume).isdigit():
            index = int(resume)
            found = sessions[index - 1] if 1 <= index <= len(sessions) else None
        else:
            found = run.sessions.get(str(resume))
        if found is None:
            # FatalInputError: exit 42, before any model request.
            raise ArgvError(
                f'Error resuming session: Invalid session identifier "{resume}".\n'
                "  Use --list-sessions to see available sessions, then use --resume {number}, "
                "--resume {uuid}, or --resume latest.",
                42,
            )
    sid = found["id"] if found else str(run.script.get("session_id") or uuid.uuid4())
    run.open_session(sid, resumed=found is not None)
    return run.play(_Gemini(run, sid, fmt))
