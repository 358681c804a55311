"""The API verbs of ``Branch``: chat, chat_and_record, communicate and parse.

Each verb is a function of the branch (``branch`` is its first argument, a ``BranchPort``);
``Branch`` binds them as its methods, so a verb's signature is written once, here. Each one
builds the parameter objects and delegates to ``turnlog.kernel.operations.<verb>`` through
an import inside the function, so importing Branch loads none of them. ``communicate`` owns
one observed run; the others own none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from turnlog.kernel._errors import UsageError
from turnlog.kernel._lifecycle import observed_run
from turnlog.kernel._params import ChatParam, build_chat_param, build_parse_param, capped_parse_retries
from turnlog.kernel._removed import check_removed

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort
    from turnlog.projections import AssistantResponse, Instruction

__all__ = ["chat", "chat_and_record", "check_format", "communicate", "parse"]


@overload
async def chat(
    branch: BranchPort,
    instruction: Any = None,
    guidance: Any = None,
    context: Any = None,
    sender: str | None = None,
    recipient: str | None = None,
    request_fields: Sequence[str] | Mapping[str, Any] | None = None,
    response_format: Any = None,
    progression: Sequence[str] | None = None,
    imodel: Any = None,
    tool_schemas: Sequence[Mapping[str, Any]] | None = None,
    images: Sequence[str] | None = None,
    image_detail: Literal["low", "high", "auto"] | None = None,
    plain_content: str | None = None,
    return_ins_res_message: Literal[False] = False,
    include_token_usage_to_model: bool = False,
    **kwargs: Any,
) -> str: ...
@overload
async def chat(
    branch: BranchPort,
    instruction: Any = None,
    guidance: Any = None,
    context: Any = None,
    sender: str | None = None,
    recipient: str | None = None,
    request_fields: Sequence[str] | Mapping[str, Any] | None = None,
    response_format: Any = None,
    progression: Sequence[str] | None = None,
    imodel: Any = None,
    tool_schemas: Sequence[Mapping[str, Any]] | None = None,
    images: Sequence[str] | None = None,
    image_detail: Literal["low", "high", "auto"] | None = None,
    plain_content: str | None = None,
    *,
    return_ins_res_message: Literal[True],
    include_token_usage_to_model: bool = False,
    **kwargs: Any,
) -> tuple[Instruction, AssistantResponse]: ...
async def chat(
    branch: BranchPort,
    instruction: Any = None,
    guidance: Any = None,
    context: Any = None,
    sender: str | None = None,
    recipient: str | None = None,
    request_fields: Sequence[str] | Mapping[str, Any] | None = None,
    response_format: Any = None,
    progression: Sequence[str] | None = None,
    imodel: Any = None,
    tool_schemas: Sequence[Mapping[str, Any]] | None = None,
    images: Sequence[str] | None = None,
    image_detail: Literal["low", "high", "auto"] | None = None,
    plain_content: str | None = None,
    return_ins_res_message: bool = False,
    include_token_usage_to_model: bool = False,
    **kwargs: Any,
) -> str | tuple[Instruction, AssistantResponse]:
    """Ask the model once. No message is recorded; the model call is (``model.called``).

    Returns the response text, or ``(Instruction, AssistantResponse)`` when
    ``return_ins_res_message`` is true. Extra keyword arguments are request parameters.
    """
    from turnlog.kernel.operations.chat import chat as chat_operation

    param = build_chat_param(
        guidance=guidance,
        context=context,
        sender=sender,
        recipient=recipient,
        response_format=response_format if response_format is not None else request_fields,
        progression=progression,
        imodel=imodel,
        tool_schemas=tool_schemas,
        images=images,
        image_detail=image_detail,
        plain_content=plain_content,
        include_token_usage_to_model=include_token_usage_to_model,
        imodel_kw=kwargs,
    )
    if return_ins_res_message:
        return await chat_operation(branch, instruction, param, True)
    return await chat_operation(branch, instruction, param, False)


async def chat_and_record(branch: BranchPort, instruction: Any = None, **kwargs: Any) -> str:
    """Ask the model once and record instruction, model call and response in one append.

    Takes the keyword arguments of ``chat`` (``return_ins_res_message`` is ignored) and
    returns the response text. Owns no run lifecycle.
    """
    from turnlog.kernel.operations.chat_and_record import chat_and_record as record

    kwargs.pop("return_ins_res_message", None)
    request_fields = kwargs.pop("request_fields", None)
    if kwargs.get("response_format") is None and request_fields is not None:
        kwargs["response_format"] = request_fields
    param = build_chat_param(chat_model=kwargs.pop("chat_model", None), **_chat_param_kwargs(kwargs))
    return await record(branch, instruction, param)


async def communicate(
    branch: BranchPort,
    instruction: Any = None,
    *,
    guidance: Any = None,
    context: Any = None,
    plain_content: str | None = None,
    sender: str | None = None,
    recipient: str | None = None,
    progression: Sequence[str] | None = None,
    response_format: Any = None,
    request_fields: Sequence[str] | Mapping[str, Any] | None = None,
    chat_model: Any = None,
    parse_model: Any = None,
    skip_validation: bool = False,
    images: Sequence[str] | None = None,
    image_detail: Literal["low", "high", "auto"] | None = None,
    num_parse_retries: int = 3,
    clear_messages: bool = False,
    include_token_usage_to_model: bool = False,
    **kwargs: Any,
) -> Any:
    """Record one exchange and return the answer, parsed when a format is requested.

    Runs as one observed run (``run.started`` then ``run.ended`` or ``run.failed``).
    ``num_parse_retries`` above ``MAX_PARSE_RETRIES`` (5) warns and uses 5.

    Returns:
        The response text; with ``response_format``, an instance of it; with
        ``request_fields``, a dict of the fields found.
    """
    from turnlog.kernel.operations.communicate import communicate as communicate_operation

    check_removed("communicate", kwargs)
    num_parse_retries = capped_parse_retries(num_parse_retries)
    branch.require_writable()
    param = build_chat_param(
        guidance=guidance,
        context=context,
        sender=sender,
        recipient=recipient,
        response_format=response_format if response_format is not None else request_fields,
        progression=progression,
        chat_model=chat_model,
        images=images,
        image_detail=image_detail,
        plain_content=plain_content,
        include_token_usage_to_model=include_token_usage_to_model,
        imodel_kw=kwargs,
    )
    check_format(param.response_format)  # refused before the run starts: nothing recorded
    parse_param = None
    if response_format is not None and not skip_validation:
        parse_param = build_parse_param(
            branch.models, response_format, parse_model=parse_model, max_retries=num_parse_retries
        )
    async with observed_run.using(branch, "communicate", param.imodel) as run:
        run.result = await communicate_operation(
            branch,
            instruction,
            param,
            parse_param,
            clear_messages=clear_messages,
            skip_validation=skip_validation,
            request_fields=request_fields if response_format is None else None,
        )
        return run.result


async def parse(
    branch: BranchPort,
    text: str,
    *,
    response_format: Any = None,
    request_type: Any = None,
    handle_validation: Literal["raise", "return_value", "return_none"] = "return_value",
    max_retries: int = 3,
    fuzzy_match: bool = True,
    similarity_threshold: float = 0.85,
    parse_model: Any = None,
    return_res_message: bool = False,
    **kwargs: Any,
) -> Any:
    """Parse ``text`` into ``response_format``: directly, else by asking the parse model.

    ``response_format`` is a pydantic model class, ``dict``, or a field spec such as
    ``{"name": str, "age": int}`` (a dict of those fields is returned; keys are matched
    approximately). Reformat requests record no message (each is a ``model.called``
    with verb ``parse``). On failure, ``handle_validation`` decides: raise
    ``ValueError``, return the text, or return None.

    With ``return_res_message``, returns ``(value, response)``: ``response`` is the
    reformat ``AssistantResponse`` (None when the text parsed directly), whose metadata
    holds ``model_call_id``, ``is_parsed`` and ``original_text``.

    Raises:
        RemovedArgument: a keyword of the seed's ``parse`` that turnlog does not take.
    """
    from turnlog.kernel.operations.parse import parse as parse_operation

    check_removed("parse", kwargs)
    if kwargs:
        raise TypeError(f"parse() got an unexpected keyword argument {next(iter(kwargs))!r}")
    fmt = response_format if response_format is not None else request_type
    if fmt is None:
        raise UsageError("parse() needs response_format=")
    param = build_parse_param(
        branch.models,
        fmt,
        parse_model=parse_model,
        handle_validation=handle_validation,
        max_retries=max_retries,
        fuzzy_match=fuzzy_match,
        similarity_threshold=similarity_threshold,
    )
    return await parse_operation(branch, text, param, return_res_message=return_res_message)


_CHAT_FIELDS = frozenset(f.name for f in dataclasses.fields(ChatParam)) - {"imodel_kw"}
"""The keyword arguments that are ``ChatParam`` fields (the rest are request parameters)."""


def check_format(fmt: Any) -> None:
    """Raise ``UsageError`` for a response format or ``request_fields`` no request can carry."""
    from turnlog.kernel.operations._prepare import response_schema

    response_schema(fmt)


def _chat_param_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``chat``'s keyword arguments split: ``ChatParam`` fields, and the request parameters in ``imodel_kw``."""
    fields = {k: v for k, v in kwargs.items() if k in _CHAT_FIELDS}
    fields["imodel_kw"] = {k: v for k, v in kwargs.items() if k not in _CHAT_FIELDS}
    return fields
