"""The run page's waterfall: the run's spans (``turnlog.analytics.SpanView``) as a tree on a time axis.

Server-rendered and script-free: each row's bar is an SVG whose ``x`` and ``width`` are
attributes (the page's Content-Security-Policy forbids inline styles), each span a
``<details>`` that opens its attributes, events and message content, and links to the branch
version at which its last event was recorded. A span built from an event that fails its hash
check carries the TAMPERED badge; the run page's banner names those events.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

from turnlog.analytics import SPAN_EVENT_TYPES, Semconv, Span, SpanView, Trace
from turnlog.eventstore import EventStore, Problem, RecordedEvent

from ._conversation import TAMPERED_BADGE
from ._html import h, link, q, seg

__all__ = ["run_trace", "tampered_spans", "trace_section", "waterfall_html"]

_CONTENT_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)
_MAX_DEPTH = 8


async def run_trace(store: EventStore, branch_id: str, run_id: str) -> Trace | None:
    """The finished trace that holds ``run_id`` (None while the run is open), content included."""
    return (await _trace_and_events(store, branch_id, run_id))[0]


async def _trace_and_events(
    store: EventStore, branch_id: str, run_id: str
) -> tuple[Trace | None, list[RecordedEvent]]:
    """The trace of ``run_id`` and the events it was built from (to check them)."""
    wanted = set(SPAN_EVENT_TYPES)
    events: list[RecordedEvent] = [
        e async for e in store.read_stream(f"branch-{branch_id}") if e.type in wanted
    ]
    events += [e async for e in store.read_stream(f"run-{run_id}")]
    events.sort(key=lambda e: e.position)
    view = SpanView(content=True, semconv=Semconv.LATEST)
    for event in events:
        for trace in view.apply(event):
            if any(s.attributes.get("turnlog.run_id") == run_id for s in trace.spans):
                used = [e for e in events if trace.start_position <= e.position <= trace.end_position]
                return trace, used
    return None, []


def tampered_spans(trace: Trace, problems: Sequence[Problem], events: Sequence[RecordedEvent]) -> set[int]:
    """The ids of the spans of ``trace`` built from an event named in ``problems``.

    A span records only the position of its last event, so an altered event is matched to the
    span ending on it (a model call, a tool call, a run's end) or else to the span of the run it
    belongs to: its run's chunks (stream ``run-{id}``) and lifecycle events all feed that span.
    """
    by_position = {e.position: e for e in events}
    run_spans = {
        str(s.attributes["turnlog.run_id"]): s.span_id
        for s in trace.spans
        if s.kind_of == "run" and "turnlog.run_id" in s.attributes
    }
    ends = {s.position: s.span_id for s in trace.spans}
    marked: set[int] = set()
    for problem in problems:
        if problem.position in ends:
            marked.add(ends[problem.position])
            continue
        event = by_position.get(problem.position) if problem.position is not None else None
        run_id = problem.stream.removeprefix("run-") if problem.stream.startswith("run-") else None
        if run_id is None and event is not None:
            run_id = event.data.get("run_id") or event.meta.get("run_id")
        if run_id is not None and str(run_id) in run_spans:
            marked.add(run_spans[str(run_id)])
        else:  # an altered event the view cannot place stands on the whole trace
            marked.add(trace.root.span_id)
    return marked


async def trace_section(
    store: EventStore,
    branch_id: str,
    run_id: str,
    check: Callable[[list[RecordedEvent]], Awaitable[Sequence[Problem]]] | None = None,
    *,
    names: Mapping[str, str] | None = None,
) -> tuple[str, tuple[Problem, ...]]:
    """The waterfall section of a run page (a note while the run has not ended), and its damage.

    ``check`` names the damaged events among those the spans are built from: their spans are
    marked, and they are returned for the page's banner (one banner on top of the page, with
    the run's damaged chunks). ``names``: branch id -> name, for the links to branch versions.
    """
    trace, events = await _trace_and_events(store, branch_id, run_id)
    if trace is None:
        return (
            '<section class="waterfall"><h2>spans</h2>'
            '<p class="note">The spans appear when the run has ended.</p></section>'
        ), ()
    problems = tuple(await check(events)) if check is not None else ()
    return waterfall_html(trace, tampered_spans(trace, problems, events), names=names), problems


def _depths(spans: tuple[Span, ...]) -> dict[int, int]:
    depth: dict[int, int] = {}
    for span in spans:  # parents come before their children
        depth[span.span_id] = depth.get(span.parent_id, -1) + 1 if span.parent_id in depth else 0
    return depth


def waterfall_html(
    trace: Trace, tampered: Collection[int] = (), *, names: Mapping[str, str] | None = None
) -> str:
    """The spans of ``trace`` as rows in tree order, each with a bar on the run's time axis.

    ``tampered``: ids of spans built from an altered event, marked with the TAMPERED badge.
    ``names``: branch id -> name, so that links read as names rather than ids.
    """
    spans = trace.spans
    t0 = min(s.start_ns for s in spans)
    total = max(max(s.end_ns for s in spans) - t0, 1)
    depth = _depths(spans)
    names = names or {}
    rows = "".join(_row(s, depth[s.span_id], t0, total, s.span_id in tampered, names) for s in spans)
    return (
        '<link rel="stylesheet" href="/static/waterfall.css">'
        f'<section class="waterfall" aria-label="spans of the run" data-trace="{h(trace.root.trace_hex)}">'
        f'<h2>spans <span class="count">{len(spans)}</span></h2>'
        f'<div class="axis"><span>0 ms</span><span>{h(_ms(total))}</span></div>'
        f'<ol class="spans">{rows}</ol></section>'
    )


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.1f} ms" if ns < 10_000_000 else f"{ns / 1e6:.0f} ms"


def _bar(span: Span, t0: int, total: int) -> str:
    x = (span.start_ns - t0) / total * 1000
    width = max((span.end_ns - span.start_ns) / total * 1000, 2.0)
    marks = "".join(
        f'<line class="mark" x1="{(e.time_ns - t0) / total * 1000:.1f}" x2="{(e.time_ns - t0) / total * 1000:.1f}" '
        'y1="0" y2="14"/>'
        for e in span.events
        if e.name in ("gen_ai.first_token", "turnlog.first_chunk")
    )
    return (
        '<svg class="bar" viewBox="0 0 1000 14" preserveAspectRatio="none" aria-hidden="true">'
        f'<rect x="{x:.1f}" y="2" width="{width:.1f}" height="10" rx="2"/>{marks}</svg>'
    )


def _row(span: Span, depth: int, t0: int, total: int, altered: bool, names: Mapping[str, str]) -> str:
    status = f" status-{span.status}" + (" tampered" if altered else "")
    cls = f"span kind-{span.kind_of} depth-{min(depth, _MAX_DEPTH)}{status}"
    offset = _ms(span.start_ns - t0)
    return (
        f'<li class="{cls}" data-depth="{depth}" data-kind="{span.kind_of}" data-name="{h(span.name)}" '
        f'data-span="{h(span.span_hex)}"><details><summary>'
        f'<span class="name">{h(span.name)}</span>{TAMPERED_BADGE if altered else ""}'
        f'<span class="when">+{h(offset)}</span><span class="dur">{h(_ms(span.end_ns - span.start_ns))}</span>'
        f"{_bar(span, t0, total)}</summary>{_detail(span, t0, names)}</details></li>"
    )


def _detail(span: Span, t0: int, names: Mapping[str, str]) -> str:
    parts = []
    if span.branch_id is not None and span.branch_version is not None:
        href = q(f"/branches/{seg(span.branch_id)}", at=span.branch_version)
        branch = names.get(span.branch_id) or span.branch_id
        parts.append(
            f'<p class="recorded">recorded at {link(href, f"{branch} version {span.branch_version}")}</p>'
        )
    if span.status == "error":
        parts.append(f'<p class="error">{h(span.attributes.get("error.type"))}: {h(span.status_message)}</p>')
    attrs = "".join(
        f'<tr><th><code>{h(k)}</code></th><td><code class="value">{h(_value(v))}</code></td></tr>'
        for k, v in span.attributes.items()
        if k not in _CONTENT_KEYS
    )
    # ids never wrap: a narrow screen scrolls the table sideways instead
    parts.append(f'<div class="attr-scroll"><table class="attributes">{attrs}</table></div>')
    if span.events:
        items = "".join(
            f"<li><code>{h(e.name)}</code> +{h(_ms(e.time_ns - t0))} {h(_value(dict(e.attributes)) if e.attributes else '')}</li>"
            for e in span.events
        )
        parts.append(f'<ul class="span-events">{items}</ul>')
    for key in _CONTENT_KEYS:
        value = span.attributes.get(key)
        if isinstance(value, str):
            parts.append(f'<h4><code>{h(key)}</code></h4><pre class="content">{h(_pretty(value))}</pre>')
    return f'<div class="span-detail">{"".join(parts)}</div>'


def _value(value: Any) -> str:
    if isinstance(value, tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def _pretty(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text
