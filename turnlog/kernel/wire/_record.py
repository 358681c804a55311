"""The recording side of ``turnlog proxy``: which branch a call lands on, and its events.

``WireRecorder.open_call`` picks the branch (named, or threaded: see ``docs/proxy.md``) and
makes the request's new turns into messages and ``run.started``; the returned ``WireCall``
records each stream event as a ``stream.chunk`` of the run: ``chunks`` writes its line to the
call's run buffer (the write-ahead journal of ``stream_persist``, one ``write`` per
chunk) *before* the event is forwarded, so a client never holds a chunk that ``recover`` cannot
put in the log, and ``flush``, after the forward, commits the journaled chunks to the store. It
closes the call with the answer's messages, ``model.called`` and ``run.ended`` in one append
(``finish``), or with ``model.called`` and ``run.failed`` (``fail``), once every chunk is
committed (the buffer is then removed). A streamed call's turns and ``run.started`` (its
opening) are journaled in its run buffer's header when it opens, before its first chunk, and
committed by its first ``flush``, after the first chunks were forwarded (``recover`` appends
them from the buffer should the proxy die before); a non-streamed call's go in its closing
append (its client receives the answer only after that commit), so such a call costs one
commit, a new branch included.

The threading index maps each branch to the digests of its turns and where each turn was
recorded (the branch and version that first recorded it), so a divergence forks the branch
that really holds the shared prefix.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio

from turnlog.eventstore import EventStore, MemoryEventStore, RecordedEvent, uuid7
from turnlog.kernel._branch import Branch
from turnlog.kernel._commands import AddMessages
from turnlog.kernel._errors import UnknownBranch
from turnlog.kernel._persist import ChunkLog
from turnlog.kernel._run_buffer import (
    BufferHeader,
    RunBuffer,
    buffer_name,
    default_persist_dir,
    store_location,
)
from turnlog.kernel.models import ModelResponse, Usage
from turnlog.kernel.models._secrets import Scrubber
from turnlog.projections import (
    ActionRequest,
    ActionRequestContent,
    ActionResponse,
    ActionResponseContent,
    AnyMessage,
    AssistantResponse,
    AssistantResponseContent,
    EventData,
    Instruction,
    InstructionContent,
    MessageAdded,
    ModelCalled,
    RunEnded,
    RunFailed,
    RunStarted,
    System,
    SystemContent,
    stored_payload,
)

from ._apis import Route, Turn, answer_turn, fingerprint, request_params, tool_names
from ._apis import conversation as conversation_of
from ._chunks import SSEBatch, plain_json, wire_payloads

__all__ = ["MARKER", "WireCall", "WireRecorder"]

#: ``branch.created`` metadata of the branches the proxy starts.
MARKER = {"recorded_by": "turnlog proxy"}
VERB = "proxy"
_PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "gemini",
    "chatgpt": "chatgpt",
    "code_assist": "code_assist",
}


def _as_opening(events: Sequence[EventData]) -> tuple[dict[str, Any], ...]:
    """Events as a run buffer's ``opening`` journals them: their type and stored payload."""
    return tuple({"type": e.event_type, "data": stored_payload(e)} for e in events)


@dataclass(frozen=True, slots=True)
class _Recorded:
    """One turn of a branch: its digest, and the branch and version that recorded it."""

    digest: str
    origin: str
    version: int


@dataclass
class WireRecorder:
    """Records proxied model calls into ``store``; one per proxy, shared by its connections."""

    store: EventStore
    _index: dict[str, list[_Recorded]] = field(default_factory=dict)
    #: The branches of the index by the digest of their first turn (checked on use: a branch
    #: whose first turn is no longer that one is skipped), so that threading a call looks only
    #: at the branches that start as it does, not at every conversation the proxy recorded.
    _firsts: dict[str, dict[str, None]] = field(default_factory=dict)
    #: Per branch, the non-streamed call answered and being committed (set once committed).
    _settling: dict[str, anyio.Event] = field(default_factory=dict)
    _branches: dict[str, Branch] = field(default_factory=dict)
    _parents: dict[str, str] = field(default_factory=dict)
    #: Held while a call's branch is chosen and its turns reserved in the index (no I/O but a
    #: fork or a branch's first load).
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    _persist_dir: Path | None = None
    _location: tuple[str | None] | None = None

    def location(self) -> str | None:
        """The store file's path for a buffer header (resolved once), or None."""
        if self._location is None:
            self._location = (store_location(self.store),)
        return self._location[0]

    def buffer_path(self, branch_id: str, run_id: str) -> Path:
        """Where a streamed call's run buffer goes: ``recover``'s default directory of the store.

        The directory is resolved once (``buffer_path`` resolves two paths on every call, some
        0.2 ms); a name of two canonical UUIDs stays in it, and ``RunBuffer`` opens the file
        with ``O_EXCL | O_NOFOLLOW``, so nothing planted at the path is followed.
        """
        if self._persist_dir is None:
            self._persist_dir = default_persist_dir(self.store).resolve()
        return self._persist_dir / buffer_name(branch_id, run_id)

    @classmethod
    async def load(cls, store: EventStore) -> WireRecorder:
        """A recorder whose threading index holds every conversation the proxy recorded before.

        One filtered scan of the log: the branches the proxy started (``MARKER``), the forks of
        those, and the turn digests their messages carry (``metadata.wire_turn``).
        """
        recorder = cls(store)
        index = recorder._index
        types = ["branch.created", "branch.forked", "message.added"]
        async for event in store.read_all(types=types, stream_prefix="branch-"):
            branch_id = event.stream.removeprefix("branch-")
            data = event.data
            if event.type == "branch.created":
                if data.get("metadata") == MARKER:
                    index[branch_id] = []
            elif event.type == "branch.forked":
                parent = index.get(data["parent_branch_id"])
                if parent is not None:
                    index[branch_id] = _inherited(parent, data["parent_branch_id"], data["parent_version"])
                    recorder._parents[branch_id] = data["parent_branch_id"]
            elif branch_id in index:
                recorded = index[branch_id]
                digest = (data.get("message") or {}).get("metadata", {}).get("wire_turn")
                if isinstance(digest, str):
                    recorded.append(_Recorded(digest, branch_id, event.version))
                elif recorded and recorded[-1].origin == branch_id:
                    recorded[-1] = _Recorded(recorded[-1].digest, branch_id, event.version)
        for branch_id in index:
            recorder._track(branch_id)
        return recorder

    def _track(self, branch_id: str) -> None:
        """File ``branch_id`` under the digest of its first turn (once it has one)."""
        recorded = self._index.get(branch_id)
        if recorded:
            self._firsts.setdefault(recorded[0].digest, {})[branch_id] = None  # in the order filed

    async def open_call(
        self, route: Route, body: dict[str, Any], name: str | None, scrub: Scrubber
    ) -> WireCall:
        """Pick the branch of a call and prepare its new turns and ``run.started``.

        A streamed call records them now, before its first chunk; a non-streamed one records
        them with its answer, in the one append that closes it (see ``WireCall.open``).
        """
        turns = conversation_of(route.codec, body)
        run_id = _uuid()
        names = _call_names(turns)
        async with self.lock:  # the choice of branch and the index change together, in memory
            branch, known = await self._resolve(turns, name)
            recorded = self._index.setdefault(branch.id, list(known))
            first = len(recorded)
            new = turns[first:]
            # reserved until the append says where they landed (version 0: not yet forkable)
            recorded.extend(_Recorded(turn.digest, branch.id, 0) for turn in new)
            self._track(branch.id)
        while (settling := self._settling.get(branch.id)) is not None:
            # a call on this branch was answered and is being committed: this call's events,
            # appended after this returns, go after that call's
            await settling.wait()
        items: list[EventData] = []
        ends: list[int] = []
        for turn in new:
            items += [
                MessageAdded(message=m, run_id=run_id) for m in _messages(_scrubbed(turn, scrub), names)
            ]
            ends.append(len(items))
        items.append(RunStarted(run_id=run_id, verb=VERB, provider=_PROVIDERS[route.api], model=route.model))
        call = WireCall(
            recorder=self,
            branch=branch,
            route=route,
            run_id=run_id,
            body=body,
            scrub=scrub,
            names=names,
            opening=_Opening(tuple(items), recorded, first, tuple(new), tuple(ends)),
        )
        if route.stream:
            await call.begin()
        else:
            # read from the request now, while the upstream works on it: off the path between
            # the answer's arrival and its last byte (a stream reads them after its first byte)
            call.request_facts()
        return call

    def note(self, branch_id: str, turn: Turn, version: int) -> None:
        """Remember that ``branch_id`` recorded ``turn`` (its last message at ``version``)."""
        self._index.setdefault(branch_id, []).append(_Recorded(turn.digest, branch_id, version))
        self._track(branch_id)

    def reserve(self, branch_id: str, turn: Turn) -> _Recorded:
        """Place ``turn`` in ``branch_id``'s index before it is committed (version 0: not forkable)."""
        entry = _Recorded(turn.digest, branch_id, 0)
        self._index.setdefault(branch_id, []).append(entry)
        self._track(branch_id)
        return entry

    def land(self, entry: _Recorded, version: int | None) -> None:
        """A reserved turn was committed with its last message at ``version`` (None: it was not)."""
        recorded = self._index.get(entry.origin, [])
        for i, seen in enumerate(recorded):
            if seen is entry:
                if version is None:
                    del recorded[i]
                else:
                    recorded[i] = _Recorded(entry.digest, entry.origin, version)
                return

    async def _resolve(self, turns: list[Turn], name: str | None) -> tuple[Branch, list[_Recorded]]:
        digests = [t.digest for t in turns]
        if name is not None:
            named = await self._named(name)
            self._index.setdefault(named.id, [])
            # the named branch and the forks the proxy made of it (and of those)
            family = {b for b in self._index if self._descends(b, named.id)}
            candidates = {b: self._index[b] for b in family}
        else:
            # Only a branch that starts with the request's first turn can be extended or forked
            # (both need a shared prefix): this keeps the scan cheap when there are many branches.
            first = digests[0] if digests else None
            index = self._index
            filed = self._firsts.get(first, {}) if first is not None else {}
            candidates = {b: r for b in filed if (r := index.get(b)) and r[0].digest == first}
        # 1. a branch whose whole recorded conversation the request extends (the longest wins)
        extended = [
            (len(recorded), branch_id)
            for branch_id, recorded in candidates.items()
            if (recorded or name is not None) and _common(digests, recorded) == len(recorded)
        ]
        if extended:
            return await self._load(max(extended)[1]), []
        # 2. the longest shared prefix that is more than a system prompt: a fork at the divergence
        best, shared = None, 0
        for branch_id, recorded in candidates.items():
            k = _common(digests, recorded)
            if k > shared:
                best, shared = branch_id, k
        while best is not None and shared and candidates[best][shared - 1].version == 0:
            shared -= 1  # a turn still being appended by another call: fork before it
        if best is not None and shared and any(t.role != "system" for t in turns[:shared]):
            at = candidates[best][shared - 1]
            origin = await self._load(at.origin)
            child = await origin.fork(at_version=at.version)
            self._branches[child.id] = child
            self._parents[child.id] = best
            return child, candidates[best][:shared]
        # 3. a new conversation
        branch = Branch(store=self.store, name=None, metadata=MARKER)
        self._branches[branch.id] = branch
        return branch, []

    def _descends(self, branch_id: str, ancestor: str) -> bool:
        seen: str | None = branch_id
        while seen is not None:
            if seen == ancestor:
                return True
            seen = self._parents.get(seen)
        return False

    async def _named(self, name: str) -> Branch:
        for branch in self._branches.values():
            if branch.name == name:
                return branch
        try:
            branch = await Branch.load(self.store, name)
        except UnknownBranch:
            branch = Branch(store=self.store, name=name, metadata=MARKER)
        self._branches[branch.id] = branch
        return branch

    async def _load(self, branch_id: str) -> Branch:
        if branch_id not in self._branches:
            self._branches[branch_id] = await Branch.load(self.store, branch_id)
        return self._branches[branch_id]


def _inherited(parent: list[_Recorded], parent_id: str, version: int) -> list[_Recorded]:
    """The turns a fork at ``version`` of the parent starts with."""
    out: list[_Recorded] = []
    for entry in parent:
        if entry.origin == parent_id and entry.version > version:
            break
        out.append(entry)
    return out


def _common(digests: Sequence[str], recorded: Sequence[_Recorded]) -> int:
    k = 0
    while k < len(digests) and k < len(recorded) and digests[k] == recorded[k].digest:
        k += 1
    return k


def _uuid() -> str:
    return str(uuid7())


def _scrubbed(turn: Turn, scrub: Scrubber) -> Turn:
    """The turn with every credential the request carried replaced (its digest is the original's)."""
    calls = tuple((scrub(i), scrub(n), scrub(a)) for i, n, a in turn.calls)
    return Turn(turn.role, scrub(turn.text), calls, tuple((scrub(i), scrub(o)) for i, o in turn.results))


def _call_names(turns: list[Turn]) -> dict[str, str]:
    return {call_id: name for t in turns for call_id, name, _ in t.calls if call_id}


def _messages(turn: Turn, names: dict[str, str]) -> list[AnyMessage]:
    """The turnlog messages of one turn (the first carries the turn's digest)."""
    meta: dict[str, Any] = {"wire_turn": turn.digest}
    if turn.role == "system":
        return [System(content=SystemContent(system_message=turn.text), metadata=meta)]
    if turn.role == "user":
        return [Instruction(content=InstructionContent(instruction=turn.text), metadata=meta)]
    if turn.role == "tool":
        out: list[AnyMessage] = []
        for call_id, output in turn.results:
            content = ActionResponseContent(function=names.get(call_id, call_id), output=plain_json(output))
            out.append(ActionResponse(content=content, metadata=meta if not out else {"call_id": call_id}))
        return out
    return _assistant(turn, meta)


def _assistant(turn: Turn, meta: dict[str, Any]) -> list[AnyMessage]:
    out: list[AnyMessage] = []
    if turn.text or not turn.calls:
        out.append(AssistantResponse(content=AssistantResponseContent(text=turn.text), metadata=meta))
    for call_id, name, arguments in turn.calls:
        args = arguments if isinstance(arguments, dict) else {"_raw": plain_json(arguments)}
        content = ActionRequestContent(function=name, arguments=plain_json(args), call_id=call_id or None)
        out.append(ActionRequest(content=content, metadata=meta if not out else {}))
    return out


@dataclass
class _Opening:
    """A call's first events (its new turns and ``run.started``), not yet appended.

    ``recorded[first:]`` are the new turns' places in the threading index, reserved (version 0)
    until the append says where they landed; ``ends[i]`` is the end of turn i's messages in
    ``items``.
    """

    items: tuple[EventData, ...]
    recorded: list[_Recorded]
    first: int
    turns: tuple[Turn, ...]
    ends: tuple[int, ...]

    def landed(self, events: Sequence[RecordedEvent], branch_id: str) -> None:
        """The append of ``items`` (the first events of ``events``) succeeded: index the turns."""
        for i, (turn, end) in enumerate(zip(self.turns, self.ends, strict=True)):
            self.recorded[self.first + i] = _Recorded(turn.digest, branch_id, events[end - 1].version)

    def lost(self) -> None:
        """The append failed: free the reserved places."""
        del self.recorded[self.first : self.first + len(self.turns)]


@dataclass
class WireCall:
    """One recorded call in flight: its chunks as they pass, then its end.

    A streamed call makes its run buffer before its first chunk (``begin``), its opening (new
    turns and ``run.started``, with ``branch.created`` for a new branch) journaled in the
    buffer's header; its chunks are journaled in the buffer before they are forwarded
    (``chunks``), and the opening and the chunks are committed after (``flush``). A non-streamed call's client
    receives nothing before the call is closed, so it is recorded whole in the one append that
    closes it: a crash before that leaves no trace of it, and the client had received nothing
    of it.
    """

    recorder: WireRecorder
    branch: Branch
    route: Route
    run_id: str
    body: dict[str, Any]
    """The request as the client sent it: its fingerprint, parameters and tools are read at the close."""
    scrub: Scrubber
    names: dict[str, str]
    opening: _Opening | None = None
    started: float = field(default_factory=time.perf_counter)
    ttft_ms: float | None = None
    seq: int = 0
    closed: bool = False
    log: ChunkLog | None = None
    _settling: tuple[list[EventData], _Recorded, int, anyio.Event] | None = None
    _buffer: RunBuffer | None = None
    _facts: tuple[Any, list[str], str] | None = None

    async def begin(self) -> None:
        """Make a streamed call's run buffer, its opening journaled in the header, before its first chunk.

        The opening (``branch.created`` of a new branch, the new turns, ``run.started``) is
        committed by the first ``flush``, after the first chunks were forwarded: ``recover``
        appends it from the buffer should the proxy die before. A new branch with a name is
        opened at once instead (its name is claimed in the store as it is created).
        """
        created = self.branch.pending_creation
        if created is not None and created.name is not None:
            await self.open()
            return
        opening = self.opening
        assert opening is not None
        events = [created, *opening.items] if created is not None else list(opening.items)
        self._journal(_as_opening(events))

    async def open(self) -> None:
        """Record the call's new turns and ``run.started`` (a no-op once done)."""
        opening, self.opening = self.opening, None
        if opening is None:
            return
        try:
            # outside the proxy's lock: calls on other branches append (and share commits) meanwhile
            events = await self.branch.execute(AddMessages(opening.items), run_id=self.run_id)
        except BaseException:
            opening.lost()
            raise
        opening.landed(events, self.branch.id)
        if self.route.stream:
            self._journal()  # while the request is on its way upstream, off the first byte's path

    def _journal(self, opening: tuple[dict[str, Any], ...] | None = None) -> ChunkLog:
        """The call's chunk log: its run buffer made, with ``opening`` in its header if given.

        Without an opening the branch and run must be in the store already. A memory store
        does not outlive the process, so its calls have no buffer.
        """
        if self.log is None:
            store = self.recorder.store
            buffer = None
            if not isinstance(store, MemoryEventStore):
                buffer = RunBuffer(self.recorder.buffer_path(self.branch.id, self.run_id))
                if opening is not None:
                    location = self.recorder.location()
                    header = BufferHeader(
                        store.store_id, location, self.branch.id, self.run_id, opening=opening
                    )
                    buffer.write(header.encode())  # the chunk log writes no header of its own then
            meta = {"branch_id": self.branch.id, "run_id": self.run_id}
            self.log = ChunkLog(store, self.run_id, meta, buffer=buffer)
        return self.log

    async def _close(self, items: list[EventData]) -> list[RecordedEvent]:
        """Append the call's closing events, after its opening ones if they are not recorded yet.

        Every journaled chunk is committed first; the buffer is removed only once the close is
        committed too (a crash in between leaves a buffer whose run is closed: ``recover``
        removes it). Should a commit fail, the buffer is closed (its lock dropped) and kept
        for ``recover``, with the opening it may carry.
        """
        opening, self.opening = self.opening, None
        first = list(opening.items) if opening is not None else []
        log = self.log
        try:
            with anyio.CancelScope(shield=True):  # a client leaving now must not cut the close in two
                if log is not None:
                    await log.commit()
                events = await self.branch.execute(
                    AddMessages((*first, *items)), run_id=self.run_id, terminal=True
                )
        except BaseException:
            if opening is not None:
                opening.lost()
            if log is not None and log.buffer is not None:
                log.buffer.close()  # its lock dropped: ``recover`` imports it
            raise
        if opening is not None:
            opening.landed(events, self.branch.id)
        if log is not None and log.buffer is not None:
            # ``ChunkLog.finish`` removes a buffer in a worker thread; one unlink of a file that
            # held a dozen lines does not block the loop as long as a thread hop costs
            log.buffer.remove()
        return events[len(first) :]

    async def chunks(self, batch: SSEBatch) -> None:
        """Journal stream events in the run buffer (one write for the batch), before they are forwarded.

        Each item is one SSE event: its exact text (kept in ``metadata.sse`` of its first
        chunk), the pieces the codec made of it, and the error it carried, if any. The lines
        hold the very event ids and bytes the store receives at the next ``flush``.
        """
        if self.log is None:
            await self.open()  # an answer that streams although the request did not ask it to
        log = self._journal()
        payloads, answered = wire_payloads(batch, self.scrub, self.seq)
        if self.ttft_ms is None and answered:
            self.ttft_ms = self.elapsed_ms
        log.add_many(payloads)  # one write for the events of one read
        self.seq = log.seq

    async def flush(self) -> None:
        """Commit the opening if it waits, then the journaled chunks (one append), after they were forwarded."""
        log = self.log
        if log is not None and (log.pending or self.opening is not None):
            try:
                with anyio.CancelScope(shield=True):  # recorded whole, or not at all, then closed
                    await self.open()
                await log.commit()
            except Exception:
                # the store failed (not a cancellation, after which the close commits): the
                # buffer's lock is dropped so that ``recover`` can import what was forwarded
                if log.buffer is not None:
                    log.buffer.close()
                raise

    def _called(
        self,
        status: Literal["ok", "error"],
        answer: ModelResponse | None,
        upstream: dict[str, Any],
        error: tuple[str, str] | None = None,
    ) -> ModelCalled:
        raw = self.scrub(answer.raw) if answer is not None else None
        params, tools, print_ = self.request_facts()
        return ModelCalled(
            call_id=_uuid(),
            provider=_PROVIDERS[self.route.api],
            model=self.route.model,
            endpoint=self.route.wire.endpoint,
            served_model=answer.model if answer is not None and answer.model != self.route.model else None,
            verb=VERB,
            run_id=self.run_id,
            message_ids=self._message_ids(),
            params={**(params if isinstance(params, dict) else {}), "_upstream": upstream},
            tools=tools,
            fingerprint=print_,
            response=raw if isinstance(raw, dict) else None,
            usage=answer.usage if answer is not None else Usage(),
            latency_ms=self.elapsed_ms,
            ttft_ms=self.ttft_ms,
            status=status,
            error_type=error[0] if error else None,
            error_message=self.scrub(error[1]) if error else None,
            stream=self.route.stream,
        )

    def request_facts(self) -> tuple[Any, list[str], str]:
        """The request's scrubbed parameters, its tool names and its fingerprint (read once)."""
        if self._facts is None:
            body, route, scrub = self.body, self.route, self.scrub
            self._facts = (
                scrub(request_params(body)),
                tool_names(route.codec, body),
                fingerprint(route, scrub(body)),
            )
        return self._facts

    def _message_ids(self) -> list[str]:
        """The branch's messages the call was made with (its new turns included, recorded or not)."""
        # a branch not in the store yet holds no message (its system prompt is outside the
        # list): its state need not be previewed for that
        ids = [] if self.branch.pending_creation is not None else list(self.branch.progression)
        if self.opening is not None:  # a System message replaces the branch's, outside the list
            ids += [
                item.message.id
                for item in self.opening.items
                if isinstance(item, MessageAdded) and not isinstance(item.message, System)
            ]
        return ids

    @property
    def elapsed_ms(self) -> float:
        """Milliseconds since the call was opened."""
        return (time.perf_counter() - self.started) * 1000

    async def finish(self, answer: ModelResponse, upstream: dict[str, Any]) -> None:
        """Close the call with its answer: messages, ``model.called``, ``run.ended``, one append."""
        if self.closed:
            return
        self.closed = True
        turn = answer_turn(answer)
        messages = _messages(_scrubbed(turn, self.scrub), self.names)
        items: list[EventData] = [MessageAdded(message=m, run_id=self.run_id) for m in messages]
        items.append(self._called("ok", answer, upstream))
        ended = RunEnded(
            run_id=self.run_id,
            verb=VERB,
            duration_ms=self.elapsed_ms,
            usage=answer.usage,
            chunks=self.seq if self.route.stream else None,
        )
        if self.route.stream or self.log is not None or self._named_new():
            events = await self._close([*items, ended])
            self.recorder.note(self.branch.id, turn, events[len(messages) - 1].version)
            return
        # A non-streamed answer: journaled whole, committed once its last byte is forwarded
        # (``settle``), so that commit is not between the client and its answer.
        self._settling = (
            [*items, ended],
            self.recorder.reserve(self.branch.id, turn),
            len(messages),
            anyio.Event(),
        )
        self.recorder._settling[self.branch.id] = self._settling[3]
        opening = self.opening
        created = self.branch.pending_creation
        events_all: list[EventData] = [
            *([created] if created is not None else []),
            *(opening.items if opening is not None else ()),
            *items,
            ended,
        ]
        store = self.recorder.store
        if not isinstance(store, MemoryEventStore):
            try:
                self._buffer = RunBuffer(self.recorder.buffer_path(self.branch.id, self.run_id))
                header = BufferHeader(
                    store.store_id,
                    self.recorder.location(),
                    self.branch.id,
                    self.run_id,
                    opening=_as_opening(events_all),
                )
                self._buffer.write(header.encode())
            except BaseException:
                await self._unsettled()
                raise

    def _named_new(self) -> bool:
        """The call starts a branch with a name (claimed in the store as the branch is created)."""
        created = self.branch.pending_creation
        return created is not None and created.name is not None

    async def settle(self) -> None:
        """Commit a call that ``finish`` journaled, after its answer was forwarded (else a no-op).

        Should the commit fail, the journal is kept, unlocked, for ``recover``.
        """
        settling, self._settling = self._settling, None
        if settling is None:
            return
        items, entry, count, done = settling
        buffer, self._buffer = self._buffer, None
        try:
            with anyio.CancelScope(shield=True):
                events = await self._close(items)
        except BaseException:
            self.recorder.land(entry, None)
            if buffer is not None:
                buffer.close()  # its lock dropped: ``recover`` records the call from it
            raise
        finally:
            done.set()
            if self.recorder._settling.get(self.branch.id) is done:
                del self.recorder._settling[self.branch.id]
        self.recorder.land(entry, events[count - 1].version)
        if buffer is not None:
            buffer.remove()

    async def _unsettled(self) -> None:
        """``finish`` could not journal the call: undo its reservations (its answer is not forwarded)."""
        settling, self._settling = self._settling, None
        assert settling is not None
        _, entry, _, done = settling
        done.set()
        self.recorder._settling.pop(self.branch.id, None)
        self.recorder.land(entry, None)
        if self._buffer is not None:
            self._buffer.remove()
            self._buffer = None

    async def fail(
        self,
        error_type: str,
        message: str,
        upstream: dict[str, Any],
        *,
        reason: Literal["error", "cancelled", "timeout"] = "error",
        answer: ModelResponse | None = None,
    ) -> None:
        """Close a failed or cancelled call: ``model.called`` (status error) and ``run.failed``."""
        if self.closed:
            return
        self.closed = True
        called = self._called("error", answer, upstream, (error_type, message))
        failed = RunFailed(
            run_id=self.run_id,
            verb=VERB,
            duration_ms=self.elapsed_ms,
            usage=answer.usage if answer is not None else Usage(),
            error_type=error_type,
            error_message=self.scrub(message),
            reason=reason,
        )
        await self._close([called, failed])  # shielded: a cancelled client still gets its call closed
