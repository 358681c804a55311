"""Usage: one type for providers, events and folded runs; its stored form is unchanged."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from turnlog.kernel.models import Usage as KernelUsage
from turnlog.projections import ModelCalled, RunEnded, Usage


def test_the_kernel_and_the_events_share_one_usage_class() -> None:
    assert KernelUsage is Usage and Usage is Usage
    assert RunEnded.model_fields["usage"].annotation is Usage
    assert ModelCalled.model_fields["usage"].annotation is Usage


def test_positional_and_keyword_construction_and_sums() -> None:
    assert Usage(10, 2, None) == Usage(input_tokens=10, output_tokens=2)
    assert Usage(1, cost_usd=0.5) == Usage(input_tokens=1, cost_usd=0.5)
    assert Usage(10, 2) + Usage(5, None, 0.01) == Usage(15, 2, 0.01)
    assert Usage() + Usage() == Usage()
    with pytest.raises(TypeError):
        Usage(1, 2, 3, 4)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Usage(1, input_tokens=2)  # type: ignore[misc]
    with pytest.raises(ValidationError):
        Usage(tokens=3)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        Usage("many")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        Usage(1).input_tokens = 2  # type: ignore[misc]  # frozen
    assert hash(Usage(1, 2)) == hash(Usage(1, 2))


def test_the_stored_form_is_byte_identical_to_the_former_event_type() -> None:
    """What ``Usage`` (a plain frozen pydantic model) stored, key order included."""
    ended = RunEnded(run_id="r", verb="chat", duration_ms=1.0, usage=Usage(3, 4, 0.25))
    payload = orjson.dumps(ended.model_dump(mode="json"))
    assert b'"usage":{"input_tokens":3,"output_tokens":4,"cost_usd":0.25}' in payload
    assert Usage().to_dict() == {"input_tokens": None, "output_tokens": None, "cost_usd": None}


def test_validating_stored_usage_stays_in_pydantic_core() -> None:
    """Reading stored usage never calls the positional ``__init__`` (it would validate twice)."""
    assert Usage.__pydantic_custom_init__ is False
    read = RunEnded.model_validate(
        {"run_id": "r", "verb": "v", "duration_ms": 1, "usage": {"input_tokens": 2}}
    )
    assert read.usage == Usage(2) and read.usage.model_fields_set == {"input_tokens"}
    with pytest.raises(ValidationError, match="extra"):
        Usage.model_validate({"tokens": 1})


def test_usage_reported_by_a_chunk_or_a_recorded_call() -> None:
    """Lenient: a value of the wrong type counts as unknown instead of failing the run."""
    assert Usage.from_reported({"input_tokens": 5, "output_tokens": 2, "cost_usd": 1}) == Usage(5, 2, 1.0)
    assert Usage.from_reported({"input_tokens": "5", "output_tokens": True, "cost_usd": "x"}) == Usage()
    assert Usage.from_reported({}) == Usage()
    assert Usage.from_reported(Usage(3, 4, 0.5).to_dict()) == Usage(3, 4, 0.5)


def test_payloads_without_usage_share_usage_none_and_store_what_a_fresh_usage_stores() -> None:
    """The schemas default to the shared ``Usage.NONE``; what is stored is what ``Usage()`` stores."""
    from turnlog.projections import RunFailed, RunInfo, stored_payload

    assert Usage.NONE == Usage() and hash(Usage.NONE) == hash(Usage())
    fields = {"call_id": "c", "provider": "p", "model": "m", "endpoint": "e", "fingerprint": "f"}
    payloads = [
        (RunEnded, {"run_id": "r", "verb": "chat", "duration_ms": 1.0}),
        (
            RunFailed,
            {
                "run_id": "r",
                "verb": "chat",
                "duration_ms": 1.0,
                "error_type": "E",
                "error_message": "m",
                "reason": "error",
            },
        ),
        (ModelCalled, {**fields, "latency_ms": 1.0, "status": "ok"}),
    ]
    for schema, values in payloads:
        default = schema.model_validate(values)
        assert default.usage is Usage.NONE
        assert stored_payload(default) == stored_payload(schema.model_validate({**values, "usage": Usage()}))
        assert schema.model_validate(stored_payload(default)) == default
        counted = schema.model_validate({**values, "usage": Usage(3, 1)})
        assert Usage.model_validate(stored_payload(counted)["usage"]) == Usage(3, 1)
    assert "usage" not in stored_payload(ModelCalled(**fields, latency_ms=1.0, status="ok"))
    assert RunInfo(run_id="r", verb="chat").usage is Usage.NONE


_counts = st.one_of(st.none(), st.integers(0, 3))
_usages = st.builds(
    Usage,
    _counts,
    _counts,
    st.one_of(st.none(), st.sampled_from([0.0, 0.5, 1.0])),
    cache_read_tokens=_counts,
    cache_write_tokens=_counts,
)


@given(_usages, _usages)
def test_usage_equality_is_pydantic_s_equality(a: Usage, b: Usage) -> None:
    """Usage's own __eq__ (a fast path) answers what pydantic's BaseModel.__eq__ answers."""
    assert (a == b) is BaseModel.__eq__(a, b)
    if a == b:
        assert hash(a) == hash(b)
    assert (a == Usage.NONE) is BaseModel.__eq__(a, Usage.NONE)
    assert a != (a.input_tokens, a.output_tokens)
