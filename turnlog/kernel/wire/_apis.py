"""What the recording proxy knows of each LLM API: its paths, its conversation, its error shape.

Pure functions, no I/O. ``route`` tells a recorded model call (OpenAI Chat Completions and
Responses, Anthropic Messages, Gemini ``generateContent`` / ``streamGenerateContent``) from
everything else, which passes through unrecorded. Two subscription backends speak these APIs
under another path: the ChatGPT backend of Codex signed in with ChatGPT
(``/backend-api/codex/responses``, the Responses API) and Google's Code Assist of Gemini CLI
signed in with Google (``/v1internal:streamGenerateContent``, the Gemini API wrapped in an
envelope, ``_code_assist``); Gemini on Vertex AI is the Gemini API under a publisher model
path. ``conversation`` turns a request body into the provider-neutral turns the threading rule
compares (``Turn``), ``answer_turn`` does the same for an answer, ``error_body`` writes an error in the API's own shape, and ``fingerprint`` is
the digest replay looks calls up by.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from turnlog.kernel.models import ModelResponse
from turnlog.kernel.models._codec import Codec
from turnlog.kernel.models._codec_anthropic import AnthropicCodec
from turnlog.kernel.models._codec_gemini import GeminiCodec
from turnlog.kernel.models._codec_openai import ChatCompletionsCodec
from turnlog.kernel.models._codec_responses import ResponsesCodec

from ._code_assist import CodeAssistCodec, unwrap_request

__all__ = [
    "DEFAULT_UPSTREAMS",
    "Api",
    "Route",
    "Turn",
    "answer_turn",
    "conversation",
    "error_body",
    "fingerprint",
    "request_params",
    "route",
    "tool_names",
]

Api = Literal["openai", "anthropic", "gemini", "chatgpt", "code_assist"]

#: Where each API goes unless ``--upstream`` names another host.
DEFAULT_UPSTREAMS: dict[Api, str] = {
    "openai": "https://api.openai.com",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
    # Codex signed in with ChatGPT: the Responses API under /backend-api/codex
    "chatgpt": "https://chatgpt.com",
    # Gemini CLI signed in with Google: Code Assist (CODE_ASSIST_ENDPOINT)
    "code_assist": "https://cloudcode-pa.googleapis.com",
}

_GEMINI = re.compile(r"^/(v1|v1beta|v1alpha)/models/([^/:]+):(generateContent|streamGenerateContent)$")
#: Gemini on Vertex AI: the same body and answer under a publisher model path (a project's,
#: or without one for an express-mode key).
_VERTEX = re.compile(
    r"^/(v1|v1beta1)/(?:projects/[^/]+/locations/[^/]+/)?publishers/google/models/([^/:]+)"
    r":(generateContent|streamGenerateContent)$"
)
#: Code Assist: ``/v1internal:streamGenerateContent`` (the version can be changed by the CLI).
_CODE_ASSIST = re.compile(r"^/v1[a-z0-9]*:(generateContent|streamGenerateContent)$")
#: The ChatGPT backend's Responses API (Codex signed in with a ChatGPT account).
CHATGPT_RESPONSES = "/backend-api/codex/responses"
_CODECS: dict[str, Codec] = {
    "chat_completions": ChatCompletionsCodec(),
    "responses": ResponsesCodec(),
    "anthropic_messages": AnthropicCodec(),
    "gemini": GeminiCodec(),
    "code_assist": CodeAssistCodec(),
}
#: Body keys that hold the conversation or the tools, not parameters.
_NOT_PARAMS = frozenset(
    {"messages", "system", "input", "instructions", "contents", "systemInstruction", "tools", "model"}
)


@dataclass(frozen=True, slots=True)
class Route:
    """A recorded model call: which API, which codec, which model, streamed or not.

    Attributes:
        api: The API family, which also picks the upstream (``openai`` covers Chat
            Completions and Responses; ``chatgpt`` is the Responses API of the ChatGPT
            backend; ``code_assist`` is Gemini in Code Assist's envelope).
        codec: The codec of the wire format (``chat_completions``, ``responses``,
            ``anthropic_messages``, ``gemini``, ``code_assist``).
        model: The model asked for (from the body, or from the path for Gemini).
        stream: The answer streams (SSE).
    """

    api: Api
    codec: str
    model: str
    stream: bool

    @property
    def wire(self) -> Codec:
        """The codec instance."""
        return _CODECS[self.codec]


def route(method: str, path: str, query: str, body: Any) -> Route | None:
    """The ``Route`` of a model call, or None for anything that passes through unrecorded."""
    if method != "POST" or not isinstance(body, dict):
        return None
    bare = path.rstrip("/")
    model = str(body.get("model") or "")
    stream = body.get("stream") is True
    if bare == CHATGPT_RESPONSES:
        return Route("chatgpt", "responses", model, stream)
    assist = _CODE_ASSIST.match(bare)
    if assist is not None:
        return Route("code_assist", "code_assist", model, assist.group(1) == "streamGenerateContent")
    if bare.endswith("/chat/completions"):
        return Route("openai", "chat_completions", model, stream)
    if bare.endswith("/responses") and bare.startswith("/v1"):
        return Route("openai", "responses", model, stream)
    if bare == "/v1/messages":
        return Route("anthropic", "anthropic_messages", model, stream)
    found = _GEMINI.match(bare) or _VERTEX.match(bare)
    if found is not None:
        streamed = found.group(3) == "streamGenerateContent"
        return Route("gemini", "gemini", found.group(2), streamed)
    return None


# ------------------------------------------------------------------------------- conversation


@dataclass(frozen=True, slots=True)
class Turn:
    """One provider-neutral turn of a conversation, as the threading rule compares it.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool`` (tool results).
        text: The text of the turn (thinking and other non-text parts left out), stripped.
        calls: ``(id, name, arguments)`` of the tool calls of an assistant turn.
        results: ``(id or name, output)`` of the tool results of a tool turn.
    """

    role: str
    text: str = ""
    calls: tuple[tuple[str, str, Any], ...] = ()
    results: tuple[tuple[str, Any], ...] = field(default=())

    @property
    def digest(self) -> str:
        """What two turns must share to be the same turn (call ids are left out: Gemini has none)."""
        shape = {
            "role": self.role,
            "text": self.text,
            "calls": [[name, args] for _, name, args in self.calls],
            "results": [_plain(output) for _, output in self.results],
        }
        return hashlib.sha256(orjson.dumps(shape, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


def _plain(value: Any) -> Any:
    # A tool result goes out as a string on one API and as blocks on another; compare text.
    if isinstance(value, list):
        return "".join(_plain(v) for v in value)
    if isinstance(value, dict) and value.get("type") == "text":
        return str(value.get("text", ""))
    return value if isinstance(value, str) else orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _text(content: Any, kinds: tuple[str, ...] = ("text", "input_text", "output_text")) -> str:
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") in kinds
        ).strip()
    return ""


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return orjson.loads(raw) if raw.strip() else {}
        except orjson.JSONDecodeError:
            return raw
    return raw if raw is not None else {}


def _merge(turns: list[Turn]) -> list[Turn]:
    """Adjacent assistant turns, and adjacent tool turns, are one turn (APIs split them differently)."""
    out: list[Turn] = []
    for turn in turns:
        last = out[-1] if out else None
        if last is not None and last.role == turn.role and turn.role in ("assistant", "tool"):
            text = "\n".join(t for t in (last.text, turn.text) if t)
            out[-1] = Turn(last.role, text, last.calls + turn.calls, last.results + turn.results)
        elif turn.role != "assistant" or turn.text or turn.calls:
            out.append(turn)
    return out


def conversation(codec: str, body: dict[str, Any]) -> list[Turn]:
    """The turns of a request body (system first), in the order the API reads them."""
    reader = {
        "chat_completions": _chat_turns,
        "responses": _responses_turns,
        "anthropic_messages": _anthropic_turns,
        "gemini": _gemini_turns,
        "code_assist": _code_assist_turns,
    }[codec]
    return _merge(reader(body))


def _chat_turns(body: dict[str, Any]) -> list[Turn]:
    turns: list[Turn] = []
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role in ("system", "developer"):
            turns.append(Turn("system", _text(m.get("content"))))
        elif role == "tool":
            turns.append(Turn("tool", results=((str(m.get("tool_call_id") or ""), m.get("content")),)))
        elif role == "assistant":
            calls = tuple(
                (str(c.get("id") or ""), str((c.get("function") or {}).get("name")), _args_of(c))
                for c in m.get("tool_calls") or []
                if isinstance(c, dict)
            )
            turns.append(Turn("assistant", _text(m.get("content")), calls))
        else:
            turns.append(Turn("user", _text(m.get("content"))))
    return turns


def _args_of(call: dict[str, Any]) -> Any:
    return _arguments((call.get("function") or {}).get("arguments"))


def _responses_turns(body: dict[str, Any]) -> list[Turn]:
    turns: list[Turn] = []
    if body.get("instructions"):
        turns.append(Turn("system", _text(body["instructions"])))
    raw = body.get("input")
    items = [{"type": "message", "role": "user", "content": raw}] if isinstance(raw, str) else raw or []
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            role = "system" if role in ("system", "developer") else role
            turns.append(Turn(str(role), _text(item.get("content"))))
        elif kind == "function_call":
            call = (str(item.get("call_id") or ""), str(item.get("name")), _arguments(item.get("arguments")))
            turns.append(Turn("assistant", calls=(call,)))
        elif kind == "function_call_output":
            turns.append(Turn("tool", results=((str(item.get("call_id") or ""), item.get("output")),)))
    return turns


def _anthropic_turns(body: dict[str, Any]) -> list[Turn]:
    turns: list[Turn] = []
    if body.get("system"):
        turns.append(Turn("system", _text(body["system"])))
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        blocks = content if isinstance(content, list) else []
        if m.get("role") == "assistant":
            calls = tuple(
                (str(b.get("id") or ""), str(b.get("name")), b.get("input") or {})
                for b in blocks
                if isinstance(b, dict) and b.get("type") == "tool_use"
            )
            turns.append(Turn("assistant", _text(content), calls))
            continue
        results = tuple(
            (str(b.get("tool_use_id") or ""), b.get("content"))
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "tool_result"
        )
        if results:
            turns.append(Turn("tool", results=results))
        text = _text(content)
        if text or not results:
            turns.append(Turn("user", text))
    return turns


def _gemini_turns(body: dict[str, Any]) -> list[Turn]:
    turns: list[Turn] = []
    system = body.get("systemInstruction") or body.get("system_instruction")
    if isinstance(system, dict):
        turns.append(Turn("system", _parts_text(system.get("parts"))))
    for content in body.get("contents") or []:
        if not isinstance(content, dict):
            continue
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        if content.get("role") == "model":
            calls = tuple(
                (
                    str(p["functionCall"].get("id") or ""),
                    str(p["functionCall"].get("name")),
                    p["functionCall"].get("args") or {},
                )
                for p in parts
                if isinstance(p.get("functionCall"), dict)
            )
            turns.append(Turn("assistant", _parts_text(parts), calls))
            continue
        results = tuple(
            (
                str(p["functionResponse"].get("id") or p["functionResponse"].get("name")),
                p["functionResponse"].get("response"),
            )
            for p in parts
            if isinstance(p.get("functionResponse"), dict)
        )
        if results:
            turns.append(Turn("tool", results=results))
        text = _parts_text(parts)
        if text or not results:
            turns.append(Turn("user", text))
    return turns


def _code_assist_turns(body: dict[str, Any]) -> list[Turn]:
    return _gemini_turns(unwrap_request(body))


def _parts_text(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "".join(
        str(p["text"]) for p in parts if isinstance(p, dict) and "text" in p and not p.get("thought")
    ).strip()


def answer_turn(answer: ModelResponse) -> Turn:
    """The assistant turn of an answer, as the next request will carry it back."""
    calls = tuple((c.id, c.name, c.arguments) for c in answer.tool_calls)
    return Turn("assistant", answer.text.strip(), calls)


def request_params(body: dict[str, Any]) -> dict[str, Any]:
    """The request parameters of a body: everything but the conversation, the tools and the model.

    Code Assist's envelope keeps its own fields (``project``, ``user_prompt_id``) beside the
    parameters of the request it wraps.
    """
    inner = body.get("request")
    if isinstance(inner, dict) and "contents" in inner:
        outer = {k: v for k, v in body.items() if k not in _NOT_PARAMS and k != "request"}
        return {**outer, **request_params(inner)}
    return {k: v for k, v in body.items() if k not in _NOT_PARAMS}


def tool_names(codec: str, body: dict[str, Any]) -> list[str]:
    """The names of the tools a request offers."""
    names: list[str] = []
    if codec == "code_assist":
        body = unwrap_request(body)
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if codec in ("gemini", "code_assist"):
            names += [
                str(d.get("name")) for d in tool.get("functionDeclarations") or [] if isinstance(d, dict)
            ]
        elif isinstance(tool.get("function"), dict):
            names.append(str(tool["function"].get("name")))
        elif tool.get("name"):
            names.append(str(tool["name"]))
    return names


def fingerprint(route: Route, body: dict[str, Any]) -> str:
    """SHA-256 hex of the normalized request: API, model, stream and the body in canonical JSON."""
    shape = {"codec": route.codec, "model": route.model, "stream": route.stream, "body": body}
    return hashlib.sha256(orjson.dumps(shape, option=orjson.OPT_SORT_KEYS)).hexdigest()


# ------------------------------------------------------------------------------------- errors


def error_body(api: Api, status: int, message: str, kind: str = "api_error") -> bytes:
    """An error answer in the API's own shape (what its SDK parses into its error class)."""
    if api == "anthropic":
        shape: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    elif api in ("gemini", "code_assist"):
        statuses = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 502: "UNAVAILABLE", 503: "UNAVAILABLE"}
        shape = {"error": {"code": status, "message": message, "status": statuses.get(status, "INTERNAL")}}
    else:
        shape = {"error": {"message": message, "type": kind, "param": None, "code": kind}}
    return orjson.dumps(shape)
