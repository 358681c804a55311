"""The price table: what a model call costs, from token counts, with no network.

Prices are US dollars per million tokens, input and output apart. The table ships a
handful of well-known list prices as data and is extended (or overridden) by the user::

    prices = PriceTable().with_entries({"my-local-model": Price(0.0, 0.0)})
    prices = load_price_table("prices.json")  # defaults < $TURNLOG_PRICES < file < entries

The JSON form (a file, or the value of ``$TURNLOG_PRICES``: a path or inline JSON) maps a
model name to its prices::

    {"gpt-4o": {"input": 2.5, "output": 10.0}, "my-model": {"input": 0, "output": 0}}

A model the table does not know costs ``None`` (unknown), never zero.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ._errors import PriceTableError

__all__ = ["DEFAULT_PRICES", "PRICES_ENV", "Price", "PriceTable", "load_price_table"]

PRICES_ENV = "TURNLOG_PRICES"
"""The environment variable holding a price file path or inline price JSON."""


@dataclass(frozen=True, slots=True)
class Price:
    """The list price of one model.

    Attributes:
        input: US dollars per million input (prompt) tokens.
        output: US dollars per million output (completion) tokens.
    """

    input: float
    output: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """The cost in US dollars of a call with these token counts."""
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


# List prices per million tokens (standard tier, no caching or batch discounts) at the time
# of writing. Providers change them; override any entry with your own table.
DEFAULT_PRICES: Mapping[str, Price] = {
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4o-mini": Price(0.15, 0.60),
    "gpt-4.1": Price(2.00, 8.00),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.40),
    "o3": Price(2.00, 8.00),
    "o3-mini": Price(1.10, 4.40),
    "o4-mini": Price(1.10, 4.40),
    "claude-opus-4": Price(15.00, 75.00),
    "claude-sonnet-4": Price(3.00, 15.00),
    "claude-3-7-sonnet": Price(3.00, 15.00),
    "claude-3-5-haiku": Price(0.80, 4.00),
    "gemini-2.5-pro": Price(1.25, 10.00),
    "gemini-2.5-flash": Price(0.30, 2.50),
    "gemini-2.0-flash": Price(0.10, 0.40),
}


class PriceTable:
    """A mapping of model names to prices, with dated-variant matching.

    ``lookup`` tries the exact model name first, then the longest table entry the name
    starts with followed by ``-`` (so ``gpt-4o-2024-08-06`` is priced as ``gpt-4o`` and
    ``gpt-4o-mini-2024-07-18`` as ``gpt-4o-mini``), and ignores a ``provider/`` prefix.

    Args:
        entries: Prices to use on top of the defaults (they win over a default entry).
        include_defaults: Start from ``DEFAULT_PRICES``; False starts from an empty table.
    """

    __slots__ = ("_cache", "_entries")

    def __init__(self, entries: Mapping[str, Price] | None = None, *, include_defaults: bool = True) -> None:
        merged: dict[str, Price] = dict(DEFAULT_PRICES) if include_defaults else {}
        for name, price in (entries or {}).items():
            merged[name] = _check_entry("argument", name, price)
        self._entries = merged
        self._cache: dict[str, Price | None] = {}

    @property
    def entries(self) -> Mapping[str, Price]:
        """Every entry of the table, by model name."""
        return dict(self._entries)

    def with_entries(self, entries: Mapping[str, Price]) -> PriceTable:
        """A new table with ``entries`` added on top of this one."""
        table = PriceTable(include_defaults=False)
        table._entries = dict(self._entries)
        for name, price in entries.items():
            table._entries[name] = _check_entry("argument", name, price)
        return table

    def lookup(self, model: str | None) -> Price | None:
        """The price of ``model``, or None when the table does not know it."""
        if model is None:
            return None
        try:
            return self._cache[model]
        except KeyError:
            pass
        price = self._find(model)
        if price is None and "/" in model:
            price = self._find(model.rsplit("/", 1)[1])
        self._cache[model] = price
        return price

    def _find(self, model: str) -> Price | None:
        exact = self._entries.get(model)
        if exact is not None:
            return exact
        best: str | None = None
        for name in self._entries:
            if model.startswith(name + "-") and (best is None or len(name) > len(best)):
                best = name
        return None if best is None else self._entries[best]

    def cost(self, model: str | None, input_tokens: int | None, output_tokens: int | None) -> float | None:
        """The cost of a call in US dollars; None when the model or a token count is unknown."""
        if input_tokens is None or output_tokens is None:
            return None
        price = self.lookup(model)
        return None if price is None else price.cost(input_tokens, output_tokens)

    def fingerprint(self) -> str:
        """A short hash of the table's content; the projection re-prices facts when it changes."""
        canonical = orjson.dumps(
            {name: [p.input, p.output] for name, p in self._entries.items()}, option=orjson.OPT_SORT_KEYS
        )
        return hashlib.sha256(canonical).hexdigest()[:16]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PriceTable) and self._entries == other._entries

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def __repr__(self) -> str:
        return f"PriceTable({len(self._entries)} models)"


def _check_entry(source: str, name: object, price: object) -> Price:
    if not isinstance(name, str) or not name:
        raise PriceTableError(source, f"a model name must be a non-empty string, not {name!r}")
    if isinstance(price, Price):
        value = price
    elif isinstance(price, Mapping):
        unknown = set(price) - {"input", "output"}
        if unknown or not {"input", "output"} <= set(price):
            raise PriceTableError(
                source,
                f"model {name!r}: expected an object with 'input' and 'output', got keys {sorted(price)}",
            )
        value = Price(price["input"], price["output"])
    else:
        raise PriceTableError(
            source, f"model {name!r}: expected a Price or an object, not {type(price).__name__}"
        )
    for side in ("input", "output"):
        amount = getattr(value, side)
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not amount >= 0:
            raise PriceTableError(
                source,
                f"model {name!r}: {side} must be a number >= 0 (USD per million tokens), not {amount!r}",
            )
    return Price(float(value.input), float(value.output))


def _parse_json(source: str, raw: bytes | str) -> dict[str, Price]:
    try:
        value: Any = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise PriceTableError(source, f"not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise PriceTableError(
            source, f"expected a JSON object mapping model names to prices, not {type(value).__name__}"
        )
    return {name: _check_entry(source, name, price) for name, price in value.items()}


def _read_file(path: str | Path, source: str) -> dict[str, Price]:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise PriceTableError(source, f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    return _parse_json(source, raw)


def load_price_table(
    path: str | Path | None = None,
    *,
    entries: Mapping[str, Price] | None = None,
    environ: Mapping[str, str] | None = None,
    include_defaults: bool = True,
) -> PriceTable:
    """Build the price table a command should use.

    Later sources win: the defaults, then ``$TURNLOG_PRICES`` (a file path, or inline JSON
    when it starts with ``{``), then the JSON file at ``path``, then ``entries``.

    Args:
        path: A JSON price file.
        entries: Prices given in code.
        environ: The environment to read ``$TURNLOG_PRICES`` from (``os.environ`` when None).
        include_defaults: Start from the shipped list prices.

    Raises:
        PriceTableError: a source cannot be read or is malformed.
    """
    env = os.environ if environ is None else environ
    merged: dict[str, Price] = {}
    from_env = env.get(PRICES_ENV, "").strip()
    if from_env:
        source = f"${PRICES_ENV}"
        merged.update(
            _parse_json(source, from_env) if from_env.startswith(("{", "[")) else _read_file(from_env, source)
        )
    if path is not None:
        merged.update(_read_file(path, str(path)))
    for name, price in (entries or {}).items():
        merged[name] = _check_entry("argument", name, price)
    return PriceTable(merged, include_defaults=include_defaults)
