"""``turnlog run MESSAGE --cli claude|codex|gemini``: stream one CLI agent turn and record it.

The agent's output is shown as it arrives (text as it streams, tool calls and results as
lines) while ``branch.run`` records every chunk and the messages they make. On a branch that
has talked to the same agent before, the agent's session is resumed. ``--stream-persist``
keeps a live buffer of the chunks so that ``turnlog recover`` loses nothing if this process
is killed. The agent's calls to its model API are recorded at the wire unless ``--no-wire``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import orjson

from turnlog.kernel import Branch, KernelError, iModel
from turnlog.kernel.models import CLIError, CLINotFound, ProviderError, StreamChunk

from ._cmd_chat import add_branch_arguments, last_run_line
from ._command import Command, UserError, add_store_argument, emit_json
from ._inspect import branch_id_of, check_new_name, opened_store

__all__ = ["COMMAND", "EchoingModel"]

_PROVIDERS = {"claude": "claude_code", "codex": "codex", "gemini": "gemini"}
_VARIABLES = {"claude": "TURNLOG_CLAUDE_BIN", "codex": "TURNLOG_CODEX_BIN", "gemini": "TURNLOG_GEMINI_BIN"}


class EchoingModel:
    """A CLI model that hands each chunk to ``echo`` as it arrives, then to the run verb.

    Args:
        inner: The CLI agent model (provider, model and ``stream`` are those of ``inner``).
        echo: Called with every chunk, before the verb sees it.
    """

    is_cli = True

    def __init__(self, inner: Any, echo: Callable[[StreamChunk], None]) -> None:
        self.inner = inner
        self.echo = echo
        self.provider = inner.provider
        self.model = inner.model
        self.endpoint = "cli"

    def to_config(self) -> dict[str, Any]:
        """The inner model's recordable configuration."""
        return dict(self.inner.to_config())

    async def stream(
        self, prompt: str, *, resume: str | None = None, **kwargs: Any
    ) -> AsyncIterator[StreamChunk]:
        """The inner model's chunks, each echoed first."""
        async with contextlib.aclosing(self.inner.stream(prompt, resume=resume, **kwargs)) as chunks:
            async for chunk in chunks:
                self.echo(chunk)
                yield chunk


class _Terminal:
    """Writes chunks for a person: text inline, the rest on lines of their own."""

    def __init__(self) -> None:
        self.mid_line = False

    def _line(self, text: str) -> None:
        if self.mid_line:
            sys.stdout.write("\n")
            self.mid_line = False
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def __call__(self, chunk: StreamChunk) -> None:
        kind = chunk.type
        if kind == "text" and chunk.content:
            sys.stdout.write(str(chunk.content))
            sys.stdout.flush()
            self.mid_line = not str(chunk.content).endswith("\n")
        elif kind == "thinking" and chunk.content:
            self._line(f"[thinking] {_short(chunk.content)}")
        elif kind == "tool_use":
            self._line(f"[tool] {chunk.tool_name} {_short(orjson.dumps(chunk.tool_input).decode())}")
        elif kind == "tool_result":
            flag = " (error)" if chunk.is_error else ""
            self._line(f"[result{flag}] {_short(chunk.tool_output)}")
        elif kind == "system" and chunk.metadata.get("session_id"):
            self._line(f"[session {chunk.metadata['session_id']}]")
        elif kind == "error":
            self._line(f"[error] {_short(chunk.content)}")

    def end(self) -> None:
        if self.mid_line:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.mid_line = False


def _short(value: Any, width: int = 100) -> str:
    text = " ".join(str(value if value is not None else "").split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("message", help="what to ask the agent")
    parser.add_argument("--cli", required=True, choices=sorted(_PROVIDERS), help="the CLI agent to run")
    parser.add_argument("--model", default=None, help="the agent's model (default: the CLI's own default)")
    add_branch_arguments(parser)
    parser.add_argument(
        "--stream-persist",
        action="store_true",
        help="keep a live buffer of the chunks (STORE.runs/ beside the store file) so 'turnlog recover' can "
        "finish the run if this process is killed",
    )
    parser.add_argument(
        "--no-wire",
        action="store_true",
        help="do not record the agent's calls to its model API at the wire (a kill mid-answer then "
        "loses what the agent had not printed; see docs/streams.md)",
    )
    parser.add_argument("--timeout", type=float, default=None, help="seconds for the whole turn")
    parser.add_argument(
        "--cwd",
        default=None,
        help="the agent's working directory (default: the directory the branch's session is bound "
        "with, else the current one; another directory than the bound one starts a new session)",
    )
    add_store_argument(parser)


def _check_cli(args: argparse.Namespace, inner: iModel) -> None:
    """Find the CLI's executable (and check the prompt) before anything is written."""
    backend = getattr(inner, "backend", None)
    command = getattr(backend, "command", None)
    if command is None:
        return
    try:
        command(args.message)
    except CLINotFound as exc:
        hint = "" if _VARIABLES[args.cli] in str(exc) else f" (or set ${_VARIABLES[args.cli]})"
        raise UserError(f"{exc}{hint}") from exc
    except ValueError as exc:
        raise UserError(str(exc)) from exc


async def _turn(args: argparse.Namespace, echo: _Terminal | None) -> tuple[Branch, list[Any], str | None]:
    provider = _PROVIDERS[args.cli]
    inner = iModel(provider=provider, model=args.model)
    _check_cli(args, inner)  # before the store is even opened: a missing CLI writes nothing
    if args.branch is None:
        await check_new_name(None, args.new)
    model: Any = EchoingModel(inner, echo) if echo is not None else inner
    async with opened_store(args.store, must_exist=args.branch is not None) as store:
        if args.branch is None:
            await check_new_name(store, args.new)
        if args.branch is not None:
            branch = await Branch.load(store, await branch_id_of(store, args.branch))
        else:
            branch = Branch(store=store, name=args.new, user="you", chat_model=inner)
        messages: list[Any] = []
        try:
            extra = {"cwd": args.cwd} if args.cwd is not None else {}
            run = branch.run(
                args.message,
                chat_model=model,
                stream_persist=args.stream_persist,
                timeout=args.timeout,
                record_wire=not args.no_wire,
                **extra,
            )
            async with contextlib.aclosing(run) as stream:
                async for message in stream:
                    messages.append(message)
        except CLINotFound as exc:
            raise UserError(f"{exc} (or set ${_VARIABLES[args.cli]})") from exc
        except (ProviderError, KernelError, ValueError) as exc:
            if echo is not None:
                echo.end()
            kind = f" ({exc.kind})" if isinstance(exc, CLIError) else ""
            return branch, messages, f"{type(exc).__name__}{kind}: {exc}"
        finally:
            if echo is not None:
                echo.end()
        return branch, messages, None


def _run(args: argparse.Namespace) -> int:
    echo = None if args.json else _Terminal()
    branch, messages, error = anyio.run(_turn, args, echo)
    runs = list(branch.state.runs.values())
    run = runs[-1] if runs else None
    if args.json:
        emit_json(
            {
                "branch_id": branch.id,
                "name": branch.name,
                "version": branch.version,
                "run_id": run.run_id if run else None,
                "status": run.status if run else None,
                "error": error,
                "session_id": branch.provider_session(_PROVIDERS[args.cli]),
                "usage": run.usage.model_dump() if run is not None else None,
                "messages": [m.to_dict() for m in messages],
            }
        )
        return 1 if error else 0
    if error:
        print(f"turnlog run: {error}", file=sys.stderr)
        print(f"turnlog run: recorded as a failed run; {last_run_line(branch)}", file=sys.stderr)
        return 1
    print(f"-- {last_run_line(branch)}", file=sys.stderr)
    session = branch.provider_session(_PROVIDERS[args.cli])
    if session:
        print(
            f"-- {args.cli} session {session} (the next 'turnlog run --branch {branch.id}' resumes it)",
            file=sys.stderr,
        )
    return 0


COMMAND = Command(
    name="run",
    help="stream one turn of a CLI agent (claude, codex, gemini), shown live and recorded",
    description="Run a CLI agent on a branch and record the turn: every chunk (stream.chunk in "
    "run-<run_id>), the messages they make, the call and the run lifecycle. The agent's session is "
    "bound to the branch and resumed by the next run on it. The executable comes from "
    "$TURNLOG_CLAUDE_BIN / $TURNLOG_CODEX_BIN / $TURNLOG_GEMINI_BIN, else claude / codex / gemini on PATH.",
    add_arguments=_add_arguments,
    run=_run,
    example='turnlog run "List the files and summarize them" --cli claude --new work --stream-persist',
)
