"""The Gemini API (Generative Language) over HTTP: ``generateContent`` and ``streamGenerateContent``.

``GeminiAPIModel`` is the ``HTTPChatModel`` of the Gemini codec (``_codec_gemini``), for
``POST {base_url}/v1beta/models/{model}:generateContent`` (and
``:streamGenerateContent?alt=sse`` when streaming).
"""

from __future__ import annotations

import os
from typing import ClassVar

from ._codec_gemini import GEMINI_PARAMETERS, GeminiCodec, to_contents
from ._http_model import HTTPChatModel

__all__ = ["GEMINI_BASE_URL", "GEMINI_PARAMETERS", "GeminiAPIModel", "to_contents"]

GEMINI_BASE_URL = "https://generativelanguage.googleapis.com"


class GeminiAPIModel(HTTPChatModel):
    """A Gemini API client (generativelanguage.googleapis.com or any server speaking it).

    Args:
        model: The model, e.g. ``gemini-2.5-flash``.
        provider: The provider name recorded with each call (default ``gemini_api``).
        base_url: The API root without ``/v1beta``; default the Generative Language API.
        api_key: The key; when None it is read from ``$GEMINI_API_KEY``, else ``$GOOGLE_API_KEY``.
        timeout, retry, headers, client: As for ``OpenAIChatModel``.
    """

    codec: ClassVar[GeminiCodec] = GeminiCodec()
    request_params: frozenset[str] | None = GeminiCodec.ACCEPTED_PARAMETERS
    default_provider: ClassVar[str] = "gemini_api"
    default_base_url: ClassVar[str] = GEMINI_BASE_URL
    default_api_key_env: ClassVar[str | None] = "GEMINI_API_KEY"

    def _key(self) -> str | None:
        if self._api_key is None and self.api_key_env == "GEMINI_API_KEY":
            fallback = os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")
            if fallback:
                return fallback
        return super()._key()
