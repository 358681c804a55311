"""CLI agent providers: the command line, the run, and the chunks it becomes.

``CLIAgentModel`` is the base of ``ClaudeCodeModel``, ``CodexModel`` and ``GeminiModel``: it
finds the executable (``resolve_executable``), runs it as a ``CLIProcess`` (``_cli_process``:
spawning, NDJSON framing, stopping the process group), feeds each JSON event to the
provider's ``CLIEventParser``, scrubs the credentials of the CLI's environment from every
chunk, and turns a failed exit into a classified ``CLIError``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from turnlog._errors import UsageError

from ._cli_errors import classify_cli_failure, cli_failure
from ._cli_process import CLIProcess, Diagnostic
from ._cli_sessions import cli_home, shown_path
from ._contract import BaseChatModel, ModelProfile
from ._errors import CLIError, CLINotFound, ProviderError
from ._secrets import Scrubber
from ._types import ChunkSink, ModelRequest, ModelResponse, StreamChunk

__all__ = ["CLIAgentModel", "CLIEventParser", "cli_agent_of", "resolve_executable", "usage_dict"]


def resolve_executable(
    env_var: str,
    default: str,
    *,
    provider: str,
    override: str | Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """Find the command line that starts a CLI.

    Args:
        env_var: Environment variable that may name the executable, e.g. ``TURNLOG_CLAUDE_BIN``.
            Its value is split like a shell would (``"python -m turnlog.testing._fake_cli claude"``).
        default: The executable name looked up on PATH when neither override nor variable is set.
        provider: Provider name for the error.
        override: An explicit command (a string split like a shell would, or an argv list).
        environ: The environment to read (default ``os.environ``).

    Returns:
        The argv prefix, its first element resolved to an absolute path.

    Raises:
        CLINotFound: The executable does not exist or is not executable.
    """
    env = os.environ if environ is None else environ
    if override is not None:
        parts = shlex.split(override) if isinstance(override, str) else list(override)
        source = "the configured executable"
    elif env.get(env_var):
        parts = shlex.split(env[env_var])
        source = f"${env_var}"
    else:
        parts = [default]
        source = "PATH"
    if not parts:
        raise CLINotFound(f"{source} is empty", provider=provider, kind="not_found")
    found = shutil.which(parts[0], path=env.get("PATH"))
    if found is None:
        raise CLINotFound(
            f"{provider}: executable {parts[0]!r} not found (looked up from {source}); install the CLI "
            f"or set {env_var} to its path or to a command line",
            provider=provider,
            kind="not_found",
        )
    return [found, *parts[1:]]


class CLIEventParser:
    """Turns one CLI's NDJSON events into ``StreamChunk`` objects (one parser per run).

    Subclasses implement ``feed``; they record the provider session id, the error texts
    seen (used to classify a failed exit) and whether the terminal event arrived.

    Attributes:
        provider: The provider name.
        started: ``time.monotonic()`` when the process was started.
        session_id: The provider session id once the stream announced it.
        error_texts: Error messages of the stream, oldest first.
        http_status: An upstream HTTP error status the CLI reported, if any.
        finished: True once the CLI's terminal event (result / turn end) arrived.
    """

    def __init__(self, provider: str, started: float) -> None:
        self.provider = provider
        self.started = started
        self.session_id: str | None = None
        self.error_texts: list[str] = []
        self.http_status: int | None = None
        self.finished = False

    def feed(self, event: dict[str, Any]) -> list[StreamChunk]:
        """The chunks one JSON event becomes (often one, sometimes none or two)."""
        raise NotImplementedError

    def elapsed_ms(self) -> float:
        """Milliseconds since the process was started."""
        return round((time.monotonic() - self.started) * 1000.0, 3)

    def error_chunk(self, text: str, **metadata: Any) -> StreamChunk:
        """An ``error`` chunk for ``text``, its ``kind`` classified, the text remembered."""
        self.error_texts.append(text)
        kind = classify_cli_failure(
            [text, *(str(v) for v in metadata.values() if v)],
            provider=self.provider,
            http_status=self.http_status,
        )
        return StreamChunk("error", content=text, is_error=True, metadata={"kind": kind, **metadata})


def usage_dict(
    input_tokens: Any,
    output_tokens: Any,
    cost_usd: Any,
    *,
    cache_read_tokens: Any = None,
    cache_write_tokens: Any = None,
) -> dict[str, Any]:
    """The ``usage`` object of a result chunk, in ``Usage``'s stored form (None when unknown).

    ``input_tokens`` counts every prompt token, the cached ones included; the cache counts
    are there only when the CLI reported them.
    """
    usage = {
        "input_tokens": _tokens(input_tokens),
        "output_tokens": _tokens(output_tokens),
        "cost_usd": float(cost_usd)
        if isinstance(cost_usd, int | float) and not isinstance(cost_usd, bool)
        else None,
    }
    for key, value in (("cache_read_tokens", cache_read_tokens), ("cache_write_tokens", cache_write_tokens)):
        if (count := _tokens(value)) is not None:
            usage[key] = count
    return usage


def _tokens(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _absolute(path: str | os.PathLike[str] | None) -> str:
    """``path`` made absolute (default: the current directory); nothing is looked up on disk."""
    return os.path.abspath(path if path is not None else os.getcwd())


_COMMON_OPTIONS = frozenset({"cwd", "env", "extra_args", "model"})


class CLIAgentModel(BaseChatModel):
    """Base of the CLI agent providers: argv building, spawning, chunk normalization, errors.

    A subclass sets ``provider``, ``env_var`` and ``default_executable`` and implements
    ``build_args`` and ``new_parser``.

    Args:
        model: The model to ask for (``--model``); "" leaves the CLI's default.
        executable: The command to run (a path, or a command line split like a shell would);
            default: the environment variable ``env_var``, else ``default_executable`` on PATH.
        cwd: Working directory of the agent (default: the current directory).
        env: Extra environment variables for the agent.
        extra_args: Extra CLI arguments, placed before the prompt and resume arguments.
        stderr_cap: Bytes of standard error kept for errors (the tail).
        terminate_grace: Seconds between SIGTERM and SIGKILL when the process group is stopped.
        exit_timeout: Seconds to wait for the CLI to exit after it closed its output.

    Per-call ``options`` (the ``options`` argument of ``stream``) accept ``cwd``, ``env``,
    ``extra_args`` and ``model`` plus the provider's own keys (``option_keys``); unknown keys
    are refused with ``ValueError``.
    """

    provider: str = ""
    env_var: str = ""
    default_executable: str = ""
    option_keys: frozenset[str] = _COMMON_OPTIONS
    system_prompt_option: str | None = None
    """The per-call option that adds to the CLI's own system prompt (None: the CLI has none)."""

    def __init__(
        self,
        model: str = "",
        *,
        executable: str | Sequence[str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
        stderr_cap: int = 65536,
        terminate_grace: float = 2.0,
        exit_timeout: float = 10.0,
    ) -> None:
        self.model = model
        self.executable = executable
        self.cwd = cwd
        self.env = dict(env or {})
        self.extra_args = list(extra_args)
        self.stderr_cap = stderr_cap
        self.terminate_grace = terminate_grace
        self.exit_timeout = exit_timeout

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r})"

    @property
    def profile(self) -> ModelProfile:
        """A CLI agent: driven by ``stream``, recorded as ``cli``, with its system-prompt option and cwd."""
        return ModelProfile(
            is_cli=True,
            endpoint="cli",
            system_prompt_option=self.system_prompt_option,
            cwd=self.cwd,
            transport=type(self).__name__,
        )

    async def invoke(self, request: ModelRequest, *, on_chunk: ChunkSink | None = None) -> ModelResponse:
        """A CLI agent takes no request/response call: ``ProviderError`` pointing at ``stream``."""
        raise ProviderError(
            f"{self.provider} is a CLI agent provider: use stream(prompt)",
            provider=self.provider,
            model=self.model,
        )

    def build_args(
        self, prompt: str, *, resume: str | None, model: str, options: Mapping[str, Any]
    ) -> list[str]:
        """The CLI arguments after the executable."""
        raise NotImplementedError

    def new_parser(self, started: float) -> CLIEventParser:
        """A fresh parser for one run."""
        raise NotImplementedError

    def default_env(self) -> dict[str, str]:
        """Variables the provider sets unless the caller did (none by default)."""
        return {}

    async def before_spawn(self, parser: CLIEventParser, *, resume: str | None, home: str | None) -> None:
        """Prepare ``parser`` before the CLI starts (Codex reads its usage baseline here)."""

    def command(
        self, prompt: str, *, resume: str | None = None, options: Mapping[str, Any] | None = None
    ) -> list[str]:
        """The full argv ``stream`` would run (the executable resolved).

        Raises:
            ValueError: Empty prompt, empty resume id or unknown option keys.
            CLINotFound: The executable is missing.
        """
        opts = self._check(prompt, resume, options)
        exe = resolve_executable(
            self.env_var, self.default_executable, provider=self.provider, override=self.executable
        )
        model = str(opts.get("model") or self.model)
        extra = self.child_extra_args(opts)
        return [
            *exe,
            *self.build_args(prompt, resume=resume, model=model, options={**opts, "extra_args": extra}),
        ]

    def _check(self, prompt: object, resume: object, options: Mapping[str, Any] | None) -> dict[str, Any]:
        # Typed ``object``: callers outside the type checker pass anything, and are told why not.
        if not isinstance(prompt, str) or not prompt.strip():
            raise UsageError(f"{self.provider}: the prompt must be a non-empty string, got {prompt!r}")
        if resume is not None and (not isinstance(resume, str) or not resume.strip()):
            raise UsageError(f"{self.provider}: resume must be a non-empty session id, got {resume!r}")
        opts = dict(options or {})
        unknown = sorted(set(opts) - self.option_keys)
        if unknown:
            raise UsageError(
                f"{self.provider}: unknown option(s) {unknown}; accepted: {sorted(self.option_keys)}"
            )
        return opts

    def child_env(self, opts: Mapping[str, Any]) -> dict[str, str]:
        """The environment the CLI starts with: this process's, the defaults, ``env``, the call's ``env``."""
        env = dict(os.environ)
        for key, value in self.default_env().items():
            env.setdefault(key, value)
        env.update(self.env)
        env.update({str(k): str(v) for k, v in (opts.get("env") or {}).items()})
        return env

    def child_cwd(self, opts: Mapping[str, Any]) -> str:
        """The directory the CLI starts in: the call's ``cwd``, else the model's (absolute)."""
        return _absolute(opts.get("cwd") or self.cwd)

    def child_extra_args(self, opts: Mapping[str, Any]) -> list[str]:
        """The extra arguments the CLI gets: the model's, then the call's ``extra_args``."""
        return [*self.extra_args, *[str(a) for a in opts.get("extra_args", ())]]

    async def stream(
        self, prompt: str, *, resume: str | None = None, options: Mapping[str, Any] | None = None
    ) -> AsyncIterator[StreamChunk]:
        """Run the CLI on ``prompt`` (resuming provider session ``resume``) and yield its chunks.

        Chunks arrive as the CLI prints them. A stdout line that is not a JSON object is
        yielded as a ``system`` chunk with ``metadata["diagnostic"]`` (the line),
        ``metadata["line_number"]`` and ``metadata["reason"]`` (``not_json``, ``not_object``,
        ``torn``, ``too_long``); it never stops the stream.

        Raises:
            ValueError: Bad arguments (before anything is started).
            CLINotFound: The executable is missing.
            CLIError: After the chunks that arrived: the CLI exited non-zero or was killed
                (``kind`` classified), or it exited 0 without its terminal event (``kind="stream"``).
        """
        opts = self._check(prompt, resume, options)
        argv = self.command(prompt, resume=resume, options=opts)
        model = str(opts.get("model") or self.model)
        env = self.child_env(opts)
        # The CLI's environment holds its credentials (ANTHROPIC_API_KEY, ...): a CLI that echoes
        # one in its output or an error must not put it into the append-only log.
        scrub = Scrubber(value for name, value in env.items() if _env_secret(name, value))
        cwd = self.child_cwd(opts)
        home = cli_home(self.provider, env)
        started = time.monotonic()
        parser = self.new_parser(started)
        await self.before_spawn(parser, resume=resume, home=home)
        diagnostics: list[str] = []
        announced = False
        proc = CLIProcess(
            argv,
            env=env,
            cwd=cwd,
            stderr_cap=self.stderr_cap,
            terminate_grace=self.terminate_grace,
            exit_timeout=self.exit_timeout,
            provider=self.provider,
        )
        async with proc:
            async for item in proc:
                if isinstance(item, Diagnostic):
                    line = scrub(item.line)
                    diagnostics.append(line)
                    yield StreamChunk(
                        "system",
                        metadata={
                            "diagnostic": line,
                            "line_number": item.line_number,
                            "reason": item.reason,
                        },
                    )
                    continue
                for chunk in parser.feed(item):
                    if not announced and chunk.type == "system" and chunk.metadata.get("session_id"):
                        # Where the CLI keeps this session: what recover reconciles with.
                        announced = True
                        chunk.metadata.setdefault("cwd", cwd)
                        # ~ for the home directory: the log records no user's home (recover expands it)
                        chunk.metadata["cli_home"] = shown_path(home) if home is not None else None
                    yield _scrub_chunk(chunk, scrub)
            status = await proc.wait_exit()
        if status.failed:
            raise cli_failure(
                status,
                scrub(proc.stderr),
                texts=[*diagnostics, *(scrub(t) for t in parser.error_texts)],
                provider=self.provider,
                model=model,
                http_status=parser.http_status,
            )
        if not parser.finished:
            raise CLIError(
                f"{self.provider} CLI exited 0 without its final event (output cut short)",
                exit_code=0,
                stderr=scrub(proc.stderr),
                kind="stream",
                provider=self.provider,
                model=model,
            )


_ENV_SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials", "auth"}
)


def _env_secret(name: str, value: str) -> bool:
    """True for an environment variable that holds a credential (``ANTHROPIC_API_KEY``, ...).

    Stricter than ``is_secret_name``: ``PWD`` is the working directory here, and a value
    that is a path (``SSH_AUTH_SOCK``, ``GOOGLE_APPLICATION_CREDENTIALS``) names where a
    secret is, not the secret.
    """
    words = set(re.split(r"[-_.]+", name.lower()))
    return bool(words & _ENV_SECRET_WORDS) and not value.startswith(("/", "~", "."))


def _scrub_chunk(chunk: StreamChunk, scrub: Scrubber) -> StreamChunk:
    """``chunk`` with every secret value of ``scrub`` replaced (the same object when none is in it)."""
    # Most chunks hold no secret: one search over their text says so without rebuilding them.
    if not scrub.found_in(chunk.content, chunk.tool_input, chunk.tool_output, chunk.metadata):
        return chunk
    changed = {
        name: scrub(value)
        for name in ("content", "tool_input", "tool_output", "metadata")
        if (value := getattr(chunk, name)) is not None
    }
    changed = {name: value for name, value in changed.items() if value != getattr(chunk, name)}
    return replace(chunk, **changed) if changed else chunk


def cli_agent_of(model: object) -> CLIAgentModel | None:
    """The CLI provider behind ``model``: itself, or what it wraps, however deeply nested.

    What it wraps: ``as_chat_model``'s target, a wrapper's ``inner``, an iModel's backend. The wire recorder under ``run()`` needs the provider object itself (its child environment
    names the upstream the CLI would call), not only its profile.
    """
    seen: set[int] = set()
    todo: list[object] = [model]
    while todo:
        candidate = todo.pop()
        if candidate is None or id(candidate) in seen:
            continue
        seen.add(id(candidate))
        if isinstance(candidate, CLIAgentModel):
            return candidate
        todo.extend(getattr(candidate, name, None) for name in ("target", "inner", "_backend"))
    return None
