"""``communicate``: a recorded exchange, then optional parsing (the canonical API ``Middle``).

The Branch facade runs it inside one observed run (``run.started`` ... ``run.ended`` or
``run.failed``). Steps:

1. ``clear_messages``: record ``messages.cleared`` first (the system message stays).
2. Call the model; record instruction, ``model.called`` and response in one append. A failed
   call records its ``model.called`` only and raises.
3. ``skip_validation``: return the response text.
4. With a ``ParseParam`` and a response format: parse; when a reformat request produced the
   value, the recorded response is annotated (``message.annotated``, reason ``parsed``)
   with the reformat call's id, ``is_parsed`` and the parsed text (the recorded text is the
   original). A parse failure raises ``ResponseParseError`` naming the
   requested type.
5. With ``request_fields``: return the requested fields found in the response.
6. Else return the response text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from turnlog.kernel._commands import AnnotateMessage, ClearMessages
from turnlog.kernel._errors import ResponseParseError
from turnlog.kernel._params import ChatParam, ParseParam
from turnlog.kernel.operations.chat_and_record import record_exchange
from turnlog.kernel.operations.parse import fuzzy_validate_mapping, parse, target_name

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort

__all__ = ["communicate"]


async def communicate(
    branch: BranchPort,
    instruction: Any,
    chat_param: ChatParam,
    parse_param: ParseParam | None = None,
    clear_messages: bool = False,
    skip_validation: bool = False,
    request_fields: Sequence[str] | Mapping[str, Any] | None = None,
) -> Any:
    """Record one exchange and return the (optionally parsed) answer; see the module docstring."""
    branch.require_writable()
    if clear_messages:
        await branch.execute(ClearMessages())
    _, response = await record_exchange(branch, instruction, chat_param, verb="communicate")
    if skip_validation:
        return response.response
    if parse_param is not None and parse_param.response_format is not None:
        fmt = parse_param.response_format
        try:
            value, reformat = await parse(branch, response.response, parse_param, return_res_message=True)
        except ValueError as exc:
            raise ResponseParseError(
                f"Failed to parse model response into {target_name(fmt)}: {exc}", target=target_name(fmt)
            ) from exc
        if reformat is not None:
            await branch.execute(
                AnnotateMessage(
                    response.id,
                    {
                        "original_model_call_id": response.metadata.get("model_call_id"),
                        "model_call_id": reformat.metadata.get("model_call_id"),
                        "is_parsed": True,
                        "parsed_text": reformat.response,
                    },
                    reason="parsed",
                )
            )
        return value
    if request_fields is not None:
        return fuzzy_validate_mapping(response.response, list(request_fields))
    return response.response
