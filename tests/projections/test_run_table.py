"""The runs table of a state is an ordered map that later changes never reach."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnlog.projections import BranchState, RunInfo
from turnlog.projections._runs import Deferred, RunTable
from turnlog.projections._state import StateBuilder

_IDS = st.sampled_from([f"r{i}" for i in range(60)]) | st.text(min_size=1, max_size=3)


@given(st.lists(st.tuples(_IDS, st.integers()), max_size=400))
def test_a_table_is_a_dict_in_start_order_and_each_version_keeps_its_entries(
    changes: list[tuple[str, int]],
) -> None:
    table: RunTable[int] = RunTable()
    model: dict[str, int] = {}
    versions: list[tuple[RunTable[int], dict[str, int]]] = []
    for key, value in changes:
        table = table.set(key, value)
        model[key] = value  # a known key keeps its place, a new one goes last
        versions.append((table, dict(model)))
    for old, expected in versions:
        assert list(old.items()) == list(expected.items())
        assert len(old) == len(expected)
        assert all(k in old and old.get(k) == v for k, v in expected.items())
        assert old.get("absent") is None and "absent" not in old
        assert old == expected


@given(st.lists(st.tuples(_IDS, st.integers()), max_size=400), st.sets(_IDS, max_size=6))
def test_values_of_gives_the_held_runs_of_some_ids_in_table_order(
    changes: list[tuple[str, int]], wanted: set[str]
) -> None:
    table: RunTable[int] = RunTable()
    for key, value in changes:
        table = table.set(key, value)
    assert table.values_of(wanted) == [v for k, v in table.items() if k in wanted]


def test_states_of_a_fold_share_the_table_and_never_see_later_runs() -> None:
    builder = StateBuilder(BranchState("b"))
    states = []
    for i in range(300):
        builder.put_run(RunInfo(run_id=f"run-{i}", verb="communicate"))
        builder.end_run(f"run-{i}", "communicate", status="ended")
        states.append(builder.freeze())
    for i, state in enumerate(states):
        assert list(state.runs) == [f"run-{j}" for j in range(i + 1)]
        assert {r.status for r in state.runs.values()} == {"ended"}
    again = BranchState("b", runs=dict(states[-1].runs))
    assert again.runs == states[-1].runs


def test_a_deferred_entry_is_decoded_once_when_used_and_keeps_its_place() -> None:
    decoded: list[str] = []

    def decode(data: str) -> int:
        decoded.append(data)
        return len(data)

    table: RunTable[int] = RunTable({"a": 1, "b": Deferred("b", "xyz", decode), "c": 3})
    assert decoded == [] and list(table) == ["a", "b", "c"] and "b" in table and len(table) == 3
    changed = table.set("c", 4)
    assert changed["b"] == 3 and table.get("b") == 3 and decoded == ["xyz"]  # once, shared
    assert dict(changed) == {"a": 1, "b": 3, "c": 4} and table.get("z", 0) == 0


def test_a_deferred_entry_that_does_not_decode_raises_where_it_is_used() -> None:
    def decode(data: str) -> int:
        raise ValueError(data)

    table: RunTable[int] = RunTable({"a": Deferred("a", "bad", decode)})
    assert list(table) == ["a"]
    with pytest.raises(ValueError, match="bad"):
        table["a"]
