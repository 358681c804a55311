"""``chat_and_record``: one request, recorded as one atomic batch, without a run lifecycle.

The instruction, the ``model.called`` record and the response are appended together, in
that order, or not at all: a failed call records only its ``model.called`` (status
``error``) and raises, so there is never a half-recorded exchange.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from turnlog.kernel._commands import AddMessages
from turnlog.kernel._params import ChatParam
from turnlog.kernel.operations.chat import exchange
from turnlog.projections import AssistantResponse, Instruction, MessageAdded, without_answer

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort

__all__ = ["chat_and_record", "record_exchange"]


async def record_exchange(
    branch: BranchPort, instruction: Any, chat_param: ChatParam, *, verb: str
) -> tuple[Instruction, AssistantResponse]:
    """Call the model and record instruction, call and response in one append.

    Raises:
        Exception: whatever the model raised (after the failed call was recorded).
    """
    done = await exchange(branch, instruction, chat_param, verb=verb)
    run_id = done.called.run_id
    if done.error is not None:
        await branch.execute(AddMessages((done.called,)), run_id=run_id)
        raise done.error
    assert done.response is not None
    items = (
        MessageAdded(message=done.instruction, run_id=run_id),
        # the answer's text is stored once, in the response message of this same append
        without_answer(done.called, done.response),
        MessageAdded(message=done.response, run_id=run_id),
    )
    await branch.execute(AddMessages(items), run_id=run_id)
    return done.instruction, done.response


async def chat_and_record(branch: BranchPort, instruction: Any, chat_param: ChatParam) -> str:
    """Ask the model once and record the exchange; return the response text."""
    _, response = await record_exchange(branch, instruction, chat_param, verb="chat_and_record")
    return response.response
