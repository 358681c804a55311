"""The other pages: the branch list, a run, verify, replay, analytics and the live tail."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from turnlog.eventstore import Problem, RecordedEvent, redacted_marker
from turnlog.projections import visible_data

from ._conversation import TAMPERED_BADGE, tampered_banner
from ._data import PAGE, RunDetail, UIData
from ._html import attr_json, fmt_ms, fmt_time, h, link, q, seg, table

__all__ = [
    "analytics_body",
    "branches_body",
    "chunk_view",
    "event_view",
    "replay_body",
    "run_body",
    "tail_body",
    "verify_body",
]


async def branches_body(data: UIData, query: str, page: int) -> str:
    """The branch list: search, one page of rows, paging links."""
    rows, total = await data.branch_page(query, page)
    pages = max(1, -(-total // PAGE))
    # the name a row shows comes from the branch's first event: it is checked like any content
    altered = await data.damaged_names([r.branch_id for r in rows])
    cells = []
    for r in rows:
        origin = (
            link(q(f"/branches/{seg(r.parent_id)}", at=r.parent_version), f"{r.parent_id}@{r.parent_version}")
            if r.parent_id
            else ""
        )
        run = r.last_run
        state = (
            f'<a class="state {h(run.state)}" href="/runs/{h(seg(run.run_id))}">{h(run.state)}</a> {h(run.verb)}'
            if run
            else '<span class="muted">no run</span>'
        )
        cells.append(
            [
                link(q(f"/branches/{seg(r.branch_id)}"), r.name or "(unnamed)")
                + (f" {TAMPERED_BADGE}" if r.branch_id in altered else ""),
                f'<code class="id">{h(r.branch_id)}</code>',
                h(fmt_time(r.created_at)),
                h(fmt_time(await data.updated_at(r.branch_id))),
                str(r.version),
                origin,
                state,
            ]
        )
    nav = []
    if page > 1:
        nav.append(link(q("/", q=query or None, page=page - 1), "← newer"))
    nav.append(f"<span>{total} branch(es) · page {page} of {pages}</span>")
    if page < pages:
        nav.append(link(q("/", q=query or None, page=page + 1), "older →"))
    return (
        "<h1>Branches</h1>"
        f'<form class="search" method="get" action="/"><input name="q" value="{h(query)}" '
        'placeholder="name or id prefix" autofocus> <button type="submit">search</button></form>'
        f'<div class="pager">{" ".join(nav)}</div>'
        + table(["name", "id", "created", "updated", "version", "forked from", "last run"], cells, "branches")
    )


def chunk_view(event: RecordedEvent, start: float | None) -> dict[str, Any]:
    """A chunk for the page and the live stream: what the JS renders with ``textContent``."""
    note = _redacted_note(event.data)
    # A redacted chunk kept its structure (seq, type, tool name): show that beside the note.
    d = visible_data(event.type, event.data) if note else event.data
    t = event.recorded_at.timestamp()
    return {
        "seq": d.get("seq"),
        "type": d.get("type"),
        "content": d.get("content") or note,
        "tool": d.get("tool_name"),
        "input": d.get("tool_input"),
        "output": d.get("tool_output"),
        "error": bool(d.get("is_error")),
        "t_ms": round((t - start) * 1000, 1) if start is not None else 0.0,
        "position": event.position,
    }


def _redacted_note(data: Any) -> str:
    """``[redacted: reason]`` for an erased payload (see docs/redaction.md), else ``""``."""
    marker = redacted_marker(data)
    return "" if marker is None else f"[redacted: {marker.reason}]"


def _usage(usage: Any) -> str:
    if usage is None or (usage.input_tokens is None and usage.output_tokens is None):
        return "not reported"
    known = [("?" if n is None else str(n)) for n in (usage.input_tokens, usage.output_tokens)]
    text = f"{known[0]} input, {known[1]} output tokens"
    read, written = usage.cache_read_tokens, usage.cache_write_tokens
    if read or written:
        text += f" (prompt cache: {read or 0} of the input read, {written or 0} written)"
    return text


def _run_facts(detail: RunDetail) -> list[tuple[str, str]]:
    info = detail.info
    calls = detail.calls
    first = calls[-1] if calls else {}
    usage = info.usage if info is not None else None
    status: str = info.status if info is not None else "unknown"
    if info is not None and info.reason:
        status = f"{status} ({info.reason}: {info.error_type})"
    return [
        ("verb", h(info.verb if info else "")),
        (
            "provider / model",
            h(
                f"{(info.provider if info else None) or first.get('provider') or '-'} / {(info.model if info else None) or first.get('model') or '-'}"
            ),
        ),
        ("status", f'<span class="status" id="run-status">{h(status)}</span>'),
        ("error", h(info.error_message) if info and info.error_message else "-"),
        ("latency", h(fmt_ms(info.duration_ms if info else None))),
        ("model call latency", h(", ".join(fmt_ms(c.get("latency_ms")) for c in calls) or "-")),
        (
            "time to first token",
            h(", ".join(fmt_ms(c.get("ttft_ms")) for c in calls if c.get("ttft_ms") is not None) or "-"),
        ),
        ("usage", h(_usage(usage))),
        ("cost", h(f"${usage.cost_usd:.6f}" if usage and usage.cost_usd is not None else "unknown")),
        ("provider session", f"<code>{h(detail.session_id or '-')}</code>"),
        ("working directory", f"<code>{h(detail.cwd or '-')}</code>"),
        ("started", h(fmt_time(info.started_at if info else None))),
        ("ended", h(fmt_time(info.ended_at if info else None))),
    ]


def run_body(
    run_id: str, detail: RunDetail, damaged: Sequence[Problem] = (), *, branch_name: str | None = None
) -> str:
    """The run page: facts, chunks on a time axis and as a list; open runs update live.

    ``damaged``: chunks that fail their hash check, named on top and marked in the list.
    ``branch_name``: shown before the branch id, which stays beside it.
    """
    info = detail.info
    start = detail.chunks[0].recorded_at.timestamp() if detail.chunks else None
    altered = {p.position for p in damaged}
    chunks = [chunk_view(e, start) | {"tampered": e.position in altered} for e in detail.chunks]
    facts = "".join(f"<tr><th>{h(k)}</th><td>{v}</td></tr>" for k, v in _run_facts(detail))
    rows = "".join(_chunk_row(c) for c in chunks)
    live = info is None or info.status == "running"
    id_note = f' <code class="id">{h(detail.branch_id)}</code>' if branch_name else ""
    return (
        f'<h1>run <code class="id">{h(run_id)}</code></h1>'
        f"<p>of branch {link(q(f'/branches/{seg(detail.branch_id)}'), branch_name or detail.branch_id)}{id_note}</p>"
        f"{tampered_banner(damaged)}"
        f'<table class="facts">{facts}</table>'
        f'<h2>chunks <span id="chunk-count">{len(chunks)}</span></h2>'
        f'<div id="run-live" data-run="{h(run_id)}" data-live="{int(live)}" data-after="{detail.position}" '
        f'data-start="{start or 0}"></div>'
        '<svg id="chunk-axis" class="axis" role="img" aria-label="chunks on a time axis"></svg>'
        '<table class="chunks"><thead><tr><th>seq</th><th>+ms</th><th>type</th><th>content</th></tr></thead>'
        f'<tbody id="chunk-rows">{rows}</tbody></table>'
    )


def _chunk_row(c: dict[str, Any]) -> str:
    content = c["content"]
    if c["tool"]:
        content = f"{c['tool']}({orjson.dumps(c['input']).decode() if c['input'] is not None else ''})"
    elif c["type"] == "tool_result":
        content = orjson.dumps(c["output"], default=str).decode()
    cls = (
        f"chunk type-{h(c['type'])}"
        + (" error" if c["error"] else "")
        + (" tampered" if c.get("tampered") else "")
    )
    badge = TAMPERED_BADGE if c.get("tampered") else ""
    return (
        f'<tr class="{cls}" data-seq="{h(c["seq"])}" data-t="{c["t_ms"]}" data-type="{h(c["type"])}"><td>{h(c["seq"])}</td>'
        f'<td>{c["t_ms"]:.0f}</td><td>{h(c["type"])}{badge}</td><td><pre class="text">{h(content)}</pre></td></tr>'
    )


def verify_body(report: Any, streams: list[tuple[str, int]], page: int) -> str:
    """Every stream's chain status; a damaged one loud, with where it breaks."""
    damaged: dict[str, list[Any]] = {}
    for p in report.problems:
        damaged.setdefault(p.stream, []).append(p)
    if report.ok:
        banner = (
            f'<div class="banner ok" id="verify-status">verified: {report.events} events in {report.streams} '
            "streams; every hash chain verifies, no version gap</div>"
        )
    else:
        items = "".join(
            f"<li><code>{h(p.stream)}</code> breaks at version {p.version}"
            + (f", position {p.position}" if p.position is not None else "")
            + f": {h(p.what)}</li>"
            for p in report.problems
        )
        banner = (
            f'<div class="banner damaged" id="verify-status" role="alert"><strong>DAMAGED: {len(damaged)} '
            f"stream(s) fail verification ({len(report.problems)} problem(s))</strong><ul>{items}</ul></div>"
        )
    ordered = sorted(streams, key=lambda s: (s[0] not in damaged, s[0]))
    per = 200
    shown = ordered[(page - 1) * per : page * per]
    rows = [
        [
            f"<code>{h(name)}</code>",
            str(version),
            '<span class="state damaged">DAMAGED</span>'
            if name in damaged
            else '<span class="state ok">ok</span>',
            h("; ".join(f"v{p.version}: {p.what}" for p in damaged.get(name, []))),
        ]
        for name, version in shown
    ]
    pages = max(1, -(-len(ordered) // per))
    nav = f'<div class="pager">streams page {page} of {pages}'
    if page < pages:
        nav += " " + link(q("/verify", page=page + 1), "next →")
    return (
        "<h1>Verify</h1>"
        + banner
        + nav
        + "</div>"
        + table(["stream", "version", "chain", "where"], rows, "streams")
    )


def replay_body(branch_id: str, audit: Any, executed: Any) -> str:
    """The audit replay and, when asked, the execute replay with its first divergence."""
    base = f"/branches/{seg(branch_id)}"
    parts = [f"<h1>replay of {link(q(base), branch_id)}</h1>"]
    if audit.ok:
        parts.append(
            f'<div class="banner ok">audit replay matches: {audit.events} events refolded without calling a model; '
            f"{audit.snapshots_checked} snapshot(s) agree; hash chain verifies</div>"
        )
    else:
        items = "".join(f"<li>{h(p)}</li>" for p in audit.problems)
        parts.append(
            f'<div class="banner damaged" role="alert"><strong>MISMATCH</strong><ul>{items}</ul></div>'
        )
    if executed is None:
        parts.append(
            f"<p>{link(q(f'{base}/replay', execute=1), 'execute replay')}: re-run the recorded verbs "
            "against the recorded responses (no model is called)</p>"
        )
        return "".join(parts)
    d = executed.divergence
    if d is not None:
        at = link(q(base, at=d.version), f"the branch as it was at version {d.version}")
        parts.append(
            f'<div class="banner damaged" id="divergence" role="alert"><strong>DIVERGENCE</strong> at call '
            f"{d.call_index} (<code>{h(d.call_id)}</code>, model.called at version {d.version}): today's request "
            f"differs from the recorded one</div>"
            f'<pre class="difference">{h(d.difference)}</pre>'
            f'<table class="facts"><tr><th>recorded fingerprint</th><td><code class="expected">{h(d.expected)}</code></td></tr>'
            f'<tr><th>fingerprint now</th><td><code class="actual">{h(d.actual)}</code></td></tr></table>'
            f"<p>see {at}</p>"
        )
    for problem in executed.final_mismatch:
        parts.append(f'<div class="banner damaged">MISMATCH {h(problem)}</div>')
    if executed.ok:
        parts.append(
            f'<div class="banner ok">execute replay matches: {executed.calls_replayed} call(s) re-run with identical '
            f"request fingerprints ({executed.calls_skipped} not re-runnable, {executed.messages_copied} "
            "message(s) recorded without a model call)</div>"
        )
    return "".join(parts)


def _usage_table(by: str, rows: list[dict[str, Any]]) -> str:
    def p(d: dict[str, Any], k: str) -> str:
        return h("-" if d[k] is None else f"{d[k]:.0f}")

    return table(
        [
            by,
            "calls",
            "errors",
            "error rate",
            "input tok",
            "output tok",
            "cost $",
            "p50 ms",
            "p95 ms",
            "ttft p50",
            "ttft p95",
        ],
        [
            [
                h("(default model)" if by == "model" and r["key"] == "" else r["key"]),
                str(r["calls"]),
                str(r["errors"]),
                h(f"{r['error_rate'] * 100:.1f}%"),
                str(r["input_tokens"]),
                str(r["output_tokens"]),
                h("-" if r["cost_usd"] is None else f"{r['cost_usd']:.6f}"),
                p(r["latency_ms"], "p50"),
                p(r["latency_ms"], "p95"),
                p(r["ttft_ms"], "p50"),
                p(r["ttft_ms"], "p95"),
            ]
            for r in rows
        ],
        "figures",
    )


def analytics_body(result: dict[str, Any]) -> str:
    """Charts (drawn by app.js from the embedded figures) and the tables they come from."""
    by = result["by"]
    tabs = " ".join(
        f'<a class="{"current" if b == by else ""}" href="{q("/analytics", by=b)}">{h(b)}</a>'
        for b in ("model", "provider", "verb", "tool", "day")
    )
    parts = [
        f'<h1>Analytics</h1><div class="tabs">by {tabs}</div>',
        f'<div id="charts" data-figures="{attr_json(result)}"></div>',
    ]
    if "usage" in result:
        parts.append(f"<h2>model calls by {h(by)}</h2>" + _usage_table(by, result["usage"]))
    if "runs" in result:
        parts.append(
            "<h2>runs by verb</h2>"
            + table(
                ["verb", "runs", "ok", "failed", "running", "input tok", "output tok", "cost $"],
                [
                    [
                        h(r["key"]),
                        str(r["runs"]),
                        str(r["ok"]),
                        str(r["failed"]),
                        str(r["running"]),
                        str(r["input_tokens"]),
                        str(r["output_tokens"]),
                        h("-" if r["cost_usd"] is None else f"{r['cost_usd']:.6f}"),
                    ]
                    for r in result["runs"]
                ],
                "figures",
            )
        )
    tools = result.get("tools", result["tool_calls"])
    parts.append(
        "<h2>tool calls</h2>"
        + table(
            ["tool", "calls", "ok", "errors", "denied", "error rate"],
            [
                [
                    h(r["key"]),
                    str(r["calls"]),
                    str(r["ok"]),
                    str(r["errors"]),
                    str(r["denied"]),
                    h(f"{r['error_rate'] * 100:.1f}%"),
                ]
                for r in tools
            ],
            "figures",
        )
    )
    parts.append(
        f'<p class="muted">up to position {result["position"]}; the same figures as <code>turnlog stats --by {h(by)}</code></p>'
    )
    return "".join(parts)


def event_view(event: RecordedEvent) -> dict[str, Any]:
    """An event for the live tail (rendered with ``textContent``)."""
    payload = orjson.dumps(event.data, default=str).decode()
    return {
        "position": event.position,
        "time": fmt_time(event.recorded_at),
        "stream": event.stream,
        "version": event.version,
        "type": event.type,
        "payload": payload if len(payload) <= 160 else payload[:157] + "...",
    }


def tail_body(events: list[RecordedEvent], after: int, damaged: Sequence[Problem] = ()) -> str:
    """The last events of the log; new ones are added live. ``damaged`` ones are marked."""
    altered = {p.position for p in damaged}
    rows = "".join(_tail_row(event_view(e) | {"tampered": e.position in altered}) for e in events)
    return (
        "<h1>Live tail</h1>"
        f"{tampered_banner(damaged)}"
        f'<div id="tail-live" data-after="{after}"></div>'
        '<table class="tail"><thead><tr><th>pos</th><th>time</th><th>stream@v</th><th>type</th><th>data</th></tr></thead>'
        f'<tbody id="tail-rows">{rows}</tbody></table>'
    )


def _tail_row(e: dict[str, Any]) -> str:
    cls, badge = ("tampered", TAMPERED_BADGE + " ") if e.get("tampered") else ("", "")
    return (
        f'<tr class="{cls}" data-position="{e["position"]}"><td>{e["position"]}</td><td class="nowrap">{h(e["time"])}</td><td><code>{h(e["stream"])}@{e["version"]}</code></td>'
        f"<td>{badge}<code>{h(e['type'])}</code></td><td><code>{h(e['payload'])}</code></td></tr>"
    )
