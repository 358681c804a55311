"""Parameter objects passed from the Branch facade to the verbs, and the ``Middle`` seam.

They are frozen, slotted dataclasses whose declared defaults really apply: a field the
caller leaves out has exactly the default written here. Each one is built in one place:
``build_chat_param`` (a verb's keyword arguments, where the seed's model names ``imodel=``
and ``chat_model=`` meet in the one field ``imodel``), ``RunParam.from_chat`` (a chat
parameter object plus the run's own fields) and ``build_parse_param`` (the one rule
"the given parse model, else the branch's").
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self

from turnlog.kernel._model_config import resolve_model

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort, ModelChoice
    from turnlog.kernel.models import ChatModel

__all__ = [
    "MAX_PARSE_RETRIES",
    "ChatParam",
    "Middle",
    "ParseParam",
    "RunParam",
    "build_chat_param",
    "build_parse_param",
    "capped_parse_retries",
    "instruct_value",
]

MAX_PARSE_RETRIES = 5
"""The most reformat retries a verb allows (``num_parse_retries``); more warns and is lowered to this."""


def capped_parse_retries(requested: int, *, stacklevel: int = 3) -> int:
    """``requested``, lowered to ``MAX_PARSE_RETRIES`` with a ``UserWarning`` when above it.

    The one rule for every verb that takes ``num_parse_retries`` (``communicate`` and
    ``run_and_collect``); ``stacklevel`` points the warning at the verb's caller.
    """
    if requested <= MAX_PARSE_RETRIES:
        return requested
    warnings.warn(
        f"num_parse_retries={requested} is high. Lowering to {MAX_PARSE_RETRIES}. Suggestion: <3",
        UserWarning,
        stacklevel=stacklevel,
    )
    return MAX_PARSE_RETRIES


ImageDetail = Literal["low", "high", "auto"]


def instruct_value(instruct: Any, name: str) -> Any:
    """Field ``name`` of an ``instruct`` (a mapping or an object with attributes; None: None)."""
    if instruct is None:
        return None
    if isinstance(instruct, Mapping):
        return instruct.get(name)
    return getattr(instruct, name, None)


@dataclass(frozen=True, slots=True)
class ChatParam:
    """How to build and send one request.

    Attributes:
        guidance: Guidance rendered with the instruction.
        context: Extra context rendered with the instruction.
        sender: Sender of the instruction (default: the branch user, else ``"user"``).
        recipient: Recipient of the instruction (default: the branch id).
        response_format: A pydantic model class (or instance, or JSON schema dict) the answer
            should follow; rendered into the instruction and sent as ``response_format``.
        progression: Message ids to send as history instead of the branch's progression.
        tool_schemas: Tool schemas in OpenAI function form, sent with the request.
        images: Image URLs or data URIs attached to the instruction.
        image_detail: Detail level requested for the images.
        plain_content: Text sent verbatim instead of the rendered instruction.
        include_token_usage_to_model: Accepted for compatibility; has no effect.
        imodel: The model to call (default: the branch's chat model).
        imodel_kw: Extra request parameters (temperature, max_tokens, ...); never secrets.
    """

    guidance: Any = None
    context: Any = None
    sender: str | None = None
    recipient: str | None = None
    response_format: Any = None
    progression: Sequence[str] | None = None
    tool_schemas: Sequence[Mapping[str, Any]] = ()
    images: Sequence[str] = ()
    image_detail: ImageDetail = "auto"
    plain_content: str | None = None
    include_token_usage_to_model: bool = False
    imodel: ChatModel | None = None
    imodel_kw: Mapping[str, Any] = field(default_factory=dict)

    def with_updates(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied; unknown names raise ``TypeError``."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class RunParam(ChatParam):
    """A ``ChatParam`` for streamed CLI runs.

    Attributes:
        stream_persist: Record every stream chunk as it arrives (crash recovery).
        persist_dir: Where run logs go, for providers that keep files of their own.
        snapshot_dir: Where snapshots go, for providers that keep files of their own.
        record_wire: Record the CLI's upstream calls at the wire (``docs/streams.md``).
    """

    stream_persist: bool = False
    persist_dir: str | None = None
    snapshot_dir: str | None = None
    record_wire: bool = True

    @classmethod
    def from_chat(
        cls,
        chat_param: ChatParam,
        *,
        stream_persist: bool = False,
        persist_dir: str | os.PathLike[str] | None = None,
        snapshot_dir: str | os.PathLike[str] | None = None,
        record_wire: bool | None = None,
    ) -> RunParam:
        """``chat_param`` with the run's own fields: the one copy of a ``ChatParam`` into a ``RunParam``.

        A ``RunParam`` given without run fields is returned as it is; ``record_wire`` left at None
        keeps a ``RunParam``'s own choice (True for a plain ``ChatParam``).
        """
        if (
            isinstance(chat_param, RunParam)
            and not stream_persist
            and persist_dir is None
            and snapshot_dir is None
            and record_wire in (None, chat_param.record_wire)
        ):
            return chat_param
        if record_wire is None:
            record_wire = chat_param.record_wire if isinstance(chat_param, RunParam) else True
        fields = {f.name: getattr(chat_param, f.name) for f in dataclasses.fields(ChatParam)}
        return cls(
            **fields,
            stream_persist=stream_persist,
            persist_dir=os.fspath(persist_dir) if persist_dir is not None else None,
            snapshot_dir=os.fspath(snapshot_dir) if snapshot_dir is not None else None,
            record_wire=record_wire,
        )


@dataclass(frozen=True, slots=True)
class ParseParam:
    """How to turn response text into a structured value.

    Attributes:
        response_format: The pydantic model class (or ``dict``) to produce.
        handle_validation: On failure: ``"raise"``, ``"return_value"`` (the text) or
            ``"return_none"``.
        max_retries: How many reformat requests to the parse model at most.
        fuzzy_match: Match keys approximately (case, spacing, close spellings).
        similarity_threshold: The lowest similarity accepted for a fuzzy key match.
        imodel: The model for reformat requests (default: the branch's parse model).
        imodel_kw: Extra request parameters for reformat requests.
    """

    response_format: Any = None
    handle_validation: Literal["raise", "return_value", "return_none"] = "raise"
    max_retries: int = 3
    fuzzy_match: bool = True
    similarity_threshold: float = 0.85
    imodel: ChatModel | None = None
    imodel_kw: Mapping[str, Any] = field(default_factory=dict)

    def with_updates(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied; unknown names raise ``TypeError``."""
        return dataclasses.replace(self, **changes)


def build_chat_param(*, chat_model: Any = None, **fields: Any) -> ChatParam:
    """A ``ChatParam`` from a verb's keyword arguments; None means "the field's default".

    The seed names the model ``imodel=`` in ``chat`` and ``chat_model=`` in ``communicate``,
    ``operate`` and ``run``: both land in the field ``imodel``, resolved here (a model object,
    a ``"provider/model"`` string or a config). Sequences become tuples.

    Raises:
        TypeError: a name that is no field (request parameters go in ``imodel_kw``).
    """
    given = {k: v for k, v in fields.items() if v is not None}
    if chat_model is not None:
        given["imodel"] = chat_model
    if "imodel" in given:
        given["imodel"] = resolve_model(given["imodel"])
    for name in ("tool_schemas", "images"):
        if name in given:
            given[name] = tuple(given[name])
    return ChatParam(**given)


def build_parse_param(
    models: ModelChoice, response_format: Any, *, parse_model: Any = None, **fields: Any
) -> ParseParam:
    """A ``ParseParam`` for ``response_format``: the one rule "``parse_model``, else the branch's parse model".

    ``parse_model`` is resolved like any model (``is None``, not truthiness: a model object
    may be falsy); ``fields`` are the other ``ParseParam`` fields.
    """
    return ParseParam(
        response_format=response_format, imodel=models.parse_or(resolve_model(parse_model)), **fields
    )


class Middle(Protocol):
    """One logical exchange on a branch (``communicate`` is the canonical API adapter).

    An adapter may call a provider once, consume a stream of several assistant messages,
    or run a bounded series of recorded inner exchanges; it owns the clearing and the
    recording of what it does. Example::

        async def echo_middle(branch, instruction, chat_param, parse_param=None,
                              clear_messages=False, skip_validation=False):
            return await branch.chat_and_record(instruction)
    """

    async def __call__(
        self,
        branch: BranchPort,
        instruction: Any,
        chat_param: ChatParam,
        parse_param: ParseParam | None = None,
        clear_messages: bool = False,
        skip_validation: bool = False,
    ) -> Any: ...
