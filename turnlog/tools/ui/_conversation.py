"""The conversation as a person reads it: one block per message, everything escaped."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from pydantic import JsonValue

from turnlog.eventstore import Problem
from turnlog.projections import (
    ActionRequest,
    ActionResponse,
    AnyMessage,
    AssistantResponse,
    BranchState,
    Instruction,
    System,
)

from ._html import fmt_time, h, pretty_json, q, seg

__all__ = ["SHOWN", "TAMPERED_BADGE", "conversation", "message_block", "tampered_banner"]

SHOWN = 300
"""Messages rendered at once; the earlier ones of a longer conversation are behind a link."""


TAMPERED_BADGE = (
    '<span class="badge tampered" title="this event does not match the hash chain: it was altered '
    "behind the store's back\">TAMPERED</span>"
)
"""The mark on whatever stands on an event that fails its hash check."""


def tampered_banner(problems: Iterable[Problem]) -> str:
    """A loud notice naming the damaged events a page stands on ("" when there is none)."""
    items = "".join(f"<li><code>{h(p.stream)}</code> v{p.version}: {h(p.what)}</li>" for p in problems)
    if not items:
        return ""
    return (
        '<div class="banner tampered" role="alert">'
        f"{TAMPERED_BADGE} this page shows events that do not match the hash chain "
        f'(altered behind the store\'s back); see <a href="/verify">Verify</a><ul>{items}</ul></div>'
    )


def _text(value: object) -> str:
    return h(value) if isinstance(value, str) else pretty_json(value)


def _badges(message: AnyMessage, annotated: Collection[str]) -> str:
    meta = message.metadata
    out = []
    if meta.get("interrupted"):
        out.append(
            '<span class="badge interrupted" title="the run ended before this text was complete">interrupted</span>'
        )
    if message.id in annotated:
        out.append(
            '<span class="badge annotated" title="metadata merged by message.annotated">annotated</span>'
        )
    if meta.get("redacted"):
        out.append('<span class="badge redacted">redacted</span>')
    return "".join(out)


def _tool_name(schema: Mapping[str, JsonValue]) -> str:
    """A tool schema's name, in the plain form or the OpenAI ``{"function": {...}}`` form."""
    function = schema.get("function")
    nested = function.get("name") if isinstance(function, dict) else None
    return str(schema.get("name") or nested)


def _body(message: AnyMessage) -> str:
    if isinstance(message, System):
        return f'<details><summary>system prompt</summary><pre class="text">{h(message.content.system_message)}</pre></details>'
    if isinstance(message, Instruction):
        ask = message.content
        main = ask.plain_content if ask.plain_content is not None else ask.instruction
        parts = [f'<pre class="text">{_text(main)}</pre>']
        if ask.guidance is not None:
            parts.append(
                f'<details><summary>guidance</summary><pre class="text">{_text(ask.guidance)}</pre></details>'
            )
        if ask.context:
            parts.append(
                f"<details><summary>context</summary><pre>{pretty_json(ask.context)}</pre></details>"
            )
        if ask.tool_schemas:
            names = ", ".join(_tool_name(schema) for schema in ask.tool_schemas)
            parts.append(f'<div class="note">tools offered: {h(names)}</div>')
        return "".join(parts)
    if isinstance(message, AssistantResponse):
        parts = []
        thinking = message.metadata.get("thinking")
        if thinking:
            parts.append(
                f'<details class="thinking"><summary>thinking</summary><pre class="text">{_text(thinking)}</pre></details>'
            )
        text = message.content.text
        parts.append(f'<pre class="text">{h(text)}</pre>' if text else '<div class="note">(no text)</div>')
        return "".join(parts)
    if isinstance(message, ActionRequest):
        call = message.content
        call_id = f' <span class="muted">call {h(call.call_id)}</span>' if call.call_id else ""
        return f'<div class="tool">tool call <code>{h(call.function)}</code>{call_id}</div><pre>{pretty_json(call.arguments)}</pre>'
    if isinstance(message, ActionResponse):
        result = message.content
        took = (
            f' <span class="muted">{result.duration_ms:.0f} ms</span>'
            if result.duration_ms is not None
            else ""
        )
        if result.error is not None:
            return f'<div class="tool error">tool error <code>{h(result.function)}</code>{took}</div><pre class="text">{h(result.error)}</pre>'
        return f'<div class="tool">tool result <code>{h(result.function)}</code>{took}</div><pre>{pretty_json(result.output)}</pre>'
    return f"<pre>{pretty_json(message.to_dict())}</pre>"  # pragma: no cover - closed union


def message_block(
    message: AnyMessage, annotated: Collection[str] = (), mark: str = "", tampered: Collection[str] = ()
) -> str:
    """One message: role, time, badges, run link, body; ``tampered`` ids get the TAMPERED badge."""
    altered = message.id in tampered
    if altered:
        mark = f"{mark} tampered".strip()
    run_id = message.metadata.get("run_id")
    run = f' <a class="run" href="/runs/{h(seg(str(run_id)))}">run</a>' if isinstance(run_id, str) else ""
    cls = f"msg role-{h(message.role)} kind-{h(message.kind)} {mark}".strip()
    sign = {"added": "+ ", "removed": "- "}.get(mark, "")
    return (
        f'<article class="{cls}" data-id="{h(message.id)}"><div class="meta">'
        f'<span class="role">{sign}{h(message.role)}</span> <span class="kind">{h(message.kind)}</span> '
        f"<time>{h(fmt_time(message.created_at))}</time>{TAMPERED_BADGE if altered else ''}"
        f"{_badges(message, annotated)}{run}</div>"
        f"{_body(message)}</article>"
    )


def conversation(
    state: BranchState, annotated: Collection[str], *, show_all: bool, tampered: Collection[str] = ()
) -> str:
    """The messages of a state (the last ``SHOWN`` unless ``show_all``); ``tampered``: ids to mark."""
    messages = state.messages
    parts = [
        f'<div class="conv-head" data-version="{state.version}">version {state.version}: {len(messages)} message(s)</div>'
    ]
    if state.system is not None:
        parts.append(message_block(state.system, annotated, tampered=tampered))
    hidden = 0 if show_all else max(0, len(messages) - SHOWN)
    if hidden:
        more = q(f"/branches/{seg(state.branch_id)}", at=state.version, all=1)
        parts.append(
            f'<div class="note">{hidden} earlier message(s) not shown · <a href="{more}">show all</a></div>'
        )
    parts.extend(message_block(m, annotated, tampered=tampered) for m in list(messages)[hidden:])
    if not messages:
        parts.append('<div class="note">no messages at this version</div>')
    return "".join(parts)
