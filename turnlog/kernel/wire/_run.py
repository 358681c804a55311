"""The CLIs recorded at the wire under ``run()``: the recorder in-process, one chunk stream per call.

``run()`` with the Claude Code, Codex or Gemini CLI starts ``RunWire``: the recording proxy
(``ProxyApp``) served on 127.0.0.1, port 0, in the run's task group (``_server``), and the
CLI pointed at it (``wire_target``: ``ANTHROPIC_BASE_URL``, Codex's provider ``base_url`` or,
signed in with ChatGPT, its ``openai_base_url``; ``GOOGLE_GEMINI_BASE_URL``, or signed in with
Google ``CODE_ASSIST_ENDPOINT``, on Vertex AI ``GOOGLE_VERTEX_BASE_URL``), forwarding to the
upstream the CLI would have used, with the CLI's own credentials.

Each upstream call the CLI makes is one stream, ``run-<run_id>-wire-<n>`` (n from 1): every
stream event is a ``stream.chunk`` appended *before* it is forwarded to the CLI (its exact
SSE text in ``metadata.sse`` of its first chunk), and the call ends with the proxy's
``model.called`` (verb ``wire``: model, usage, latency, time to first token, status) as the
stream's last event. The run's own ``model.called`` names the streams in
``params.wire_calls``. The wire calls stay out of the branch stream so that the run's usage
and cost are counted once (the CLI's own total is the run's).

When a run ends without its answer (the CLI killed, or this process), ``wire_remainder``
gives the text that crossed the wire in the last call and the CLI never printed; ``run``
and ``recover`` record it as an ``AssistantResponse`` marked ``source: "wire"``.
"""

from __future__ import annotations

import logging
import re
import time
import tomllib
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import orjson

from turnlog.eventstore import NO_STREAM, EventStore, uuid7
from turnlog.kernel.models import ModelResponse, Usage
from turnlog.kernel.models._secrets import Scrubber
from turnlog.projections import (
    AssistantResponse,
    ChunkReceived,
    ModelCalled,
    new_event,
    new_events,
)

from ._apis import DEFAULT_UPSTREAMS, Api, Route, conversation, fingerprint, request_params, tool_names
from ._app import ProxyApp, ProxyConfig, RecordedCall
from ._chunks import SSEBatch, plain_json, wire_chunks
from ._gemini_settings import gemini_start
from ._server import serve_loopback

__all__ = [
    "VERB",
    "RunWire",
    "RunWireCall",
    "WireRecord",
    "WireTarget",
    "close_open_wire_calls",
    "last_cut",
    "read_wire_calls",
    "recording_wire",
    "wire_message",
    "wire_remainder",
    "wire_stream",
    "wire_target",
]

_log = logging.getLogger("turnlog.kernel.wire")

#: The ``verb`` of the ``model.called`` that closes a wire call under ``run()``.
VERB = "wire"


def wire_stream(run_id: str, n: int) -> str:
    """The chunk stream of the ``n``-th upstream call (from 1) of run ``run_id``."""
    return f"run-{run_id}-wire-{n}"


# ------------------------------------------------------------------------------------ targets


@dataclass(frozen=True, slots=True)
class WireTarget:
    """How one CLI is pointed at the recorder.

    Attributes:
        api: The API the CLI speaks (which upstream the recorder forwards to).
        upstream: Where the CLI would have sent its calls (the recorder forwards there).
        env: ``name -> suffix`` of the variables that point the CLI at the recorder (the value
            is the recorder's base URL followed by the suffix).
        config: ``-c`` overrides (Codex), as ``key -> suffix`` likewise.
    """

    api: Api
    upstream: str
    env: dict[str, str] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)

    def options(self, base_url: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` (the run's stream options) with the CLI pointed at ``base_url``."""
        out = dict(options)
        env = {**dict(out.get("env") or {}), **{k: base_url + v for k, v in self.env.items()}}
        if env:
            out["env"] = env
        extra = list(out.get("extra_args") or ())
        for key, suffix in self.config.items():
            extra += ["-c", f"{key}={orjson.dumps(base_url + suffix).decode()}"]
        if extra:
            out["extra_args"] = extra
        return out


def _split_v1(url: str) -> tuple[str, str]:
    """``(root, "/v1")`` for a base URL ending in ``/v1`` (the path the CLI adds is kept)."""
    bare = url.rstrip("/")
    if bare.endswith("/v1"):
        return bare[: -len("/v1")], "/v1"
    return bare, ""


def wire_target(
    provider: str, env: Mapping[str, str], cwd: str | None = None, args: Sequence[str] = ()
) -> WireTarget | None:
    """Where the CLI of ``provider``, started with ``env`` in ``cwd``, sends its calls, and how to redirect it.

    The CLIs' subscription logins are recorded too: Codex signed in with ChatGPT (the ChatGPT
    backend's Responses API), Gemini CLI signed in with Google (Code Assist) or on Vertex AI.
    Gemini CLI's auth type comes from its settings files (system, workspace of ``cwd``, user,
    system defaults), its ``.env`` file and ``env``, as the CLI merges them
    (``_gemini_settings``); ``args`` are the CLI's extra arguments (``--ignore-env``
    bears on that). None when the CLI cannot be pointed at the recorder
    (another provider; a Codex provider without a ``base_url`` of its own config; Codex's
    ChatGPT login with an ``openai_base_url`` that is neither an OpenAI ``/v1`` nor a ChatGPT
    ``/backend-api/codex`` base).
    """
    if provider == "claude_code":
        upstream = env.get("ANTHROPIC_BASE_URL") or DEFAULT_UPSTREAMS["anthropic"]
        return WireTarget("anthropic", upstream.rstrip("/"), env={"ANTHROPIC_BASE_URL": ""})
    if provider == "gemini":
        return _gemini_target(env, cwd, args)
    if provider == "codex":
        return _codex_target(env)
    return None


def _gemini_target(env: Mapping[str, str], cwd: str | None, args: Sequence[str]) -> WireTarget:
    start = gemini_start(env, cwd, args)
    env = start.env  # with what the CLI's .env file adds (an upstream, a location)
    if start.auth in ("oauth-personal", "compute-default-credentials"):
        # Code Assist: the CLI sends its calls to CODE_ASSIST_ENDPOINT with its Google token
        upstream = env.get("CODE_ASSIST_ENDPOINT") or DEFAULT_UPSTREAMS["code_assist"]
        return WireTarget("code_assist", upstream.rstrip("/"), env={"CODE_ASSIST_ENDPOINT": ""})
    if start.auth == "vertex-ai":
        return WireTarget("gemini", _vertex_upstream(env), env={"GOOGLE_VERTEX_BASE_URL": ""})
    upstream = env.get("GOOGLE_GEMINI_BASE_URL") or DEFAULT_UPSTREAMS["gemini"]
    return WireTarget("gemini", upstream.rstrip("/"), env={"GOOGLE_GEMINI_BASE_URL": ""})


def _vertex_upstream(env: Mapping[str, str]) -> str:
    """Vertex AI's host for the CLI's location (as the CLI, then the google-genai SDK, picks it).

    The CLI maps the multi-regions ``us`` and ``eu`` to their REP endpoints. The SDK takes a
    region's host only for a project and a location (not ``global``) without an API key: with
    ``GOOGLE_API_KEY`` (express mode, which the CLI hands the SDK) it drops both and takes
    ``aiplatform.googleapis.com``, as for no location.
    """
    if env.get("GOOGLE_VERTEX_BASE_URL"):
        return env["GOOGLE_VERTEX_BASE_URL"].rstrip("/")
    location = env.get("GOOGLE_CLOUD_LOCATION") or ""
    if location in ("us", "eu"):
        return f"https://aiplatform.{location}.rep.googleapis.com"
    if (
        location
        and location != "global"
        and env.get("GOOGLE_CLOUD_PROJECT")
        and not env.get("GOOGLE_API_KEY")
    ):
        return f"https://{location}-aiplatform.googleapis.com"
    return "https://aiplatform.googleapis.com"


#: The ChatGPT backend's base of the Responses API (``openai_base_url`` of a ChatGPT login).
_CHATGPT_BASE = "/backend-api/codex"


def _codex_target(env: Mapping[str, str]) -> WireTarget | None:
    home = Path(env.get("CODEX_HOME") or Path(env.get("HOME") or Path.home()) / ".codex")
    try:
        config = tomllib.loads((home / "config.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        config = {}
    chosen = str(config.get("model_provider") or "openai")
    declared = (config.get("model_providers") or {}).get(chosen)
    if isinstance(declared, dict) and isinstance(declared.get("base_url"), str):
        # a provider of the user's config: its base_url is overridden for this run only
        root, suffix = _split_v1(declared["base_url"])
        return WireTarget("openai", root, config={f"model_providers.{chosen}.base_url": suffix})
    if chosen != "openai":
        return None
    # The built-in provider's base: ``openai_base_url`` of the config (the pinned Codex reads
    # only that), else the older OPENAI_BASE_URL; the recorder sets both.
    configured = config.get("openai_base_url")
    base = configured if isinstance(configured, str) and configured else env.get("OPENAI_BASE_URL", "")
    if not env.get("OPENAI_API_KEY") and _chatgpt_login(home):
        return _chatgpt_target(base.rstrip("/"))
    root, suffix = _split_v1(base) if base else (DEFAULT_UPSTREAMS["openai"], "/v1")
    return WireTarget("openai", root, env={"OPENAI_BASE_URL": suffix}, config={"openai_base_url": suffix})


def _chatgpt_target(base: str) -> WireTarget | None:
    """Codex signed in with ChatGPT: its ``openai_base_url`` goes through the recorder.

    Codex keeps its ChatGPT bearer token and ``chatgpt-account-id`` header for that base (the
    recorder forwards them and records neither); its other ChatGPT traffic (the account and
    plugin calls under ``chatgpt_base_url``) does not pass the recorder.
    """
    if not base:
        return WireTarget("chatgpt", DEFAULT_UPSTREAMS["chatgpt"], config={"openai_base_url": _CHATGPT_BASE})
    if base.endswith(_CHATGPT_BASE):
        return WireTarget("chatgpt", base[: -len(_CHATGPT_BASE)], config={"openai_base_url": _CHATGPT_BASE})
    if base.endswith("/v1"):
        return WireTarget("openai", base[: -len("/v1")], config={"openai_base_url": "/v1"})
    return None


def _chatgpt_login(home: Path) -> bool:
    try:
        auth = orjson.loads((home / "auth.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return False
    return isinstance(auth, dict) and bool(auth.get("tokens")) and not auth.get("OPENAI_API_KEY")


# -------------------------------------------------------------------------------------- calls


@dataclass
class RunWireCall:
    """One upstream call of the CLI: its stream events in its own stream, then its end."""

    wire: RunWire
    route: Route
    call_id: str
    stream: str
    fingerprint: str
    params: dict[str, Any]
    tools: list[str]
    scrub: Scrubber
    started: float = field(default_factory=time.perf_counter)
    ttft_ms: float | None = None
    seq: int = 0
    closed: bool = False
    status: str = "open"
    text: list[str] = field(default_factory=list)
    lock: anyio.Lock = field(default_factory=anyio.Lock)

    @property
    def elapsed_ms(self) -> float:
        """Milliseconds since the request went upstream."""
        return (time.perf_counter() - self.started) * 1000

    async def chunks(self, batch: SSEBatch) -> None:
        """Record stream events in one append, before they are forwarded to the CLI."""
        meta = {"branch_id": self.wire.branch_id, "run_id": self.wire.run_id, "wire_call": self.call_id}
        async with self.lock:
            if self.closed:
                return
            expected = self.seq if self.seq else NO_STREAM
            chunks, answered = wire_chunks(batch, self.scrub, self.seq)
            if self.ttft_ms is None and answered:
                self.ttft_ms = self.elapsed_ms
            events = new_events(chunks, meta=meta)
            seq = self.seq + len(chunks)
            texts = [c.content for c in chunks if c.type == "text" and c.content]
            await self.wire.store.append(self.stream, events, expected_version=expected)
            self.seq = seq
            self.text += texts

    async def flush(self) -> None:
        """Nothing to do: ``chunks`` commits before the events are forwarded."""

    async def request_results(self, results: Sequence[tuple[str, Any]]) -> None:
        """Record the tool results the request sends upstream (``tool_result`` chunks first).

        What a tool returned, as the CLI hands it to the model: Gemini's stream-json leaves
        the output of ``read_file`` out, its ``functionResponse`` carries it.
        """
        meta = {"branch_id": self.wire.branch_id, "run_id": self.wire.run_id, "wire_call": self.call_id}
        async with self.lock:
            datas = [
                ChunkReceived(
                    seq=i,
                    type="tool_result",
                    tool_id=self.scrub(key),
                    tool_output=self.scrub(plain_json(output)),
                    metadata={"wire": True, "source": "request"},
                )
                for i, (key, output) in enumerate(results, start=self.seq + 1)
            ]
            events = new_events(datas, meta=meta)
            await self.wire.store.append(self.stream, events, expected_version=self.seq or NO_STREAM)
            self.seq += len(events)

    async def settle(self) -> None:
        """Nothing to do: ``finish`` commits."""

    async def finish(self, answer: ModelResponse, upstream: dict[str, Any]) -> None:
        """Close the call with its answer (``model.called``, status ok)."""
        if not self.text and answer.text:
            self.text.append(self.scrub(answer.text))  # a call that did not stream
        await self._close("ok", answer, upstream, None)

    async def fail(
        self,
        error_type: str,
        message: str,
        upstream: dict[str, Any],
        *,
        reason: Literal["error", "cancelled", "timeout"] = "error",
        answer: ModelResponse | None = None,
    ) -> None:
        """Close a failed or cancelled call (``model.called``, status error, ``params.reason``)."""
        await self._close("error", answer, {**upstream, "reason": reason}, (error_type, message))

    async def _close(
        self,
        status: Literal["ok", "error"],
        answer: ModelResponse | None,
        upstream: dict[str, Any],
        error: tuple[str, str] | None,
    ) -> None:
        with anyio.CancelScope(shield=True):  # a CLI that leaves now must not cut the close in two
            async with self.lock:
                if self.closed:
                    return
                self.closed = True
                self.status = status if error is None else str(upstream.get("reason", "error"))
                raw = self.scrub(answer.raw) if answer is not None else None
                called = ModelCalled(
                    call_id=self.call_id,
                    provider=self.route.api,
                    model=self.route.model,
                    endpoint=self.route.wire.endpoint,
                    served_model=answer.model
                    if answer is not None and answer.model != self.route.model
                    else None,
                    verb=VERB,
                    run_id=self.wire.run_id,
                    params={**self.params, "_upstream": upstream, "wire_stream": self.stream},
                    tools=self.tools,
                    fingerprint=self.fingerprint,
                    response=raw if isinstance(raw, dict) else None,
                    usage=answer.usage if answer is not None else Usage(),
                    latency_ms=self.elapsed_ms,
                    ttft_ms=self.ttft_ms,
                    status=status,
                    error_type=error[0] if error else None,
                    error_message=self.scrub(error[1]) if error else None,
                    stream=self.route.stream,
                )
                meta = {
                    "branch_id": self.wire.branch_id,
                    "run_id": self.wire.run_id,
                    "wire_call": self.call_id,
                }
                try:
                    await self.wire.store.append(
                        self.stream, [new_event(called, meta=meta)], expected_version=self.seq or NO_STREAM
                    )
                except Exception as exc:  # the run goes on; recover closes the call
                    _log.warning("wire call %s: closing it failed: %r", self.stream, exc)


@dataclass
class RunWire:
    """The recorder of one run: every call the CLI makes upstream, in order."""

    store: EventStore
    branch_id: str
    run_id: str
    calls: list[RunWireCall] = field(default_factory=list)
    _results: set[tuple[str, bytes]] = field(default_factory=set)

    async def open_call(
        self, route: Route, body: dict[str, Any], name: str | None, scrub: Scrubber
    ) -> RecordedCall:
        """A new call: nothing is written until its first stream event (or its end)."""
        del name  # the run's branch is the only one
        params = scrub(request_params(body))
        call = RunWireCall(
            wire=self,
            route=route,
            call_id=str(uuid7()),
            stream=wire_stream(self.run_id, len(self.calls) + 1),
            fingerprint=fingerprint(route, scrub(body)),
            params=params if isinstance(params, dict) else {},
            tools=tool_names(route.codec, body),
            scrub=scrub,
        )
        self.calls.append(call)
        results = self._new_results(route, body)
        if results:
            await call.request_results(results)
        return call

    def _new_results(self, route: Route, body: dict[str, Any]) -> list[tuple[str, Any]]:
        """The tool results this request sends upstream for the first time in the run.

        Those after the conversation's last user turn (older ones belong to earlier runs of
        the session), less those an earlier call of this run sent.
        """
        turns = conversation(route.codec, body)
        last_user = max((i for i, t in enumerate(turns) if t.role == "user"), default=-1)
        out = []
        for turn in turns[last_user + 1 :]:
            for key, output in turn.results:
                seen = (key, orjson.dumps(plain_json(output), option=orjson.OPT_SORT_KEYS))
                if seen not in self._results:
                    self._results.add(seen)
                    out.append((key, output))
        return out

    @property
    def streams(self) -> list[str]:
        """The chunk streams of the calls, in order."""
        return [call.stream for call in self.calls]

    async def close(self) -> None:
        """Close every call still open (the run ended before the CLI's call did)."""
        for call in self.calls:
            if not call.closed:
                await call.fail(
                    "RunEnded", "the run ended before the upstream call did", {}, reason="cancelled"
                )

    def last_partial(self) -> tuple[str, str] | None:
        """``(stream, text)`` of the last call that did not end with its answer but had text.

        The last such call, not the last call: a CLI's side calls (a title, a topic check)
        may end after the conversation's own call was cut.
        """
        cut = [call for call in self.calls if call.status != "ok" and call.text]
        if not cut:
            return None
        return cut[-1].stream, "".join(cut[-1].text)


@asynccontextmanager
async def recording_wire(
    store: EventStore,
    branch_id: str,
    run_id: str,
    target: WireTarget,
) -> AsyncIterator[tuple[RunWire, str]]:
    """Serve the recorder for one run; yield it and its base URL (``target.options`` uses it).

    The server is a task of this context's task group: leaving the context stops it, and the
    calls still open are closed as cancelled.
    """
    wire = RunWire(store, branch_id, run_id)
    config = ProxyConfig(upstreams={**DEFAULT_UPSTREAMS, target.api: target.upstream})
    app = ProxyApp(config, wire)
    error: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            server = await serve_loopback(app, tg)
            try:
                yield wire, server.base_url
            except BaseException as exc:
                # The run's own error leaves as it came, not wrapped in the server's task
                # group (an ExceptionGroup would hide a CLIError from its handlers).
                error = exc
            finally:
                tg.cancel_scope.cancel()
        if error is not None:
            raise error
    finally:
        with anyio.CancelScope(shield=True):
            await wire.close()
            await app.aclose()


# ----------------------------------------------------------------------------------- recovery


@dataclass(frozen=True, slots=True)
class WireRecord:
    """One recorded wire call, read back: its stream, its text, and how it ended (None: open)."""

    stream: str
    text: str
    chunks: int
    status: str | None


async def read_wire_calls(store: EventStore, run_id: str) -> list[WireRecord]:
    """The wire calls of run ``run_id``, in order."""
    prefix = f"run-{run_id}-wire-"
    found = []
    for stream, _version in await store.list_streams(prefix):
        tail = stream.removeprefix(prefix)
        if re.fullmatch(r"[0-9]+", tail):
            found.append((int(tail), stream))
    out = []
    for _, stream in sorted(found):
        texts: list[str] = []
        chunks = 0
        status: str | None = None
        async for event in store.read_stream(stream):
            if event.type == "model.called":
                data = event.data
                status = (
                    "ok"
                    if data.get("status") == "ok"
                    else str((data.get("params") or {}).get("_upstream", {}).get("reason") or "error")
                )
                continue
            chunks += 1
            if event.data.get("type") == "text" and isinstance(event.data.get("content"), str):
                texts.append(event.data["content"])
        out.append(WireRecord(stream, "".join(texts), chunks, status))
    return out


async def close_open_wire_calls(store: EventStore, run_id: str, records: Sequence[WireRecord]) -> int:
    """Close the wire calls a crash left open (``model.called``, status error); how many."""
    closed = 0
    for record in records:
        if record.status is not None:
            continue
        called = ModelCalled(
            call_id=str(uuid7()),
            provider="wire",
            model="",
            endpoint="wire",
            verb=VERB,
            run_id=run_id,
            params={"_upstream": {"reason": "crashed"}, "wire_stream": record.stream},
            fingerprint="",
            usage=Usage(),
            latency_ms=0.0,
            status="error",
            error_type="Crashed",
            error_message="the process recording the call ended before the call did (closed by recover)",
            stream=True,
        )
        meta = {"run_id": run_id}
        await store.append(record.stream, [new_event(called, meta=meta)], expected_version=record.chunks)
        closed += 1
    return closed


def last_cut(records: Sequence[WireRecord]) -> WireRecord | None:
    """The last wire call that did not end with its answer and had text (see ``last_partial``)."""
    cut = [record for record in records if record.status != "ok" and record.text]
    return cut[-1] if cut else None


def wire_remainder(printed: str, wire_text: str) -> str:
    """What of ``wire_text`` (the answer as it crossed the wire) the CLI never printed.

    ``printed`` is the run's recorded text; the part of ``wire_text`` that continues its end
    is left out (a CLI that streams its deltas printed the start of the same answer).
    """
    if not wire_text or wire_text in printed:
        return ""
    for k in range(len(wire_text), 0, -1):
        if printed.endswith(wire_text[:k]):
            return wire_text[k:]
    return wire_text


def wire_message(
    text: str, *, stream: str, run_id: str, branch_id: str, user: str | None, whole: str
) -> AssistantResponse:
    """The ``AssistantResponse`` holding text restored from the wire (``source: "wire"``)."""
    metadata: dict[str, Any] = {
        "run_id": run_id,
        "source": "wire",
        "wire_stream": stream,
        "interrupted": True,
    }
    if text != whole:
        metadata["wire_continues"] = True  # the CLI printed the start of this answer
    return AssistantResponse.create(text, sender=branch_id, recipient=user, metadata=metadata)
