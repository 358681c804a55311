"""The span view of the log: runs, ReAct steps, model calls and tool calls as OpenTelemetry spans.

A pure fold: ``SpanView.apply`` reads one recorded event at a time, in log order, and returns
the traces that event finished; nothing here does I/O or reads a clock. Both outputs use it:
``turnlog otel export`` sends the traces over OTLP, ``turnlog ui`` draws them as a waterfall.

What becomes a span:

- a run (``run.started`` .. ``run.ended`` / ``run.failed``): ``invoke_agent {verb}``, the root
  of its trace; a run started inside another run nests under it, and a run started on a branch
  while a flow's node runs there nests under the node;
- a ReAct round (each instruction of a ``ReAct`` run): ``step {n}``;
- a model call (``model.called``): ``chat {model}``, a client span ending when it was recorded
  and starting ``latency_ms`` before;
- a tool call (an ``ActionRequest`` and its ``ActionResponse``): ``execute_tool {name}``;
- a flow's node (``node.started`` .. ``node.completed`` / ``node.failed``): ``{operation}``.

Ids are derived from the log (``derived_id``): the trace id from the root run's id (or the
flow's graph), a span id from the run id or the id of the event that recorded the span, so the
same log always yields the same ids.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from turnlog.eventstore import RecordedEvent
from turnlog.projections import visible_data

from ._span_content import finish_reasons, message_parts, old_content_event, to_json
from ._span_model import AttributeValue, Semconv, Span, SpanEvent, Trace, derived_id

__all__ = ["SPAN_EVENT_TYPES", "SpanView", "build_traces"]

SPAN_EVENT_TYPES = (
    "branch.created",
    "branch.forked",
    "message.added",
    "model.called",
    "run.started",
    "run.ended",
    "run.failed",
    "stream.chunk",
    "node.started",
    "node.completed",
    "node.failed",
)
"""The event types the span view reads; a reader may filter the log to these."""

REACT_VERBS = frozenset({"ReAct", "ReActStream"})
"""Verbs whose instructions each open a step span."""

PROVIDER_NAMES = {
    "openai": "openai",
    "anthropic": "anthropic",
    "claude_code": "anthropic",
    "codex": "openai",
    "gemini": "gcp.gemini",
    "gemini_api": "gcp.gemini",
}
"""turnlog provider -> the conventions' well-known ``gen_ai.provider.name`` value."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ns(moment: datetime) -> int:
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def _iso_ns(text: Any, fallback: int) -> int:
    if not isinstance(text, str):
        return fallback
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return fallback
    return _ns(moment if moment.tzinfo else moment.replace(tzinfo=UTC))


@dataclass(slots=True)
class _Node:
    """A span being built; ``children`` are its nodes in the order they began."""

    kind: Literal["run", "step", "chat", "tool", "node"]
    span_id: int
    name: str
    start_ns: int
    end_ns: int | None = None
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    events: list[SpanEvent] = field(default_factory=list)
    status: Literal["unset", "ok", "error"] = "unset"
    status_message: str | None = None
    branch_id: str | None = None
    branch_version: int | None = None
    position: int = 0
    children: list[_Node] = field(default_factory=list)
    inputs: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class _Run:
    """An open run: its span, its trace and what its next events attach to."""

    node: _Node
    trace_id: int
    parent_id: int | None
    root: _Run | None
    verb: str
    start_position: int
    step: _Node | None = None
    steps: int = 0
    pending: list[dict[str, Any]] = field(default_factory=list)
    unclaimed: list[dict[str, Any]] = field(default_factory=list)
    calls: dict[str, _Node] = field(default_factory=dict)
    tools: dict[str, _Node] = field(default_factory=dict)
    chunks: int = 0
    closed: bool = False


class SpanView:
    """The fold from recorded events to finished traces (pure: no I/O, no clock).

    Args:
        content: Put message content on the spans (``gen_ai.input.messages`` and
            ``gen_ai.output.messages``, or the v1.36 content events). Redacted messages never
            contribute content.
        semconv: The convention version to follow (see ``semconv_from_env``).

    Example:
        >>> view = SpanView()
        >>> view.open_from() is None
        True
    """

    def __init__(self, *, content: bool = False, semconv: Semconv = Semconv.V1_36) -> None:
        self._content = content
        self._semconv = semconv
        self._runs: dict[str, _Run] = {}
        self._names: dict[str, str] = {}
        self._nodes: dict[str, tuple[_Node, int, str | None]] = {}
        self._node_on_branch: dict[str, tuple[int, int]] = {}

    def open_from(self) -> int | None:
        """The position of the earliest ``run.started`` whose trace is not finished yet.

        A reader that stops and starts again from here rebuilds every open run completely.
        """
        starts = [run.start_position for run in self._runs.values() if run.root is None]
        return min(starts) if starts else None

    def apply(self, event: RecordedEvent) -> list[Trace]:
        """Fold one event (in log order); return the traces it finished (usually none)."""
        handler = _HANDLERS.get(event.type)
        if handler is None:
            return []
        data = event.data
        if len(data) == 1 and "turnlog_redacted" in data:
            data = visible_data(event.type, data)
        return handler(self, event, data)

    # ------------------------------------------------------------------------------ branches

    def _on_branch(self, event: RecordedEvent, data: Mapping[str, Any]) -> list[Trace]:
        name, branch = data.get("name"), data.get("branch_id")
        if isinstance(name, str) and isinstance(branch, str):
            self._names[branch] = name
        return []

    # ---------------------------------------------------------------------------------- runs

    def _on_run_started(self, event: RecordedEvent, data: Mapping[str, Any]) -> list[Trace]:
        run_id, verb = str(data.get("run_id")), str(data.get("verb"))
        branch = _branch_of(event)
        start = _ns(event.recorded_at)
        node = _Node("run", derived_id("span", f"run:{run_id}", 8), f"invoke_agent {verb}", start)
        node.branch_id = branch
        parent_run_id = data.get("parent_run_id")
        parent = self._runs.get(parent_run_id) if isinstance(parent_run_id, str) else None
        flow_node = self._node_on_branch.get(branch or "") if parent_run_id is None else None
        if parent is not None:
            root = parent.root or parent
            (parent.step or parent.node).children.append(node)
            run = _Run(node, parent.trace_id, None, root, verb, event.position)
        elif isinstance(parent_run_id, str):
            # The enclosing run is outside what was read (--since): the ids still agree.
            trace = derived_id("trace", parent_run_id, 16)
            run = _Run(node, trace, derived_id("span", f"run:{parent_run_id}", 8), None, verb, event.position)
        elif flow_node is not None:
            run = _Run(node, flow_node[0], flow_node[1], None, verb, event.position)
        else:
            run = _Run(node, derived_id("trace", run_id, 16), None, None, verb, event.position)
        attrs = node.attributes
        attrs["gen_ai.operation.name"] = "invoke_agent"
        self._provider(attrs, data.get("provider"))
        _put(attrs, "gen_ai.request.model", data.get("model"))
        _put(attrs, "gen_ai.conversation.id", branch)
        _put(attrs, "gen_ai.agent.name", self._names.get(branch or ""))
        attrs["turnlog.verb"] = verb
        attrs["turnlog.run_id"] = run_id
        _put(attrs, "turnlog.cwd", data.get("cwd"))
        self._runs[run_id] = run
        return []

    def _on_run_closed(self, event: RecordedEvent, data: Mapping[str, Any]) -> list[Trace]:
        run = self._runs.get(str(data.get("run_id")))
        if run is None or run.closed:
            return []
        run.closed = True
        node = run.node
        _close(node, event)
        attrs = node.attributes
        _usage(attrs, data.get("usage"))
        if isinstance(data.get("chunks"), int):
            attrs["turnlog.chunks"] = data["chunks"]
        elif run.chunks:
            attrs["turnlog.chunks"] = run.chunks
        if event.type == "run.failed":
            _fail(node, data.get("error_type"), data.get("error_message"))
            _put(attrs, "turnlog.failure_reason", data.get("reason"))
        else:
            node.status = "ok"
        if run.root is not None:
            return []
        return [self._finish(run, event.position)]

    def _finish(self, run: _Run, end_position: int) -> Trace:
        spans: list[Span] = []
        _emit(run.node, run.parent_id, run.trace_id, spans, self._content, self._semconv)
        done = [rid for rid, r in self._runs.items() if r is run or r.root is run]
        for rid in done:
            del self._runs[rid]
        return Trace(tuple(spans), run.start_position, end_position)

    def _on_chunk(self, event: RecordedEvent, data: Mapping[str, Any]) -> list[Trace]:
        run = self._runs.get(event.stream[4:]) if event.stream.startswith("run-") else None
        if run is None:
            return []
        run.chunks += 1
        if run.chunks == 1:
            first = _ns(event.recorded_at)
            run.node.events.append(
                SpanEvent("turnlog.first_chunk", first, {"turnlog.chunk_type": str(data.get("type"))})
            )
        return []

    # ------------------------------------------------------------------------------ messages

    def _on_message(self, event: RecordedEvent, data: Mapping[str, Any]) -> list[Trace]:
        message = data.get("message")
        run_id = data.get("run_id") or event.meta.get("run_id")
        run = self._runs.get(run_id) if isinstance(run_id, str) else None
        if run is None or not isinstance(message, Mapping):
            return []
        kind = message.get("kind")
        if kind == "Instruction" and run.verb in REACT_VERBS:
            run.steps += 1
            step = _Node(
                "step",
                derived_id("span", f"event:{event.id.hex}", 8),
                f"step {run.steps}",
                _ns(event.recorded_at),
            )
            step.attributes["turnlog.step"] = run.steps
            step.branch_id, step.branch_version, step.position = (
                _branch_of(event),
                event.version,
                event.position,
            )
            run.node.children.append(step)
            run.step = step
        if kind == "AssistantResponse":
            self._on_answer(run, message)
        elif kind == "ActionRequest":
            self._on_tool_request(run, event, message)
        elif kind == "ActionResponse":
            self._on_tool_response(run, event, message)
        if self._content and kind != "AssistantResponse" and (parts := message_parts(message)) is not None:
            run.pending.append(parts)
        return []

    def _on_answer(self, run: _Run, message: Mapping[str, Any]) -> None:
        if not self._content:
            return
        parts = message_parts(message)
        if parts is None:
            return
        metadata = message.get("metadata")
        call_id = metadata.get("model_call_id") if isinstance(metadata, Mapping) else None
        call = run.calls.get(call_id) if isinstance(call_id, str) else None
        if call is not None:
            call.outputs.append(parts)
        else:
            # A CLI run records its answer before the call that produced it.
            run.unclaimed.append(parts)

    def _on_tool_request(self, run: _Run, event: RecordedEvent, message: Mapping[str, Any]) -> None:
        content = message.get("content")
        content = content if isinstance(content, Mapping) else {}
        name = str(content.get("function") or "tool")
        start = _iso_ns(message.get("created_at"), _ns(event.recorded_at))
        node = _Node("tool", derived_id("span", f"event:{event.id.hex}", 8), f"execute_tool {name}", start)
        attrs = node.attributes
        attrs["gen_ai.operation.name"] = "execute_tool"
        attrs["gen_ai.tool.name"] = name
        attrs["gen_ai.tool.type"] = "function"
        call_id = content.get("call_id")
        attrs["gen_ai.tool.call.id"] = str(call_id or message.get("id"))
        _put(attrs, "gen_ai.conversation.id", _branch_of(event))
        if self._content and self._semconv is Semconv.LATEST and message_parts(message) is not None:
            attrs["gen_ai.tool.call.arguments"] = to_json(content.get("arguments"))
        node.branch_id, node.branch_version, node.position = _branch_of(event), event.version, event.position
        (run.step or run.node).children.append(node)
        run.tools[str(message.get("id"))] = node

    def _on_tool_response(self, run: _Run, event: RecordedEvent, message: Mapping[str, Any]) -> None:
        content = message.get("content")
        content = content if isinstance(content, Mapping) else {}
        node = run.tools.pop(str(content.get("action_request_id")), None)
        if node is None:
            # An answer without its recorded request still is a tool call that ran.
            self._on_tool_request(run, event, {**message, "kind": "ActionRequest"})
            node = run.tools.pop(str(message.get("id")))
        end = _iso_ns(message.get("created_at"), _ns(event.recorded_at))
        duration = content.get("duration_ms")
        if isinstance(duration, int | float) and not isinstance(duration, bool):
            node.start_ns = end - int(duration * 1_000_000)
            node.attributes["turnlog.duration_ms"] = float(duration)
        node.end_ns = max(end, node.start_ns)
        node.branch_version, node.position = event.version, event.position
        error = content.get("error")
        if error:
            _fail(node, "ToolError", str(error))
        else:
            node.status = "ok"
        if self._content and self._semconv is Semconv.LATEST and message_parts(message) is not None:
            node.attributes["gen_ai.tool.call.result"] = to_json(content.get("output"))

    # ----------------------------------------------------------------------------- model calls

    def _on_model_called(self, event: RecordedEvent, data: Mapping[str, Any]) -> list[Trace]:
        run_id = data.get("run_id") or event.meta.get("run_id")
        run = self._runs.get(run_id) if isinstance(run_id, str) else None
        model = str(data.get("model"))
        end = _ns(event.recorded_at)
        latency = data.get("latency_ms")
        start = end - int(latency * 1_000_000) if isinstance(latency, int | float) else end
        node = _Node("chat", derived_id("span", f"event:{event.id.hex}", 8), f"chat {model}", start, end)
        node.branch_id, node.branch_version, node.position = _branch_of(event), event.version, event.position
        self._chat_attributes(node, data)
        ttft = data.get("ttft_ms")
        if isinstance(ttft, int | float):
            node.events.append(SpanEvent("gen_ai.first_token", start + int(ttft * 1_000_000), {}))
        if data.get("status") == "error":
            _fail(node, data.get("error_type"), data.get("error_message"))
        else:
            node.status = "ok"
        if run is None:
            # A call outside any run (a proxied call) is a trace of its own.
            trace = derived_id("trace", f"event:{event.id.hex}", 16)
            spans: list[Span] = []
            _emit(node, None, trace, spans, self._content, self._semconv)
            return [Trace(tuple(spans), event.position, event.position)]
        if run.node.start_ns > node.start_ns:
            node.start_ns = run.node.start_ns
        if self._content:
            node.inputs, run.pending = run.pending, []
            node.outputs, run.unclaimed = run.unclaimed, []
        call_id = data.get("call_id")
        if isinstance(call_id, str):
            run.calls[call_id] = node
        (run.step or run.node).children.append(node)
        return []

    def _chat_attributes(self, node: _Node, data: Mapping[str, Any]) -> None:
        attrs = node.attributes
        attrs["gen_ai.operation.name"] = "chat"
        self._provider(attrs, data.get("provider"))
        attrs["gen_ai.request.model"] = str(data.get("model"))
        response = data.get("response")
        response = response if isinstance(response, Mapping) else None
        served = data.get("served_model") or (response or {}).get("model") or data.get("model")
        attrs["gen_ai.response.model"] = str(served)
        _put(attrs, "gen_ai.response.id", (response or {}).get("id"))
        reasons = finish_reasons(response)
        if reasons:
            attrs["gen_ai.response.finish_reasons"] = reasons
        _put(attrs, "gen_ai.conversation.id", node.branch_id)
        params = data.get("params")
        for key, name in _PARAMS:
            value = params.get(key) if isinstance(params, Mapping) else None
            if isinstance(value, int | float) and not isinstance(value, bool):
                attrs[name] = value
        _usage(attrs, data.get("usage"))
        attempts = data.get("attempts")
        if isinstance(attempts, int) and attempts > 1:
            attrs["turnlog.attempts"] = attempts
            node.events.append(SpanEvent("turnlog.retried", node.start_ns, {"turnlog.attempts": attempts}))
        _put(attrs, "turnlog.call_id", data.get("call_id"))
        _put(attrs, "turnlog.endpoint", data.get("endpoint"))
        _put(attrs, "turnlog.verb", data.get("verb"))
        if isinstance(data.get("ttft_ms"), int | float):
            attrs["turnlog.ttft_ms"] = float(data["ttft_ms"])
        if data.get("stream"):
            attrs["turnlog.stream"] = True

    def _provider(self, attrs: dict[str, AttributeValue], provider: Any) -> None:
        if not isinstance(provider, str):
            return
        key = "gen_ai.provider.name" if self._semconv is Semconv.LATEST else "gen_ai.system"
        attrs[key] = PROVIDER_NAMES.get(provider, provider)
        attrs["turnlog.provider"] = provider

    # ---------------------------------------------------------------------------------- flows

    def _on_node_started(self, event: RecordedEvent, data: Mapping[str, Any]) -> list[Trace]:
        node_id, operation = str(data.get("node_id")), str(data.get("operation"))
        node = _Node(
            "node", derived_id("span", f"node:{event.stream}:{node_id}", 8), operation, _ns(event.recorded_at)
        )
        node.attributes["turnlog.node_id"] = node_id
        node.attributes["turnlog.operation"] = operation
        branch = data.get("branch_id")
        _put(node.attributes, "gen_ai.conversation.id", branch)
        node.branch_id = branch if isinstance(branch, str) else None
        trace = derived_id("trace", event.stream, 16)
        self._nodes[f"{event.stream}:{node_id}"] = (node, event.position, node.branch_id)
        if node.branch_id is not None:
            self._node_on_branch[node.branch_id] = (trace, node.span_id)
        return []

    def _on_node_closed(self, event: RecordedEvent, data: Mapping[str, Any]) -> list[Trace]:
        found = self._nodes.pop(f"{event.stream}:{data.get('node_id')}", None)
        if found is None:
            return []
        node, start_position, branch = found
        if branch is not None and self._node_on_branch.get(branch, (0, 0))[1] == node.span_id:
            del self._node_on_branch[branch]
        _close(node, event)
        if event.type == "node.failed":
            _fail(node, data.get("error_type"), data.get("error_message"))
        else:
            node.status = "ok"
        spans: list[Span] = []
        _emit(node, None, derived_id("trace", event.stream, 16), spans, False, self._semconv)
        return [Trace(tuple(spans), start_position, event.position)]


_PARAMS = (
    ("temperature", "gen_ai.request.temperature"),
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("top_p", "gen_ai.request.top_p"),
    ("seed", "gen_ai.request.seed"),
)

_HANDLERS: dict[str, Callable[[SpanView, RecordedEvent, Mapping[str, Any]], list[Trace]]] = {
    "branch.created": SpanView._on_branch,
    "branch.forked": SpanView._on_branch,
    "run.started": SpanView._on_run_started,
    "run.ended": SpanView._on_run_closed,
    "run.failed": SpanView._on_run_closed,
    "stream.chunk": SpanView._on_chunk,
    "message.added": SpanView._on_message,
    "model.called": SpanView._on_model_called,
    "node.started": SpanView._on_node_started,
    "node.completed": SpanView._on_node_closed,
    "node.failed": SpanView._on_node_closed,
}


def _branch_of(event: RecordedEvent) -> str | None:
    branch = event.meta.get("branch_id")
    if branch is None and event.stream.startswith("branch-"):
        return event.stream[7:]
    return branch if isinstance(branch, str) else None


def _put(attrs: dict[str, AttributeValue], key: str, value: Any) -> None:
    if isinstance(value, str) and value:
        attrs[key] = value


def _usage(attrs: dict[str, AttributeValue], usage: Any) -> None:
    if not isinstance(usage, Mapping):
        return
    for key, name in (
        ("input_tokens", "gen_ai.usage.input_tokens"),
        ("output_tokens", "gen_ai.usage.output_tokens"),
        # The OpenTelemetry GenAI names of the prompt-cache counts.
        ("cache_read_tokens", "gen_ai.usage.cache_read.input_tokens"),
        ("cache_write_tokens", "gen_ai.usage.cache_creation.input_tokens"),
    ):
        if isinstance(usage.get(key), int):
            attrs[name] = usage[key]
    if isinstance(usage.get("cost_usd"), int | float):
        attrs["turnlog.cost_usd"] = float(usage["cost_usd"])


def _fail(node: _Node, error_type: Any, message: Any) -> None:
    node.status = "error"
    node.attributes["error.type"] = str(error_type or "error")
    node.status_message = str(message) if message else None


def _close(node: _Node, event: RecordedEvent) -> None:
    node.end_ns = max(_ns(event.recorded_at), node.start_ns)
    node.branch_version, node.position = event.version, event.position


def _emit(
    node: _Node, parent: int | None, trace: int, out: list[Span], content: bool, semconv: Semconv
) -> int:
    """Put ``node`` and its subtree into ``out`` (parents first); return the subtree's end."""
    index = len(out)
    end = node.end_ns or node.start_ns
    children = node.children
    if len(children) > 1:
        children = sorted(children, key=_start_of)
    for child in children:
        child_end = _emit(child, node.span_id, trace, out, content, semconv)
        if child_end > end:
            end = child_end
    if node.kind == "step" and children:
        # A step is recorded with its instruction, often after its model call was made:
        # it spans what ran inside it.
        node.start_ns = min(node.start_ns, out[index].start_ns)
    # An unfinished tool call or a step ends with the last thing inside it.
    closing = end if node.end_ns is None or node.kind == "step" else node.end_ns
    # the node's span goes before its subtree, now that the subtree's end is known
    out.insert(index, _span(node, parent, trace, closing, content, semconv))
    return end


def _start_of(node: _Node) -> int:
    return node.start_ns


def _time_of(event: SpanEvent) -> int:
    return event.time_ns


def _span(node: _Node, parent: int | None, trace: int, end: int, content: bool, semconv: Semconv) -> Span:
    attrs: Mapping[str, AttributeValue] = node.attributes  # the node is dropped once emitted
    events = node.events
    if content and node.kind == "chat":
        attrs, events = _with_content(node, end, semconv)
    start = node.start_ns
    return Span(
        trace_id=trace,
        span_id=node.span_id,
        parent_id=parent,
        name=node.name,
        kind="client" if node.kind == "chat" else "internal",
        start_ns=start,
        end_ns=end if end > start else start,
        attributes=attrs,
        events=tuple(events) if len(events) < 2 else tuple(sorted(events, key=_time_of)),
        status=node.status,
        status_message=node.status_message,
        branch_id=node.branch_id,
        branch_version=node.branch_version,
        position=node.position,
        kind_of=node.kind,
    )


def _with_content(
    node: _Node, end: int, semconv: Semconv
) -> tuple[dict[str, AttributeValue], list[SpanEvent]]:
    attrs = dict(node.attributes)
    events = list(node.events)
    if semconv is Semconv.LATEST:
        if node.inputs:
            attrs["gen_ai.input.messages"] = to_json(node.inputs)
        if node.outputs:
            # an output message carries the reason the model stopped, when the response gave one
            reasons = attrs.get("gen_ai.response.finish_reasons")
            reason = reasons[0] if isinstance(reasons, tuple) and reasons else None
            outputs = [{**o, "finish_reason": reason} if reason else o for o in node.outputs]
            attrs["gen_ai.output.messages"] = to_json(outputs)
        return attrs, events
    for parts in node.inputs:
        name, extra = old_content_event(parts, output=False)
        events.append(SpanEvent(name, node.start_ns, extra))
    for parts in node.outputs:
        name, extra = old_content_event(parts, output=True)
        events.append(SpanEvent(name, end, extra))
    return attrs, events


def build_traces(
    events: Iterable[RecordedEvent], *, content: bool = False, semconv: Semconv = Semconv.V1_36
) -> list[Trace]:
    """Every trace the events finish, in the order they finished (runs still open are left out).

    Example:
        >>> build_traces([])
        []
    """
    view = SpanView(content=content, semconv=semconv)
    traces: list[Trace] = []
    for event in events:
        traces.extend(view.apply(event))
    return traces
