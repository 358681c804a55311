"""The Anthropic Messages API over HTTP: plain JSON and SSE streaming.

``AnthropicModel`` is the ``HTTPChatModel`` of the Messages codec (``_codec_anthropic``), for
``POST {base_url}/v1/messages``: it shares retries, timeouts, the error tree, credential
scrubbing and the loopback guard with every HTTP provider. Every request carries
``anthropic-version: 2023-06-01`` (``ANTHROPIC_VERSION``), the one stable version.
"""

from __future__ import annotations

from typing import ClassVar

from ._codec_anthropic import (
    ANTHROPIC_PARAMETERS,
    ANTHROPIC_VERSION,
    DEFAULT_MAX_TOKENS,
    RESPONSE_TOOL,
    AnthropicCodec,
    to_messages,
)
from ._http_model import HTTPChatModel

__all__ = [
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_PARAMETERS",
    "ANTHROPIC_VERSION",
    "DEFAULT_MAX_TOKENS",
    "RESPONSE_TOOL",
    "AnthropicModel",
    "to_messages",
]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"


class AnthropicModel(HTTPChatModel):
    """A Messages API client (api.anthropic.com or any server speaking it).

    Args:
        model: The model, e.g. ``claude-sonnet-4-5``.
        provider: The provider name recorded with each call (default ``anthropic``).
        base_url: The API root without ``/v1``; default ``https://api.anthropic.com``.
        api_key: The key; when None it is read from ``$ANTHROPIC_API_KEY`` at request time.
        timeout, retry, headers, client: As for ``OpenAIChatModel``.

    Example:
        ```python
        model = AnthropicModel("claude-sonnet-4-5")  # key from $ANTHROPIC_API_KEY
        reply = await model.invoke(ModelRequest(messages=[{"role": "user", "content": "hi"}]))
        ```
    """

    codec: ClassVar[AnthropicCodec] = AnthropicCodec()
    request_params: frozenset[str] | None = AnthropicCodec.ACCEPTED_PARAMETERS
    default_provider: ClassVar[str] = "anthropic"
    default_base_url: ClassVar[str] = ANTHROPIC_BASE_URL
    default_api_key_env: ClassVar[str | None] = "ANTHROPIC_API_KEY"

    def __repr__(self) -> str:
        shown = self._shown_url.removesuffix("/v1/messages")
        return f"AnthropicModel(provider={self.provider!r}, model={self.model!r}, base_url={shown!r})"
