"""Sending the span view over OTLP/HTTP with the official OpenTelemetry SDK and exporter.

The spans come from ``turnlog.analytics.SpanView``; here they become the SDK's
``ReadableSpan`` objects (ids, times and parents as recorded, nothing made up) and go out
through ``OTLPSpanExporter`` (protobuf) or, where ``http/json`` is asked, the exporter's own
protobuf encoding rendered as OTLP/JSON. Needs ``pip install turnlog[otel]``.
"""

from __future__ import annotations

import importlib
import os
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from turnlog._version import __version__
from turnlog.analytics import Span, Trace

from ._errors import ExportFailed, UserError

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = [
    "EXPORT_TIMEOUT",
    "Protocol",
    "Sender",
    "otlp_json",
    "protocol_of",
    "readable_spans",
    "resolve_endpoint",
    "safe_url",
    "service_resource",
]

Protocol = Literal["http/protobuf", "http/json"]

_TRACES_PATH = "v1/traces"
_DEFAULT_ENDPOINT = "http://localhost:4318/"


def _require_sdk() -> None:
    try:
        importlib.import_module("opentelemetry.sdk.trace")
        importlib.import_module("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    except ImportError as exc:
        raise UserError(
            "turnlog otel needs the OpenTelemetry SDK and OTLP exporter: pip install 'turnlog[otel]'"
        ) from exc


def resolve_endpoint(given: str | None, environ: Mapping[str, str]) -> str:
    """The traces URL: ``--endpoint``, else the standard variables, else ``localhost:4318``.

    ``--endpoint`` and ``OTEL_EXPORTER_OTLP_ENDPOINT`` are base URLs to which ``v1/traces`` is
    added (unless the URL already ends in it); ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is used
    as it is, as the specification says.

    Example:
        >>> resolve_endpoint("http://127.0.0.1:6006", {})
        'http://127.0.0.1:6006/v1/traces'
    """
    if not given and environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        url = environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    else:
        base = given or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or _DEFAULT_ENDPOINT
        url = base if base.rstrip("/").endswith("/" + _TRACES_PATH) else base.rstrip("/") + "/" + _TRACES_PATH
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(f"the OTLP endpoint must be an http:// or https:// URL, not {safe_url(url)!r}")
    return url


def safe_url(url: str) -> str:
    """``url`` without a password or token in it, for messages (credentials never leave)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = (
        host + (f":{parts.port}" if parts.port else "") if parts.username or parts.password else parts.netloc
    )
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def service_resource(environ: Mapping[str, str]) -> Resource:
    """The resource of every span: ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``, else ``turnlog``."""
    from opentelemetry.sdk.resources import Resource

    given = environ.get("OTEL_SERVICE_NAME") or "service.name=" in environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    return Resource.create({} if given else {"service.name": "turnlog"})


def readable_spans(traces: Sequence[Trace], resource: Resource) -> list[ReadableSpan]:
    """The SDK's spans of ``traces``, ready for any SDK exporter."""
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    scope = InstrumentationScope("turnlog", __version__)
    return [_readable(span, resource, scope, ReadableSpan) for trace in traces for span in trace.spans]


def _readable(span: Span, resource: Resource, scope: Any, cls: type[ReadableSpan]) -> ReadableSpan:
    from opentelemetry.sdk.trace import Event
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    flags = TraceFlags(TraceFlags.SAMPLED)
    context = SpanContext(span.trace_id, span.span_id, is_remote=False, trace_flags=flags)
    parent = (
        None
        if span.parent_id is None
        else SpanContext(span.trace_id, span.parent_id, is_remote=False, trace_flags=flags)
    )
    status = {
        "unset": Status(StatusCode.UNSET),
        "ok": Status(StatusCode.OK),
        "error": Status(StatusCode.ERROR, span.status_message),
    }[span.status]
    return cls(
        name=span.name,
        context=context,
        parent=parent,
        resource=resource,
        attributes=dict(span.attributes),
        events=[Event(e.name, dict(e.attributes), e.time_ns) for e in span.events],
        kind=SpanKind.CLIENT if span.kind == "client" else SpanKind.INTERNAL,
        status=status,
        start_time=span.start_ns,
        end_time=span.end_ns,
        instrumentation_scope=scope,
    )


EXPORT_TIMEOUT = 10.0
"""How long a send may take by default: the exporter's deadline over all its retries
(http/protobuf), or httpx's timeout of each network operation (http/json). The standard
variables ``OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`` / ``OTEL_EXPORTER_OTLP_TIMEOUT`` change it, in
seconds as the Python exporter reads them."""


class Sender:
    """One OTLP/HTTP destination; ``send`` blocks until the receiver said yes, or raises.

    Args:
        endpoint: The traces URL (see ``resolve_endpoint``).
        protocol: ``http/protobuf`` (the official exporter) or ``http/json``.
        environ: Where ``OTEL_EXPORTER_OTLP_HEADERS`` (or ``..._TRACES_HEADERS``) and the
            service name come from.
    """

    def __init__(self, endpoint: str, protocol: Protocol, environ: Mapping[str, str]) -> None:
        _require_sdk()
        self.endpoint = endpoint
        self.protocol = protocol
        self._resource = service_resource(environ)
        self._headers = _headers(environ)
        self.timeout = _timeout(environ)
        self._exporter: Any = None
        if protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            self._exporter = OTLPSpanExporter(endpoint=endpoint, headers=self._headers, timeout=self.timeout)

    def send(self, traces: Sequence[Trace]) -> int:
        """Send the spans of ``traces``; return how many spans went out.

        Raises:
            ExportFailed: the receiver could not be reached or refused the spans (after the
                exporter's own retries); the message names the endpoint, never its credentials.
        """
        spans = readable_spans(traces, self._resource)
        if not spans:
            return 0
        if self._exporter is not None:
            from opentelemetry.sdk.trace.export import SpanExportResult

            if self._exporter.export(spans) is not SpanExportResult.SUCCESS:
                raise ExportFailed(
                    f"the OTLP receiver at {safe_url(self.endpoint)} did not accept {len(spans)} spans"
                )
        else:
            self._send_json(spans)
        return len(spans)

    def _send_json(self, spans: list[ReadableSpan]) -> None:
        import httpx
        import orjson

        body = orjson.dumps(otlp_json(spans))
        headers = {**self._headers, "Content-Type": "application/json"}
        try:
            response = httpx.post(self.endpoint, content=body, headers=headers, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise ExportFailed(
                f"the OTLP receiver at {safe_url(self.endpoint)} cannot be reached: {type(exc).__name__}"
            ) from exc
        if response.status_code >= 300:
            raise ExportFailed(
                f"the OTLP receiver at {safe_url(self.endpoint)} answered {response.status_code} to {len(spans)} spans"
            )

    def close(self) -> None:
        """Release the exporter's connections; a send still running stops retrying."""
        if self._exporter is not None:
            self._exporter.shutdown()


def _timeout(environ: Mapping[str, str]) -> float:
    text = environ.get("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") or environ.get("OTEL_EXPORTER_OTLP_TIMEOUT") or ""
    try:
        seconds = float(text) if text else EXPORT_TIMEOUT
    except ValueError:
        raise UserError(f"OTEL_EXPORTER_OTLP_TIMEOUT must be a number of seconds, not {text!r}") from None
    return seconds if seconds > 0 else EXPORT_TIMEOUT


def _headers(environ: Mapping[str, str]) -> dict[str, str]:
    from opentelemetry.util.re import parse_env_headers

    text = environ.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or environ.get("OTEL_EXPORTER_OTLP_HEADERS") or ""
    return dict(parse_env_headers(text, liberal=True))


def otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """The OTLP/JSON body of ``spans``: the exporter's protobuf message with hex ids, as OTLP/JSON wants."""
    # protobuf ships no type hints; only this one function of it is used
    message_to_dict: Any = importlib.import_module("google.protobuf.json_format").MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    body: dict[str, Any] = message_to_dict(encode_spans(spans), use_integers_for_enums=True)
    for resource in body.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = _b64_hex(span[key])
    return body


def _b64_hex(text: str) -> str:
    import base64

    return base64.b64decode(text).hex()


def protocol_of(given: str | None, environ: Mapping[str, str] = os.environ) -> Protocol:
    """``--protocol``, else ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``, else protobuf."""
    value = (
        given
        or environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    )
    value = value or "http/protobuf"
    if value == "http/protobuf":
        return "http/protobuf"
    if value == "http/json":
        return "http/json"
    raise UserError(f"turnlog otel speaks OTLP over HTTP: protocol http/protobuf or http/json, not {value!r}")
