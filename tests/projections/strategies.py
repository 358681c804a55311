"""Hypothesis strategies for messages and branch events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import strategies as st

from turnlog.projections import (
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    Instruction,
    RunInfo,
    System,
    Usage,
)

text = st.text(max_size=20)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(text, json_values, max_size=3)
times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
) | st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)).map(
    lambda d: d.replace(tzinfo=UTC).astimezone(__import__("datetime").timezone(timedelta(hours=5)))
)
common = {
    "created_at": times,
    "sender": st.none() | text,
    "recipient": st.none() | text,
    "metadata": json_objects,
}

systems = st.builds(
    lambda m, dt, **kw: System.create(m, system_datetime=dt, **kw),
    text,
    st.none() | text.filter(bool),
    **common,
)
instructions = st.builds(
    lambda ins, g, ctx, tools, rf, img, **kw: Instruction.create(
        ins, guidance=g, context=ctx, tool_schemas=tools, response_format=rf, images=img, **kw
    ),
    json_values,
    json_values,
    st.lists(json_values, max_size=3),
    st.lists(json_objects, max_size=2),
    st.none() | json_objects,
    st.lists(st.sampled_from(["https://x.test/a.png", "data:image/png;base64,AAAA", "QUJD"]), max_size=2),
    **common,
)
responses = st.builds(AssistantResponse.create, text, **common)
requests = st.builds(ActionRequest.create, text, json_objects, call_id=st.none() | text, **common)
action_responses = st.builds(
    lambda req, out, err, dur, **kw: ActionResponse.create(req, output=out, error=err, duration_ms=dur, **kw),
    requests,
    json_values,
    st.none() | text,
    st.none() | st.floats(0, 1e6),
    **common,
)
messages = systems | instructions | responses | requests | action_responses


# Stored run and head fields: optional times in two zones, texts and counts, as a head stores them.
optional_times = st.one_of(
    st.none(), st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=2))]))
)
optional_texts = st.one_of(st.none(), st.text(max_size=8))
optional_counts = st.one_of(st.none(), st.integers(0, 10**9))
run_infos = st.builds(
    RunInfo,
    run_id=st.text(min_size=1, max_size=8),
    verb=st.text(max_size=8),
    status=st.sampled_from(["running", "ended", "failed"]),
    started_at=optional_times,
    ended_at=optional_times,
    duration_ms=st.one_of(st.none(), st.floats(0, 1e9)),
    usage=st.builds(
        Usage,
        input_tokens=optional_counts,
        output_tokens=optional_counts,
        cost_usd=st.one_of(st.none(), st.floats(0, 10)),
        cache_read_tokens=optional_counts,
        cache_write_tokens=optional_counts,
    ),
    parent_run_id=optional_texts,
    provider=optional_texts,
    model=optional_texts,
    chunks=optional_counts,
    error_type=optional_texts,
    error_message=optional_texts,
    reason=optional_texts,
    recovered=st.one_of(st.none(), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2)),
)
