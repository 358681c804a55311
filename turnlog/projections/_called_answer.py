"""A ``model.called`` recorded beside its answer stores the answer's text once, in the message.

The raw provider response of a call that the kernel records together with its
``AssistantResponse`` (one append: instruction, ``model.called``, response) repeats the
answer's text, often the largest part of both events. ``without_answer`` takes that text out of
the raw response (every string in it equal to the answer's text becomes null) and notes where
it stood (``answer_paths``) and which message holds it (``answer_id``); ``with_answer`` puts it
back. Everything else of the raw response (ids, finish reasons, the provider's usage) stays.

A call recorded without a message (``chat``, ``parse``, a failed call) keeps its whole
response, and so does one whose answer's text appears nowhere in the raw response as one
string (a text split over several blocks): nothing is taken out, nothing needs putting back.
"""

from __future__ import annotations

from typing import Any

from pydantic import JsonValue

from ._catalogue import ModelCalled
from ._messages import AssistantResponse

__all__ = ["with_answer", "without_answer"]

Path = list[str | int]


def _paths_of(value: JsonValue, text: str, at: Path, found: list[Path]) -> None:
    if isinstance(value, str):
        if value == text:
            found.append(list(at))
    elif isinstance(value, dict):
        for key, item in value.items():
            _paths_of(item, text, [*at, key], found)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _paths_of(item, text, [*at, index], found)


def _set(raw: Any, path: Path, value: str | None) -> Any:
    """A copy of ``raw`` with the value at ``path`` replaced (only the containers on the path copied).

    Putting text back (``value`` not None) fills a null only: a value found there was written
    by someone else than ``without_answer`` and is left for the reader to see.
    """
    if not path:
        return value if value is None or raw is None else raw
    key, rest = path[0], path[1:]
    if isinstance(raw, dict) and isinstance(key, str) and key in raw:
        return {**raw, key: _set(raw[key], rest, value)}
    if isinstance(raw, list) and isinstance(key, int) and 0 <= key < len(raw):
        copy = list(raw)
        copy[key] = _set(raw[key], rest, value)
        return copy
    return raw  # the path is not there (an edited or redacted response): leave it


def without_answer(called: ModelCalled, answer: AssistantResponse) -> ModelCalled:
    """``called`` with the answer's text taken out of its raw response (``answer_paths``, ``answer_id``).

    Use it only when ``answer`` is recorded in the same append as ``called``. Returns ``called``
    itself when the text is empty or not in the response as a whole string.

    Example:
        >>> from turnlog.projections import ModelCalled
        >>> answer = AssistantResponse.create("hi")
        >>> called = ModelCalled(call_id="c", provider="p", model="m", endpoint="e", fingerprint="f",
        ...     latency_ms=1.0, status="ok", response={"choices": [{"message": {"content": "hi"}}]})
        >>> slim = without_answer(called, answer)
        >>> slim.response, slim.answer_paths
        ({'choices': [{'message': {'content': None}}]}, [['choices', 0, 'message', 'content']])
        >>> with_answer(slim, "hi") == called.response
        True
    """
    text = answer.content.text
    if called.response is None or not text or called.answer_paths:
        return called
    found: list[Path] = []
    _paths_of(called.response, text, [], found)
    if not found:
        return called
    response: Any = called.response
    for path in found:
        response = _set(response, path, None)
    return called.model_copy(update={"response": response, "answer_id": answer.id, "answer_paths": found})


def with_answer(called: ModelCalled, text: str | None) -> dict[str, JsonValue] | None:
    """The raw response as the provider sent it: ``called.response`` with the answer's ``text`` put back.

    ``text`` is the text of the message ``called.answer_id`` names; None (the message is not
    at hand, or was erased) leaves the places empty.
    """
    response: Any = called.response
    if response is None or not called.answer_paths or text is None:
        return called.response
    for path in called.answer_paths:
        response = _set(response, path, text)
    result: dict[str, JsonValue] = response
    return result
