"""Tools: Python callables a model may call, with OpenAI function schemas from their type hints.

A ``Tool`` wraps a sync or async callable. Its JSON schema comes from the signature: each
parameter's annotation (pydantic models included) becomes a property, parameters without a
default are required, and the description comes from the docstring (the first paragraph for
the tool, the Google-style ``Args:`` section for the parameters). Arguments are validated
against that schema before the call; a sync callable runs in a worker thread so it never
blocks the event loop.

Example::

    def get_weather(city: str, unit: Literal["C", "F"] = "C") -> dict:
        # The docstring gives the description: its first paragraph describes the tool,
        # and its Google-style argument section describes each parameter.
        return {"city": city, "temp": 21, "unit": unit}

    branch = Branch(store=store, chat_model=model, tools=[get_weather])
    branch.tools["get_weather"]                         # the callable, by name
    Tool.from_callable(get_weather).schema              # {"type": "function", "function": {...}}

``ToolRegistry`` holds tools by name; ``ActionParam`` and ``ToolInvocation`` describe how
``act`` runs them and what an authorization gate sees.

Errors::

    KernelError
    └── ToolError                    a tool cannot be called
        ├── UnknownTool              no tool has that name (LookupError): name, available
        └── ToolArgumentsError       the arguments do not fit the schema (ValueError): name
"""

from __future__ import annotations

import functools
import inspect
import re
import weakref
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_type_hints

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import to_jsonable_python

from turnlog.kernel._errors import ToolArgumentsError, ToolError, UnknownTool, UsageError

__all__ = [
    "ActionParam",
    "Authorize",
    "Tool",
    "ToolArgumentsError",
    "ToolError",
    "ToolInvocation",
    "ToolRegistry",
    "UnknownTool",
    "as_tool",
    "jsonable",
]


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")
_SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")


def _doc_parts(doc: str | None) -> tuple[str, dict[str, str]]:
    """The summary paragraph of a docstring and its ``Args:`` descriptions by name."""
    if not doc:
        return "", {}
    text = inspect.cleandoc(doc)
    summary = text.split("\n\n", 1)[0].strip()
    if _ARGS_HEADER.match(summary.splitlines()[0] if summary else ""):
        summary = ""
    args: dict[str, str] = {}
    current: str | None = None
    inside = False
    for line in text.splitlines():
        if _ARGS_HEADER.match(line):
            inside, current = True, None
            continue
        if not inside:
            continue
        if _SECTION.match(line) and not line.startswith(" "):
            break
        found = _ARG_LINE.match(line)
        if found and (current is None or len(line) - len(line.lstrip()) <= 4):
            current = found.group(1).lstrip("*")
            args[current] = found.group(3).strip()
        elif current is not None and line.strip():
            args[current] = f"{args[current]} {line.strip()}".strip()
        elif not line.strip():
            current = None
    summary = " ".join(summary.split())
    return summary, args


def _unwrap(func: Callable[..., Any]) -> Callable[..., Any]:
    target = func
    while isinstance(target, functools.partial):
        target = target.func
    return target


def _is_async(func: Callable[..., Any]) -> bool:
    target = _unwrap(func)
    if inspect.iscoroutinefunction(target):
        return True
    call = getattr(target, "__call__", None)  # noqa: B004 - an object with an async __call__
    return (
        not inspect.isfunction(target) and not inspect.ismethod(target) and inspect.iscoroutinefunction(call)
    )


def _arguments_model(name: str, func: Callable[..., Any], descriptions: Mapping[str, str]) -> type[BaseModel]:
    """A pydantic model of the callable's parameters (``*args``/``**kwargs`` are not offered)."""
    signature = inspect.signature(func)
    try:
        hints = get_type_hints(_unwrap(func), include_extras=True)
    except Exception:  # hints that cannot be resolved fall back to the raw annotations
        hints = {}
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        annotation = hints.get(param.name, param.annotation)
        if annotation is inspect.Parameter.empty:
            annotation = Any
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, Field(default, description=descriptions.get(param.name)))
    safe = re.sub(r"\W", "_", name) or "tool"
    return create_model(f"{safe}_arguments", __config__=ConfigDict(extra="forbid"), **fields)


def jsonable(value: Any) -> Any:
    """A JSON value for a tool output: pydantic models dumped, other objects as their text."""
    return to_jsonable_python(value, fallback=str)


@dataclass(frozen=True, slots=True, eq=False)
class Tool:
    """A callable offered to models as a function tool.

    Attributes:
        name: The function name the model calls.
        func: The callable (sync or async).
        description: What the tool does (sent to the model).
        arguments_model: The pydantic model the arguments are validated with.
        is_async: True when ``func`` returns an awaitable.
    """

    name: str
    func: Callable[..., Any]
    description: str
    arguments_model: type[BaseModel]
    is_async: bool = False

    @classmethod
    def from_callable(
        cls, func: Callable[..., Any], *, name: str | None = None, description: str | None = None
    ) -> Tool:
        """Make a tool from a callable, its type hints and its docstring.

        Raises:
            UsageError: ``func`` is not callable or has no usable name.
        """
        if isinstance(func, Tool):
            return func
        if not callable(func):
            raise UsageError(f"a tool must be callable, not {type(func).__name__}")
        tool_name = name or getattr(_unwrap(func), "__name__", None)
        if not tool_name or tool_name == "<lambda>":
            raise UsageError("a lambda or partial needs an explicit tool name")
        summary, args = _doc_parts(inspect.getdoc(_unwrap(func)))
        model = _arguments_model(tool_name, func, args)
        return cls(
            tool_name, func, description if description is not None else summary, model, _is_async(func)
        )

    @property
    def __name__(self) -> str:
        """The tool name (so ``Branch.register_tools([tool])`` files it under its name)."""
        return self.name

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments."""
        schema = self.arguments_model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        schema.setdefault("properties", {})
        return schema

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool form: ``{"type": "function", "function": {...}}``."""
        function: dict[str, Any] = {"name": self.name, "parameters": self.parameters}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments to call ``func`` with, validated and converted.

        Raises:
            ToolArgumentsError: the arguments do not fit the schema.
        """
        try:
            parsed = self.arguments_model.model_validate(dict(arguments))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors()
            )
            raise ToolArgumentsError(self.name, problems) from exc
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}

    async def call(self, arguments: Mapping[str, Any]) -> Any:
        """Validate ``arguments`` and call the tool; a sync tool runs in a worker thread.

        Raises:
            ToolArgumentsError: the arguments do not fit the schema.
            Exception: whatever the tool raised.
        """
        kwargs = self.validate(arguments)
        if self.is_async:
            return await self.func(**kwargs)
        result = await anyio.to_thread.run_sync(functools.partial(self.func, **kwargs))
        if inspect.isawaitable(result):  # a sync wrapper handing back a coroutine
            return await result
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying callable directly (no validation)."""
        return self.func(*args, **kwargs)


# Tools made from plain callables, kept per callable so schemas are built once.
_TOOL_CACHE: weakref.WeakKeyDictionary[Any, dict[str, Tool]] = weakref.WeakKeyDictionary()


def as_tool(func: Callable[..., Any] | Tool, name: str | None = None) -> Tool:
    """The ``Tool`` for a registered callable (built once per callable and name)."""
    if isinstance(func, Tool):
        return func
    try:
        per_name = _TOOL_CACHE.setdefault(func, {})
    except TypeError:  # not weak-referenceable: build it each time
        return Tool.from_callable(func, name=name)
    key = name or ""
    tool = per_name.get(key)
    if tool is None:
        tool = per_name[key] = Tool.from_callable(func, name=name)
    return tool


class ToolRegistry(Mapping[str, Tool]):
    """Tools by name.

    Args:
        tools: Callables or ``Tool`` objects (filed under their names), or a mapping
            name -> callable.
    """

    __slots__ = ("_tools",)

    def __init__(
        self, tools: Iterable[Callable[..., Any] | Tool] | Mapping[str, Callable[..., Any]] | None = None
    ) -> None:
        self._tools: dict[str, Tool] = {}
        if tools:
            self.register(tools)

    @classmethod
    def of(cls, tools: Mapping[str, Callable[..., Any]]) -> ToolRegistry:
        """A registry of the callables of ``tools`` (a branch's ``tools`` dict)."""
        registry = cls()
        for name, func in tools.items():
            registry._tools[name] = as_tool(func, name)
        return registry

    def register(
        self,
        tools: Iterable[Callable[..., Any] | Tool] | Mapping[str, Callable[..., Any]] | Callable[..., Any],
        *,
        update: bool = False,
    ) -> list[Tool]:
        """Add tools; a taken name raises ``UsageError`` unless ``update``; return them."""
        if isinstance(tools, Mapping):
            items = [as_tool(f, n) for n, f in tools.items()]
        elif callable(tools):
            items = [as_tool(tools)]
        else:
            items = [as_tool(t) for t in tools]
        for tool in items:
            if tool.name in self._tools and not update:
                raise UsageError(f"tool {tool.name!r} is registered already")
        for tool in items:
            self._tools[tool.name] = tool
        return items

    def match(self, name: str) -> Tool:
        """The tool called ``name``.

        Raises:
            UnknownTool: no tool has that name.
        """
        tool = self._tools.get(name)
        if tool is None:
            raise UnknownTool(name, sorted(self._tools))
        return tool

    def schemas(self, names: bool | str | Iterable[str] = True) -> list[dict[str, Any]]:
        """The OpenAI schemas of all tools (``True``) or of the named ones.

        Raises:
            UnknownTool: a named tool is not registered.
        """
        if names is True:
            return [t.schema for t in self._tools.values()]
        if names is False:
            return []
        wanted = [names] if isinstance(names, str) else list(names)
        return [self.match(n).schema for n in wanted]

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolRegistry({sorted(self._tools)})"


@dataclass(frozen=True, slots=True)
class ToolInvocation:
    """What an authorization gate is asked about: one tool call, before it runs.

    Attributes:
        function: The tool name.
        arguments: The arguments the model gave.
        branch_id: The branch the call belongs to.
        request_id: The id of the recorded ActionRequest.
    """

    function: str
    arguments: Mapping[str, Any]
    branch_id: str
    request_id: str


Authorize = Callable[[ToolInvocation], "bool | Awaitable[bool]"]
"""A gate: sync or async, returns True to allow a call. One that raises denies it."""


@dataclass(frozen=True, slots=True)
class ActionParam:
    """How ``act`` runs tool calls.

    Attributes:
        strategy: ``"concurrent"`` (all at once, in a task group) or ``"sequential"``.
        suppress_errors: Record a failing call as an error response and go on; when False,
            the error is recorded and then raised.
        authorize: A gate asked before each call; a denied call is recorded with
            ``error`` set and ``metadata["denied"] = True`` and never runs.
        tools: Restrict the callable tools to these names (None: every registered tool).
    """

    strategy: Literal["concurrent", "sequential"] = "concurrent"
    suppress_errors: bool = True
    authorize: Authorize | None = None
    tools: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.strategy not in ("concurrent", "sequential"):
            raise UsageError(f"Invalid strategy {self.strategy!r}: use 'concurrent' or 'sequential'")
