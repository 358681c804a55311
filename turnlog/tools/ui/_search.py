"""Search in ``turnlog ui``: branches and messages by text, over a SQLite FTS5 index of the log.

The index is the ui's own (an in-memory SQLite database, never the store): it reads the log's
``branch.created`` / ``branch.forked`` and ``message.added`` events from where it stopped and
adds their names and texts. A hit links to its branch at the version where the message was
recorded. A message redacted after it was indexed is checked again against the store before
it is shown, so a redaction takes effect at once. Each hit's event is checked against the hash
chain as it is shown: a hit from an altered event carries the TAMPERED badge.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from turnlog.eventstore import EventStore, RecordedEvent, check_events
from turnlog.projections import visible_data

from ._conversation import TAMPERED_BADGE
from ._html import h, q, seg

__all__ = ["SearchIndex"]

_TYPES = ("branch.created", "branch.forked", "message.added")
_LIMIT = 50


def _message_text(message: Mapping[str, Any]) -> str:
    metadata = message.get("metadata")
    if isinstance(metadata, Mapping) and "redacted" in metadata:
        return ""
    content = message.get("content")
    if not isinstance(content, Mapping):
        return ""
    keys = ("instruction", "guidance", "text", "system_message", "function", "output", "error")
    return "\n".join(str(content[k]) for k in keys if content.get(k))


def _fts_query(text: str) -> str:
    """Every word as a quoted FTS5 string (a user's quote or operator is only text), all required."""
    words = [w.replace('"', '""') for w in text.split() if w.strip()]
    return " ".join(f'"{w}"' for w in words)


class SearchIndex:
    """An FTS5 index of branch names and message texts, brought up to date before each search."""

    def __init__(self) -> None:
        self._db = sqlite3.connect(":memory:")
        self._db.execute(
            "CREATE VIRTUAL TABLE hits USING fts5("
            "text, kind UNINDEXED, branch UNINDEXED, version UNINDEXED, name UNINDEXED, tokenize='unicode61')"
        )
        self._names: dict[str, str] = {}
        self._position = 0

    async def refresh(self, store: EventStore) -> None:
        """Index what the log holds beyond what was indexed before."""
        rows = []
        async for event in store.read_all(self._position + 1, types=_TYPES):
            self._position = event.position
            data = visible_data(event.type, event.data)
            branch = event.stream.removeprefix("branch-")
            message = data.get("message")
            if event.type == "message.added" and isinstance(message, Mapping):
                text = _message_text(message)
                if text:
                    rows.append((text, str(message.get("kind")), branch, event.version, ""))
            elif isinstance(data.get("name"), str):
                self._names[branch] = data["name"]
                rows.append((data["name"], "branch", branch, event.version, data["name"]))
        self._db.executemany("INSERT INTO hits VALUES (?, ?, ?, ?, ?)", rows)

    async def search(self, store: EventStore, text: str) -> list[dict[str, Any]]:
        """The best hits for ``text`` (every word must occur), each with a highlighted snippet."""
        await self.refresh(store)
        query = _fts_query(text)
        if not query:
            return []
        found = self._db.execute(
            "SELECT kind, branch, version, snippet(hits, 0, char(1), char(2), ' … ', 12) "
            "FROM hits WHERE hits MATCH ? ORDER BY rank LIMIT ?",
            (query, _LIMIT),
        ).fetchall()
        hits = []
        events: list[RecordedEvent] = []
        for kind, branch, version, snippet in found:
            event = await self._event(store, branch, version)
            if kind != "branch" and not _still_there(event):
                continue
            if event is not None:
                events.append(event)
            hits.append(
                {"kind": kind, "branch": branch, "version": version, "snippet": snippet,
                 "name": self._names.get(branch, ""), "position": event.position if event else None}
            )  # fmt: skip
        # the text was indexed from the event as it read then; a hit stands on that event now
        altered = {p.position for p in await check_events(store, events)}
        for hit in hits:
            hit["tampered"] = hit.pop("position") in altered
        return hits

    async def _event(self, store: EventStore, branch: str, version: int) -> RecordedEvent | None:
        async for event in store.read_stream(f"branch-{branch}", version, version):
            return event
        return None

    async def body(self, store: EventStore, text: str) -> str:
        """The search page: the form and the hits, each linking to its branch at its version."""
        form = (
            '<form class="search" method="get" action="/search">'
            f'<input type="search" name="q" value="{h(text)}" placeholder="words in messages or branch names" '
            'aria-label="search"><button type="submit">search</button></form>'
        )
        if not text.strip():
            return f"<h1>Search</h1>{form}"
        hits = await self.search(store, text)
        rows = "".join(_row(hit) for hit in hits)
        return (
            f'<h1>Search</h1>{form}<p class="note">{len(hits)} hit(s) for {h(text)}</p>'
            f'<ol class="search-hits">{rows}</ol>'
        )


def _still_there(event: RecordedEvent | None) -> bool:
    """Whether a message hit's event still shows text (a redaction since indexing hides it)."""
    if event is None:
        return False
    message = visible_data(event.type, event.data).get("message")
    return isinstance(message, Mapping) and bool(_message_text(message))


def _row(hit: Mapping[str, Any]) -> str:
    href = q(f"/branches/{seg(hit['branch'])}", at=hit["version"])
    snippet = h(hit["snippet"]).replace("\x01", "<mark>").replace("\x02", "</mark>")
    # names before ids: the branch's name leads; its id follows, set apart so it never wraps
    where = f"{hit['name']} @ {hit['version']}" if hit["name"] else f"{hit['branch']} @ {hit['version']}"
    id_note = f' <code class="id">{h(hit["branch"])}</code>' if hit["name"] else ""
    cls, badge = (" tampered", " " + TAMPERED_BADGE) if hit.get("tampered") else ("", "")
    return (
        f'<li class="hit kind-{h(hit["kind"])}{cls}"><a class="where" href="{href}">{h(where)}</a>{id_note} '
        f'<span class="muted">{h(hit["kind"])}</span>{badge}<div class="snippet">{snippet}</div></li>'
    )
