"""Prompt assembly: the new Instruction and the chat messages of one request.

The assembly is a function of the branch's messages, done the same way for every verb:

- history is walked in progression order; System and ActionRequest messages are not sent;
- an assistant turn that called tools natively (its ``metadata["tool_calls"]`` have ids) is
  sent as Chat Completions defines it: ``{"role": "assistant", "content": <text or null>,
  "tool_calls": [...]}`` followed by one ``{"role": "tool", "tool_call_id": ...}`` message
  per call; a call with no recorded result is answered with a "not run" tool message so
  that every call id has its answer, as the API requires; what the provider signed goes
  back unchanged (the turn's ``thinking_blocks``, a call's Gemini ``thought_signature`` in
  ``extra_content.google``), and a failed tool's message says ``is_error``: the codecs of the
  other APIs translate these, the Chat Completions codec leaves ``thinking_blocks`` and
  ``is_error`` out;
- other ActionResponses (tools run by ``act`` without a native call) are folded into the
  context of the next Instruction (or of the new one) as ``{"function", "arguments",
  "output"}`` items;
- past Instructions are sent without their tool schemas and response schema;
- consecutive assistant texts are joined with a blank line;
- the system text (and the text of context providers) is put in front of the guidance of
  the first Instruction, so no ``system`` role message is sent; the first message sent
  must therefore be an Instruction.

Past messages never change once recorded, so the rendered history of a branch is kept and
extended message by message: the cost of a turn does not grow with the rendering work of
the whole history.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel

from turnlog.kernel._called import sent_message_ids
from turnlog.kernel._errors import UsageError
from turnlog.kernel._params import ChatParam
from turnlog.kernel.operations._fields import is_field_spec, spec_model
from turnlog.projections import (
    ActionRequest,
    ActionResponse,
    AnyMessage,
    AssistantResponse,
    Instruction,
    System,
    render_yaml,
)

if TYPE_CHECKING:
    from turnlog.kernel._port import BranchPort

__all__ = ["Prompt", "assemble", "build_instruction", "response_schema"]

_FIRST_ERROR = "First message in progression must be an Instruction or System"


def response_schema(fmt: Any) -> tuple[dict[str, Any] | None, str | None, dict[str, Any] | None]:
    """Describe a requested response format.

    Returns:
        ``(schema, name, wire)``: the JSON schema rendered into the instruction, the name
        recorded in ``model.called``, and the ``response_format`` object to send on the wire
        (only when the caller gave an OpenAI ``response_format`` dict with a ``type``).
    """
    if fmt is None:
        return None, None, None
    if isinstance(fmt, type) and issubclass(fmt, BaseModel):
        return fmt.model_json_schema(), fmt.__name__, None
    if isinstance(fmt, BaseModel):
        return type(fmt).model_json_schema(), type(fmt).__name__, None
    if is_field_spec(fmt):  # {"name": str, "age": int}: the schema of the fields' model
        return spec_model(fmt).model_json_schema(), "dict", None
    if isinstance(fmt, Mapping):
        _check_json(fmt)
        if "type" in fmt and fmt.get("type") in ("json_schema", "json_object", "text"):
            inner = fmt.get("json_schema") or {}
            name = inner.get("name") if isinstance(inner, Mapping) else None
            schema = inner.get("schema") if isinstance(inner, Mapping) else None
            return (dict(schema) if schema else None), (name or str(fmt["type"])), dict(fmt)
        return dict(fmt), str(fmt.get("title") or "dict"), None
    if isinstance(fmt, list | tuple):
        return {str(name): "..." for name in fmt}, "fields", None
    raise UsageError(
        f"response_format must be a pydantic model, a dict or a list of fields, not {type(fmt).__name__}"
    )


def _check_json(fmt: Mapping[str, Any]) -> None:
    try:
        orjson.dumps(fmt)
    except TypeError as exc:
        raise UsageError(
            "a dict response format (or request_fields) must be JSON (an example or a JSON schema) "
            f"or map every field name to a type ({{'name': str}}): {exc}"
        ) from exc


def _context_items(context: Any) -> list[Any]:
    if context is None:
        return []
    if isinstance(context, list | tuple):
        return list(context)
    return [context]


def build_instruction(branch: BranchPort, instruction: Any, param: ChatParam) -> Instruction:
    """The Instruction a verb sends: ``instruction`` as given, or one built from the param."""
    if isinstance(instruction, Instruction):
        return instruction
    schema, _, _ = response_schema(param.response_format)
    return Instruction.create(
        instruction,
        guidance=param.guidance,
        context=_context_items(param.context),
        plain_content=param.plain_content,
        tool_schemas=[dict(t) for t in param.tool_schemas],
        response_format=schema,
        images=list(param.images),
        image_detail=param.image_detail if param.images else None,
        sender=param.sender or branch.state.user or "user",
        recipient=param.recipient or branch.id,
    )


def _action_item(response: ActionResponse) -> dict[str, Any]:
    c = response.content
    return {"function": c.function, "arguments": c.arguments, "output": c.output}


def _with_actions(ins: Instruction, actions: Sequence[ActionResponse], *, history: bool) -> Instruction:
    """``ins`` with the action outputs added to its context (and, for history, no schemas)."""
    content = ins.content
    update: dict[str, Any] = {}
    if actions:
        items = list(content.context)
        for action in actions:
            item = _action_item(action)
            if item not in items:
                items.append(item)
        update["context"] = items
    if history and (content.tool_schemas or content.response_format is not None):
        update["tool_schemas"] = []
        update["response_format"] = None
    if not update:
        return ins
    return ins.model_copy(update={"content": content.model_copy(update=update)})


def _fold_system(ins: Instruction, prefix: Sequence[str]) -> dict[str, Any]:
    """The chat message of ``ins`` with the system (and provider) text before its guidance."""
    guidance = ins.content.guidance
    parts = list(prefix)
    if guidance is not None and guidance != "":
        parts.append(guidance if isinstance(guidance, str) else render_yaml(guidance))
    folded = ins.model_copy(
        update={"content": ins.content.model_copy(update={"guidance": "\n\n".join(parts)})}
    )
    return folded.to_chat()


_NOT_RUN = "The tool call {name} was not run: no result was recorded."


def _native_calls(message: AssistantResponse) -> list[dict[str, Any]]:
    """The Chat Completions ``tool_calls`` of an assistant turn (calls without an id are left out)."""
    out: list[dict[str, Any]] = []
    calls = message.metadata.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if not isinstance(call, Mapping) or not call.get("id") or not call.get("name"):
            continue
        arguments = call.get("arguments")
        text = arguments if isinstance(arguments, str) else orjson.dumps(arguments or {}).decode()
        chat: dict[str, Any] = {
            "id": str(call["id"]),
            "type": "function",
            "function": {"name": str(call["name"]), "arguments": text},
        }
        if isinstance(call.get("signature"), str):
            # Gemini's thoughtSignature, where Google's OpenAI-compatible API carries it.
            chat["extra_content"] = {"google": {"thought_signature": call["signature"]}}
        out.append(chat)
    return out


def _tool_message(call_id: str, response: ActionResponse) -> dict[str, Any]:
    """The ``tool`` message answering ``call_id`` with a recorded result (its error when it failed)."""
    c = response.content
    if c.error is not None:
        content = orjson.dumps({"error": c.error}).decode()
    elif isinstance(c.output, str):
        content = c.output
    else:
        content = orjson.dumps(c.output).decode()
    message: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "content": content}
    if c.error is not None:
        message["is_error"] = True  # Anthropic's tool_result says so; Chat Completions bodies leave it out
    return message


@dataclass(slots=True)
class _History:
    """The rendered history of a branch, extended as messages are appended."""

    ids: list[str] = field(default_factory=list)
    out: list[dict[str, Any]] = field(default_factory=list)
    out_ids: list[str] = field(default_factory=list)
    first: Instruction | None = None
    first_is_instruction: bool = True
    pending: list[ActionResponse] = field(default_factory=list)
    folded: dict[str, dict[str, Any]] = field(default_factory=dict)
    open_calls: dict[str, str] = field(default_factory=dict)
    """Call ids of the last native tool-calling turn not answered yet -> function name."""
    call_of: dict[str, str] = field(default_factory=dict)
    """ActionRequest id -> the native call id it carries out."""
    sent: tuple[Instruction, dict[str, Any]] | None = None
    """The instruction last sent as the new turn and its chat message, when the history renders it alike."""

    def extends(self, messages: Sequence[AnyMessage]) -> bool:
        n = len(self.ids)
        if n > len(messages):
            return False
        return n == 0 or (messages[0].id == self.ids[0] and messages[n - 1].id == self.ids[-1])

    def feed(self, message: AnyMessage) -> None:
        self.ids.append(message.id)
        if isinstance(message, System):
            return
        if isinstance(message, ActionRequest):
            call_id = message.content.call_id
            if call_id is not None and call_id in self.open_calls:
                self.call_of[message.id] = call_id
            return
        if isinstance(message, ActionResponse):
            call_id = self.call_of.pop(message.content.action_request_id or "", None)
            if call_id is not None and self.open_calls.pop(call_id, None) is not None:
                self._push(_tool_message(call_id, message), message.id, None)
            else:
                self.pending.append(message)
            return
        self._close()
        if isinstance(message, AssistantResponse):
            calls = _native_calls(message)
            last = self.out[-1] if self.out else None
            if calls:
                chat: dict[str, Any] = {
                    "role": "assistant",
                    "content": message.rendered or None,
                    "tool_calls": calls,
                }
                thinking = message.metadata.get("thinking_blocks")
                if isinstance(thinking, list) and thinking:
                    chat["thinking_blocks"] = thinking
                self._push(chat, message.id, None)
                self.open_calls = {c["id"]: c["function"]["name"] for c in calls}
                self.call_of = {}
            elif last is not None and last["role"] == "assistant" and "tool_calls" not in last:
                text = message.rendered
                self.out[-1] = {"role": "assistant", "content": f"{last['content']}\n\n{text}"}
            else:
                self._push(message.to_chat(), message.id, None)
            return
        if isinstance(message, Instruction):
            ins = _with_actions(message, self.pending, history=True)
            self.pending = []
            sent, self.sent = self.sent, None
            # the very instruction sent last, rendered alike: its chat message as sent (the
            # same object in both requests, which the fingerprint memo tests by identity)
            chat = sent[1] if sent is not None and sent[0] is message and ins is message else ins.to_chat()
            self._push(chat, message.id, ins)
            return
        self._push(message.to_chat(), message.id, None)  # pragma: no cover - the union is closed

    def closing(self) -> list[dict[str, Any]]:
        """The tool messages that answer the open native calls which have no recorded result."""
        return [
            {"role": "tool", "tool_call_id": call_id, "content": _NOT_RUN.format(name=name)}
            for call_id, name in self.open_calls.items()
        ]

    def _close(self) -> None:
        for chat in self.closing():
            self.out.append(chat)
            self.out_ids.append(self.ids[-1])
        self.open_calls = {}
        self.call_of = {}

    def _push(self, chat: dict[str, Any], message_id: str, ins: Instruction | None) -> None:
        if not self.out:
            self.first = ins
            self.first_is_instruction = ins is not None
        self.out.append(chat)
        self.out_ids.append(message_id)


@dataclass(frozen=True, slots=True)
class Prompt:
    """The assembled request messages.

    Attributes:
        messages: Chat messages in wire form.
        message_ids: Ids of the recorded messages they were built from, plus the new one.
    """

    messages: list[dict[str, Any]]
    message_ids: list[str]


def _history_for(cache: dict[Any, Any], messages: Sequence[AnyMessage], *, cached: bool) -> _History:
    history = cache.get("prompt") if cached else None
    if history is None or not history.extends(messages):
        history = _History()
    for message in messages[len(history.ids) :]:
        history.feed(message)
    if cached:
        cache["prompt"] = history
    return history


def assemble(
    cache: dict[Any, Any],
    messages: Sequence[AnyMessage],
    system: System | None,
    ins: Instruction,
    blocks: Sequence[str] = (),
    *,
    cached: bool = True,
) -> Prompt:
    """Assemble the chat messages for ``ins`` after ``messages`` (the history).

    Args:
        cache: Where the rendered history of this branch is kept between turns.
        messages: The history in progression order.
        system: The system message, folded into the first instruction.
        ins: The new instruction.
        blocks: Texts of context providers, put after the system text.
        cached: False for an explicit progression (never cached).

    Raises:
        ValueError: the first message to send is not an Instruction.
    """
    history = _history_for(cache, messages, cached=cached)
    new = _with_actions(ins, history.pending, history=False)
    out = [*history.out, *history.closing()]
    prefix = [system.rendered] if system is not None else []
    prefix.extend(blocks)
    if not out:
        out.append(_fold_system(new, prefix) if prefix else new.to_chat())
    else:
        if not history.first_is_instruction:
            raise UsageError(_FIRST_ERROR)
        chat = new.to_chat()
        out.append(chat)
        # the history renders this instruction alike when nothing is added to it or taken out
        history.sent = (ins, chat) if new is ins else None
        if prefix:
            assert history.first is not None
            if blocks:
                out[0] = _fold_system(history.first, prefix)
            else:
                key = system.id if system is not None else ""
                folded = history.folded.get(key)
                if folded is None:
                    folded = history.folded[key] = _fold_system(history.first, prefix)
                out[0] = folded
    ids = [m.id for m in messages] if not cached else history.ids
    return Prompt(out, sent_message_ids(ids, system, ins.id))
