"""The request rules of the real Gemini API, checked by the fake upstream before it answers.

A request the real API refuses is refused here too, with 400 ``INVALID_ARGUMENT`` and the
wording of the real message:

- ``contents`` is required and not empty; a top-level field the API does not know is refused;
- a content's role is ``user`` or ``model``;
- a user turn of ``functionResponse`` parts answers every ``functionCall`` part of the model
  turn right before it (fewer responses than calls is refused);
- on Gemini 3 models, every ``functionCall`` part of the current turn (after the last user
  text) carries the ``thoughtSignature`` the model gave it.
"""

from __future__ import annotations

from typing import Any

from ._fake_upstream_script import UpstreamError

__all__ = ["FIELDS", "problem", "signs_calls"]

#: The top-level fields of a ``GenerateContentRequest`` in its JSON form.
FIELDS = frozenset(
    {
        "model",
        "contents",
        "systemInstruction",
        "tools",
        "toolConfig",
        "safetySettings",
        "generationConfig",
        "cachedContent",
    }
)


def signs_calls(model: str) -> bool:
    """Whether the model signs its function calls (Gemini 3 and later) and checks them."""
    return model.startswith("gemini-") and model[7:8].isdigit() and int(model[7]) >= 3


def _invalid(message: str) -> UpstreamError:
    return UpstreamError(type="INVALID_ARGUMENT", message=message)


def _parts(content: Any) -> list[dict[str, Any]]:
    parts = content.get("parts") if isinstance(content, dict) else None
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def problem(body: Any, model: str) -> UpstreamError | None:
    """What the real API would refuse in ``body`` sent to ``model`` (None: nothing)."""
    if not isinstance(body, dict):
        return _invalid("Invalid JSON payload received.")
    for name in body:
        if name not in FIELDS:
            return _invalid(f'Invalid JSON payload received. Unknown name "{name}": Cannot find field.')
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return _invalid("* GenerateContentRequest.contents: contents is not specified")
    for i, content in enumerate(contents):
        role = content.get("role", "user") if isinstance(content, dict) else None
        if role not in ("user", "model"):
            return _invalid(f"Please use a valid role: user, model. (contents[{i}].role: {role!r})")
    return _answers(contents) or (_signatures(contents) if signs_calls(model) else None)


def _answers(contents: list[dict[str, Any]]) -> UpstreamError | None:
    for i, content in enumerate(contents):
        responses = [p for p in _parts(content) if "functionResponse" in p]
        if not responses:
            continue
        before = contents[i - 1] if i else {}
        calls = [p for p in _parts(before) if "functionCall" in p] if before.get("role") == "model" else []
        # Fewer answers than calls is refused; Gemini CLI sends a resumed turn's responses twice
        # (and works against the real API), so extra answers are let through.
        if len(responses) < len(calls):
            return _invalid(
                "Please ensure that the number of function response parts is equal to the number of "
                "function call parts of the function call turn."
            )
    return None


def _signatures(contents: list[dict[str, Any]]) -> UpstreamError | None:
    start = 0  # the current turn starts after the last user message with text
    for i, content in enumerate(contents):
        if content.get("role", "user") == "user" and any("text" in p for p in _parts(content)):
            start = i
    for content in contents[start:]:
        if content.get("role") != "model":
            continue
        calls = [p for p in _parts(content) if "functionCall" in p]
        if calls and not calls[0].get("thoughtSignature"):
            name = (calls[0].get("functionCall") or {}).get("name")
            return _invalid(
                "Function call is missing a thought_signature in functionCall parts. This is required "
                "for tools to work correctly, and missing thought_signature may lead to degraded model "
                f"performance. Additional data, function call `default_api:{name}`, position 1."
            )
    return None
