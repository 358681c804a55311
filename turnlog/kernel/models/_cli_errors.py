"""What a CLI agent's failure means: one place for every CLI error classification.

A failure is classified into a ``kind`` (the ``CLIError.kind`` attribute):

=====================  =================================================================
``auth``               missing, wrong or expired credentials (HTTP 401/403, "API key not
                       valid", Gemini exit 41)
``rate_limit``         rate limits, quotas, usage limits (HTTP 429)
``context``            the request exceeds the model's context window
``session_not_found``  the provider session to resume does not exist (for example, in
                       another working directory)
``usage``              the CLI refused how it was invoked: argv, configuration, untrusted
                       workspace, bad input (Gemini exits 42, 44, 52, 55; codex 2)
``bad_request``        the upstream API refused the request (HTTP 400/404/422)
``server``             the upstream API failed (HTTP 5xx, overloaded)
``turn_limit``         the agent reached its maximum number of turns (Gemini exit 53)
``cancelled``          the CLI was interrupted (Gemini exit 130)
``crash``              the process was killed by a signal (the OS says so: a negative
                       return code), or closed its output without exiting
``stream``             it exited 0 without its final event
``unknown``            nothing above applies
=====================  =================================================================

Sources, in order of trust: the texts of the CLI's own JSON error and result lines (and an
HTTP status the CLI reported), then the exit status by its documented meaning, then standard
error with known noise lines removed (which refines a generic status: Gemini's exit 42,
"bad input", with "Error resuming session" on standard error is ``session_not_found``). An exit status of 128 or more is *not* read as a
signal: Gemini exits with the HTTP status modulo 256 (400 -> 144, 429 -> 173).
"""

from __future__ import annotations

import re
import signal as _signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._errors import CLIError

__all__ = [
    "ExitStatus",
    "classify_cli_failure",
    "classify_stream_error",
    "cli_failure",
    "kind_for_http_status",
    "meaningful_stderr",
]


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How the child process ended.

    Attributes:
        returncode: The exit status, or None when a signal ended it.
        signal: The number of the signal that ended it, or None.
        terminated_by_us: True when the process had to be stopped after it closed its output
            without exiting in time.
    """

    returncode: int | None
    signal: int | None = None
    terminated_by_us: bool = False

    @property
    def failed(self) -> bool:
        """True unless the process exited on its own with status 0."""
        return self.returncode != 0 or self.signal is not None or self.terminated_by_us

    def describe(self) -> str:
        """A short human description (``exit status 1``, ``killed by SIGKILL``)."""
        if self.signal is not None:
            try:
                name = _signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            return f"killed by {name}"
        if self.terminated_by_us:
            return "closed its output but did not exit"
        return f"exit status {self.returncode}"


_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "context",
        re.compile(
            r"context[\s._-]?(window|length)[\s._-]?(exceeded|too\s+long)|prompt is too long"
            r"|maximum context",
            re.IGNORECASE,
        ),
    ),
    (
        "session_not_found",
        re.compile(
            r"no conversation found|no saved session found|no rollout found|invalid session identifier"
            r"|session (?:id )?not found|thread (?:id )?not found|error resuming session",
            re.IGNORECASE,
        ),
    ),
    (
        "auth",
        re.compile(
            r"not logged in|/login|invalid[\s._-]?api[\s._-]?key|api[\s_]key[\s_]invalid"
            r"|api key not valid|incorrect api key|\b401\b|unauthori[sz]ed|authentication"
            r"|api key (?:is )?(?:missing|not (?:set|found))|access token could not be refreshed",
            re.IGNORECASE,
        ),
    ),
    (
        "rate_limit",
        re.compile(
            r"rate[\s._-]?limit|usage limit|\b429\b|quota|too many requests|try again at"
            r"|resource[\s_]exhausted",
            re.IGNORECASE,
        ),
    ),
    (
        "usage",
        re.compile(
            r"unknown option|unexpected argument|unknown argument|requires --verbose|requires --print"
            r"|requires a session id|invalid value|not inside a trusted directory|untrusted"
            r"|not running in a trusted directory|usage: ",
            re.IGNORECASE,
        ),
    ),
    (
        "server",
        re.compile(r"\b5\d\d\b (?:internal|bad gateway|service unavailable)|overloaded", re.IGNORECASE),
    ),
    ("bad_request", re.compile(r"invalid_request_error|INVALID_ARGUMENT|\bbad request\b", re.IGNORECASE)),
)

# An HTTP status quoted in an error text: "code": 400, "status 429", "401 Unauthorized".
_QUOTED_STATUS = re.compile(
    r"\"code\"\s*:\s*([45]\d\d)\b|\bstatus:?\s+([45]\d\d)\b"
    r"|\b([45]\d\d) (?:Bad Request|Unauthorized|Forbidden|Not Found|Too Many Requests|Internal Server Error)"
)

# Exit statuses with a documented meaning of their own.
_EXIT_KINDS: Mapping[str, Mapping[int, str]] = {
    # gemini-cli packages/core/src/utils/errors.ts and the headless docs
    "gemini": {
        41: "auth",
        42: "usage",
        44: "usage",
        52: "usage",
        53: "turn_limit",
        54: "unknown",
        55: "usage",
        130: "cancelled",
    },
    "codex": {2: "usage"},  # clap: bad argv
}

# Lines CLIs print on standard error that never explain a failure.
_NOISE = re.compile(
    r"^\s*(?:Reading additional input from stdin|\[STARTUP\]|Warning: |WARNING: proceeding"
    r"|Ripgrep is not available|Loaded cached credentials|Data collection is disabled|\}\s*$)",
)


def kind_for_http_status(status: Any) -> str | None:
    """The kind an upstream HTTP status means (None for a status that is not an error)."""
    if not isinstance(status, int) or isinstance(status, bool) or status < 400:
        return None
    if status in (401, 403):
        return "auth"
    if status == 429:
        return "rate_limit"
    if status == 413:
        return "context"
    if status >= 500:
        return "server"
    return "bad_request"


def _exit_kind(status: ExitStatus, provider: str) -> str | None:
    code = status.returncode
    if code is None:
        return None
    known = _EXIT_KINDS.get(provider, {}).get(code)
    if known is not None:
        return known
    if provider == "gemini" and code >= 128:
        # An API error: the HTTP status modulo 256 (400 -> 144). Which status exactly is
        # ambiguous only across multiples of 256; the 4xx/5xx range decides.
        for http in (code + 256, code + 512):
            if 400 <= http < 600:
                return kind_for_http_status(http)
    return None


def _by_text(texts: Sequence[str]) -> str | None:
    joined = "\n".join(t for t in texts if t)
    for kind, pattern in _PATTERNS:
        if pattern.search(joined):
            return kind
    quoted = _QUOTED_STATUS.search(joined)
    if quoted is not None:
        return kind_for_http_status(int(next(g for g in quoted.groups() if g)))
    return None


def meaningful_stderr(stderr: str) -> list[str]:
    """The lines of ``stderr`` that are not known noise, in order."""
    return [line.strip() for line in stderr.splitlines() if line.strip() and not _NOISE.match(line)]


def classify_cli_failure(
    texts: Sequence[str],
    status: ExitStatus | None = None,
    *,
    provider: str = "",
    stderr: str = "",
    http_status: Any = None,
) -> str:
    """Classify a CLI failure (see the module docstring for the kinds and the order of sources).

    Args:
        texts: Error texts of the CLI's JSON lines, oldest first.
        status: How the process ended, when it did.
        provider: The provider name (exit statuses are read by the provider's documentation).
        stderr: The captured standard error (used last, noise removed).
        http_status: An upstream HTTP status the CLI reported (Claude's ``api_error_status``).
    """
    kind = _by_text(texts)
    if kind is not None:
        return kind
    kind = kind_for_http_status(http_status)
    if kind is not None:
        return kind
    by_exit = _exit_kind(status, provider) if status is not None else None
    by_stderr = _by_text(meaningful_stderr(stderr)) if stderr else None
    if by_exit in (None, "usage", "unknown") and by_stderr is not None:
        return by_stderr  # a generic status ("bad input") is refined by what the CLI explained
    if by_exit is not None:
        return by_exit
    if status is not None and (status.signal is not None or status.terminated_by_us):
        return "crash"
    return "unknown"


def cli_failure(
    status: ExitStatus,
    stderr: str,
    *,
    texts: Sequence[str] = (),
    provider: str,
    model: str,
    http_status: Any = None,
) -> CLIError:
    """The ``CLIError`` for a failed run: classified, with the exit code, stderr and the error text.

    The message is the CLI's last JSON error text; standard error (noise removed) only when
    the stream said nothing.
    """
    kind = classify_cli_failure(texts, status, provider=provider, stderr=stderr, http_status=http_status)
    lines = meaningful_stderr(stderr)
    detail = next((t for t in reversed(texts) if t), "") or (lines[-1] if lines else "")
    message = f"{provider} CLI failed ({status.describe()}, {kind})"
    if detail:
        message += f": {detail}"
    return CLIError(
        message, exit_code=status.returncode, stderr=stderr, kind=kind, provider=provider, model=model
    )


def classify_stream_error(
    text: str | None, metadata: Mapping[str, Any] | None = None, *, provider: str = "", model: str = ""
) -> CLIError:
    """The error an ``error`` chunk means: a ``CLIError`` whose ``kind`` says what went wrong.

    ``kind`` is the chunk's own classification when it has one (unless the text says the
    context window is exceeded), else it is found from the text. Empty text becomes
    ``"(empty error)"``.
    """
    message = (text or "").strip() or "(empty error)"
    meta = metadata or {}
    kind = meta.get("kind") if isinstance(meta.get("kind"), str) else None
    found = classify_cli_failure([message], provider=provider, http_status=meta.get("api_error_status"))
    if found == "context" or kind in (None, "unknown"):
        kind = found
    return CLIError(message, kind=kind or "unknown", provider=provider, model=model)
