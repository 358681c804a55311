"""OpenAI-compatible Chat Completions over HTTP: plain JSON and SSE streaming.

``OpenAIChatModel`` is the ``HTTPChatModel`` of the Chat Completions codec, for api.openai.com
and any server that speaks the same wire format (``POST {base_url}/chat/completions``): vLLM,
Ollama, LiteLLM, the loopback ``turnlog fake-openai`` server.
"""

from __future__ import annotations

from typing import ClassVar

from ._codec_openai import ChatCompletionsCodec
from ._errors import MissingAPIKey, ModelRequestsBlocked
from ._http_model import DEFAULT_TIMEOUT, HTTPChatModel, model_requests_allowed

__all__ = [
    "DEFAULT_TIMEOUT",
    "OPENAI_BASE_URL",
    "MissingAPIKey",
    "ModelRequestsBlocked",
    "OpenAIChatModel",
    "model_requests_allowed",
]

OPENAI_BASE_URL = "https://api.openai.com/v1"


class OpenAIChatModel(HTTPChatModel):
    """A Chat Completions client for OpenAI and OpenAI-compatible servers.

    Args:
        model: The model name sent in every request, e.g. ``gpt-4.1-mini``.
        provider: The provider name recorded with each call (``openai``, ``ollama``, ``fake``...);
            default ``openai``.
        base_url: The API root ending in ``/v1``; default ``https://api.openai.com/v1``.
        api_key: The key; when None it is read from ``api_key_env`` at request time.
        api_key_env: The environment variable holding the key (None: only the argument counts);
            default ``OPENAI_API_KEY``.
        require_api_key: Raise ``MissingAPIKey`` when no key is found; when False a request is
            sent without an ``Authorization`` header (local servers such as Ollama).
        timeout: Connect/read/write/pool timeouts (a float sets all four).
        retry: The retry policy (default: 3 attempts, the official client's backoff).
        headers: Extra request headers (e.g. ``OpenAI-Organization``); never recorded.
        client: An ``httpx.AsyncClient`` to use instead of one per call (or per ``async with``).

    Example:
        ```python
        model = OpenAIChatModel("gpt-4.1-mini")  # key from $OPENAI_API_KEY
        reply = await model.invoke(ModelRequest(messages=[{"role": "user", "content": "hi"}]))
        print(reply.text, reply.usage.output_tokens)
        ```
    """

    codec: ClassVar[ChatCompletionsCodec] = ChatCompletionsCodec()
    #: Chat Completions' parameters; a compatible server that takes more (vLLM's ``top_k``...)
    #: widens it on the instance (``model.request_params |= {"top_k"}``) or sets None.
    request_params: frozenset[str] | None = ChatCompletionsCodec.ACCEPTED_PARAMETERS
    default_provider: ClassVar[str] = "openai"
    default_base_url: ClassVar[str] = OPENAI_BASE_URL
    default_api_key_env: ClassVar[str | None] = "OPENAI_API_KEY"
