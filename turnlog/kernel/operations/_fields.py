"""Field specs: a mapping of field names to types, as a response format or ``request_fields``.

``{"name": str, "age": int}`` asks for a JSON object with those fields. It is turned into a
pydantic model (cached per spec) so that it renders as a JSON schema in the instruction and
validates like any model; a parse returns a plain ``dict`` of the fields, as the seed does.
A mapping whose values are JSON values (``{"answer": "the answer, one word"}``) is not a
spec: it stays an example object.

Example::

    spec_model({"name": str, "age": int}).model_validate({"name": "Ann", "age": "41"})
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, PydanticSchemaGenerationError, create_model

from turnlog.kernel._errors import UsageError

__all__ = ["is_field_spec", "spec_model"]


def _is_type(value: Any) -> bool:
    return (
        isinstance(value, type)
        or value is Any
        or isinstance(value, types.UnionType)
        or typing.get_origin(value) is not None
    )


def is_field_spec(fmt: Any) -> bool:
    """True for a non-empty mapping of field names to types (``{"data": str}``).

    Raises:
        UsageError: some values are types and others are not (neither a spec nor JSON).
    """
    if not isinstance(fmt, Mapping) or not fmt:
        return False
    typed = [_is_type(v) for v in fmt.values()]
    if all(typed):
        return True
    if any(typed):
        odd = sorted(str(k) for k, v in fmt.items() if not _is_type(v))
        raise UsageError(
            "a field spec maps every field name to a type ({'name': str, 'age': int}); "
            f"these fields are not types: {odd}"
        )
    return False


class _Spec(BaseModel):
    model_config = ConfigDict(extra="ignore")


@functools.lru_cache(maxsize=256)
def _cached(items: tuple[tuple[str, Any], ...]) -> type[BaseModel]:
    fields: dict[str, Any] = {name: (kind, ...) for name, kind in items}
    try:
        return create_model("Fields", __base__=_Spec, **fields)
    except (PydanticSchemaGenerationError, TypeError, NameError) as exc:
        raise UsageError(
            f"cannot build a response format from the field spec {dict(items)!r}: {exc}"
        ) from exc


def spec_model(fmt: Mapping[Any, Any]) -> type[BaseModel]:
    """The pydantic model of a field spec (every field required).

    Raises:
        UsageError: a field name is not a string, or a type pydantic cannot validate.
    """
    bad = [k for k in fmt if not isinstance(k, str) or not k.isidentifier() or k.startswith("_")]
    if bad:
        raise UsageError(f"field names of a field spec must be public identifiers, not {bad!r}")
    items = tuple((str(k), v) for k, v in fmt.items())
    try:
        return _cached(items)
    except TypeError:  # an unhashable type annotation: build it uncached
        return _cached.__wrapped__(items)
