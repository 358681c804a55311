"""``parse``: text into a structured value; a direct parse first, then reformat requests.

The direct parse finds a JSON object in the text (a fenced ```json block, or the outermost
``{...}``), matches its keys to the requested fields (exactly, then ignoring case and
punctuation, then by similarity) and validates. When that fails, the parse model is asked
to reformat the text, through ``chat``: nothing is recorded as a message, and each request
is a ``model.called`` event with verb ``parse``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel, ValidationError

from turnlog.kernel._errors import ResponseParseError
from turnlog.kernel._params import ParseParam, build_chat_param
from turnlog.kernel.operations._fields import is_field_spec, spec_model
from turnlog.kernel.operations._prepare import response_schema

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort

__all__ = ["extract_json", "fuzzy_validate_mapping", "parse", "parse_direct", "target_name"]

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n(.*?)```", re.DOTALL)
_REFORMAT = (
    "Reformat the text in the context into a JSON object that follows the ResponseSchema. "
    "Return only the JSON object."
)


def target_name(fmt: Any) -> str:
    """A short name of a response format, for messages and records."""
    if isinstance(fmt, type):
        return fmt.__name__
    if isinstance(fmt, BaseModel):
        return type(fmt).__name__
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        inner = fmt.get("json_schema")
        name = inner.get("name") if isinstance(inner, Mapping) else None
        return str(name or "json_schema")
    return type(fmt).__name__


def extract_json(text: str) -> Any:
    """The JSON value in ``text``: the whole text, a fenced block, or the outermost object.

    Raises:
        ValueError: no JSON object is found.
    """
    candidates = [text.strip()]
    candidates.extend(m.group(1).strip() for m in _FENCE.finditer(text))
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        if not candidate:
            continue
        try:
            return orjson.loads(candidate)
        except orjson.JSONDecodeError:
            continue
    raise ValueError("no JSON object found in the text")


def _norm(key: str) -> str:
    return re.sub(r"[^a-z0-9]", "", key.lower())


def _match_keys(data: Mapping[str, Any], fields: Sequence[str], threshold: float) -> dict[str, Any]:
    """Map each key of ``data`` to a requested field; unmatched keys are dropped."""
    out: dict[str, Any] = {}
    left = dict(data)
    for field in fields:  # exact names first
        if field in left:
            out[field] = left.pop(field)
    normalized = {_norm(f): f for f in fields if f not in out}
    for key in list(left):
        named = normalized.get(_norm(key))
        if named is not None and named not in out:
            out[named] = left.pop(key)
    for key in list(left):
        remaining = [f for f in fields if f not in out]
        if not remaining:
            break
        scored = [(difflib.SequenceMatcher(None, _norm(key), _norm(f)).ratio(), f) for f in remaining]
        score, field = max(scored)
        if score >= threshold:
            out[field] = left.pop(key)
    return out


def fuzzy_validate_mapping(
    text_or_data: Any, fields: Sequence[str] | Mapping[str, Any], *, threshold: float = 0.85
) -> dict[str, Any]:
    """The requested ``fields`` found in a response (keys matched approximately).

    Fields the response does not have are left out; keys that match no field are dropped.

    Raises:
        ResponseParseError: the response holds no JSON object.
    """
    data = text_or_data
    if isinstance(data, str):
        try:
            data = extract_json(data)
        except ValueError as exc:
            raise ResponseParseError(
                f"Failed to parse model response into dict: {exc}", target="dict"
            ) from exc
    if not isinstance(data, Mapping):
        raise ResponseParseError(
            f"Failed to parse model response into dict: got a JSON {type(data).__name__}", target="dict"
        )
    return _match_keys(data, list(fields), threshold)


def parse_direct(text: str, fmt: Any, *, fuzzy_match: bool = True, threshold: float = 0.85) -> Any:
    """Parse ``text`` into ``fmt`` without any model call.

    ``fmt`` is a pydantic model class (an instance of it is returned), ``dict`` (the JSON
    object as it is), a field spec such as ``{"name": str, "age": int}`` (a dict of those
    fields, validated and converted; keys are matched approximately like a model's), or a
    format dict: an OpenAI ``response_format`` (``json_schema``, ``json_object``, ``text``),
    a bare JSON schema or an example object (the JSON object, its required properties and
    their JSON types checked).

    Raises:
        ValueError: no JSON object, or it does not validate (pydantic's ValidationError is one).
    """
    if isinstance(fmt, Mapping) and fmt.get("type") == "text" and not is_field_spec(fmt):
        return text
    data = extract_json(text)
    if fmt is dict or fmt is None:
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        return data
    spec = is_field_spec(fmt)
    if isinstance(fmt, Mapping) and not spec:
        return _parse_format_dict(data, fmt, fuzzy_match=fuzzy_match, threshold=threshold)
    model = spec_model(fmt) if spec else type(fmt) if isinstance(fmt, BaseModel) else fmt
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ValueError(f"cannot parse into {target_name(fmt)}")
    if isinstance(data, dict) and fuzzy_match:
        names = [f.alias or name for name, f in model.model_fields.items()]
        matched = _match_keys(data, names, threshold)
        data = {**{k: v for k, v in data.items() if k in names}, **matched}
    value = model.model_validate(data)
    return value.model_dump() if spec else value


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _format_schema(fmt: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JSON schema a format dict asks for (None for ``json_object`` or an example object)."""
    kind = fmt.get("type")
    if kind == "json_schema":
        inner = fmt.get("json_schema")
        schema = inner.get("schema") if isinstance(inner, Mapping) else None
        return schema if isinstance(schema, Mapping) else None
    if kind == "json_object":
        return None
    if kind == "object" and isinstance(fmt.get("properties"), Mapping):
        return fmt  # a bare JSON schema
    return None


def _type_ok(value: Any, expected: Any) -> bool:
    kinds = expected if isinstance(expected, list) else [expected]
    known = [k for k in kinds if k in _JSON_TYPES]
    if not known:
        return True
    for kind in known:
        if isinstance(value, bool) and kind in ("integer", "number"):
            continue
        if isinstance(value, _JSON_TYPES[kind]):
            return True
    return False


def _parse_format_dict(
    data: Any, fmt: Mapping[str, Any], *, fuzzy_match: bool, threshold: float
) -> dict[str, Any]:
    """The JSON object of an answer to a format dict, checked against its schema's top level.

    A format dict is an OpenAI ``response_format`` (``json_schema`` or ``json_object``), a
    bare JSON schema, or an example object. The object must have every required property
    with the declared JSON type; keys are matched to the properties approximately (as for a
    model) unless the schema forbids other keys.
    """
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    schema = _format_schema(fmt)
    if schema is None:
        if fmt.get("type") in ("json_object", "json_schema"):
            return data
        names = [str(k) for k in fmt]  # an example object: its keys are the fields
        return {**data, **_match_keys(data, names, threshold)} if fuzzy_match else data
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    if fuzzy_match and properties:
        names = [str(k) for k in properties]
        matched = _match_keys(data, names, threshold)
        rest = {} if schema.get("additionalProperties") is False else data
        data = {**{k: v for k, v in rest.items() if k not in matched}, **matched}
    required = schema.get("required")
    missing = [str(k) for k in required or () if k not in data] if isinstance(required, list) else []
    if missing:
        raise ValueError(f"the JSON object lacks the required properties {missing}")
    for name, prop in properties.items():
        if name in data and isinstance(prop, Mapping) and not _type_ok(data[name], prop.get("type")):
            raise ValueError(f"property {name!r} should be of JSON type {prop.get('type')}")
    checked: dict[str, Any] = data
    return checked


async def parse(
    branch: BranchPort, text: str, parse_param: ParseParam, *, return_res_message: bool = False
) -> Any:
    """Parse ``text`` into ``parse_param.response_format``.

    Returns:
        The value; with ``return_res_message`` a pair ``(value, response)`` where
        ``response`` is the reformat ``AssistantResponse`` that produced it (None when the
        direct parse sufficed); its metadata holds ``model_call_id`` (the reformat call),
        ``is_parsed`` (True) and ``original_text`` (the text that did not parse).

    Raises:
        ValueError: nothing parsed and ``handle_validation`` is ``"raise"``.
    """
    fmt = parse_param.response_format
    if fmt is not dict:
        response_schema(fmt)  # a format no parse can produce is refused before any call
    last_error: Exception | None = None
    try:
        value = parse_direct(
            text, fmt, fuzzy_match=parse_param.fuzzy_match, threshold=parse_param.similarity_threshold
        )
        return (value, None) if return_res_message else value
    except (ValueError, ValidationError) as exc:
        last_error = exc
    from turnlog.kernel.operations.chat import chat

    model = branch.models.parse_or(parse_param.imodel)
    param = build_chat_param(
        guidance=_REFORMAT,
        context=[text],
        response_format=fmt if fmt is not dict else None,
        imodel=model,
        imodel_kw=parse_param.imodel_kw,
    )
    for _ in range(max(0, parse_param.max_retries)):
        _, response = await chat(
            branch, "Reformat into JSON.", param, return_ins_res_message=True, verb="parse"
        )
        try:
            value = parse_direct(
                response.response,
                fmt,
                fuzzy_match=parse_param.fuzzy_match,
                threshold=parse_param.similarity_threshold,
            )
        except (ValueError, ValidationError) as exc:
            last_error = exc
            continue
        if not return_res_message:
            return value
        # What a reader inspects to see that a repair happened, besides the call's id.
        repaired = {**response.metadata, "is_parsed": True, "original_text": text}
        return value, response.model_copy(update={"metadata": repaired})
    return _unparsed(text, parse_param, last_error, return_res_message)


def _unparsed(text: str, param: ParseParam, error: Exception | None, pair: bool) -> Any:
    if param.handle_validation == "raise":
        raise ValueError(
            f"cannot parse the text into {target_name(param.response_format)}: {error}"
        ) from error
    value = text if param.handle_validation == "return_value" else None
    return (value, None) if pair else value
