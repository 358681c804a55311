"""The upcaster registry: lifting old schemas one step at a time."""

from __future__ import annotations

import pytest

from turnlog.eventstore import Upcasters


def test_steps_chain_from_old_schema_to_newest() -> None:
    """Every registered step from the stored schema upwards is applied in order."""
    ups = Upcasters()

    @ups.register("message.added", 1)
    def v1(data: dict) -> dict:
        return {"content": data["text"]}

    ups.add("message.added", 2, lambda d: {**d, "sender": "user"})
    assert ups.upcast("message.added", 1, {"text": "hi"}) == (3, {"content": "hi", "sender": "user"})
    assert ups.upcast("message.added", 2, {"content": "x"}) == (3, {"content": "x", "sender": "user"})
    assert v1({"text": "t"}) == {"content": "t"}  # the decorator returns the function


def test_current_schema_and_other_types_are_untouched() -> None:
    """Data already at the newest schema, or of another type, comes back as it is."""
    ups = Upcasters()
    ups.add("a.b", 1, lambda d: {"lifted": True})
    assert ups.upcast("a.b", 2, {"x": 1}) == (2, {"x": 1})
    assert ups.upcast("c.d", 1, {"x": 1}) == (1, {"x": 1})


def test_empty_registry_is_falsy() -> None:
    """An empty registry is falsy, so stores can skip upcasting altogether."""
    ups = Upcasters()
    assert not ups
    ups.add("a.b", 1, dict)
    assert ups


def test_registering_a_step_twice_is_refused() -> None:
    """Two functions for one type and schema raise ValueError naming them."""
    ups = Upcasters()
    ups.add("a.b", 1, dict)
    with pytest.raises(ValueError, match=r"'a\.b' schema 1"):
        ups.add("a.b", 1, dict)
