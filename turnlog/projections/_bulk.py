"""Bulk validation of stored messages: the fold's and the snapshot loader's fast path.

A stored message is the JSON form of a message (``Message.to_dict()``), with every field
present. ``validate_messages`` checks a list of them against the message classes' own field
schemas in one pydantic-core call. It then builds the message objects itself. Compared with
``TypeAdapter(list[AnyMessage])``, this takes about 15% less CPU time and 58% less memory per
message kept (864 bytes instead of 2,063 for the benchmark's messages):

- pydantic builds a new ``__pydantic_fields_set__`` for every model. A set of eight names takes
  728 bytes, more than half of what a folded message keeps. Here all messages of one class, and
  all contents of one class, share one read-only set, since all their fields were given.
- pydantic calls the Python ``created_at`` validator for every message. Here the same parse
  (``datetime.fromisoformat``) runs in the loop that builds the objects.

The validation itself is pydantic's. The schema is derived from the models' core schemas:
typed dicts with the same field validators, strict, with extra keys forbidden and every field
required; two of them are taken a cheaper way that gives the same result: ``JsonValue`` as a
union tried in pydantic-core instead of a choice picked by a Python function per value
(``_native_json``), and an empty ``images`` list without its Python validator (``_images``). When the fast path does not accept an item as it is (a missing field, a time not in
UTC, any invalid value), it returns None. The caller (``_decode.decode_messages``, the one
entry for stored messages) then validates the general way, so results and errors do not
depend on which path ran.

Why building the objects by hand is kept, and how it is guarded. pydantic is pinned only from
below, and what an instance holds is pydantic's business; ``model_construct`` would be the
public way, but it builds a fields set per object and runs in Python per field, which gives up
both gains above. So the path switches itself off (``ENABLED`` False, every message then
validated the general way) unless all of these hold at import:

- pydantic is of major version 2, and ``BaseModel.__slots__`` is exactly what this module sets;
- every message and content model is plain (``_check_plain``: no validators beyond fields, no
  private attributes, no post-init, extra keys forbidden) and its schema has the known shape;
- a self-check: one stored message of every kind, built here and by
  ``TypeAdapter(list[AnyMessage])``, agrees in class, ``__dict__``, fields set, extra, private
  and dump.

``tests/projections/test_bulk.py`` holds the path to the same contract with Hypothesis over
random and mutated messages, and checks that it is on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn

import pydantic
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import CoreSchema, SchemaValidator, core_schema

from ._messages import (
    ActionRequest,
    ActionResponse,
    AnyMessage,
    AssistantResponse,
    Instruction,
    InstructionContent,
    Message,
    System,
)

__all__ = ["ENABLED", "GENERAL", "SharedFieldsSet", "validate_messages"]

GENERAL: TypeAdapter[list[AnyMessage]] = TypeAdapter(list[AnyMessage])
"""The general validation of a list of stored messages: what this path is checked against,
and what ``_decode`` falls back to (one adapter for both: each one built costs a validator)."""


class SharedFieldsSet(set[str]):
    """The ``__pydantic_fields_set__`` that bulk-validated messages of one class share.

    It refuses changes, since a change would show in every message sharing it; a copy
    (``copy.copy``, which ``model_copy`` uses) is an ordinary set.
    """

    __slots__ = ()

    def __copy__(self) -> set[str]:
        return set(self)

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("the fields set of a stored message is shared and read-only; copy it first")

    add = discard = remove = pop = clear = update = _refuse
    intersection_update = difference_update = symmetric_difference_update = _refuse
    __ior__ = __iand__ = __isub__ = __ixor__ = _refuse


class _Unsupported(Exception):
    """The models use a feature the fast path does not reproduce; it stays off."""


_Plan = tuple[type[BaseModel], SharedFieldsSet, type[BaseModel], SharedFieldsSet]
"""How to build one message class: the class, its fields set, its content class and fields set."""


def _plan(cls: type[BaseModel], content_cls: type[BaseModel]) -> _Plan:
    return (cls, SharedFieldsSet(cls.model_fields), content_cls, SharedFieldsSet(content_cls.model_fields))


_SLOTS = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
"""What pydantic sets on every model instance it builds (``BaseModel.__slots__``)."""


def _check_plain(cls: type[BaseModel]) -> None:
    """Refuse a model whose instances pydantic builds with more than ``_SLOTS``."""
    if (
        BaseModel.__slots__ != _SLOTS
        or any("__slots__" in vars(k) for k in cls.__mro__[: cls.__mro__.index(BaseModel)])
        or cls.model_config.get("extra") != "forbid"
        or cls.__pydantic_post_init__ is not None
        or cls.__private_attributes__
        or cls.__pydantic_decorators__.model_validators
        or cls.__pydantic_computed_fields__
        or cls.__pydantic_custom_init__
        or cls.__pydantic_root_model__
    ):
        raise _Unsupported(f"{cls.__name__} is not a plain frozen model")


def _is_utc_validator(schema: Mapping[str, Any]) -> bool:
    fn = schema.get("function", {}).get("function")
    return getattr(fn, "__func__", None) is Message._utc.__func__  # type: ignore[attr-defined]


def _is_images_validator(schema: Mapping[str, Any]) -> bool:
    fn = schema.get("function", {}).get("function")
    return getattr(fn, "__func__", None) is InstructionContent._check_images.__func__  # type: ignore[attr-defined]


def _images(schema: Mapping[str, Any]) -> CoreSchema:
    """``InstructionContent.images`` with an empty list taken without calling its Python validator.

    The validator returns an empty list as it is, so an empty list is what it gives either way;
    any other list still goes through it (the union's second choice).
    """
    if schema["schema"] != {"type": "list", "items_schema": {"type": "str"}}:
        raise _Unsupported("InstructionContent.images is not a plain list of strings")
    empty = core_schema.list_schema(core_schema.str_schema(), max_length=0)
    return core_schema.union_schema([empty, dict(schema)], mode="left_to_right")


_JSON_CHOICES = ("NoneType", "str", "bool", "int", "float", "dict", "list")
"""The choices of pydantic's ``JsonValue`` union, in the order the native union tries them: None
and text first, the commonest values (each choice tried in vain builds an error); int before
float, since a strict float takes an int (and would make it a float)."""


def _native_json(definition: Mapping[str, Any]) -> Mapping[str, Any]:
    """A definition with pydantic's ``JsonValue`` union (if it is one) made a native union.

    ``JsonValue`` picks its choice with a Python function (the type's name) called for every
    value. In strict mode each choice takes only its own type (a strict int refuses a bool, a
    strict float is tried after int), so trying them in turn in pydantic-core picks the same
    choice for every value of a JSON type, and the choice gives the same result. Values of other
    types fail either way (the caller then validates the general way, whose errors count).
    """
    if definition.get("type") != "json-or-python":
        return definition
    union = definition["python_schema"]
    pick = union.get("discriminator")
    if (
        union.get("type") != "tagged-union"
        or getattr(pick, "__module__", None) != "pydantic.types"
        or getattr(pick, "__name__", None) != "_get_type_name"
        or set(union["choices"]) != set(_JSON_CHOICES)
    ):
        return definition
    choices = [union["choices"][name] for name in _JSON_CHOICES]
    return core_schema.union_schema(choices, mode="left_to_right", ref=definition["ref"])


class _Builder:
    """Derives the typed-dict schema from the core schema of ``list[AnyMessage]``."""

    def __init__(self, definitions: Sequence[Mapping[str, Any]]) -> None:
        self.definitions = {d["ref"]: d for d in definitions}
        self.plans: dict[str, _Plan] = {}

    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        if schema["type"] == "definition-ref":
            return self.definitions[schema["schema_ref"]]
        return schema

    def message(self, schema: Mapping[str, Any]) -> CoreSchema:
        """The typed dict of one message class (its content a nested typed dict)."""
        schema = self.resolve(schema)
        cls = schema["cls"]
        _check_plain(cls)
        content_cls: type[BaseModel] | None = None
        fields: dict[str, Any] = {}
        for name, field in self._fields(schema):
            inner = field["schema"]
            inner = inner["schema"] if inner["type"] == "default" else inner
            if name == "created_at":
                if inner["type"] != "function-before" or not _is_utc_validator(inner):
                    raise _Unsupported("created_at is not validated by Message._utc")
                if set(inner["schema"]) - {"type", "microseconds_precision"}:
                    raise _Unsupported("created_at has datetime constraints")
                inner = core_schema.str_schema()  # parsed by validate_messages
            elif name == "content":
                content = self.resolve(inner)
                if content["type"] != "model":
                    raise _Unsupported(f"{cls.__name__}.content is not a model")
                content_cls = content["cls"]
                _check_plain(content_cls)
                inner = self.content(content)
            elif _holds_model(inner, self.definitions, set()):
                raise _Unsupported(f"{cls.__name__}.{name} holds a model")
            fields[name] = core_schema.typed_dict_field(inner, required=True)
        if content_cls is None or "kind" not in fields:
            raise _Unsupported(f"{cls.__name__} has no content model or no kind")
        self.plans[cls.__name__] = _plan(cls, content_cls)
        return core_schema.typed_dict_schema(fields, extra_behavior="forbid", config=schema.get("config"))

    def content(self, schema: Mapping[str, Any]) -> CoreSchema:
        fields: dict[str, Any] = {}
        for name, field in self._fields(schema):
            inner = field["schema"]
            inner = inner["schema"] if inner["type"] == "default" else inner
            if _holds_model(inner, self.definitions, set()):
                raise _Unsupported(f"{schema['cls'].__name__}.{name} holds a model")
            if inner["type"] == "function-after" and _is_images_validator(inner):
                inner = _images(inner)
            fields[name] = core_schema.typed_dict_field(inner, required=True)
        return core_schema.typed_dict_schema(fields, extra_behavior="forbid", config=schema.get("config"))

    def _fields(self, schema: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
        inner = schema["schema"]
        if inner["type"] != "model-fields" or inner.get("computed_fields"):
            raise _Unsupported(f"{schema['cls'].__name__} is not a plain fields model")
        out = []
        for name, field in inner["fields"].items():
            if set(field) - {"type", "schema", "metadata", "serialization_exclude"} or field.get(
                "serialization_exclude"
            ):
                raise _Unsupported(f"{schema['cls'].__name__}.{name} has aliases or other options")
            out.append((name, field))
        return out


def _holds_model(schema: Any, definitions: Mapping[str, Any], seen: set[str]) -> bool:
    """Whether a field schema contains a model anywhere (the fast path builds only two levels)."""
    if isinstance(schema, list):
        return any(_holds_model(s, definitions, seen) for s in schema)
    if not isinstance(schema, dict):
        return False
    if schema.get("type") == "model":
        return True
    if schema.get("type") == "definition-ref":
        ref = schema["schema_ref"]
        if ref in seen:
            return False
        seen.add(ref)
        return _holds_model(definitions[ref], definitions, seen)
    return any(_holds_model(v, definitions, seen) for k, v in schema.items() if k not in ("metadata", "cls"))


def _build() -> tuple[SchemaValidator, dict[str, _Plan]]:
    """The validator of a list of stored messages, and how to build each message class."""
    base: Any = GENERAL.core_schema
    if base["type"] != "definitions" or base["schema"]["type"] != "list":
        raise _Unsupported("unexpected shape of the list[AnyMessage] schema")
    union = base["schema"]["items_schema"]
    if union["type"] != "tagged-union" or union.get("discriminator") != "kind":
        raise _Unsupported("AnyMessage is not a union tagged by kind")
    builder = _Builder(base["definitions"])
    choices = {tag: builder.message(choice) for tag, choice in union["choices"].items()}
    if set(choices) != set(builder.plans):
        raise _Unsupported("a kind tag does not name its class")
    items = core_schema.tagged_union_schema(choices, "kind")
    definitions = [_native_json(d) for d in base["definitions"]]
    schema = core_schema.definitions_schema(core_schema.list_schema(items), definitions)
    return SchemaValidator(schema), builder.plans


def _self_check() -> None:
    """Build one stored message of every kind here and the general way; refuse any difference."""
    samples = [
        System.create("s"),
        Instruction.create("q", guidance="g", context=[{"k": 1}]),
        AssistantResponse.create("a", metadata={"n": 1}),
        ActionRequest.create("f", {"x": 1}),
        ActionResponse.create(function="f", output={"ok": True}),
    ]
    items = [m.to_dict() for m in samples]
    general = GENERAL.validate_python(items, strict=True)
    built = _construct(_MESSAGES.validate_python(items, strict=True)) if _MESSAGES is not None else None
    if built is None or len(built) != len(general):
        raise _Unsupported("the self-check did not build its samples")
    for a, b in zip(built, general, strict=True):
        for x, y in ((a, b), (a.content, b.content)):
            if (
                type(x) is not type(y)
                or list(x.__dict__.items()) != list(y.__dict__.items())
                or x.model_fields_set != y.model_fields_set
                or (x.__pydantic_extra__, x.__pydantic_private__)
                != (y.__pydantic_extra__, y.__pydantic_private__)
            ):
                raise _Unsupported(f"a {type(y).__name__} built here differs from pydantic's")
        if a != b or a.model_dump() != b.model_dump():
            raise _Unsupported(f"a {type(b).__name__} built here differs from pydantic's")


def validate_messages(items: list[Any]) -> list[AnyMessage] | None:
    """The messages of ``items`` (stored message dicts), or None: validate them the general way.

    When it returns messages, they equal what ``TypeAdapter(list[AnyMessage])`` makes of
    ``items`` in strict mode. None means some item is not one this path takes as is (it may
    still be valid); nothing is raised.
    """
    if _MESSAGES is None:
        return None
    try:
        validated = _MESSAGES.validate_python(items, strict=True)
    except ValidationError:
        return None
    return _construct(validated)


def _construct(validated: list[dict[str, Any]]) -> list[AnyMessage] | None:
    """The message objects of validated typed dicts (changed in place), or None."""
    plans, parse, utc = _PLANS, datetime.fromisoformat, UTC
    new = object.__new__
    set_dict, set_fields, set_extra, set_private = _SET_DICT, _SET_FIELDS, _SET_EXTRA, _SET_PRIVATE
    out: list[Any] = []
    append = out.append
    for fields in validated:
        cls, field_names, content_cls, content_names = plans[fields["kind"]]
        try:
            created = parse(fields["created_at"])
        except ValueError:
            return None
        if created.tzinfo is not utc:
            return None  # Message._utc converts other offsets: leave that to it
        fields["created_at"] = created
        # what pydantic sets on a model it validated: __dict__, fields set, extra and private
        content = new(content_cls)
        set_dict(content, fields["content"])
        set_fields(content, content_names)
        set_extra(content, None)
        set_private(content, None)
        fields["content"] = content
        message = new(cls)
        set_dict(message, fields)
        set_fields(message, field_names)
        set_extra(message, None)
        set_private(message, None)
        append(message)
    return out


_MESSAGES: SchemaValidator | None
_PLANS: dict[str, _Plan]
try:
    if not pydantic.VERSION.startswith("2."):
        raise _Unsupported(f"written for pydantic 2, found {pydantic.VERSION}")
    _MESSAGES, _PLANS = _build()
    # the slot descriptors of _SLOTS (checked by _build): calling their __set__ is what
    # object.__setattr__ ends in, without the lookup (for __dict__, object.__setattr__ takes
    # about four times as long as the descriptor); all four are set on every object
    _SET_DICT, _SET_FIELDS, _SET_EXTRA, _SET_PRIVATE = (vars(BaseModel)[name].__set__ for name in _SLOTS)
    _self_check()
    ENABLED = True
    """Whether the fast path is on (the models use nothing it cannot reproduce)."""
except (_Unsupported, KeyError, TypeError, AttributeError, ValueError):  # pragma: no cover
    # A pydantic whose schemas have another shape than the one this path was written for
    # (KeyError and the like while deriving the schema) switches it off, not the package:
    # every message then goes through the general validation. A test checks it is on.
    _MESSAGES, _PLANS = None, {}
    ENABLED = False
