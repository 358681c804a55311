"""A message renders the same whether it was just made or rebuilt from the log."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from turnlog.projections import Instruction, message_from_dict, render_yaml

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@given(st.dictionaries(st.text(min_size=1, max_size=5), json_values, min_size=1, max_size=5))
def test_nested_key_order_does_not_change_the_rendering(data: dict) -> None:
    reordered = dict(reversed(list(data.items())))
    assert render_yaml({"Context": data}) == render_yaml({"Context": reordered})


def test_top_level_sections_keep_their_order() -> None:
    assert render_yaml({"Instruction": "a", "Context": "b"}).splitlines() == ["Instruction: a", "Context: b"]


def test_instruction_renders_identically_after_a_round_trip() -> None:
    ins = Instruction.create(
        "go",
        context=[{"b": 1, "a": {"d": 2, "c": 3}}],
        tool_schemas=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    )
    stored = orjson.dumps(ins.to_dict(), option=orjson.OPT_SORT_KEYS)  # as the log keeps it
    again = message_from_dict(orjson.loads(stored))
    assert again.rendered == ins.rendered
