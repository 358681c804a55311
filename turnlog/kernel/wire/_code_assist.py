"""Google's Code Assist API: the Gemini API in an envelope (Gemini CLI signed in with Google).

Gemini CLI signed in with a Google account (``oauth-personal``) sends its model calls to
``{CODE_ASSIST_ENDPOINT}/v1internal:streamGenerateContent?alt=sse`` (and ``:generateContent``)
with the body ``{"model", "project", "user_prompt_id", "request": {contents, tools, ...}}``,
and each answer or stream event is ``{"response": {candidates, usageMetadata, ...},
"traceId"}``. Inside the envelope everything is the Gemini API, so ``CodeAssistCodec`` is the
Gemini codec with the envelope taken off what it reads; what is forwarded and recorded as
SSE text stays the exact bytes of the wire.
"""

from __future__ import annotations

from typing import Any

from turnlog.kernel.models import ModelResponse, StreamChunk
from turnlog.kernel.models._codec_gemini import ContentAssembly, GeminiCodec

__all__ = ["CodeAssistAssembly", "CodeAssistCodec", "unwrap_request", "unwrap_response"]


def unwrap_request(body: dict[str, Any]) -> dict[str, Any]:
    """The Gemini request inside a Code Assist body (the body itself when it has none)."""
    inner = body.get("request")
    return inner if isinstance(inner, dict) else body


def unwrap_response(raw: Any) -> Any:
    """The Gemini answer inside a Code Assist answer or stream event (errors are not wrapped)."""
    if isinstance(raw, dict) and isinstance(raw.get("response"), dict) and "error" not in raw:
        return raw["response"]
    return raw


class CodeAssistAssembly:
    """Folds Code Assist stream events: the Gemini assembly, each event unwrapped."""

    unit = "chunks"
    end_marker: str | None = None

    def __init__(self) -> None:
        self._inner = ContentAssembly()

    @property
    def count(self) -> int:
        """Events folded so far."""
        return self._inner.count

    def missing(self) -> str | None:
        """What the stream still lacks to be complete (None: complete)."""
        return self._inner.missing()

    def add(self, chunk: Any) -> bool:
        """Fold one event; True when it carried output."""
        return self._inner.add(unwrap_response(chunk))

    def take_pieces(self) -> list[StreamChunk]:
        """The chunks completed since the last call."""
        return self._inner.take_pieces()

    def result(self) -> dict[str, Any]:
        """The assembled answer, shaped like a ``generateContent`` answer (without the envelope)."""
        return self._inner.result()


class CodeAssistCodec(GeminiCodec):
    """The Gemini codec for Code Assist's envelope (used by the recorder, never to send)."""

    api = "code_assist"
    endpoint = "v1internal:generateContent"

    def parse(self, raw: Any, *, model: str, provider: str) -> ModelResponse:
        return super().parse(unwrap_response(raw), model=model, provider=provider)

    def assembly(self, model: str) -> CodeAssistAssembly:  # type: ignore[override]
        return CodeAssistAssembly()
