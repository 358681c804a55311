"""The stream verbs of ``Branch``: ``run`` and ``run_and_collect``.

Functions of the branch (a ``BranchPort``) that ``Branch`` binds as its methods, so each
signature is written once, here. Each verb builds its parameter object and delegates to
``turnlog.kernel.operations.run`` through an import inside the function (importing Branch
loads no verb).

Example::

    branch = Branch(store=store, chat_model=iModel("claude_code/sonnet"))
    async for message in branch.run("List the files", stream_persist=True):
        print(type(message).__name__, message.rendered)
    text = await branch.run_and_collect("And now summarize them.")
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING, Any, Literal

from turnlog.kernel._params import RunParam, build_chat_param, build_parse_param, capped_parse_retries
from turnlog.kernel._persist import PersistOptions
from turnlog.projections import AnyMessage

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort

__all__ = ["run", "run_and_collect"]


def run(
    branch: BranchPort,
    instruction: Any = "",
    *,
    chat_model: Any = None,
    guidance: Any = None,
    context: Any = None,
    sender: str | None = None,
    recipient: str | None = None,
    images: Sequence[str] | None = None,
    image_detail: Literal["low", "high", "auto"] = "auto",
    stream_persist: bool = False,
    persist_dir: str | os.PathLike[str] | None = None,
    snapshot_dir: str | os.PathLike[str] | None = None,
    response_format: Any = None,
    timeout: float | None = None,
    persist_options: PersistOptions | None = None,
    record_wire: bool = True,
    **kwargs: Any,
) -> AsyncGenerator[AnyMessage, None]:
    """Stream one CLI agent turn; an async generator of the recorded messages.

    Yields the instruction first, then every AssistantResponse, ActionRequest and
    ActionResponse the stream makes, each already recorded. Every chunk is recorded as
    a ``stream.chunk`` event of ``run-<run_id>``. Close the generator when you stop
    early (``contextlib.aclosing``): the run then ends with ``run.ended``.

    Args:
        branch: The branch (``self`` when called as ``Branch.run``).
        instruction: The instruction (an ``Instruction`` or any JSON value).
        chat_model: A CLI model for this run; it replaces the branch's chat model.
        guidance: Guidance rendered with the instruction.
        context: Extra context rendered with the instruction.
        sender: Sender of the instruction.
        recipient: Recipient of the instruction.
        images: Image URLs kept on the instruction.
        image_detail: Detail level of the images.
        stream_persist: Keep a live JSONL buffer of the chunks and branch snapshot files
            (``<persist_dir>/<branch_id>.<run_id>.jsonl``, ``<snapshot_dir>/<branch_id>.json``)
            so a crash loses nothing that reached the process (see ``recover``).
        persist_dir: Where the buffer goes (default: ``<store file>.runs/``, see docs/streams.md).
        snapshot_dir: Where snapshots go (default: ``persist_dir``).
        response_format: A format rendered into the instruction (parse with
            ``run_and_collect``).
        timeout: Seconds for the whole stream (one absolute deadline); None, zero or a
            negative value means no limit.
        persist_options: Batching of chunk commits and buffer fsync.
        record_wire: Record the CLI's calls to its model API at the wire, in-process: every
            stream event as it passes (``run-<run_id>-wire-<n>``), so that a CLI killed
            mid-answer loses no text that reached the wire. False turns it off (see
            docs/streams.md for what is then lost).
        **kwargs: Stream options of the model (``resume=`` overrides the bound session).

    Raises:
        ValueError: the model is not a CLI agent (on the first iteration).
    """
    from turnlog.kernel.operations.run import run as run_operation

    imodel_kw = dict(kwargs)
    if timeout is not None:
        imodel_kw["timeout"] = timeout
    chat_param = build_chat_param(
        guidance=guidance,
        context=context,
        sender=sender,
        recipient=recipient,
        response_format=response_format,
        images=images,
        image_detail=image_detail,
        chat_model=chat_model,
        imodel_kw=imodel_kw,
    )
    param = RunParam.from_chat(
        chat_param,
        stream_persist=stream_persist,
        persist_dir=persist_dir,
        snapshot_dir=snapshot_dir,
        record_wire=record_wire,
    )
    return run_operation(branch, instruction, param, persist=persist_options)


async def run_and_collect(
    branch: BranchPort,
    instruction: Any = "",
    *,
    clear_messages: bool = False,
    skip_validation: bool = False,
    response_format: Any = None,
    chat_model: Any = None,
    parse_model: Any = None,
    num_parse_retries: int = 3,
    guidance: Any = None,
    context: Any = None,
    sender: str | None = None,
    recipient: str | None = None,
    stream_persist: bool = False,
    persist_dir: str | os.PathLike[str] | None = None,
    snapshot_dir: str | os.PathLike[str] | None = None,
    record_wire: bool = True,
    **kwargs: Any,
) -> Any:
    """Run one CLI turn and return its text: the responses joined with a blank line.

    Returns None when no response arrived; with ``response_format`` (and without
    ``skip_validation``), the text parsed once into it. Other keyword arguments are
    those of ``run`` (``timeout=`` and ``record_wire=`` included). ``num_parse_retries`` above
    ``MAX_PARSE_RETRIES`` (5) warns and uses 5, as in ``communicate``.
    """
    from turnlog.kernel.operations.run import run_and_collect as collect

    num_parse_retries = capped_parse_retries(num_parse_retries)
    imodel_kw = {k: v for k, v in kwargs.items() if k != "timeout" or v is not None}
    chat_param = build_chat_param(
        guidance=guidance,
        context=context,
        sender=sender,
        recipient=recipient,
        response_format=response_format,
        chat_model=chat_model,
        imodel_kw=imodel_kw,
    )
    param = RunParam.from_chat(
        chat_param,
        stream_persist=stream_persist,
        persist_dir=persist_dir,
        snapshot_dir=snapshot_dir,
        record_wire=record_wire,
    )
    parse_param = None
    if response_format is not None and not skip_validation:
        parse_param = build_parse_param(
            branch.models, response_format, parse_model=parse_model, max_retries=num_parse_retries
        )
    return await collect(
        branch,
        instruction,
        param,
        parse_param,
        clear_messages=clear_messages,
        skip_validation=skip_validation,
    )
