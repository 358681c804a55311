"""The recorder at the wire: LLM API calls forwarded and recorded as they stream.

``turnlog proxy`` (``tools/_cmd_proxy.py``) serves ``ProxyApp`` with a ``WireRecorder`` (each
conversation on its own branch, threaded; ``ReplayIndex`` answers from recordings); ``run()``
serves it in-process with a ``RunWire`` for the CLI it starts (``recording_wire``: every
upstream call of the CLI as a chunk stream of the run). Both are served by the one HTTP/1.1
server of ``_server`` (``serve`` on a listening socket, ``serve_loopback`` in a task group).
See ``docs/proxy.md`` and ``docs/streams.md``.
"""

from ._apis import (
    DEFAULT_UPSTREAMS,
    Api,
    Route,
    Turn,
    answer_turn,
    conversation,
    error_body,
    fingerprint,
    request_params,
    route,
    tool_names,
)
from ._app import MAX_BODY, CallRecorder, ProxyApp, ProxyConfig, RecordedCall
from ._record import MARKER, WireCall, WireRecorder
from ._replay import MISS_STATUS, Recording, ReplayIndex, miss_body
from ._run import (
    RunWire,
    RunWireCall,
    WireRecord,
    WireTarget,
    close_open_wire_calls,
    last_cut,
    read_wire_calls,
    recording_wire,
    wire_message,
    wire_remainder,
    wire_stream,
    wire_target,
)
from ._server import MAX_HEAD, LoopbackServer, serve, serve_loopback

__all__ = [
    "DEFAULT_UPSTREAMS",
    "MARKER",
    "MAX_HEAD",
    "MAX_BODY",
    "MISS_STATUS",
    "Api",
    "CallRecorder",
    "LoopbackServer",
    "ProxyApp",
    "ProxyConfig",
    "RecordedCall",
    "Recording",
    "ReplayIndex",
    "Route",
    "RunWire",
    "RunWireCall",
    "Turn",
    "WireCall",
    "WireRecord",
    "WireRecorder",
    "WireTarget",
    "answer_turn",
    "close_open_wire_calls",
    "last_cut",
    "conversation",
    "error_body",
    "fingerprint",
    "miss_body",
    "read_wire_calls",
    "recording_wire",
    "request_params",
    "route",
    "serve",
    "serve_loopback",
    "tool_names",
    "wire_message",
    "wire_remainder",
    "wire_stream",
    "wire_target",
]
