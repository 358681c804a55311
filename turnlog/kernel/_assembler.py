"""The chunk rules of a CLI run, as a pure state machine: ``StreamAssembler``.

``run`` feeds it every chunk as it arrives and records the messages it returns; ``recover``
replays the same rules over the chunks a crashed run left, so both make the same messages.
No I/O, no clock: the same chunks always make the same messages (ids aside).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from turnlog.kernel.models import StreamChunk, Usage
from turnlog.projections import ActionRequest, ActionResponse, AnyMessage, AssistantResponse

__all__ = ["StreamAssembler"]


def _error_text(output: Any) -> str:
    if isinstance(output, str) and output.strip():
        return output
    if output is None or output == "" or output == []:
        return "the tool reported an error"
    return orjson.dumps(output, default=str).decode()


class StreamAssembler:
    """The chunk rules of ``run``, as a pure state machine (no I/O).

    ``feed(seq, chunk)`` returns the messages the chunk completes, in order:

    - ``system`` with ``metadata["session_id"]``: sets ``session_id`` (nothing is returned);
      with ``metadata["resume_fallback"]`` (a refused resume retried as a new session):
      clears the error and the session;
    - ``thinking`` / ``text``: accumulated (non-empty content only). A chunk with
      ``metadata["reconciled"] == "replace"`` (the CLI's final block disagreed with the deltas
      streamed before it) replaces the streamed text it names; the response then carries
      ``metadata["stream_mismatch"]`` with both versions, so the difference is never hidden;
    - ``tool_use``: the pending text as an ``AssistantResponse``, then an ``ActionRequest``;
    - ``tool_result`` matching a pending request: an ``ActionResponse`` (``error`` set for an
      error result; ``metadata["empty_output"]`` when the CLI reported an empty output); an
      unmatched one makes nothing (it stays a chunk event);
    - ``result``: its metadata goes on the next response (and stays in ``last_result``), its
      usage into ``usage``;
    - ``error``: with ``benign_eos`` sets ``finished``; else the pending text is returned and
      ``error`` holds the chunk.

    A chunk with ``metadata["source"]`` (text taken from the CLI's own session record by
    ``recover``) passes it on to the messages made from it.

    ``unanswered`` holds every request no result has answered (also one whose call id a later
    call reused), by message id.

    Every message carries ``metadata["run_id"]`` and ``metadata["chunk_range"]`` (first and
    last seq it was built from). ``recover`` replays the same rules; ``existing`` maps
    ``(kind, first_seq, last_seq)`` to messages already recorded, which are then returned
    instead of new ones (so links point at the recorded requests).

    Args:
        branch_id: Sender of responses, recipient of tool results.
        user: Recipient of responses (default ``"user"``).
        run_id: The run the chunks belong to.
        existing: Messages already recorded for this run, by kind and chunk range.
    """

    def __init__(
        self,
        *,
        branch_id: str,
        user: str | None,
        run_id: str,
        existing: Mapping[tuple[str, int, int], AnyMessage] | None = None,
    ) -> None:
        self.branch_id = branch_id
        self.user = user or "user"
        self.run_id = run_id
        self.existing = dict(existing or {})
        self.thinking: list[str] = []
        self.text: list[str] = []
        self.first_seq: int | None = None
        self.last_seq: int | None = None
        self.result_meta: dict[str, Any] = {}
        self.last_result: dict[str, Any] = {}
        self.usage = Usage()
        self.pending_requests: dict[str, ActionRequest] = {}
        self.unanswered: dict[str, ActionRequest] = {}
        self.session_id: str | None = None
        self.finished = False
        self.error: StreamChunk | None = None
        self.chunks = 0
        self.mismatches: list[dict[str, Any]] = []
        self.sources: set[str] = set()

    @property
    def has_pending_text(self) -> bool:
        """True when text waits to be flushed."""
        return bool(self.text)

    def _meta(self, first: int, last: int, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"run_id": self.run_id, "chunk_range": [first, last]}
        if extra:
            meta.update(extra)
        return meta

    def _known(self, kind: str, first: int, last: int) -> AnyMessage | None:
        return self.existing.get((kind, first, last))

    def feed(self, seq: int, chunk: StreamChunk) -> list[AnyMessage]:
        """Apply one chunk; return the messages it completes."""
        self.chunks += 1
        kind = chunk.type
        if kind == "text":
            if chunk.content:
                if chunk.is_delta or not chunk.metadata:
                    self.text.append(chunk.content)
                else:
                    self._special(self.text, chunk)
                if self.first_seq is None:
                    self.first_seq = seq
                self.last_seq = seq
            return []
        if kind == "thinking":
            if chunk.content:
                self._special(self.thinking, chunk)
                if self.first_seq is None:
                    self.first_seq = seq
            return []
        if kind == "system":
            sid = chunk.metadata.get("session_id")
            if isinstance(sid, str) and sid:
                self.session_id = sid
            elif chunk.metadata.get("resume_fallback"):
                # The resume was refused and a new session starts: the refusal is behind us.
                self.error, self.finished, self.session_id = None, False, None
            return []
        if kind == "tool_use":
            return [*self.flush(), self._request(seq, chunk)]
        if kind == "tool_result":
            response = self._response(seq, chunk)
            return [response] if response is not None else []
        if kind == "result":
            self._result(chunk)
            return []
        if kind == "error":
            if chunk.metadata.get("benign_eos"):
                self.finished = True
                return []
            self.error = chunk
            return self.flush()
        return []

    def _special(self, parts: list[str], chunk: StreamChunk) -> None:
        """Add text that may replace streamed text or come from the CLI's session record."""
        meta = chunk.metadata
        source = meta.get("source")
        if isinstance(source, str):
            self.sources.add(source)
        if meta.get("reconciled") != "replace":
            parts.append(chunk.content)
            return
        streamed = str(meta.get("streamed") or "")
        joined = "".join(parts)
        applied = joined.endswith(streamed)
        if applied:
            parts[:] = [joined[: len(joined) - len(streamed)], chunk.content]
        self.mismatches.append(
            {"kind": chunk.type, "streamed": streamed, "final": chunk.content, "applied": applied}
        )

    def _request(self, seq: int, chunk: StreamChunk) -> ActionRequest:
        found = self._known("ActionRequest", seq, seq)
        if isinstance(found, ActionRequest):
            request = found
        else:
            request = ActionRequest.create(
                chunk.tool_name or "",
                chunk.tool_input or {},
                call_id=chunk.tool_id,
                sender=self.branch_id,
                recipient=self.user,
                metadata=self._meta(seq, seq, _source(chunk)),
            )
        if chunk.tool_id:
            # a second call reusing an id takes the results from then on; the first stays unanswered
            self.pending_requests[chunk.tool_id] = request
        self.unanswered[request.id] = request
        return request

    def _response(self, seq: int, chunk: StreamChunk) -> ActionResponse | None:
        request = self.pending_requests.pop(chunk.tool_id, None) if chunk.tool_id else None
        if request is None:
            return None
        self.unanswered.pop(request.id, None)
        found = self._known("ActionResponse", seq, seq)
        if isinstance(found, ActionResponse):
            return found
        return ActionResponse.create(
            request,
            output=chunk.tool_output,
            error=_error_text(chunk.tool_output) if chunk.is_error else None,
            sender=self.user,
            recipient=self.branch_id,
            metadata=self._meta(seq, seq, _response_extra(chunk)),
        )

    def _result(self, chunk: StreamChunk) -> None:
        meta = chunk.metadata
        if meta:
            self.result_meta.update(meta)
            self.last_result = dict(meta)
        usage = meta.get("usage") if meta else None
        if isinstance(usage, Mapping):
            self.usage = self.usage + Usage.from_reported(usage)
        sid = meta.get("session_id") if meta else None
        if isinstance(sid, str) and sid and self.session_id is None:
            self.session_id = sid

    def flush(self, *, interrupted: bool = False) -> list[AnyMessage]:
        """The pending text as an ``AssistantResponse`` (empty list when there is none).

        Thinking without text is kept for the next flush.
        """
        if not self.text:
            return []
        first = self.first_seq if self.first_seq is not None else 0
        last = self.last_seq if self.last_seq is not None else first
        extra: dict[str, Any] = {}
        if self.thinking:
            extra["thinking"] = "\n".join(self.thinking)
        if self.result_meta:
            extra["model_response"] = _json(self.result_meta)
        if interrupted:
            extra["interrupted"] = True
        if self.mismatches:
            extra["stream_mismatch"] = self.mismatches
        if self.sources:
            extra["source"] = sorted(self.sources)[0] if len(self.sources) == 1 else sorted(self.sources)
        text = "".join(self.text)
        self.text, self.thinking, self.result_meta = [], [], {}
        self.mismatches, self.sources = [], set()
        self.first_seq = self.last_seq = None
        found = self._known("AssistantResponse", first, last)
        if found is not None:
            return [found]
        return [
            AssistantResponse.create(
                text, sender=self.branch_id, recipient=self.user, metadata=self._meta(first, last, extra)
            )
        ]


def _source(chunk: StreamChunk) -> dict[str, Any] | None:
    source = chunk.metadata.get("source") if chunk.metadata else None
    return {"source": source} if isinstance(source, str) else None


def _response_extra(chunk: StreamChunk) -> dict[str, Any] | None:
    meta = chunk.metadata
    if not chunk.is_error and not meta:
        return None
    extra: dict[str, Any] = {}
    if chunk.is_error:
        extra["is_error"] = True
    if meta.get("empty_output"):
        extra["empty_output"] = True
    if isinstance(meta.get("source"), str):
        extra["source"] = meta["source"]
    return extra or None


def _json(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value, default=str))
