"""The price table: defaults, dated variants, user entries from code, file and environment."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from turnlog.analytics import PRICES_ENV, Price, PriceTable, PriceTableError, load_price_table


def test_dated_variants_match_the_longest_entry() -> None:
    table = PriceTable()
    assert table.lookup("gpt-4o-2024-08-06") == Price(2.5, 10.0, cache_read=1.25)
    assert table.lookup("gpt-4o-mini-2024-07-18") == Price(0.15, 0.6, cache_read=0.075)
    assert table.lookup("openai/gpt-4o") == Price(2.5, 10.0, cache_read=1.25)
    assert table.lookup("gpt-4o") == Price(2.5, 10.0, cache_read=1.25)
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
    assert table.lookup("claude-opus-4-20250514") == Price(15.0, 75.0, cache_read=1.5, cache_write=18.75)


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


def test_a_cached_call_is_charged_at_the_cache_prices() -> None:
    """claude-opus-4-5 has its own price; cache reads and writes are not charged as plain input."""
    table = PriceTable()
    assert table.lookup("claude-opus-4-5-20251101") == Price(5.0, 25.0, cache_read=0.5, cache_write=6.25)
    assert table.lookup("claude-opus-4-20250514") == Price(15.0, 75.0, cache_read=1.5, cache_write=18.75)
    # 1M input tokens of which 600k read from the cache and 100k written to it, 10k out.
    cost = table.cost(
        "claude-opus-4-5", 1_000_000, 10_000, cache_read_tokens=600_000, cache_write_tokens=100_000
    )
    assert cost == pytest.approx((300_000 * 5.0 + 600_000 * 0.5 + 100_000 * 6.25 + 10_000 * 25.0) / 1e6)
    assert table.cost("claude-opus-4-5", 1_000_000, 10_000) == pytest.approx(5.25)  # cache not known
    # a model without cache prices charges its cached tokens as input
    plain = PriceTable({"mine": Price(1.0, 2.0)}, include_defaults=False)
    assert plain.cost("mine", 1_000_000, 0, cache_read_tokens=500_000) == pytest.approx(1.0)


def test_user_entries_keep_winning_and_a_shorter_user_name_does_not_shadow_a_longer_default() -> None:
    table = PriceTable({"gpt-4o": Price(9.0, 9.0)}, maintained=True)
    assert table.lookup("gpt-4o-2024-08-06") == Price(9.0, 9.0)
    mini = table.lookup("gpt-4o-mini-2024-07-18")
    assert mini is not None and mini.input != 9.0


def test_cache_prices_in_a_price_file(tmp_path: Path) -> None:
    file = tmp_path / "p.json"
    file.write_text('{"x": {"input": 2, "output": 4, "cache_read": 0.2, "cache_write": 2.5}}')
    assert load_price_table(file).lookup("x") == Price(2.0, 4.0, 0.2, 2.5)
    file.write_text('{"x": {"input": 2, "output": 4, "cache_reads": 0.2}}')
    with pytest.raises(PriceTableError, match="cache_read"):
        load_price_table(file)


genai_prices = pytest.importorskip("genai_prices")


def test_the_shipped_defaults_agree_with_genai_prices() -> None:
    """Each default entry (input, output, cache read, cache write) is what the maintained database says."""
    from turnlog.analytics import DEFAULT_PRICES

    today = PriceTable(include_defaults=False, maintained=True)
    for name, price in DEFAULT_PRICES.items():
        maintained = today.lookup(name)
        assert maintained is not None, name
        assert maintained.input == pytest.approx(price.input), name
        assert maintained.output == pytest.approx(price.output), name
        assert maintained.cache_read == pytest.approx(price.cache_read), name
        assert maintained.cache_write == pytest.approx(price.cache_write), name


def test_a_maintained_table_prices_models_the_defaults_do_not_know() -> None:
    plain, maintained = PriceTable(), PriceTable(maintained=True)
    assert plain.lookup("claude-3-opus-20240229") is None
    found = maintained.lookup("claude-3-opus-20240229")
    assert found is not None and (found.input, found.output) == (15.0, 75.0)
    assert maintained.maintained == genai_prices.__version__
    assert plain.fingerprint() != maintained.fingerprint()  # the projection re-prices on a switch


def test_a_maintained_table_prices_each_call_at_the_price_of_its_day() -> None:
    """genai-prices' own history applies: o3 cost 10/40 $ per 1M before 2025-06-10, 2/8 from then."""
    table = PriceTable(maintained=True)
    before = table.lookup("openai/o3-2025-04-16", date(2025, 6, 9))
    after = table.lookup("o3", date(2025, 6, 10))
    assert before is not None and (before.input, before.output) == (10.0, 40.0)
    assert after is not None and (after.input, after.output, after.since) == (2.0, 8.0, date(2025, 6, 10))
    assert table.cost("o3", 1000, 1000, at=date(2025, 1, 1)) == pytest.approx(50_000 / 1e6)
    # The user's own entry still wins over the maintained history.
    mine = table.with_entries({"o3": Price(1.0, 1.0)})
    assert mine.lookup("o3", date(2025, 1, 1)) == Price(1.0, 1.0)
