"""The price table: what a model call costs, from token counts, with no network.

Prices are US dollars per million tokens: input and output apart, and cache reads and
writes apart where the provider prices them apart (a cached token is part of the input, charged
at its cache price). The table ships the list prices of well-known models as data and is
extended (or overridden) by the user::

    prices = PriceTable().with_entries({"my-local-model": Price(0.0, 0.0)})
    prices = load_price_table("prices.json")  # defaults < $TURNLOG_PRICES < file < entries

The JSON form (a file, or the value of ``$TURNLOG_PRICES``: a path or inline JSON) maps a
model name to its prices::

    {"gpt-4o": {"input": 2.5, "output": 10.0, "cache_read": 1.25}, "my-model": {"input": 0, "output": 0}}

A model whose price changed has a history: a list of prices, each with the UTC day it took
effect (``since``; none on the first means "from the start"). A call is charged at the price in
force on the day it was recorded (a call before the first dated price, at the first)::

    {"my-model": [{"input": 1.0, "output": 2.0}, {"input": 0.5, "output": 1.0, "since": "2026-12-01"}]}

With ``maintained=True`` (and the ``genai-prices`` package installed: ``pip install
turnlog[prices]``), a model the user's entries do not name is priced from that maintained,
offline database (the pydantic team's; its base tier, with its price history by date) before
the shipped defaults, which stay the fallback. The shipped defaults are checked against it in the tests.

A model the table does not know costs ``None`` (unknown), never zero.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
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
        cache_read: US dollars per million input tokens read from the prompt cache (None:
            charged as input).
        cache_write: US dollars per million input tokens written to the prompt cache (None:
            charged as input).
        since: The UTC day this price took effect, in a model's price history (None: from the
            start).
    """

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None
    since: date | None = None

    def cost(
        self,
        input_tokens: int,
        output_tokens: int,
        *,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> float:
        """The cost in US dollars of a call with these token counts.

        ``input_tokens`` counts every input token, the cached ones included (as turnlog records
        them); the cache reads and writes among them are charged at their own prices.
        """
        if not cache_read_tokens and not cache_write_tokens:
            # The plain formula, in the order the analytics re-pricing SQL uses.
            return (input_tokens * self.input + output_tokens * self.output) / 1_000_000
        plain = max(input_tokens - cache_read_tokens - cache_write_tokens, 0)
        read = self.input if self.cache_read is None else self.cache_read
        write = self.input if self.cache_write is None else self.cache_write
        total = plain * self.input + cache_read_tokens * read + cache_write_tokens * write
        return (total + output_tokens * self.output) / 1_000_000


# List prices per million tokens (standard tier, base context tier, no batch discount) with
# their cache prices (Anthropic: reads 0.1x input, 5-minute writes 1.25x; OpenAI and Gemini:
# cached input), as genai-prices has them (a test compares). Override any entry with your own.
DEFAULT_PRICES: Mapping[str, Price] = {
    "gpt-4o": Price(2.50, 10.00, cache_read=1.25),
    "gpt-4o-mini": Price(0.15, 0.60, cache_read=0.075),
    "gpt-4.1": Price(2.00, 8.00, cache_read=0.50),
    "gpt-4.1-mini": Price(0.40, 1.60, cache_read=0.10),
    "gpt-4.1-nano": Price(0.10, 0.40, cache_read=0.025),
    "gpt-5": Price(1.25, 10.00, cache_read=0.125),
    "gpt-5-mini": Price(0.25, 2.00, cache_read=0.025),
    "gpt-5-nano": Price(0.05, 0.40, cache_read=0.005),
    "o3": Price(2.00, 8.00, cache_read=0.50),
    "o3-mini": Price(1.10, 4.40, cache_read=0.55),
    "o4-mini": Price(1.10, 4.40, cache_read=0.275),
    "claude-opus-4": Price(15.00, 75.00, cache_read=1.50, cache_write=18.75),
    "claude-opus-4-1": Price(15.00, 75.00, cache_read=1.50, cache_write=18.75),
    "claude-opus-4-5": Price(5.00, 25.00, cache_read=0.50, cache_write=6.25),
    "claude-sonnet-4": Price(3.00, 15.00, cache_read=0.30, cache_write=3.75),
    "claude-sonnet-4-5": Price(3.00, 15.00, cache_read=0.30, cache_write=3.75),
    "claude-haiku-4-5": Price(1.00, 5.00, cache_read=0.10, cache_write=1.25),
    "claude-3-7-sonnet": Price(3.00, 15.00, cache_read=0.30, cache_write=3.75),
    "claude-3-5-haiku": Price(0.80, 4.00, cache_read=0.08, cache_write=1.00),
    "gemini-2.5-pro": Price(1.25, 10.00, cache_read=0.125),
    "gemini-2.5-flash": Price(0.30, 2.50, cache_read=0.03),
    "gemini-2.0-flash": Price(0.10, 0.40, cache_read=0.025),
    "gemini-3-pro-preview": Price(2.00, 12.00, cache_read=0.20),
}


def _maintained_history(model: str) -> tuple[Price, ...]:
    """The base-tier price history of ``model`` in ``genai-prices`` (empty: unknown, or not installed).

    The package is asked through its public ``calc_price`` for a thousand tokens of each kind,
    so its own model matching (aliases, dated snapshots) applies; once at each day a price of
    the model starts (its start-date constraints) and once before the first.
    """
    try:
        from genai_prices import Usage as _Usage
        from genai_prices import calc_price
    except ImportError:
        return ()

    def at(moment: datetime, since: date | None) -> Price | None:
        def per_million(**tokens: int) -> float | None:
            try:
                found = calc_price(_Usage(**tokens), model_ref=model, genai_request_timestamp=moment)
            except LookupError:
                return None
            return float(found.total_price * 1000)

        base = per_million(input_tokens=1000)
        output = per_million(output_tokens=1000)
        if base is None or output is None:
            return None
        read = per_million(input_tokens=1000, cache_read_tokens=1000)
        write = per_million(input_tokens=1000, cache_write_tokens=1000)
        return Price(
            base,
            output,
            cache_read=None if read is None or read == base else read,
            cache_write=None if write is None or write == base else write,
            since=since,
        )

    days = _maintained_start_days(model)
    if not days:
        today = at(datetime.now(UTC), None)
        return () if today is None else (today,)
    first = at(datetime.combine(days[0] - timedelta(days=1), time(), UTC), None)
    history = [first] + [at(datetime.combine(day, time(), UTC), day) for day in days]
    found = [price for price in history if price is not None]
    # A day whose price equals the one before changes nothing: kept out, the history stays short.
    kept = found[:1]
    for price in found[1:]:
        if _row(price)[:4] != _row(kept[-1])[:4]:
            kept.append(price)
    return tuple(kept)


def _maintained_start_days(model: str) -> list[date]:
    """The days a price of ``model`` starts in ``genai-prices``, oldest first.

    Read from the package's data snapshot (not part of its ``__all__``): should its shape change,
    the model is priced at today's price alone, as before price history.
    """
    try:
        from genai_prices import data_snapshot, types

        _, info = data_snapshot.get_snapshot().find_provider_model(model, None, None, None)
        prices = info.prices
        if not isinstance(prices, list):
            return []
        return sorted(
            {c.constraint.start_date for c in prices if isinstance(c.constraint, types.StartDateConstraint)}
        )
    except (ImportError, AttributeError, LookupError, TypeError):
        return []


def _maintained_version() -> str | None:
    try:
        return importlib.metadata.version("genai-prices")
    except importlib.metadata.PackageNotFoundError:
        return None


PriceHistory = Price | Sequence[Price]
"""A table entry: one price, or a model's price history (prices with the days they took effect)."""


class PriceTable:
    """A mapping of model names to prices, with dated-variant matching and price history.

    ``lookup`` tries the exact model name first, then the longest table entry the name
    starts with followed by ``-`` (so ``gpt-4o-2024-08-06`` is priced as ``gpt-4o`` and
    ``gpt-4o-mini-2024-07-18`` as ``gpt-4o-mini``), and ignores a ``provider/`` prefix.
    With ``maintained``, the user's entries are tried first, then ``genai-prices``, then the
    shipped defaults. An entry may be a price history; ``lookup`` then gives the price in force
    on the day asked (today when not asked).

    Args:
        entries: Prices (or price histories) to use on top of the defaults (they win over a
            default entry).
        include_defaults: Start from ``DEFAULT_PRICES``; False starts from an empty table.
        maintained: Price models the entries do not name from ``genai-prices`` when it is
            installed (else the table behaves as without it).

    Raises:
        PriceTableError: an entry is malformed (a negative price, two prices on one day...).
    """

    __slots__ = ("_cache", "_defaults", "_entries", "_maintained")

    def __init__(
        self,
        entries: Mapping[str, PriceHistory] | None = None,
        *,
        include_defaults: bool = True,
        maintained: bool = False,
    ) -> None:
        self._defaults: dict[str, tuple[Price, ...]] = (
            {name: (price,) for name, price in DEFAULT_PRICES.items()} if include_defaults else {}
        )
        self._entries = {
            name: _check_history("argument", name, prices) for name, prices in (entries or {}).items()
        }
        # The version of the maintained source in use (part of the fingerprint), None when off.
        self._maintained = _maintained_version() if maintained else None
        self._cache: dict[str, tuple[Price, ...]] = {}

    @property
    def entries(self) -> Mapping[str, Price]:
        """Every entry of the table, by model name (the defaults and the user's), at today's price."""
        today = datetime.now(UTC).date()
        return {name: _in_force(h, today) for name, h in {**self._defaults, **self._entries}.items()}

    @property
    def maintained(self) -> str | None:
        """The ``genai-prices`` version the table prices unnamed models with (None: not used)."""
        return self._maintained

    def with_entries(self, entries: Mapping[str, PriceHistory]) -> PriceTable:
        """A new table with ``entries`` added on top of this one (each replaces a whole history)."""
        table = PriceTable(include_defaults=False)
        table._defaults = dict(self._defaults)
        table._maintained = self._maintained
        table._entries = dict(self._entries)
        for name, prices in entries.items():
            table._entries[name] = _check_history("argument", name, prices)
        return table

    def history(self, model: str | None) -> tuple[Price, ...]:
        """The prices of ``model`` with the days they took effect, oldest first (empty: unknown)."""
        if model is None:
            return ()
        try:
            return self._cache[model]
        except KeyError:
            pass
        names = [model, model.rsplit("/", 1)[1]] if "/" in model else [model]
        merged = {**self._defaults, **self._entries}
        best = next((b for n in names if (b := _best(merged, n)) is not None), None)
        found: tuple[Price, ...] = ()
        if best is not None and best in self._entries:
            found = self._entries[best]  # the user's own entry wins over every source
        elif self._maintained is not None:
            found = next((h for n in names if (h := _maintained_history(n))), ())
        if not found and best is not None:
            found = merged[best]
        self._cache[model] = found
        return found

    def lookup(self, model: str | None, at: date | datetime | None = None) -> Price | None:
        """The price of ``model`` in force on the UTC day of ``at`` (today when None).

        None when the table does not know the model.
        """
        found = self.history(model)
        if not found:
            return None
        if len(found) == 1:
            return found[0]  # no history: the day does not matter (the per-call fast path)
        return _in_force(found, _day(at))

    def cost(
        self,
        model: str | None,
        input_tokens: int | None,
        output_tokens: int | None,
        *,
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
        at: date | datetime | None = None,
    ) -> float | None:
        """The cost of a call in US dollars; None when the model or a token count is unknown.

        ``input_tokens`` includes the cached tokens; the cache reads and writes among them,
        when known, are charged at the model's cache prices. ``at`` is when the call was made:
        it is charged at the price in force that day (today's when None).
        """
        if input_tokens is None or output_tokens is None:
            return None
        # Inline of history and lookup: a rebuild prices every model call and run (about
        # 150,000 at a million events), and a known model's history is a dict hit.
        found = self._cache.get(model) if model is not None else ()
        if found is None:
            found = self.history(model)
        if not found:
            return None
        price = found[0] if len(found) == 1 else _in_force(found, _day(at))
        if not cache_read_tokens and not cache_write_tokens:
            # Price.cost's plain formula, in its order (a re-pricing in SQL gives the same).
            return (input_tokens * price.input + output_tokens * price.output) / 1_000_000
        return price.cost(
            input_tokens,
            output_tokens,
            cache_read_tokens=cache_read_tokens or 0,
            cache_write_tokens=cache_write_tokens or 0,
        )

    def fingerprint(self) -> str:
        """A short hash of the table's content; the projection re-prices facts when it changes."""
        canonical = orjson.dumps(
            {
                "entries": {name: [_row(p) for p in h] for name, h in self._entries.items()},
                "defaults": {name: [_row(p) for p in h] for name, h in self._defaults.items()},
                "maintained": self._maintained,
            },
            option=orjson.OPT_SORT_KEYS,
        )
        return hashlib.sha256(canonical).hexdigest()[:16]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PriceTable)
            and self._defaults == other._defaults
            and self._entries == other._entries
            and self._maintained == other._maintained
        )

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def __repr__(self) -> str:
        source = f", genai-prices {self._maintained}" if self._maintained else ""
        return f"PriceTable({len({**self._defaults, **self._entries})} models{source})"


def _day(at: date | datetime | None) -> date:
    if at is None:
        return datetime.now(UTC).date()
    if isinstance(at, datetime):
        # A naive datetime is taken as UTC, as the store records its times.
        return (at if at.tzinfo is None else at.astimezone(UTC)).date()
    return at


def _in_force(history: tuple[Price, ...], day: date) -> Price:
    """The latest price of ``history`` (sorted, oldest first) in force on ``day``; else the first."""
    chosen = history[0]
    for price in history[1:]:
        if price.since is not None and price.since > day:
            break
        chosen = price
    return chosen


def _row(price: Price) -> list[float | str | None]:
    since = None if price.since is None else price.since.isoformat()
    return [price.input, price.output, price.cache_read, price.cache_write, since]


def _best(entries: Mapping[str, object], model: str) -> str | None:
    """The entry naming ``model``: itself, else the longest name it starts with followed by ``-``."""
    if model in entries:
        return model
    best: str | None = None
    for name in entries:
        if model.startswith(name + "-") and (best is None or len(name) > len(best)):
            best = name
    return best


def _check_history(source: str, name: object, prices: object) -> tuple[Price, ...]:
    """One entry (a price or a list of them) checked, as a history sorted oldest first."""
    if isinstance(prices, Price | Mapping):
        return (_check_entry(source, name, prices),)
    if not isinstance(prices, Sequence) or isinstance(prices, str | bytes) or not prices:
        raise PriceTableError(
            source, f"model {name!r}: expected a price or a non-empty list of prices, not {prices!r}"
        )
    history = [_check_entry(source, name, price) for price in prices]
    # The undated price (at most one) is the first: it is in force until the first dated one.
    undated = [p for p in history if p.since is None]
    dated = sorted((p for p in history if p.since is not None), key=lambda p: p.since or date.min)
    days = [p.since for p in dated]
    if len(undated) > 1 or len(set(days)) != len(days):
        raise PriceTableError(
            source, f"model {name!r}: two prices take effect on the same day (or both have no 'since')"
        )
    return (*undated, *dated)


def _check_entry(source: str, name: object, price: object) -> Price:
    if not isinstance(name, str) or not name:
        raise PriceTableError(source, f"a model name must be a non-empty string, not {name!r}")
    if isinstance(price, Price):
        value = price
    elif isinstance(price, Mapping):
        unknown = set(price) - {"input", "output", "cache_read", "cache_write", "since"}
        if unknown or not {"input", "output"} <= set(price):
            raise PriceTableError(
                source,
                f"model {name!r}: expected an object with 'input' and 'output' (and optionally "
                f"'cache_read', 'cache_write', 'since'), got keys {sorted(price)}",
            )
        since: Any = price.get("since")
        if isinstance(since, str):
            try:
                since = date.fromisoformat(since)
            except ValueError:
                pass  # refused below, with the value as given
        value = Price(
            price["input"], price["output"], price.get("cache_read"), price.get("cache_write"), since
        )
    else:
        raise PriceTableError(
            source, f"model {name!r}: expected a Price or an object, not {type(price).__name__}"
        )
    for side in ("input", "output", "cache_read", "cache_write"):
        amount = getattr(value, side)
        if amount is None and side.startswith("cache_"):
            continue
        if isinstance(amount, bool) or not isinstance(amount, int | float) or not amount >= 0:
            raise PriceTableError(
                source,
                f"model {name!r}: {side} must be a number >= 0 (USD per million tokens), not {amount!r}",
            )
    since_value: object = value.since
    if since_value is not None and (isinstance(since_value, datetime) or not isinstance(since_value, date)):
        raise PriceTableError(
            source, f"model {name!r}: since must be a day (YYYY-MM-DD), not {since_value!r}"
        )
    return Price(
        float(value.input),
        float(value.output),
        None if value.cache_read is None else float(value.cache_read),
        None if value.cache_write is None else float(value.cache_write),
        value.since,
    )


def _parse_json(source: str, raw: bytes | str) -> dict[str, tuple[Price, ...]]:
    try:
        value: Any = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise PriceTableError(source, f"not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise PriceTableError(
            source, f"expected a JSON object mapping model names to prices, not {type(value).__name__}"
        )
    return {name: _check_history(source, name, price) for name, price in value.items()}


def _read_file(path: str | Path, source: str) -> dict[str, tuple[Price, ...]]:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise PriceTableError(source, f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    return _parse_json(source, raw)


def load_price_table(
    path: str | Path | None = None,
    *,
    entries: Mapping[str, PriceHistory] | None = None,
    environ: Mapping[str, str] | None = None,
    include_defaults: bool = True,
    maintained: bool = False,
) -> PriceTable:
    """Build the price table a command should use.

    Later sources win: the defaults, then ``$TURNLOG_PRICES`` (a file path, or inline JSON
    when it starts with ``{``), then the JSON file at ``path``, then ``entries``.

    Args:
        path: A JSON price file.
        entries: Prices given in code.
        environ: The environment to read ``$TURNLOG_PRICES`` from (``os.environ`` when None).
        include_defaults: Start from the shipped list prices.
        maintained: Price the models no source names from ``genai-prices`` (when installed).

    Raises:
        PriceTableError: a source cannot be read or is malformed.
    """
    env = os.environ if environ is None else environ
    merged: dict[str, PriceHistory] = {}
    from_env = env.get(PRICES_ENV, "").strip()
    if from_env:
        source = f"${PRICES_ENV}"
        merged.update(
            _parse_json(source, from_env) if from_env.startswith(("{", "[")) else _read_file(from_env, source)
        )
    if path is not None:
        merged.update(_read_file(path, str(path)))
    for name, price in (entries or {}).items():
        merged[name] = _check_history("argument", name, price)
    return PriceTable(merged, include_defaults=include_defaults, maintained=maintained)
