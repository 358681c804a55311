"""The branch pages: one branch at a version with its timeline, a diff, and the forks tree."""

from __future__ import annotations

from turnlog.projections import BranchDiff, BranchState, HistoryRow

from .._shown import Damage
from ._conversation import TAMPERED_BADGE, conversation, message_block, tampered_banner
from ._data import TIMELINE_PAGE, UIData, annotated_ids
from ._html import fmt_time, h, link, q, seg, table
from ._index import BranchRow

__all__ = ["branch_body", "conversation_fragment", "diff_body", "forks_body"]


def _timeline(
    branch_id: str,
    rows: list[HistoryRow],
    runs: dict[int, str],
    at: int,
    page: int,
    pages: int,
    damaged: dict[int, str] | None = None,
) -> str:
    damaged = damaged or {}
    base = f"/branches/{seg(branch_id)}"
    items = []
    for r in rows:
        cls = "current" if r.version == at else ("future" if r.version > at else "")
        badge = ""
        if r.version in damaged:
            cls, badge = f"{cls} tampered".strip(), TAMPERED_BADGE + " "
        run = runs.get(r.version)
        run_link = f'<a class="run" href="/runs/{h(seg(run))}">{h(run[:13])}</a>' if run else ""
        items.append(
            f'<tr class="{cls}" data-version="{r.version}"><td>{link(q(base, at=r.version), r.version)}</td>'
            f"<td><code>{h(r.type)}</code></td><td>{badge}{h(r.summary)}</td>"
            f'<td class="nowrap">{h(fmt_time(r.recorded_at)[11:])}</td><td>{run_link}</td></tr>'
        )
    nav = []
    if page > 1:
        nav.append(link(q(base, at=at, tpage=page - 1), "← earlier events"))
    nav.append(f"<span>events page {page} of {pages}</span>")
    if page < pages:
        nav.append(link(q(base, at=at, tpage=page + 1), "later events →"))
    return (
        f'<div class="pager">{" ".join(nav)}</div>'
        '<table class="timeline"><thead><tr><th>v</th><th>type</th><th>what</th><th>time</th><th>run</th></tr></thead>'
        f"<tbody>{''.join(items)}</tbody></table>"
    )


def _header(state: BranchState, row: BranchRow | None, head: int) -> str:
    origin = ""
    if state.forked_from is not None:
        p = state.forked_from
        origin = (
            f"<div>forked from {link(q(f'/branches/{seg(p.parent_branch_id)}', at=p.parent_version), p.parent_branch_id)}"
            f" at version {p.parent_version}</div>"
        )
    forks = ""
    if row is not None and row.children:
        forks = "<div>forks: " + ", ".join(link(q(f"/branches/{seg(c)}"), c) for c in row.children) + "</div>"
    return (
        f"<h1>{h(state.name or '(unnamed branch)')}</h1>"
        f'<div class="facts"><div>id <code class="id" id="branch-id">{h(state.branch_id)}</code> '
        '<button type="button" class="copy" data-copy="branch-id">copy</button></div>'
        f"<div>head version {head} · created {h(fmt_time(state.created_at))}</div>{origin}{forks}</div>"
    )


def _scrubber(branch_id: str, at: int, head: int) -> str:
    base = f"/branches/{seg(branch_id)}"
    return (
        f'<div class="scrubber" data-branch="{h(branch_id)}" data-head="{head}">'
        f'<a class="step" id="prev" href="{q(base, at=max(1, at - 1))}" title="previous version (←)">←</a>'
        f'<input type="range" id="scrubber" min="1" max="{head}" value="{at}" aria-label="version">'
        f'<a class="step" id="next" href="{q(base, at=min(head, at + 1))}" title="next version (→)">→</a>'
        f'<span>version <output id="at">{at}</output> of {head}</span>'
        f'<a id="diff-link" href="{q(f"{base}/diff", a=max(1, at - 1), b=at)}">diff with previous</a>'
        f'<a href="{q(f"{base}/replay")}">replay</a></div>'
    )


def _fork_form(data: UIData, branch_id: str, at: int, csrf: str) -> str:
    if not data.allow_writes:
        return ""
    return (
        f'<form class="action" method="post" action="/branches/{h(seg(branch_id))}/fork">'
        f'<input type="hidden" name="csrf" value="{h(csrf)}"><input type="hidden" name="at" value="{at}" id="fork-at">'
        '<input name="name" placeholder="name of the fork"><button type="submit">fork at this version</button></form>'
    )


async def conversation_fragment(data: UIData, branch_id: str, at: int, show_all: bool) -> str:
    """The conversation at a version: what the scrubber swaps in."""
    state = await data.state(branch_id, at)
    return _conversation(
        state, await annotated_ids(data.store, branch_id, at), show_all, await data.damage(branch_id, at)
    )


def _conversation(state: BranchState, annotated: set[str], show_all: bool, damage: Damage) -> str:
    """The conversation with its damaged events named on top and its damaged messages marked."""
    conv = conversation(state, annotated, show_all=show_all, tampered=damage.message_ids)
    return tampered_banner(damage.problems) + conv


async def branch_body(
    data: UIData, branch_id: str, at: int | None, tpage: int | None, show_all: bool, csrf: str
) -> str:
    """The branch page: header, scrubber, conversation beside the timeline."""
    head = await data.head(branch_id)
    version = head if at is None else at
    state = await data.state(branch_id, version)
    page = tpage if tpage is not None else (version - 1) // TIMELINE_PAGE + 1
    rows, pages = await data.timeline(branch_id, page)
    runs = await data.run_of_version(branch_id, rows[0].version, rows[-1].version) if rows else {}
    await data.index.refresh()
    damage = await data.damage(branch_id, version)
    conv = _conversation(state, await annotated_ids(data.store, branch_id, version), show_all, damage)
    damaged = await data.damaged_versions(branch_id, rows[0].version, rows[-1].version) if rows else {}
    return (
        _header(state, data.index.branches.get(branch_id), head)
        + _scrubber(branch_id, version, head)
        + _fork_form(data, branch_id, version, csrf)
        + f'<div class="split"><section id="conversation" aria-live="polite">{conv}</section>'
        f'<section class="events">{_timeline(branch_id, rows, runs, version, page, pages, damaged)}</section></div>'
    )


def diff_body(branch_id: str, a: int, b: int, d: BranchDiff, damage: Damage | None = None) -> str:
    """The diff page: removed and added messages, changed ones, runs and sessions.

    ``damage``: the damaged events both states stand on, named on top; their messages are marked.
    """
    damage = damage or Damage()
    marked = damage.message_ids
    base = f"/branches/{seg(branch_id)}"
    parts = [
        f"<h1>diff of {link(q(base), branch_id)}</h1>",
        f'<form class="diff-form" method="get" action="{h(base)}/diff">'
        f'versions <input name="a" value="{a}" size="5"> → <input name="b" value="{b}" size="5"> '
        '<button type="submit">compare</button></form>',
        tampered_banner(damage.problems),
    ]
    if not d:
        parts.append(f'<p class="note">no difference between versions {a} and {b}</p>')
    summary = f"{len(d.added)} added, {len(d.removed)} removed, {len(d.changed)} changed"
    parts.append(f'<p class="diff-summary">{h(summary)}</p><div class="diff">')
    parts.extend(message_block(m, mark="removed", tampered=marked) for m in d.removed)
    parts.extend(message_block(m, mark="added", tampered=marked) for m in d.added)
    parts.extend(message_block(after, mark="changed", tampered=marked) for _, after in d.changed)
    parts.append("</div>")
    if d.runs:
        parts.append(
            "<h2>runs</h2>"
            + table(
                ["run", "before", "after"],
                [
                    [
                        link(f"/runs/{h(seg(rid))}", rid),
                        h(x.status if x else "absent"),
                        h(y.status if y else "absent"),
                    ]
                    for rid, (x, y) in d.runs.items()
                ],
            )
        )
    if d.provider_sessions:
        parts.append(
            "<h2>provider sessions</h2>"
            + table(
                ["provider/model", "before", "after"],
                [[h(f"{p}/{m}"), h(x), h(y)] for (p, m), (x, y) in d.provider_sessions.items()],
            )
        )
    return "".join(parts)


def _tree(data: UIData, row: BranchRow, depth: int) -> str:
    shares = ""
    if row.parent_id is not None:
        shares = f' <span class="muted">shares versions 1-{row.parent_version} of its parent; {row.version} own event(s)</span>'
    name = h(row.name or "(unnamed)")
    kids = "".join(_tree(data, data.index.branches[c], depth + 1) for c in row.children if depth < 64)
    inner = f"<ul>{kids}</ul>" if kids else ""
    return (
        f'<li class="fork-node"><a href="/branches/{h(seg(row.branch_id))}">{name}</a> '
        f'<code class="id">{h(row.branch_id)}</code>{shares}{inner}</li>'
    )


async def forks_body(data: UIData) -> str:
    """Every fork tree: each branch that has forks, its forks beneath it, clickable."""
    await data.index.refresh()
    roots = data.index.roots()
    if not roots:
        return '<h1>Forks</h1><p class="note">no branch has been forked yet</p>'
    return "<h1>Forks</h1>" + "".join(f'<ul class="tree">{_tree(data, r, 0)}</ul>' for r in roots)
