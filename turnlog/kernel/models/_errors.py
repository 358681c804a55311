"""Provider errors, translated once at the transport boundary.

::

    TurnlogError                      (turnlog._errors)
    └── ProviderError                 provider, model (also a RuntimeError)
        ├── ProviderHTTPError         status_code, body, retry_after
        │   ├── AuthenticationError   401/403: bad or missing API key
        │   │   └── MissingAPIKey     no key given and its variable unset, before any request: env_var
        │   ├── RateLimitError        429: rate limit or quota (retry_after when given)
        │   ├── ContextLengthError    400 context_length_exceeded
        │   └── ServerError           5xx after retries
        ├── ProviderConnectionError   connect/read failures, a stream cut mid-way
        ├── ProviderTimeout           a connect/read timeout or a run deadline (also a TimeoutError)
        ├── ResponseFormatError       the provider answered with something undecodable
        ├── ModelRequestsBlocked      a non-loopback request while TURNLOG_ALLOW_MODEL_REQUESTS=0: url
        └── CLIError                  a CLI agent failed: exit_code, stderr, kind
            └── CLINotFound           the executable is missing

Every provider error is a ``RuntimeError`` too, as in the seed, so ``except RuntimeError``
catches a failed call, a failed ``run()`` or a quota error; a timeout is also a
``TimeoutError``. The whole tree is drawn in ``docs/errors.md``.
"""

from __future__ import annotations

from turnlog._errors import TurnlogError, UsageError

__all__ = [
    "AuthenticationError",
    "CLIError",
    "CLINotFound",
    "ContextLengthError",
    "MissingAPIKey",
    "ModelRequestsBlocked",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderHTTPError",
    "ProviderTimeout",
    "RateLimitError",
    "ResponseFormatError",
    "ServerError",
    "TurnlogError",
    "UsageError",
]


class ProviderError(TurnlogError, RuntimeError):
    """A model provider failed.

    Attributes:
        provider: The provider name (``openai``, ``claude_code``, ...).
        model: The model name, when known.
        attempts: How many attempts the call made before failing (transports that retry set it).
        latency_ms: Wall time of the failed call including retries, when the transport measured it.
    """

    attempts: int = 1
    latency_ms: float | None = None

    def __init__(self, message: str, *, provider: str = "", model: str = "") -> None:
        self.provider = provider
        self.model = model
        super().__init__(message)


class ProviderHTTPError(ProviderError):
    """The provider answered with an HTTP error status.

    Attributes:
        status_code: The HTTP status.
        body: The response body (decoded JSON when possible, else text).
        retry_after: Seconds the provider asked to wait, when it said.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        body: object = None,
        retry_after: float | None = None,
        provider: str = "",
        model: str = "",
    ) -> None:
        self.status_code = status_code
        self.body = body
        self.retry_after = retry_after
        super().__init__(message, provider=provider, model=model)


class AuthenticationError(ProviderHTTPError):
    """401/403: the API key is missing, wrong or not allowed to use the model."""


class RateLimitError(ProviderHTTPError):
    """429: rate limit or quota; ``retry_after`` says how long to wait when known."""


class ContextLengthError(ProviderHTTPError):
    """The request is longer than the model's context window."""


class ServerError(ProviderHTTPError):
    """A 5xx answer that retries did not cure."""


class ProviderConnectionError(ProviderError):
    """The connection failed, or a stream was cut before it finished."""


class ProviderTimeout(ProviderError, TimeoutError):
    """A connect/read timeout, or the deadline of a run passed."""


class ResponseFormatError(ProviderError):
    """The provider's answer could not be decoded (never turned into None)."""


class CLIError(ProviderError):
    """A CLI agent failed.

    Attributes:
        exit_code: The process exit status (None when it was killed or never ran).
        stderr: The captured standard error (capped).
        kind: A classification: ``auth``, ``rate_limit``, ``usage``, ``session_not_found``,
            ``crash``, ``stream`` or ``unknown``.
    """

    def __init__(
        self,
        message: str,
        *,
        exit_code: int | None = None,
        stderr: str = "",
        kind: str = "unknown",
        provider: str = "",
        model: str = "",
    ) -> None:
        self.exit_code = exit_code
        self.stderr = stderr
        self.kind = kind
        super().__init__(message, provider=provider, model=model)


class CLINotFound(CLIError):
    """The CLI executable could not be found or started."""


class MissingAPIKey(AuthenticationError):
    """No API key was given and its environment variable is unset (raised before any request).

    It is an ``AuthenticationError`` with status 401 because that is what the provider would
    answer to a request without a key.

    Attributes:
        env_var: The environment variable that was consulted.
    """

    def __init__(self, env_var: str | None, *, provider: str = "", model: str = "") -> None:
        self.env_var = env_var
        where = f"pass api_key=... or set ${env_var}" if env_var else "pass api_key=..."
        super().__init__(
            f"{provider} {model}: no API key ({where})", status_code=401, provider=provider, model=model
        )


class ModelRequestsBlocked(ProviderError):
    """A request to a non-loopback host while ``TURNLOG_ALLOW_MODEL_REQUESTS=0``.

    Attributes:
        url: The URL that would have been called.
    """

    def __init__(self, url: str, *, provider: str = "", model: str = "") -> None:
        self.url = url
        super().__init__(
            f"{provider} {model}: model requests to {url} are blocked (TURNLOG_ALLOW_MODEL_REQUESTS=0); "
            "only loopback servers (127.0.0.1, ::1, localhost) may be called",
            provider=provider,
            model=model,
        )
