"""When and how long to wait before retrying a failed HTTP call to a model provider.

The policy mirrors what the official OpenAI client does, so that a turnlog process behaves
towards a provider exactly like the provider's own SDK would:

- retry on 408, 409 (lock timeout), 429 and 5xx answers and on transport failures (connect
  errors, timeouts);
- a server delay above ``max_retry_after`` (120 s, the client's ``MAX_RETRY_AFTER_DELAY``)
  means "do not retry now", even with ``x-should-retry: true`` (the caller gets the error with
  ``retry_after`` set and decides);
- otherwise honour the server's wish: ``x-should-retry: true|false`` overrides the status;
  the wait is ``retry-after-ms`` (milliseconds), else ``retry-after`` (seconds, or an HTTP
  date);
- otherwise wait ``min(initial_delay * 2**n, max_delay)`` scaled by a jitter factor in
  ``(1 - jitter, 1]`` so that many clients do not retry in lockstep.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from turnlog._errors import UsageError

__all__ = ["RetryPolicy", "parse_retry_after"]


def _default_retry_statuses() -> frozenset[int]:
    return frozenset({408, 409, 429, *range(500, 600)})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many times to try a call and how long to wait in between.

    Attributes:
        max_attempts: Total HTTP attempts, the first one included (1 disables retries).
        initial_delay: Backoff base in seconds (the wait after the first failure).
        max_delay: Cap of the computed backoff in seconds.
        jitter: Fraction of the backoff that is randomized away (0 disables jitter).
        max_retry_after: Longest server-requested wait (seconds) that is honoured; a longer
            ``retry-after`` stops retrying and surfaces the error.
        retry_statuses: HTTP statuses that are retried.
        retry_transport_errors: Retry connect/read failures and timeouts that happen before a
            response started (a stream cut after it started is never retried).
        random: The source of jitter (a seeded ``random.Random().random`` makes it repeatable).

    Example:
        >>> policy = RetryPolicy(max_attempts=5, initial_delay=0.1, jitter=0.0)
        >>> policy.backoff(2)
        0.4
    """

    max_attempts: int = 3
    initial_delay: float = 0.5
    max_delay: float = 8.0
    jitter: float = 0.25
    max_retry_after: float = 120.0
    retry_statuses: frozenset[int] = field(default_factory=_default_retry_statuses)
    retry_transport_errors: bool = True
    random: Callable[[], float] = field(default=random.random, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise UsageError(f"RetryPolicy.max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_delay < 0 or self.max_delay < 0 or self.max_retry_after < 0:
            raise UsageError("RetryPolicy delays must not be negative")
        if not 0.0 <= self.jitter <= 1.0:
            raise UsageError(f"RetryPolicy.jitter must be within [0, 1], got {self.jitter}")

    def backoff(self, retry_index: int) -> float:
        """The computed wait before retry number ``retry_index`` (0-based), jitter included."""
        base = min(self.initial_delay * 2.0**retry_index, self.max_delay)
        return base * (1.0 - self.jitter * self.random())

    def should_retry_status(self, status: int, headers: Mapping[str, str]) -> bool:
        """Whether an answer with ``status`` and ``headers`` may be retried at all."""
        delay = parse_retry_after(headers)
        if delay is not None and delay > self.max_retry_after:
            return False
        override = _header(headers, "x-should-retry")
        if override is not None and override.strip().lower() in ("true", "false"):
            return override.strip().lower() == "true"
        return status in self.retry_statuses

    def delay(self, retry_index: int, retry_after: float | None) -> float:
        """The wait before retry ``retry_index``: the server's wish when usable, else backoff."""
        if retry_after is not None and 0.0 < retry_after <= self.max_retry_after:
            return retry_after
        return self.backoff(retry_index)

    def to_dict(self) -> dict[str, object]:
        """The policy as a JSON object (the jitter source is not part of it)."""
        return {
            "max_attempts": self.max_attempts,
            "initial_delay": self.initial_delay,
            "max_delay": self.max_delay,
            "jitter": self.jitter,
            "max_retry_after": self.max_retry_after,
            "retry_statuses": sorted(self.retry_statuses),
            "retry_transport_errors": self.retry_transport_errors,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> RetryPolicy:
        """The inverse of ``to_dict``; missing keys take their defaults."""
        known = {k: v for k, v in data.items() if k in _FIELDS}
        unknown = sorted(set(data) - _FIELDS)
        if unknown:
            raise UsageError(f"unknown RetryPolicy fields: {', '.join(unknown)}")
        if "retry_statuses" in known:
            statuses = known["retry_statuses"]
            if not isinstance(statuses, Iterable):
                raise TypeError(
                    f"RetryPolicy.retry_statuses must be a list of status codes, got {statuses!r}"
                )
            known["retry_statuses"] = frozenset(statuses)
        return cls(**known)  # type: ignore[arg-type]


_FIELDS = frozenset(
    {
        "max_attempts",
        "initial_delay",
        "max_delay",
        "jitter",
        "max_retry_after",
        "retry_statuses",
        "retry_transport_errors",
    }
)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        # Plain dicts are case-sensitive; httpx.Headers is not.
        lowered = {k.lower(): v for k, v in headers.items()}
        value = lowered.get(name)
    return value


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the server asked to wait: ``retry-after-ms``, else ``retry-after`` (seconds or a date).

    Returns None when neither header is present or readable. ``now`` (a Unix time) is only
    used for the HTTP-date form.
    """
    ms = _header(headers, "retry-after-ms")
    if ms is not None:
        try:
            return max(float(ms) / 1000.0, 0.0)
        except ValueError:
            pass
    value = _header(headers, "retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    current = time.time() if now is None else now
    return max(when.timestamp() - current, 0.0)
