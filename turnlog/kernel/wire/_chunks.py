"""One batch of upstream SSE events as chunk events: shared by ``turnlog proxy`` and ``run()``.

Every chunk that crosses the wire passes here, so it does the least it can: one JSON round
trip per piece (to plain JSON), a search of that JSON text for the secrets (the piece is
scrubbed, rebuilt, only when one is there), one model copy to number it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from turnlog.kernel.models import StreamChunk
from turnlog.kernel.models._secrets import Scrubber
from turnlog.projections import ChunkReceived, stored_payload

__all__ = ["SSEBatch", "plain_json", "wire_chunks", "wire_payloads"]

#: Each SSE event of a batch: its exact text, the pieces the codec made of it, its error if any.
SSEBatch = Sequence[tuple[str, Sequence[StreamChunk], str | None]]


def plain_json(value: Any) -> Any:
    """``value`` as plain JSON types (what a payload can hold); anything else as its ``str``."""
    return orjson.loads(orjson.dumps(value, default=str))


#: What JSON text escapes (orjson): a secret holding one of these is not found verbatim in it.
_ESCAPED = frozenset('"\\') | frozenset(chr(c) for c in range(0x20))


def _plain_scrubbed(scrub: Scrubber, needles: tuple[bytes, ...] | None) -> Callable[[Any], Any]:
    """``plain_json`` then ``scrub``, rebuilding a piece only when its JSON text holds a secret.

    ``needles``: the secrets as they appear in JSON text (None: some secret would be escaped
    there, so every piece is scrubbed).
    """

    def plain(value: Any) -> Any:
        text = orjson.dumps(value, default=str)
        if needles is not None and not any(needle in text for needle in needles):
            return orjson.loads(text)  # no secret in it: nothing to replace (most pieces)
        return scrub(orjson.loads(text))

    return plain


def wire_chunks(batch: SSEBatch, scrub: Scrubber, after: int) -> tuple[list[ChunkReceived], bool]:
    """The chunks of ``batch``, numbered from ``after + 1``, and whether any event had a piece.

    Each SSE event gives its pieces (an error first, a bare ``system`` chunk when it had
    neither), marked ``wire``; the first keeps the event's exact text in ``metadata.sse``.
    """
    chunks: list[ChunkReceived] = []
    answered = False
    escaped = any(_ESCAPED.intersection(secret) for secret in scrub.secrets)
    plain = _plain_scrubbed(scrub, None if escaped else tuple(s.encode() for s in scrub.secrets))
    for raw, pieces, error in batch:
        answered = answered or bool(pieces)
        fields: list[dict[str, Any]] = []
        if error is not None:
            fields.append({"type": "error", "content": error, "is_error": True})
        for piece in pieces:
            fields.append(plain(piece.to_dict()))
        if not fields:
            fields.append({"type": "system"})
        sse = scrub(raw)
        for i, field in enumerate(fields):
            metadata = {
                **(field.pop("metadata", None) or {}),
                "wire": True,
                **({"sse": sse} if i == 0 else {}),
            }
            # built once, with its final seq and metadata: validated as it is made
            chunks.append(ChunkReceived(**field, seq=after + len(chunks) + 1, metadata=metadata))
    return chunks, answered


def wire_payloads(batch: SSEBatch, scrub: Scrubber, after: int) -> tuple[list[dict[str, Any]], bool]:
    """``wire_chunks`` as the ``stream.chunk`` payloads the store keeps (``new_event``'s dump).

    Each chunk is built, hence validated, with its final seq and metadata (never copied with
    new values), so its payload needs no second validation.
    """
    chunks, answered = wire_chunks(batch, scrub, after)
    return [stored_payload(c) for c in chunks], answered
