"""The stream verbs of ``Branch``: ``run``, ``run_and_collect`` and ``Branch.from_snapshot``.

A mixin, so the facade keeps one class while these verbs live next to their persistence.
Each verb builds its parameter object and delegates to ``turnlog.kernel.operations.run``
through an import inside the method (importing Branch loads no verb).

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

from turnlog.eventstore import EventStore
from turnlog.kernel._params import ParseParam, RunParam
from turnlog.kernel._persist import PersistOptions, read_snapshot_file
from turnlog.projections import AnyMessage

if TYPE_CHECKING:
    from turnlog.kernel._branch import Branch

__all__ = ["StreamVerbs"]

_MAX_PARSE_RETRIES = 5


class StreamVerbs:
    """``run`` / ``run_and_collect`` / ``from_snapshot``, mixed into ``Branch``."""

    def run(
        self,
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
        **kwargs: Any,
    ) -> AsyncGenerator[AnyMessage, None]:
        """Stream one CLI agent turn; an async generator of the recorded messages.

        Yields the instruction first, then every AssistantResponse, ActionRequest and
        ActionResponse the stream makes, each already recorded. Every chunk is recorded as
        a ``stream.chunk`` event of ``run-<run_id>``. Close the generator when you stop
        early (``contextlib.aclosing``): the run then ends with ``run.ended``.

        Args:
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
            **kwargs: Stream options of the model (``resume=`` overrides the bound session).

        Raises:
            ValueError: the model is not a CLI agent (on the first iteration).
        """
        from turnlog.kernel._branch import resolve_model
        from turnlog.kernel.operations.run import run

        branch: Branch = self  # type: ignore[assignment]
        model = chat_model if chat_model is None or callable(getattr(chat_model, "stream", None)) else None
        if chat_model is not None and model is None:
            model = resolve_model(chat_model)
        imodel_kw = dict(kwargs)
        if timeout is not None:
            imodel_kw["timeout"] = timeout
        param = RunParam(
            guidance=guidance,
            context=context,
            sender=sender,
            recipient=recipient,
            response_format=response_format,
            images=tuple(images or ()),
            image_detail=image_detail,
            imodel=model,
            imodel_kw=imodel_kw,
            stream_persist=stream_persist,
            persist_dir=os.fspath(persist_dir) if persist_dir is not None else None,
            snapshot_dir=os.fspath(snapshot_dir) if snapshot_dir is not None else None,
        )
        return run(branch, instruction, param, persist=persist_options)

    async def run_and_collect(
        self,
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
        **kwargs: Any,
    ) -> Any:
        """Run one CLI turn and return its text: the responses joined with a blank line.

        Returns None when no response arrived; with ``response_format`` (and without
        ``skip_validation``), the text parsed once into it. Other keyword arguments are
        those of ``run`` (``timeout=`` included).
        """
        from turnlog.kernel._branch import resolve_model
        from turnlog.kernel.operations.run import run_and_collect

        branch: Branch = self  # type: ignore[assignment]
        num_parse_retries = min(num_parse_retries, _MAX_PARSE_RETRIES)
        model = chat_model if chat_model is None or callable(getattr(chat_model, "stream", None)) else None
        if chat_model is not None and model is None:
            model = resolve_model(chat_model)
        imodel_kw = {k: v for k, v in kwargs.items() if k != "timeout" or v is not None}
        param = RunParam(
            guidance=guidance,
            context=context,
            sender=sender,
            recipient=recipient,
            response_format=response_format,
            imodel=model,
            imodel_kw=imodel_kw,
            stream_persist=stream_persist,
            persist_dir=os.fspath(persist_dir) if persist_dir is not None else None,
            snapshot_dir=os.fspath(snapshot_dir) if snapshot_dir is not None else None,
        )
        parse_param = None
        if response_format is not None and not skip_validation:
            # `is None`, not truthiness: a supplied model object that is falsy is still used
            chosen = resolve_model(parse_model)
            parse_param = ParseParam(
                response_format=response_format,
                max_retries=num_parse_retries,
                imodel=branch.parse_model if chosen is None else chosen,
            )
        return await run_and_collect(
            branch,
            instruction,
            param,
            parse_param,
            clear_messages=clear_messages,
            skip_validation=skip_validation,
        )

    @classmethod
    async def from_snapshot(
        cls,
        path: str | os.PathLike[str],
        *,
        store: EventStore,
        chat_model: Any = None,
        parse_model: Any = None,
    ) -> Branch:
        """Open a branch from a snapshot file written by ``stream_persist``.

        The state comes from the file; events the store holds after the snapshot's version
        are folded on top, so the branch is as current as the store.

        Raises:
            SnapshotFileError: the file cannot be read as a branch snapshot.
        """
        from turnlog.kernel._branch import Branch, _model_from_config, resolve_model

        state = await read_snapshot_file(path)
        branch = Branch.__new__(Branch)
        branch._setup(state.branch_id, store, readonly_at=None)
        branch._live.state = state
        await branch.kernel.catch_up(branch._live)
        branch._chat_model = resolve_model(chat_model) or _model_from_config(state.chat_model)
        branch._parse_model = resolve_model(parse_model) or _model_from_config(state.parse_model)
        return branch
