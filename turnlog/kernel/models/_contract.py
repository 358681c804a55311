"""The model contract: what a model can do, declared on the model, read by the verbs.

Every model the kernel ships (``iModel``, the HTTP clients, the CLI agents) is a
``BaseChatModel``: its abilities are one ``ModelProfile`` (a class-level ``default_profile``,
or a ``profile`` property when they depend on the instance's configuration, as an
``iModel``'s depend on its provider). A verb reads ``model.profile``, calls
``model.prepare`` and ``model.invoke(request, on_chunk=...)`` or ``model.stream``; it never
asks an object which attributes it happens to have.

A user's own model only has to satisfy the small protocol (``provider``, ``model`` and
``invoke``; a CLI agent ``stream`` instead). ``as_chat_model`` adapts such an object to the
contract once, at the edge: the adapter is the one place that reads optional attributes,
and the one rule deciding "is a CLI agent" lives there and in the shipped models' profiles.

Example::

    class EchoModel(BaseChatModel):
        provider, model = "echo", "echo-1"

        async def invoke(self, request, *, on_chunk=None):
            return ModelResponse(text=request.messages[-1]["content"])

    assert as_chat_model(EchoModel()).profile.is_cli is False
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from ._errors import ProviderError
from ._types import ChunkSink, ModelRequest, ModelResponse, StreamChunk

__all__ = ["BaseChatModel", "ModelProfile", "as_chat_model", "is_model_object", "model_identity"]

_NO_PARAMS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """What one model can do and how the verbs drive it.

    Attributes:
        is_cli: A CLI agent, driven by ``stream`` (``run``), not by ``invoke``.
        streams_chunks: ``invoke(request, on_chunk=...)`` hands a streamed call's deltas over.
        endpoint: The endpoint recorded with each call (``chat/completions``, ``cli``, ...).
        stream: The verbs' default for ``stream=`` (a call's own keyword wins).
        stream_persist: The verbs' default for ``stream_persist=``.
        request_params: The request parameters the model takes (None: anything).
        default_params: The model's default request parameters (merged by ``prepare``).
        system_prompt_option: A CLI agent's option that adds to its system prompt, if any.
        cwd: The working directory a CLI agent was made with, if any.
        transport: The name of the class doing the work (``OpenAIChatModel``, ...), for messages.
    """

    is_cli: bool = False
    streams_chunks: bool = False
    endpoint: str = "chat/completions"
    stream: bool = False
    stream_persist: bool = False
    request_params: frozenset[str] | None = None
    default_params: Mapping[str, Any] = field(default_factory=lambda: _NO_PARAMS)
    system_prompt_option: str | None = None
    cwd: Any = None
    transport: str = ""


class BaseChatModel(abc.ABC):
    """The model contract of the verbs (see the module docstring).

    A subclass sets ``provider`` and ``model``, implements ``invoke`` and declares its
    abilities in ``default_profile`` (or overrides ``profile``); a CLI agent overrides
    ``stream`` as well.
    """

    provider: str
    model: str

    #: What every instance of the class can do; ``profile`` returns it unless overridden.
    default_profile: ClassVar[ModelProfile] = ModelProfile()

    @property
    def profile(self) -> ModelProfile:
        """What this model can do (see ``ModelProfile``)."""
        return self.default_profile

    def prepare(self, request: ModelRequest) -> ModelRequest:
        """The request as ``invoke`` will send it (the model's defaults merged in); as given by default."""
        return request

    @abc.abstractmethod
    async def invoke(self, request: ModelRequest, *, on_chunk: ChunkSink | None = None) -> ModelResponse:
        """Send one request and return the response; raise ``ProviderError`` subclasses.

        ``on_chunk`` receives the deltas of a streamed call when ``profile.streams_chunks``.
        """

    def stream(
        self, prompt: str, *, resume: str | None = None, options: Mapping[str, Any] | None = None
    ) -> AsyncIterator[StreamChunk]:
        """Run a CLI agent on ``prompt`` and yield its chunks; a model that is none refuses."""
        raise ProviderError(
            f"{self.provider} is not a CLI agent: use invoke(request)",
            provider=self.provider,
            model=self.model,
        )

    def to_config(self) -> dict[str, Any]:
        """A JSON object describing the model; ``model_config`` records its safe fields only."""
        return {"provider": self.provider, "model": self.model}


def as_chat_model(value: object) -> BaseChatModel:
    """``value`` when it is a ``BaseChatModel``, else an adapter giving it the contract.

    The adapter reads the optional attributes of a user's object once (``is_cli``,
    ``streams_chunks``, ``stream_defaults``, ``prepare``, ``to_config``, ...), so that no verb does.
    """
    if isinstance(value, BaseChatModel):
        return value
    return _Adapted(value)


def model_identity(value: object) -> tuple[str, str]:
    """``(provider, model)`` as ``as_chat_model(value)`` names them, without building an adapter.

    A run records only these two (``run.started``); the adapter probes a dozen optional
    attributes that a run start never reads.
    """
    if isinstance(value, BaseChatModel):
        return value.provider, value.model
    return str(getattr(value, "provider", "") or ""), str(getattr(value, "model", "") or "")


def is_model_object(value: object) -> bool:
    """True for a ``BaseChatModel`` or an object with the small protocol's ``invoke`` or ``stream``."""
    return (
        isinstance(value, BaseChatModel)
        or hasattr(value, "invoke")
        or callable(getattr(value, "stream", None))
    )


def _behind(value: object, name: str) -> Any:
    """``name`` of ``value``, of a wrapper's ``inner``, or of an iModel-like ``_backend``."""
    for outer in (value, getattr(value, "inner", None)):
        for candidate in (outer, getattr(outer, "_backend", None)):
            found = getattr(candidate, name, None)
            if found is not None:
                return found
    return None


def _profile_of(value: object) -> ModelProfile:
    """The profile of an object that satisfies only the small protocol; the one place that probes."""
    flag = getattr(value, "is_cli", None)
    streams = callable(getattr(value, "stream", None))
    # The one rule: a CLI agent can stream, and either says so or has no ``invoke``.
    is_cli = streams and (flag if isinstance(flag, bool) else not hasattr(value, "invoke"))
    defaults = getattr(value, "stream_defaults", None)
    defaults = defaults if isinstance(defaults, Mapping) else {}
    declared = getattr(value, "request_params", None)
    params = getattr(value, "params", None)
    option = _behind(value, "system_prompt_option")
    return ModelProfile(
        is_cli=is_cli,
        streams_chunks=getattr(value, "streams_chunks", False) is True,
        endpoint=str(getattr(value, "endpoint", "chat/completions")),
        stream=defaults.get("stream", False),
        stream_persist=defaults.get("stream_persist", False),
        request_params=declared if isinstance(declared, frozenset) else None,
        default_params=params if isinstance(params, Mapping) else _NO_PARAMS,
        system_prompt_option=option if isinstance(option, str) else None,
        cwd=_behind(value, "cwd"),
        transport=type(getattr(value, "backend", value)).__name__,
    )


class _Adapted(BaseChatModel):
    """A user's model object seen through the contract."""

    def __init__(self, target: object) -> None:
        self.target: Any = target
        self.provider = str(getattr(target, "provider", "") or "")
        self.model = str(getattr(target, "model", "") or "")
        self._profile = _profile_of(target)
        prepare = getattr(target, "prepare", None)
        self._prepare = prepare if callable(prepare) else None
        to_config = getattr(target, "to_config", None)
        self._to_config = to_config if callable(to_config) else None

    def __repr__(self) -> str:
        return f"as_chat_model({self.target!r})"

    @property
    def profile(self) -> ModelProfile:
        return self._profile

    def prepare(self, request: ModelRequest) -> ModelRequest:
        if self._prepare is None:
            return request
        prepared: ModelRequest = self._prepare(request)
        return prepared

    async def invoke(self, request: ModelRequest, *, on_chunk: ChunkSink | None = None) -> ModelResponse:
        response: ModelResponse
        if on_chunk is not None and self._profile.streams_chunks:
            response = await self.target.invoke(request, on_chunk=on_chunk)
        else:
            response = await self.target.invoke(request)
        return response

    def stream(
        self, prompt: str, *, resume: str | None = None, options: Mapping[str, Any] | None = None
    ) -> AsyncIterator[StreamChunk]:
        if not callable(getattr(self.target, "stream", None)):
            return super().stream(prompt, resume=resume, options=options)
        chunks: AsyncIterator[StreamChunk] = self.target.stream(prompt, resume=resume, options=options)
        return chunks

    def to_config(self) -> dict[str, Any]:
        if self._to_config is None:
            return super().to_config()
        return dict(self._to_config())
