"""The price table: defaults, dated variants, user entries from code, file and environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from turnlog.analytics import PRICES_ENV, Price, PriceTable, PriceTableError, load_price_table


def test_dated_variants_match_the_longest_entry() -> None:
    table = PriceTable()
    assert table.lookup("gpt-4o-2024-08-06") == Price(2.5, 10.0)
    assert table.lookup("gpt-4o-mini-2024-07-18") == Price(0.15, 0.6)
    assert table.lookup("openai/gpt-4o") == Price(2.5, 10.0)
    assert table.lookup("gpt-4o") == Price(2.5, 10.0)
    assert table.lookup("gpt-4") is None  # a prefix of a known name is not that name


def test_unknown_model_or_tokens_cost_none_never_zero() -> None:
    table = PriceTable()
    assert table.cost("my-model", 100, 100) is None
    assert table.cost("gpt-4o", None, 100) is None
    assert table.cost("gpt-4o", 1_000_000, 1_000_000) == 12.5


def test_later_sources_win(tmp_path: Path) -> None:
    file = tmp_path / "prices.json"
    file.write_text('{"gpt-4o": {"input": 1, "output": 2}, "mine": {"input": 0, "output": 0}}')
    env = {PRICES_ENV: '{"gpt-4o": {"input": 9, "output": 9}, "env-only": {"input": 3, "output": 4}}'}
    table = load_price_table(file, environ=env, entries={"mine": Price(0.5, 0.5)})
    assert table.lookup("gpt-4o") == Price(1.0, 2.0)
    assert table.lookup("env-only") == Price(3.0, 4.0)
    assert table.lookup("mine") == Price(0.5, 0.5)
    assert table.lookup("claude-opus-4-20250514") == Price(15.0, 75.0)


def test_env_may_name_a_file(tmp_path: Path) -> None:
    file = tmp_path / "p.json"
    file.write_text('{"x": {"input": 1, "output": 1}}')
    assert load_price_table(environ={PRICES_ENV: str(file)}).lookup("x") == Price(1.0, 1.0)


def test_fingerprint_changes_with_content() -> None:
    assert PriceTable().fingerprint() == PriceTable().fingerprint()
    assert PriceTable().fingerprint() != PriceTable({"x": Price(1, 1)}).fingerprint()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("[1, 2]", "expected a JSON object"),
        ('{"m": {"input": 1}}', "'input' and 'output'"),
        ('{"m": {"input": -1, "output": 1}}', "input must be a number >= 0"),
        ('{"m": {"input": "1", "output": 1}}', "input must be a number >= 0"),
        ("{oops", "not valid JSON"),
    ],
)
def test_malformed_prices_are_refused_with_the_source(raw: str, message: str) -> None:
    with pytest.raises(PriceTableError, match=message) as caught:
        load_price_table(environ={PRICES_ENV: raw})
    assert caught.value.source == f"${PRICES_ENV}"


def test_missing_price_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PriceTableError, match="cannot read"):
        load_price_table(tmp_path / "nope.json", environ={})
