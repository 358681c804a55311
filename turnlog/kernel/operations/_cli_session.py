"""Which provider session a CLI run resumes, from which directory, and what it falls back to.

The working directory is part of the provider session binding: Claude Code and Gemini CLI
keep sessions per directory, so a session can only be resumed from the directory it was
made in. ``provider.session_bound`` and ``run.started`` record the directory.

The rule (``plan_session``):

1. ``resume`` given by the caller (``imodel_kw["resume"]``) is resumed as given.
2. Else the session bound to the branch for this provider and model is resumed, **from the
   directory it is bound with**, unless the caller asked for another directory (the
   ``cwd`` option, ``turnlog run --cwd``): for a CLI that keeps sessions per directory the
   run then starts a new session there (fallback ``cwd_changed``).
3. The directory is the ``cwd`` option, else the bound session's, else the model's own,
   else the current directory.

Fallback: a resume the CLI answers with "session not found" (``CLIError.kind ==
"session_not_found"``) before anything else happened is retried at once as a new provider
session primed with the branch history (see ``_cli_prompt``), recorded as a new binding;
the run stream holds a ``system`` chunk ``{"resume_fallback": reason, "previous_session":
id}`` and ``model.called`` its ``params["resume_fallback"]``. Later runs resume the new
session instead of failing the same way.

When ``recover`` could not reconcile a crashed run with the CLI's own record, the provider
session may hold more than the log (``run.failed.recovered["cli_session"] ==
"unreconciled"``); the next run that resumes it says so (``params["session_note"]`` and a
warning in the log).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from turnlog.kernel._port import provider_session

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort

__all__ = ["PER_DIRECTORY", "SessionPlan", "plan_session"]

PER_DIRECTORY = frozenset({"claude_code", "gemini"})
"""Providers whose sessions belong to a working directory."""


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """How one run uses the provider session.

    Attributes:
        resume: The session to resume (None: a new one).
        cwd: The working directory of the run (absolute).
        fallback: Why the bound session is not resumed (``cwd_changed``), if so.
        previous: The bound session that is not resumed.
        note: What the run should say about the session (an unreconciled crash), if anything.
    """

    resume: str | None
    cwd: str
    fallback: str | None = None
    previous: str | None = None
    note: str | None = None


def _absolute(path: Any) -> str:
    return str(os.path.abspath(os.fspath(path)))


def _note(branch: BranchPort, provider: str, model: str, resume: str | None) -> str | None:
    """A warning when the last run of this session crashed and recovery could not reconcile it."""
    if resume is None:
        return None
    for info in reversed(list(branch.state.runs.values())):
        if info.provider != provider or (info.model or "") != model:
            continue
        recovered: Mapping[str, Any] = info.recovered or {}
        if info.reason == "crashed" and recovered.get("cli_session") == "unreconciled":
            return (
                f"run {info.run_id} crashed and recovery could not read the CLI's own record of "
                f"session {resume}: the provider session may hold more than this log"
            )
        return None
    return None


def plan_session(
    branch: BranchPort, provider: str, model: str, options: dict[str, Any], model_cwd: Any, resume: Any
) -> SessionPlan:
    """Decide resume and working directory (see the module docstring); sets ``options["cwd"]``."""
    asked = options.get("cwd")
    bound = provider_session(branch.state, provider, model)
    bound_cwd = branch.state.provider_cwd(provider, model) if bound else None
    if resume is not None:
        cwd = asked or bound_cwd if resume == bound else asked
        plan = SessionPlan(str(resume), _absolute(cwd or model_cwd or os.getcwd()))
    elif bound is None:
        plan = SessionPlan(None, _absolute(asked or model_cwd or os.getcwd()))
    elif asked is not None and bound_cwd is not None and provider in PER_DIRECTORY:
        cwd = _absolute(asked)
        if cwd != bound_cwd:
            plan = SessionPlan(None, cwd, fallback="cwd_changed", previous=bound)
        else:
            plan = SessionPlan(bound, cwd)
    else:
        plan = SessionPlan(bound, _absolute(asked or bound_cwd or model_cwd or os.getcwd()))
    options["cwd"] = plan.cwd
    note = _note(branch, provider, model, plan.resume)
    if note is None:
        return plan
    return SessionPlan(plan.resume, plan.cwd, plan.fallback, plan.previous, note)
