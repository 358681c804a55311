"""A ``model.called`` recorded beside its answer stores the answer's text once, and gives it back."""

from __future__ import annotations

from typing import Any

import pytest

from turnlog.projections import AssistantResponse, ModelCalled, with_answer, without_answer


def called(response: dict[str, Any] | None) -> ModelCalled:
    return ModelCalled(
        call_id="c", provider="p", model="m", endpoint="e", fingerprint="f", latency_ms=1.0, status="ok",
        response=response,
    )  # fmt: skip


OPENAI = {
    "id": "chatcmpl-1",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Paris."}}],
    "usage": {"prompt_tokens": 9, "completion_tokens": 2},
}
ANTHROPIC = {"id": "msg_1", "content": [{"type": "text", "text": "Paris."}], "stop_reason": "end_turn"}
CLAUDE_CODE = {"id": "r1", "type": "result", "result": "Paris.", "session_id": "s", "echo": ["Paris."]}


@pytest.mark.parametrize("raw", [OPENAI, ANTHROPIC, CLAUDE_CODE], ids=["openai", "anthropic", "cli"])
def test_the_text_is_taken_out_everywhere_and_put_back_exactly(raw: dict[str, Any]) -> None:
    answer = AssistantResponse.create("Paris.")
    slim = without_answer(called(raw), answer)
    assert "Paris." not in str(slim.response)
    assert slim.answer_id == answer.id and slim.answer_paths
    assert with_answer(slim, answer.content.text) == raw
    # everything else of the raw response stays: ids, finish reasons, the provider's usage
    assert slim.response is not None and slim.response["id"] == raw["id"]


def test_nothing_is_taken_out_when_the_text_is_not_one_string_of_the_response() -> None:
    split = {"content": [{"type": "text", "text": "Par"}, {"type": "text", "text": "is."}]}
    for raw, text in ((split, "Paris."), (OPENAI, ""), (None, "Paris.")):
        original = called(raw)
        assert without_answer(original, AssistantResponse.create(text)) is original
        assert with_answer(original, text) == raw


def test_a_value_written_where_the_text_was_taken_out_is_left_for_the_reader() -> None:
    """Putting back fills nulls only: an edited response is not papered over by the message's text."""
    slim = without_answer(called(OPENAI), AssistantResponse.create("Paris."))
    assert slim.response is not None
    edited = slim.model_copy(
        update={"response": {**slim.response, "choices": [{"message": {"content": "Rome."}}]}}
    )
    assert with_answer(edited, "Paris.") == {**slim.response, "choices": [{"message": {"content": "Rome."}}]}
    # without the message (erased, or not at hand) the places stay empty
    assert with_answer(slim, None) == slim.response


def test_the_answer_fields_are_not_content_and_survive_a_redaction() -> None:
    from turnlog.projections import content_fields

    assert "response" in content_fields("model.called")
    assert not {"answer_id", "answer_paths"} & set(content_fields("model.called") or ())
