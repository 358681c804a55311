"""Server-sent events: the lines and ``data`` payloads of an SSE body, split as the grammar says.

Every HTTP provider reads its streamed answers through these two generators (the providers
differ in the JSON of each payload, not in the framing).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

__all__ = ["sse_data", "sse_lines"]

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


async def sse_lines(pieces: AsyncIterator[str]) -> AsyncIterator[str]:
    """Complete lines of an SSE body, split exactly where the SSE grammar says.

    Only CRLF, CR and LF end a line: ``str.splitlines`` (and httpx's ``aiter_lines``) would
    also break at U+0085 or U+2028, which may appear inside a JSON payload. A CR at the end
    of a piece is held back in case the next piece starts with its LF. An unterminated last
    line is incomplete and dropped.
    """
    pending = ""
    async for piece in pieces:
        pending += piece
        hold = pending.endswith("\r")
        *lines, rest = _LINE_BREAK.split(pending[:-1] if hold else pending)
        for line in lines:
            yield line
        pending = rest + ("\r" if hold else "")
    if pending.endswith("\r"):
        yield pending[:-1]


async def sse_data(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """The ``data`` payloads of an SSE stream (``event``/``id``/comment lines are skipped).

    An event is dispatched at a blank line; an unterminated event at the end of the stream is
    incomplete and discarded, as the SSE specification says.
    """
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
