"""The snapshot head: what one ``branch_state`` snapshot record holds, as a typed model.

A snapshot of a branch state at version v is a head (this model, in the record of type
``branch_state``) and the message slots it adds, in extra records ``branch_state.part<k>``
of the same version. See ``_snapshots`` for how heads chain and what deltas they hold.

``SnapshotHead`` is frozen and versioned (``SCHEMA``): the stored JSON is exactly its
``stored()``, the ``model_dump(mode="json")`` with each run's fields left at their defaults
left out (schema 3; schema 2 stored them all). Heads of every schema in ``READABLE_SCHEMAS`` validate into it: a
schema 1 head (every head a keyframe, its first messages in the head itself) lacks ``maps``,
``depth`` and ``last_id`` and takes their defaults, and a schema 3 head takes the defaults of
what it leaves out (most of a finished run's fields are unset: a run stored in full took
about 420 bytes, 60% of them nulls and field names of nulls). Stored messages stay JSON here; they are
decoded by ``decode_messages``, the one way this layer reads a stored message.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from ._decode import decode_messages
from ._messages import AnyMessage
from ._runs import Deferred
from ._state import ForkOrigin, IsoTime, RunInfo

__all__ = ["READABLE_SCHEMAS", "HeadLink", "HeadMaps", "HeadMapsMemo", "SnapshotHead"]

READABLE_SCHEMAS = frozenset({1, 2, 3})
"""The head schemas this code reads (it writes ``SnapshotHead.SCHEMA``)."""


_Message = dict[str, Any]
"""A stored message: its JSON form (``Message.to_dict()``)."""


class HeadLink(BaseModel):
    """The fields of a head that place it in its chain (a head read without its state fields).

    Walking a chain back needs only these, so a walk never validates the runs of the keyframes
    it passes: extra keys are ignored here, and ``SnapshotHead`` (which forbids them) is
    validated only for the heads whose state or maps are read.
    """

    # Built on first use: only a read that meets a snapshot validates a head, and a store
    # without snapshots (or ``show --at`` a version before the first) never does.
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    branch_id: str
    """The branch."""
    start: int
    """The view is slots ``start`` to ``n - 1`` of the branch's message log."""
    n: int
    """See ``start``."""
    maps: Literal["full", "delta"] = "full"
    """Whether runs, links and overrides are complete (a keyframe) or changes since the base."""
    depth: int = 0
    """How many delta heads stand between this head and its keyframe (0: it is one)."""
    base_version: int | None
    """The head this one extends (its slots and, for a delta, its maps), or None."""
    base_n: int
    """The message slots of the base; this head's records hold slots ``base_n`` to ``n - 1``."""
    last_id: str | None = None
    """The id in the last slot of the view: a state lending its messages must hold it too."""
    messages: list[_Message | None]
    """Slots stored in the head itself (schema 1; empty since, the parts hold them)."""
    parts: int = 1
    """1 + the number of part records."""

    keyframe_entries: int = 0
    """Runs, links and overrides its keyframe holds (schema 3; 0 in older heads)."""
    delta_entries: int = 0
    """Runs, links and overrides the deltas after its keyframe hold, this head's included."""

    @property
    def chain_depth(self) -> int:
        """``depth`` for a delta head, 0 for a keyframe."""
        return self.depth if self.maps == "delta" else 0

    def extends_to_delta(self, keyframe_every: int, max_depth: int) -> bool:
        """Whether the next head may be a delta on this one rather than a keyframe.

        Within ``keyframe_every`` heads of the keyframe it may; past that, as long as the
        deltas since the keyframe hold fewer entries than the keyframe (never when
        ``keyframe_every`` is 1). A keyframe copies every
        run the branch ever had, so writing one every ``keyframe_every`` heads costs O(runs) per
        head; written when the deltas have caught up with it, the keyframes of a branch cost
        about what its deltas cost, and a load reads about twice the keyframe's entries.
        """
        depth = self.chain_depth + 1
        if depth < keyframe_every:
            return True
        # keyframe_every=1 asks for the maps in full in every head
        return keyframe_every > 1 and depth < max_depth and self.delta_entries < self.keyframe_entries


class SnapshotHead(HeadLink):
    """The head record of a branch state snapshot (type ``branch_state``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    SCHEMA: ClassVar[int] = 3
    """The schema written (``Snapshot.schema``)."""

    def stored(self) -> dict[str, Any]:
        """The JSON the head record stores: each run without the fields left at their defaults."""
        data: dict[str, Any] = self.model_dump(mode="json", exclude={"runs"})
        data["runs"] = self.model_dump(mode="json", include={"runs"}, exclude_defaults=True)["runs"]
        return data

    name: str | None
    """``BranchState.name``."""
    user: str | None
    """``BranchState.user``."""
    session_id: str | None
    """``BranchState.session_id``."""
    system: _Message | None
    """The system message, stored."""
    chat_model: dict[str, Any] | None
    """``BranchState.chat_model``."""
    parse_model: dict[str, Any] | None
    """``BranchState.parse_model``."""
    metadata: dict[str, Any]
    """``BranchState.metadata``."""
    runs: list[RunInfo]
    """The runs: all of them (``maps == "full"``) or those changed since the base (``delta``)."""
    provider_sessions: list[tuple[str, str, str] | tuple[str, str, str, str]]
    """``[provider, model, session_id]``, with the session's directory when one was recorded."""
    action_links: dict[str, str]
    """Request id -> response id: all or the changed ones, as ``runs``."""
    forked_from: ForkOrigin | None
    """``BranchState.forked_from``."""
    version: int
    """``BranchState.version`` (also the record's version)."""
    position: int
    """``BranchState.position``."""
    created_at: IsoTime
    """``BranchState.created_at``."""
    updated_at: IsoTime
    """``BranchState.updated_at``."""
    model_calls: int
    """``BranchState.model_calls``."""
    over: list[tuple[int, _Message]]
    """Slot -> the message the view shows there: all or the changed ones, as ``runs``."""


@dataclass(slots=True)
class HeadMaps:
    """The decoded runs, action links and overrides of a head, merged from its keyframe on."""

    runs: dict[str, RunInfo | Deferred[RunInfo]]
    """Run id -> run, a stored one left as stored until used (see ``RunTable``)."""
    links: dict[str, str]
    over: dict[int, AnyMessage]

    def merged(self, heads: Sequence[tuple[SnapshotHead, Sequence[RunInfo | Deferred[RunInfo]]]]) -> HeadMaps:
        """A copy with the maps of ``heads`` (oldest first, each with its runs) applied; ``self`` is unchanged."""
        out = HeadMaps(dict(self.runs), dict(self.links), dict(self.over))
        for head, runs in heads:
            out.add(head, runs)
        return out

    def add(self, head: SnapshotHead, runs: Sequence[RunInfo | Deferred[RunInfo]] | None = None) -> None:
        """Apply the maps a head stores (all of them, or its changes); ``runs`` instead of its own."""
        for run in head.runs if runs is None else runs:
            # a changed run keeps its place, a new one goes last: the order of the fold
            self.runs[run.key if type(run) is Deferred else run.run_id] = run  # type: ignore[union-attr]
        self.links.update(head.action_links)
        if head.over:
            messages = decode_messages([m for _, m in head.over])
            for (slot, _), message in zip(head.over, messages, strict=True):
                self.over[slot] = message


class HeadMapsMemo:
    """The decoded maps (runs, links, overrides) of recently loaded heads, for the next loads.

    A keyframe holds every run, link and override of its branch, O(runs) to read and decode;
    the heads after it hold only what changed. ``StateCache`` keeps one and passes it to
    ``load_snapshot_state``: a load then reads and decodes only the delta heads after the
    newest head of its chain already decoded. A head never changes once written, and the kept
    maps are never changed (a load merges into a copy); maps of heads near each other share
    their run objects.

    Args:
        size: How many heads to keep, the least recently used going first.
    """

    __slots__ = ("_items", "size")

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, int], HeadMaps] = OrderedDict()

    def get(self, stream: str, version: int) -> HeadMaps | None:
        """The decoded maps of the head of ``stream`` at ``version``, if kept."""
        found = self._items.get((stream, version))
        if found is not None:
            self._items.move_to_end((stream, version))
        return found

    def put(self, stream: str, version: int, maps: HeadMaps) -> None:
        """Keep the decoded maps of a head."""
        self._items[(stream, version)] = maps
        self._items.move_to_end((stream, version))
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
