"""A real OTLP/HTTP receiver on loopback: it decodes what arrives with the official protobuf classes."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class Received:
    """One decoded span: ids in hex, attributes as Python values, its resource's attributes."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status_code: int
    status_message: str
    resource: dict[str, Any]
    scope: str


@dataclass
class Receiver:
    """What the receiver got: decoded spans, raw requests, headers; ``changed`` is set on each request."""

    url: str = ""
    spans: list[Received] = field(default_factory=list)
    json_bodies: list[dict[str, Any]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        """Block until at least ``count`` spans arrived (an event awaited, never a sleep)."""
        with self.changed:
            if not self.changed.wait_for(lambda: len(self.spans) >= count, timeout):
                raise AssertionError(f"{len(self.spans)} spans arrived, {count} expected")
            return list(self.spans)


def value_of(value: AnyValue) -> Any:
    """A Python value of an OTLP ``AnyValue``."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(value_of(v) for v in value.array_value.values)
    return getattr(value, kind) if kind else None


def _attrs(pairs: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in pairs}


def _decode(receiver: Receiver, body: bytes) -> None:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    for resource_spans in request.resource_spans:
        resource = _attrs(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                receiver.spans.append(
                    Received(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        name=span.name,
                        kind=span.kind,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes=_attrs(span.attributes),
                        events=[(e.name, _attrs(e.attributes)) for e in span.events],
                        status_code=span.status.code,
                        status_message=span.status.message,
                        resource=resource,
                        scope=scope_spans.scope.name,
                    )
                )


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """Serve ``POST /v1/traces`` on 127.0.0.1 (a free port) until the block ends."""
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            with receiver.changed:
                receiver.headers.append(dict(self.headers.items()))
                receiver.bodies.append(body)
                if self.headers.get("Content-Type") == "application/json":
                    receiver.json_bodies.append(orjson.loads(body))
                    reply = b"{}"
                else:
                    _decode(receiver, body)
                    reply = ExportTraceServiceResponse().SerializeToString()
                receiver.changed.notify_all()
            self.send_response(200 if self.path == "/v1/traces" else 404)
            self.send_header("Content-Type", self.headers.get("Content-Type") or "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
