"""``turnlog proxy --replay``: answer each model call from the recorded call with the same request.

``ReplayIndex.load`` reads the ``model.called`` events the proxy recorded (``verb`` ``proxy``,
status ``ok``) and keys them by fingerprint (``_apis.fingerprint``: the API, the model,
whether it streams, and the request body with its credentials removed, in canonical JSON); the
latest recording of a fingerprint wins. A non-streamed answer is the recorded response object;
a streamed one is the recorded SSE events of the call's run, byte for byte, at once or at the
recorded pace. A request without a recording is a miss (``MISS_STATUS``, in the API's shape).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anyio
import orjson

from turnlog.eventstore import EventStore

from ._apis import Route, error_body

__all__ = ["MISS_STATUS", "Recording", "ReplayIndex", "miss_body"]

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: The status of a replay miss: no recorded call has this request's fingerprint.
MISS_STATUS = 404


@dataclass(frozen=True, slots=True)
class Recording:
    """One recorded answer: the response object, the run holding its chunks, its content type."""

    response: dict[str, Any]
    run_id: str | None
    stream: bool
    content_type: str


def miss_body(route: Route, fingerprint: str) -> bytes:
    """The documented miss: a 404 error in the API's shape naming the fingerprint."""
    message = (
        f"turnlog proxy --replay: no recorded call matches this request "
        f"({route.codec}, model {route.model!r}, fingerprint {fingerprint[:16]})"
    )
    return error_body(route.api, MISS_STATUS, message, "not_found_error")


@dataclass
class ReplayIndex:
    """Recorded answers by request fingerprint."""

    store: EventStore
    pace: bool = False
    recordings: dict[str, Recording] = field(default_factory=dict)

    @classmethod
    async def load(cls, store: EventStore, *, pace: bool = False) -> ReplayIndex:
        """Every answer the proxy recorded in ``store``."""
        index = cls(store, pace)
        async for event in store.read_all(types=["model.called"]):
            data = event.data
            if data.get("verb") != "proxy" or data.get("status") != "ok" or data.get("response") is None:
                continue
            headers = (data.get("params") or {}).get("_upstream", {}).get("headers", {})
            streamed = bool(data.get("stream"))
            default = "text/event-stream" if streamed else "application/json"
            index.recordings[data["fingerprint"]] = Recording(
                data["response"], data.get("run_id"), streamed, headers.get("content-type", default)
            )
        return index

    async def answer(self, recording: Recording, send: Send) -> None:
        """Send the recorded answer: the response object, or the recorded SSE events."""
        head = [(b"content-type", recording.content_type.encode("latin-1")), (b"x-turnlog-replay", b"1")]
        if not recording.stream or recording.run_id is None:
            body = orjson.dumps(recording.response)
            head.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": 200, "headers": head})
            await send({"type": "http.response.body", "body": body})
            return
        await send({"type": "http.response.start", "status": 200, "headers": head})
        last: datetime | None = None
        async for event in self.store.read_stream(f"run-{recording.run_id}"):
            sse = event.data.get("metadata", {}).get("sse")
            if not isinstance(sse, str):
                continue  # the second piece of one SSE event: its bytes went with the first
            if self.pace and last is not None:
                await anyio.sleep((event.recorded_at - last).total_seconds())
            last = event.recorded_at
            await send({"type": "http.response.body", "body": sse.encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b""})
