"""``turnlog chat MESSAGE``: one recorded exchange with an OpenAI-compatible model.

The message goes through ``communicate`` on a branch (an existing one with ``--branch``, else
a new one), so the instruction, the model call and the answer are recorded, inside one run.
The API key comes from the environment (``$OPENAI_API_KEY`` for ``openai``) and is never
stored; a missing one is reported before anything is written.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import anyio

from turnlog.kernel import Branch, KernelError, UsageError, iModel
from turnlog.kernel.models import MissingAPIKey, ProviderError

from ._command import Command, UserError, add_store_argument, emit_json
from ._inspect import branch_id_of, check_new_name, opened_store

__all__ = ["COMMAND", "add_branch_arguments", "last_run_line"]

DEFAULT_MODEL = "openai/gpt-4.1-mini"


def add_branch_arguments(parser: argparse.ArgumentParser) -> None:
    """``--branch B`` or ``--new NAME`` (shared by ``chat`` and ``run``)."""
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--branch", default=None, help="continue this branch (id, unique id prefix or name)")
    which.add_argument(
        "--new",
        default=None,
        metavar="NAME",
        help="start a new branch with this name (one no other branch has: a name names one branch)",
    )


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("message", help="what to say")
    add_branch_arguments(parser)
    parser.add_argument(
        "--model",
        default=None,
        help=f"provider/model (default: the branch's recorded model, else {DEFAULT_MODEL})",
    )
    parser.add_argument(
        "--base-url", default=None, help="an OpenAI-compatible server root, e.g. http://127.0.0.1:8000/v1"
    )
    parser.add_argument("--system", default=None, help="system prompt of a new branch")
    add_store_argument(parser)


def _model(args: argparse.Namespace) -> iModel | None:
    """The model the options name (None: the branch's recorded one), checked before any write."""
    if args.model is None and args.base_url is None:
        return None
    try:
        model = iModel(args.model or DEFAULT_MODEL, base_url=args.base_url)
    except (ValueError, ProviderError) as exc:
        raise UserError(str(exc)) from exc
    if model.is_cli:
        raise UserError(f"{model.provider} is a CLI agent: use 'turnlog run --cli ...'")
    return model


def check_api_key(model: Any) -> None:
    """Refuse, before anything is written, a model whose required API key is not set."""
    backend = getattr(model, "backend", None)
    variable = getattr(backend, "api_key_env", None)
    if getattr(backend, "require_api_key", False) and variable and not os.environ.get(variable):
        raise UserError(f"{model.provider} needs an API key: set ${variable} (it is never stored)")


def last_run_line(branch: Branch) -> str:
    """One line about the branch and its latest run."""
    runs = list(branch.state.runs.values())
    name = f" ({branch.name})" if branch.name else ""
    line = f"branch {branch.id}{name} at version {branch.version}"
    if runs:
        run = runs[-1]
        took = f" in {run.duration_ms:.0f} ms" if run.duration_ms is not None else ""
        line += f"; run {run.run_id} ({run.verb}) {run.status}{took}"
        usage = run.usage
        if usage.input_tokens is not None:
            line += f", {usage.input_tokens} -> {usage.output_tokens} tokens"
        if usage.cost_usd is not None:
            line += f", ${usage.cost_usd:.6f}"
    return line


async def _chat(args: argparse.Namespace) -> tuple[Branch, str | None]:
    """Record the exchange; the answer, or None when the model call failed (recorded)."""
    model = _model(args)
    if args.branch is not None and args.system is not None:
        raise UserError("--system applies to a new branch; the branch given already has its system prompt")
    if args.branch is None:
        await check_new_name(None, args.new)
        model = model or iModel(DEFAULT_MODEL)
        check_api_key(model)  # before the store is even opened
    async with opened_store(args.store, must_exist=args.branch is not None) as store:
        if args.branch is None:
            await check_new_name(store, args.new)
        if args.branch is not None:
            branch = await Branch.load(store, await branch_id_of(store, args.branch), chat_model=model)
            if branch.chat_model is None:
                branch.chat_model = iModel(DEFAULT_MODEL)
            check_api_key(branch.chat_model)
        else:
            branch = Branch(store=store, name=args.new, user="you", system=args.system, chat_model=model)
        try:
            answer = await branch.communicate(args.message)
        except MissingAPIKey as exc:
            raise UserError(str(exc)) from exc
        except (ProviderError, KernelError, UsageError) as exc:
            print(f"turnlog chat: {type(exc).__name__}: {exc}", file=sys.stderr)
            return branch, None
        return branch, str(answer)


def _run(args: argparse.Namespace) -> int:
    branch, answer = anyio.run(_chat, args)
    if answer is None:
        print(f"turnlog chat: recorded as a failed run; {last_run_line(branch)}", file=sys.stderr)
        return 1
    if args.json:
        runs = list(branch.state.runs.values())
        run = runs[-1] if runs else None
        emit_json(
            {
                "branch_id": branch.id,
                "name": branch.name,
                "version": branch.version,
                "answer": answer,
                "run_id": run.run_id if run else None,
                "status": run.status if run else None,
                "usage": run.usage.model_dump() if run is not None else None,
            }
        )
        return 0
    print(answer)
    print(f"-- {last_run_line(branch)}", file=sys.stderr)
    return 0


COMMAND = Command(
    name="chat",
    help="send one message to an OpenAI-compatible model and record the exchange",
    description="Record one exchange (communicate) on a branch: the instruction, the model call "
    "(model.called: parameters, fingerprint, usage, latency; never the API key) and the answer, in one "
    "run. Without --branch a new branch is started. The key comes from the environment "
    "($OPENAI_API_KEY for openai, $<PROVIDER>_API_KEY for others).",
    add_arguments=_add_arguments,
    run=_run,
    example='turnlog chat "What is an event store?" --new notes --model openai/gpt-4.1-mini',
)
