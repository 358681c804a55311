"""The chunks of a wire batch: every secret the request carried is out of them, however it is spelt.

``wire_chunks`` rebuilds a piece only when its JSON text holds a secret; a secret that JSON
escapes (a quote, a backslash, a control character) is not found verbatim there, so then
every piece is scrubbed.
"""

from __future__ import annotations

from typing import Any

import pytest

from turnlog.kernel.models import StreamChunk
from turnlog.kernel.models._secrets import Scrubber
from turnlog.kernel.wire._chunks import plain_json, wire_chunks

PLAIN = "sk-plain-0123456789"
QUOTED = 'sk-"quoted"\\0123456789'


def _pieces(secret: str) -> list[StreamChunk]:
    return [
        StreamChunk(type="text", content="nothing to hide", is_delta=True),
        StreamChunk(type="text", content=f"the key is {secret}", is_delta=True),
        StreamChunk(type="tool_use", tool_name="f", tool_id="t1", tool_input={secret: [f"x{secret}y", 1]}),
        StreamChunk(type="tool_result", tool_id="t1", tool_output={"nested": {"deep": secret}}),
    ]


@pytest.mark.parametrize("secret", [PLAIN, QUOTED])
def test_each_piece_is_what_a_full_scrub_gives(secret: str) -> None:
    """Pieces with and without a secret come out as scrubbing the whole of each would make them."""
    scrub = Scrubber([secret])
    pieces = _pieces(secret)
    chunks, answered = wire_chunks([("data: {}\n\n", pieces, None)], scrub, 0)
    expected: list[dict[str, Any]] = [scrub(plain_json(p.to_dict())) for p in pieces]
    assert answered and [c.seq for c in chunks] == [1, 2, 3, 4]
    got = [c.model_dump(include={"content", "tool_input", "tool_output"}) for c in chunks]
    assert got == [{k: e.get(k) for k in ("content", "tool_input", "tool_output")} for e in expected]
    assert secret not in repr([c.model_dump() for c in chunks])
    assert chunks[1].content == "the key is <redacted>"


def test_without_secrets_the_pieces_pass_as_plain_json() -> None:
    """No secret to look for: the pieces are only made plain JSON."""
    chunks, _ = wire_chunks([("data: {}\n\n", _pieces(PLAIN), None)], Scrubber(), 0)
    assert chunks[1].content == f"the key is {PLAIN}"
