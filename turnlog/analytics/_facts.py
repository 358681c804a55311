"""Facts: the pure functions that derive the rows of the fact tables from events.

Every function here is pure: it reads one event (a ``RecordedEvent``, or any ``FactEvent``:
the projection's own view of a stored row it decoded itself) plus the price table and the
branch-to-session map it is given, and returns a tuple in the column order of its table
(``_tables``). A payload missing what a fact needs raises ``EventDecodeError`` naming the event.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from turnlog.projections import EventDecodeError

from ._pricing import PriceTable
from ._tables import RUNS

__all__ = [
    "FactEvent",
    "RUN_WIDTH",
    "SessionOf",
    "branch_of",
    "model_call_fact",
    "priced",
    "run_end_fact",
    "run_start_fact",
    "tool_call_fact",
]


class FactEvent(Protocol):
    """What the fact functions read of an event (a ``RecordedEvent`` has all of it)."""

    @property
    def stream(self) -> str:
        """The stream of the event."""
        ...

    @property
    def version(self) -> int:
        """Its version inside the stream."""
        ...

    @property
    def position(self) -> int:
        """Its global position."""
        ...

    @property
    def type(self) -> str:
        """The event type name."""
        ...

    @property
    def schema(self) -> int:
        """The schema version of ``data``."""
        ...

    @property
    def data(self) -> dict[str, Any]:
        """The decoded payload."""
        ...

    @property
    def meta(self) -> dict[str, Any]:
        """The decoded meta object."""
        ...

    @property
    def recorded_at(self) -> datetime:
        """UTC time of the append."""
        ...


# ----------------------------------------------------------------------------------- helpers


def _bad(event: FactEvent, reason: str) -> EventDecodeError:
    return EventDecodeError(event.stream, event.version, event.type, reason, position=event.position)


_last_when: tuple[datetime | None, tuple[str, str]] = (None, ("", ""))
"""The latest moment formatted: the events of one append share their ``recorded_at``."""


def _when(event: FactEvent) -> tuple[str, str]:
    global _last_when
    moment = event.recorded_at
    last = _last_when
    if last[0] is moment:
        return last[1]
    utc = moment if moment.tzinfo is UTC else moment.astimezone(UTC)
    text = utc.isoformat(timespec="microseconds")
    when = (text, text[:10])
    _last_when = (moment, when)
    return when


def _field(event: FactEvent, data: Mapping[str, Any], key: str) -> Any:
    try:
        return data[key]
    except KeyError:
        raise _bad(event, f"data has no {key!r}") from None


def _text(event: FactEvent, value: Any, key: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _bad(event, f"{key} must be a string or null, not {type(value).__name__}")


def _count(event: FactEvent, value: Any, key: str) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise _bad(event, f"{key} must be an integer or null, not {value!r}")


def _number(event: FactEvent, value: Any, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise _bad(event, f"{key} must be a number or null, not {value!r}")


def _seconds(event: FactEvent, value: Any, key: str) -> float | None:
    ms = _number(event, value, key)
    return None if ms is None else ms / 1000.0


_NO_USAGE: dict[str, Any] = {}


UsageFacts = tuple[int | None, int | None, float | None, int | None, int | None]
"""Input tokens, output tokens, reported cost, cache reads, cache writes."""


def _usage(event: FactEvent, data: Mapping[str, Any]) -> UsageFacts:
    # The catalogue defaults usage to all-unknown, so a payload without it is valid.
    usage = data.get("usage", _NO_USAGE)
    # The common shapes pass _usage_of's class checks at once; anything else takes the
    # checks (and the conversions, and the errors) below.
    common = _usage_of(usage)
    if common is not None:
        return common
    if not isinstance(usage, dict):
        raise _bad(event, f"usage must be an object, not {type(usage).__name__}")
    return (
        _count(event, usage.get("input_tokens"), "usage.input_tokens"),
        _count(event, usage.get("output_tokens"), "usage.output_tokens"),
        _number(event, usage.get("cost_usd"), "usage.cost_usd"),
        _count(event, usage.get("cache_read_tokens"), "usage.cache_read_tokens"),
        _count(event, usage.get("cache_write_tokens"), "usage.cache_write_tokens"),
    )


def priced(
    prices: PriceTable,
    model: str | None,
    tokens_in: int | None,
    tokens_out: int | None,
    reported: float | None,
    at: datetime | None = None,
    cache: tuple[int | None, int | None] = (None, None),
) -> tuple[float | None, str | None]:
    """The cost of a call (or run) and where it comes from: ``provider``, ``price_table`` or None.

    A cost the provider reported wins over the table; an unknown model stays unknown (None).
    The table's price is the one in force when the call was recorded (``at``); the cache reads
    and writes among the input tokens (``cache``) are charged at the model's cache prices.
    """
    if reported is not None:
        return reported, "provider"
    cost = prices.cost(
        model, tokens_in, tokens_out, cache_read_tokens=cache[0], cache_write_tokens=cache[1], at=at
    )
    return cost, (None if cost is None else "price_table")


def branch_of(event: FactEvent) -> str | None:
    """The branch an event belongs to: its meta's ``branch_id``, else its branch stream's id."""
    branch = event.meta.get("branch_id")
    if branch is None and event.stream.startswith("branch-"):
        return event.stream[7:]
    return branch


SessionOf = Callable[[str | None], str | None]


def _branch_session(
    stream: str, meta: Mapping[str, Any], session_of: SessionOf
) -> tuple[str | None, str | None]:
    # branch_of on a stream and its meta (every fact and every common-shape row needs it),
    # then the session: the meta's, else the one the branch was recorded under.
    branch = meta.get("branch_id")
    if branch is None and stream.startswith("branch-"):
        branch = stream[7:]
    session = meta.get("session_id")
    if session is None:
        session = session_of(branch)
    return branch, session


def _where(event: FactEvent, session_of: SessionOf, run_id: Any) -> tuple[str | None, str | None, Any]:
    meta = event.meta
    branch, session = _branch_session(event.stream, meta, session_of)
    if run_id is None:
        run_id = meta.get("run_id")
    return branch, session, run_id


# ------------------------------------------------------------------------------------- facts


_MISSING: Any = object()
"""A key's value when the payload lacks it (fails ``_texts_ok``)."""


def _texts_ok(*values: Any) -> bool:
    for value in values:
        if value is not None and value.__class__ is not str:
            return False
    return True


_MODEL_TEXTS = ("provider", "model", "endpoint", "verb", "call_id", "run_id", "error_type")


def model_call_fact(event: FactEvent, prices: PriceTable, session_of: SessionOf) -> tuple[Any, ...]:
    """The ``MODEL_CALLS`` row of a ``model.called`` event."""
    data = event.data
    try:
        provider, model = data["provider"], data["model"]
        status, latency_ms = data["status"], data["latency_ms"]
    except KeyError as exc:
        raise _bad(event, f"data has no {exc.args[0]!r}") from None
    get = data.get
    endpoint, verb, call_id, run_id, error_type = (
        get("endpoint"), get("verb"), get("call_id"), get("run_id"), get("error_type")
    )  # fmt: skip
    if not _texts_ok(provider, model, endpoint, verb, call_id, run_id, error_type):
        for key in _MODEL_TEXTS:
            _text(event, get(key), key)
    if status != "ok" and status != "error":
        raise _bad(event, f"status must be 'ok' or 'error', not {status!r}")
    latency = (
        latency_ms / 1000.0 if latency_ms.__class__ is float else _seconds(event, latency_ms, "latency_ms")
    )
    if latency is None:
        raise _bad(event, "latency_ms must be a number")
    tokens_in, tokens_out, reported, read, write = _usage(event, data)
    served = get("served_model")
    if served is not None and served.__class__ is not str:
        _text(event, served, "served_model")
    served = served or model
    # A proxy alias is priced as the model it served when the table does not know the alias.
    at = event.recorded_at
    cost, source = priced(prices, model, tokens_in, tokens_out, reported, at, (read, write))
    if cost is None and served != model:
        cost, source = priced(prices, served, tokens_in, tokens_out, reported, at, (read, write))
    when, day = _when(event)
    branch, session, run_id = _where(event, session_of, run_id)
    ttft = get("ttft_ms")
    if ttft is not None:
        ttft = ttft / 1000.0 if ttft.__class__ is float else _seconds(event, ttft, "ttft_ms")
    attempts = get("attempts", 1)
    return (
        event.position, when, day, provider, model, endpoint, branch, session, run_id, verb,
        call_id, get("stream") is True, tokens_in, tokens_out, read, write, cost, source, latency,
        ttft, status, error_type,
        attempts if attempts.__class__ is int else _count(event, attempts, "attempts"), served,
    )  # fmt: skip


def tool_call_fact(event: FactEvent, session_of: SessionOf) -> tuple[Any, ...] | None:
    """The ``TOOL_CALLS`` row of a ``message.added`` event, or None unless it adds an ActionResponse.

    A call whose message has ``metadata.denied`` true is ``denied``; one with an error is
    ``error``; any other is ``ok``.
    """
    data = event.data
    message = _field(event, data, "message")
    if not isinstance(message, dict):
        raise _bad(event, f"message must be an object, not {type(message).__name__}")
    if message.get("kind") != "ActionResponse":
        return None
    content = message.get("content")
    if not isinstance(content, dict):
        raise _bad(event, "ActionResponse message has no content object")
    tool = content.get("function")
    if not isinstance(tool, str):
        raise _bad(event, f"ActionResponse content.function must be a string, not {tool!r}")
    error = _text(event, content.get("error"), "content.error")
    metadata = message.get("metadata") or {}
    status = "denied" if metadata.get("denied") is True else ("ok" if error is None else "error")
    when, day = _when(event)
    branch, session, run_id = _where(event, session_of, data.get("run_id"))
    return (
        event.position,
        when,
        day,
        tool,
        _text(event, content.get("action_request_id"), "content.action_request_id"),
        _text(event, message.get("id"), "message.id"),
        branch,
        session,
        run_id,
        status,
        error,
        _seconds(event, content.get("duration_ms"), "content.duration_ms"),
    )


RUN_WIDTH = len(RUNS.columns)
"""Values in a ``RUNS`` row; a closing row (``run_end_fact``) has one more, the reported cost.

Run facts are plain tuples, not objects wrapping them: a rebuild keeps one per run start
and one per run end until its batch is written, and each object kept is one more that the
garbage collector walks (a third of what a rebuild keeps were such wrappers).
"""


def _run_id(event: FactEvent) -> str:
    run_id = _field(event, event.data, "run_id")
    if not isinstance(run_id, str):
        raise _bad(event, f"run_id must be a string, not {run_id!r}")
    return run_id


def run_start_fact(event: FactEvent, session_of: SessionOf) -> tuple[Any, ...]:
    """The ``RUNS`` row a ``run.started`` event opens (status ``running``), ``RUN_WIDTH`` values."""
    data = event.data
    run_id = _run_id(event)
    when, day = _when(event)
    branch, session, _ = _where(event, session_of, run_id)
    get = data.get
    verb, parent, provider, model = get("verb", _MISSING), get("parent_run_id"), get("provider"), get("model")
    if not _texts_ok(verb, parent, provider, model):
        # The checks one by one, for the error that names the field.
        verb = _text(event, _field(event, data, "verb"), "verb")
        for key in ("parent_run_id", "provider", "model"):
            _text(event, get(key), key)
    row = (
        run_id,
        event.position,
        when,
        day,
        None,
        verb,
        parent,
        provider,
        model,
        branch,
        session,
        "running",
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
    )
    return row


def run_end_fact(event: FactEvent, session_of: SessionOf) -> tuple[Any, ...]:
    """What a ``run.ended`` or ``run.failed`` event closes: a ``RUNS`` row, then the reported cost.

    The row (its first ``RUN_WIDTH`` values) is a whole ``RUNS`` row from this event alone:
    its closing columns (``ended_at``, status through output tokens) update the run's row,
    and all of it stands in for a run whose start is not in the log. Its cost columns are
    None: the projection prices the run with the model its start named. The last value is
    the cost reported in the run's usage (None when not reported).
    """
    data = event.data
    run_id = _run_id(event)
    when, day = _when(event)
    failed = event.type == "run.failed"
    tokens_in, tokens_out, reported, read, write = _usage(event, data)
    reason = error_type = None
    if failed:
        reason = _text(event, _field(event, data, "reason"), "reason")
        error_type = _text(event, data.get("error_type"), "error_type")
    duration = data.get("duration_ms")
    if duration.__class__ is float:
        duration /= 1000.0
    else:
        duration = _seconds(event, _field(event, data, "duration_ms"), "duration_ms")
    chunks = data.get("chunks")
    if chunks is not None and chunks.__class__ is not int:
        chunks = _count(event, chunks, "chunks")
    status = "failed" if failed else "ok"
    branch, session, _ = _where(event, session_of, run_id)
    verb = data.get("verb", _MISSING)
    if verb is not None and verb.__class__ is not str:
        verb = _text(event, _field(event, data, "verb"), "verb")
    row = (
        run_id, event.position, when, day, when, verb, None, None, None, branch, session,
        status, reason, error_type, duration, chunks, tokens_in, tokens_out, read, write, None, None,
        reported,
    )  # fmt: skip
    return row


# ------------------------------------------------------------------------- common-shape rows
#
# A rebuild takes the facts of every model call and run of the log (about 150,000 of each
# kind at a million events). The functions below give the row of the fact function above
# from the parts of a stored row a batch already holds (no event object, no call per field
# or check), for the payload shape the kernel writes: every value of the exact type it
# writes. For any other payload they return None and the batch takes the fact function's
# row, its conversions and its errors: these make no error of their own.
# ``test_analytics_fast_facts`` holds them equal.

When = tuple[str, str]
"""``recorded_at`` as ISO 8601 text with microseconds, and its day (``_when``)."""


def _usage_of(usage: Any) -> UsageFacts | None:
    # A dict of exact ints and floats, as the kernel writes it (None when it is anything else).
    if usage.__class__ is not dict:
        return None
    tokens_in, tokens_out, cost, read, write = (
        usage.get("input_tokens"),
        usage.get("output_tokens"),
        usage.get("cost_usd"),
        usage.get("cache_read_tokens"),
        usage.get("cache_write_tokens"),
    )
    if (
        (tokens_in is None or tokens_in.__class__ is int)
        and (tokens_out is None or tokens_out.__class__ is int)
        and (cost is None or cost.__class__ is float)
        and (read is None or read.__class__ is int)
        and (write is None or write.__class__ is int)
    ):
        return tokens_in, tokens_out, cost, read, write
    return None


def model_call_row(
    position: int,
    stream: str,
    data: dict[str, Any],
    meta: dict[str, Any],
    when: When,
    at: datetime,
    prices: PriceTable,
    session_of: SessionOf,
) -> tuple[Any, ...] | None:
    """``model_call_fact``'s row of a common-shape ``model.called`` payload; None for any other."""
    get = data.get
    provider, model, status, latency = get("provider"), get("model"), get("status"), get("latency_ms")
    endpoint, verb, call_id, run_id, error_type = (
        get("endpoint"), get("verb"), get("call_id"), get("run_id"), get("error_type")
    )  # fmt: skip
    served, ttft, attempts = get("served_model"), get("ttft_ms"), get("attempts", 1)
    usage = _usage_of(get("usage", _NO_USAGE))
    if (
        usage is None
        # provider and model must be present: None here may be a missing key
        or provider.__class__ is not str
        or model.__class__ is not str
        or not _texts_ok(endpoint, verb, call_id, run_id, error_type, served)
        or (status != "ok" and status != "error")
        or latency.__class__ is not float
        or (ttft is not None and ttft.__class__ is not float)
        or attempts.__class__ is not int
    ):
        return None
    tokens_in, tokens_out, reported, read, write = usage
    served = served or model
    cost: float | None
    source: str | None
    if reported is not None:
        cost, source = reported, "provider"
    else:
        cost = prices.cost(
            model, tokens_in, tokens_out, cache_read_tokens=read, cache_write_tokens=write, at=at
        )
        if cost is None and served != model:
            cost = prices.cost(
                served, tokens_in, tokens_out, cache_read_tokens=read, cache_write_tokens=write, at=at
            )
        source = None if cost is None else "price_table"
    branch, session = _branch_session(stream, meta, session_of)
    if run_id is None:
        run_id = meta.get("run_id")
    return (
        position, when[0], when[1], provider, model, endpoint, branch, session, run_id, verb,
        call_id, get("stream") is True, tokens_in, tokens_out, read, write, cost, source,
        latency / 1000.0, None if ttft is None else ttft / 1000.0, status, error_type, attempts, served,
    )  # fmt: skip


def run_start_row(
    position: int, stream: str, data: dict[str, Any], meta: dict[str, Any], when: When, session_of: SessionOf
) -> tuple[Any, ...] | None:
    """``run_start_fact``'s row of a common-shape ``run.started`` payload; None for any other."""
    get = data.get
    run_id, verb = get("run_id"), get("verb", _MISSING)
    parent, provider, model = get("parent_run_id"), get("provider"), get("model")
    if run_id.__class__ is not str or not _texts_ok(verb, parent, provider, model):
        return None
    branch, session = _branch_session(stream, meta, session_of)
    return (
        run_id, position, when[0], when[1], None, verb, parent, provider, model, branch, session,
        "running", None, None, None, None, None, None, None, None, None, None,
    )  # fmt: skip


def run_end_row(
    position: int,
    stream: str,
    failed: bool,
    data: dict[str, Any],
    meta: dict[str, Any],
    when: When,
    session_of: SessionOf,
) -> tuple[Any, ...] | None:
    """``run_end_fact``'s row of a common-shape ``run.ended`` (``run.failed``) payload; None for any other."""
    get = data.get
    run_id, verb, duration, chunks = get("run_id"), get("verb", _MISSING), get("duration_ms"), get("chunks")
    usage = _usage_of(get("usage", _NO_USAGE))
    reason = error_type = None
    if failed:
        reason, error_type = get("reason", _MISSING), get("error_type")
    if (
        usage is None
        or run_id.__class__ is not str
        or duration.__class__ is not float
        or (chunks is not None and chunks.__class__ is not int)
        or not _texts_ok(verb, reason, error_type)
    ):
        return None
    branch, session = _branch_session(stream, meta, session_of)
    tokens_in, tokens_out, reported, read, write = usage
    return (
        run_id, position, when[0], when[1], when[0], verb, None, None, None, branch, session,
        "failed" if failed else "ok", reason, error_type, duration / 1000.0, chunks, tokens_in,
        tokens_out, read, write, None, None, reported,
    )  # fmt: skip
