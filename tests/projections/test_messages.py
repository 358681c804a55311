"""Messages: exact round trips, rendering, and the validation users rely on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest
from freezegun import freeze_time
from hypothesis import given, settings

from turnlog.eventstore import TurnlogError
from turnlog.projections import (
    ActionRequest,
    ActionResponse,
    AssistantResponse,
    Instruction,
    InvalidMessageError,
    System,
    message_from_dict,
)

from .strategies import messages


@settings(max_examples=150, deadline=None)
@given(messages)
def test_every_message_round_trips_exactly(msg) -> None:
    data = msg.to_dict()
    again = message_from_dict(data)
    assert again == msg
    assert type(again) is type(msg)
    assert again.to_dict() == data
    # the dict is plain JSON: it survives real encoding unchanged
    assert message_from_dict(orjson.loads(orjson.dumps(data))) == msg


def test_dict_names_kind_and_role() -> None:
    cases = [
        (System.create("s"), "System", "system"),
        (Instruction.create("i"), "Instruction", "user"),
        (AssistantResponse.create("a"), "AssistantResponse", "assistant"),
        (ActionRequest.create("f"), "ActionRequest", "action"),
        (ActionResponse.create(function="f"), "ActionResponse", "action"),
    ]
    for msg, kind, role in cases:
        d = msg.to_dict()
        assert (d["kind"], d["role"]) == (kind, role)
        assert msg.to_chat()["role"] == role


def test_action_response_error_survives_round_trip() -> None:
    req = ActionRequest.create("divide", {"a": 1, "b": 0}, call_id="call_1")
    res = ActionResponse.create(req, error="ZeroDivisionError: division by zero", duration_ms=1.5)
    back = message_from_dict(res.to_dict())
    assert isinstance(back, ActionResponse)
    assert back.error == "ZeroDivisionError: division by zero"
    assert not back.success
    assert back.content.action_request_id == req.id
    assert back.content.arguments == {"a": 1, "b": 0}


def test_created_at_is_aware_utc_and_survives() -> None:
    local = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    msg = AssistantResponse.create("x", created_at=local)
    assert msg.created_at == local and msg.created_at.tzinfo == UTC
    assert message_from_dict(msg.to_dict()).created_at == local


def test_naive_created_at_is_rejected() -> None:
    with pytest.raises(ValueError, match="timezone"):
        AssistantResponse.create("x", created_at=datetime(2026, 1, 1))


@freeze_time("2026-05-04 10:11:12")
def test_default_created_at_is_now_and_system_datetime_stamps_minutes() -> None:
    s = System.create("hello", system_datetime=True)
    assert s.created_at == datetime(2026, 5, 4, 10, 11, 12, tzinfo=UTC)
    assert s.rendered == "System Time: 2026-05-04T10:11+00:00\n\nhello"


def test_ids_are_unique_uuid7_strings() -> None:
    ids = {AssistantResponse.create("x").id for _ in range(100)}
    assert len(ids) == 100
    assert all(i[14] == "7" for i in ids)


def test_messages_are_frozen() -> None:
    msg = AssistantResponse.create("x")
    with pytest.raises(ValueError):
        msg.metadata = {"a": 1}  # type: ignore[misc]


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"kind": "Nope"}, "kind"),
        ({"kind": "AssistantResponse", "role": "user"}, "role"),
        ({"kind": "AssistantResponse", "created_at": "2026-01-01T00:00:00"}, "created_at"),
        ({"kind": "ActionRequest"}, "content"),
        ({"kind": "AssistantResponse", "surprise": 1}, "surprise"),
        ({"kind": "AssistantResponse", "metadata": {"x": object()}}, "metadata"),
    ],
)
def test_bad_dicts_raise_a_clear_turnlog_error(data, where) -> None:
    with pytest.raises(InvalidMessageError, match=where) as info:
        message_from_dict(data)
    assert isinstance(info.value, TurnlogError)


def test_not_a_mapping_is_rejected() -> None:
    with pytest.raises(InvalidMessageError, match="JSON object"):
        message_from_dict(["kind", "System"])  # type: ignore[arg-type]


def test_instruction_renders_minimal_yaml_without_empty_parts() -> None:
    ins = Instruction.create("Add the numbers.", guidance="Be brief.", context=[{"a": 1, "b": 2}])
    assert ins.rendered == "Guidance: Be brief.\nInstruction: Add the numbers.\nContext:\n  - a: 1\n    b: 2"
    assert ins.to_chat() == {"role": "user", "content": ins.rendered}


def test_instruction_plain_content_replaces_the_structured_form() -> None:
    ins = Instruction.create("ignored", plain_content="just this")
    assert ins.rendered == "just this"


def test_instruction_response_format_and_tools_are_rendered() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    ins = Instruction.create("count", tool_schemas=[{"name": "add"}], response_format=schema)
    text = ins.rendered
    assert isinstance(text, str)
    assert "Tools:\n  - name: add" in text
    assert "ResponseSchema:" in text and "ResponseFormat:" in text


def test_instruction_images_render_as_content_parts() -> None:
    ins = Instruction.create("look", images=["https://x.test/cat.png", "QUJD"], image_detail="low")
    assert ins.content.images == ["https://x.test/cat.png", "data:image/jpeg;base64,QUJD"]
    parts = ins.rendered
    assert parts[0] == {"type": "text", "text": "Instruction: look"}
    assert parts[1] == {"type": "image_url", "image_url": {"url": "https://x.test/cat.png", "detail": "low"}}


def test_instruction_rejects_other_image_schemes() -> None:
    with pytest.raises(ValueError, match=r"images\[0\]"):
        Instruction.create("look", images=["file:///etc/passwd"])


def test_system_rendering_and_defaults() -> None:
    s = System.create("Be terse.")
    assert s.rendered == "Be terse."
    assert (s.sender, s.recipient) == ("system", "assistant")
    assert System().content.system_message.startswith("You are a helpful AI assistant")


def test_assistant_response_from_each_provider_shape() -> None:
    shapes = {
        "openai": {"choices": [{"message": {"role": "assistant", "content": "hi"}}]},
        "delta": {"choices": [{"delta": {"content": "hi"}}]},
        "anthropic": {
            "content": [{"type": "text", "text": "h"}, {"type": "tool_use"}, {"type": "text", "text": "i"}]
        },
        "responses": {"output": [{"content": [{"type": "output_text", "text": "hi"}]}]},
        "claude_code": {"type": "result", "result": "hi"},
    }
    for name, raw in shapes.items():
        msg = AssistantResponse.from_response(raw)
        assert msg.response == "hi", name
        assert msg.model_response == raw
    assert AssistantResponse.from_response("hi").response == "hi"
    assert AssistantResponse.create("x").model_response == {}


def test_action_messages_render_yaml() -> None:
    req = ActionRequest.create("add", {"a": 1})
    res = ActionResponse.create(req, output={"sum": 1})
    assert req.rendered == "Function: add\nArguments:\n  a: 1"
    assert res.rendered == "Function: add\nArguments:\n  a: 1\nOutput:\n  sum: 1"
    assert not req.is_responded and res.success


def test_action_response_needs_a_function() -> None:
    with pytest.raises(InvalidMessageError, match="function"):
        ActionResponse.create()
