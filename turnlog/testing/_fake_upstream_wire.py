"""What the API modules of the fake upstream hand to its HTTP server: a reply as frames.

Each API module (``_fake_anthropic``, ``_fake_responses``, ``_fake_gemini``) turns a script entry
into a ``Reply``: a status, headers and either one JSON body or a list of SSE ``Frame``s
(``_loopback.sse``). The server writes the frames with the entry's pacing (``chunk_delay_ms``
before each fragment frame) and cuts (``cut_after``), so the pacing rules live in one place for
every API.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ._loopback import Frame

__all__ = ["Reply", "fragments"]


@dataclass
class Reply:
    """An answer: a JSON body, or SSE frames (then ``error_frame`` is the in-stream error, if any)."""

    status: int
    body: Any = None
    frames: list[Frame] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    error_frame: Frame | None = None
    tail: int = 0
    """How many frames at the end close the stream (an in-stream error replaces them)."""


def fragments(text: str, size: int | None) -> list[str]:
    """The pieces a text streams in: ``size`` characters each, or one word (with its space) each."""
    if size is not None:
        return [text[i : i + size] for i in range(0, len(text), size)] or [""]
    return re.findall(r"\S+\s*|\s+", text) or [""]
