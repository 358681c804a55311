"""Finding a recorded branch or session by id, unique id prefix or name.

Branches and sessions are both streams (``branch-<id>``, ``session-<id>``) whose first event
carries the name, so one lookup serves both. It lives here, below the kernel, so that a
command that only reads a branch (``turnlog show NAME --at N``) resolves the name without
importing the kernel; the kernel turns a miss into its own errors.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnlog.eventstore import EventStore

from ._redacted import visible_event

__all__ = ["RefMatch", "match_ref"]

_ID_LENGTH = 36  # str(uuid7())


@dataclass(frozen=True, slots=True)
class RefMatch:
    """What a reference matched.

    Attributes:
        found: The id when exactly one stream matched, else None.
        ambiguous: Every id that matched, when several did (empty otherwise).
        close: When nothing matched: close names with their ids, ``"name (id, ...)"``.
        message: Why nothing was found (empty when ``found`` is set).
    """

    found: str | None
    ambiguous: tuple[str, ...] = ()
    close: tuple[str, ...] = ()
    message: str = ""


def _several(ref: str, candidates: tuple[str, ...], kind: str) -> str:
    kinds = "branches" if kind == "branch" else f"{kind}s"
    return f"{ref!r} matches {len(candidates)} {kinds}: {', '.join(candidates)}"


async def match_ref(store: EventStore, kind: str, ref: str) -> RefMatch:
    """Resolve ``ref`` (a full id, a unique id prefix or a name) among the ``kind-`` streams.

    A full id is taken without a scan; then a unique id prefix; then an exact name (the
    ``name`` of the stream's first event).
    """
    prefix = f"{kind}-"
    if len(ref) == _ID_LENGTH and await store.stream_version(prefix + ref) > 0:  # a full id: no scan
        return RefMatch(ref)
    ids = [s.removeprefix(prefix) for s, _ in await store.list_streams(prefix)]
    by_prefix = [i for i in ids if i.startswith(ref)]
    if len(by_prefix) == 1:
        return RefMatch(by_prefix[0])
    names: dict[str, list[str]] = {}
    for found in ids:
        async for first in store.read_stream(prefix + found, 1, 1):
            name = visible_event(first).data.get("name")
            if isinstance(name, str):
                names.setdefault(name, []).append(found)
    matches = names.get(ref, [])
    if len(matches) == 1:
        return RefMatch(matches[0])
    if len(matches) > 1 or len(by_prefix) > 1:
        several = tuple(sorted({*matches, *by_prefix}))
        return RefMatch(None, ambiguous=several, message=_several(ref, several, kind))
    import difflib  # only a miss needs it: a found branch (``show NAME``) skips the import

    close = difflib.get_close_matches(ref, list(names), n=5, cutoff=0.6)
    candidates = tuple(f"{n} ({', '.join(names[n])})" for n in close)
    hint = f"; did you mean: {', '.join(candidates)}" if candidates else ""
    return RefMatch(None, close=candidates, message=f"no {kind} has id, id prefix or name {ref!r}{hint}")
