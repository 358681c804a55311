"""The prompt a CLI agent receives from ``run``.

A CLI agent keeps its own conversation (the provider session), so ``run`` sends it what a
person would type, not a rendering of the branch:

- **The prompt text** is the user's instruction as given (``plain_content`` when set; a
  non-string instruction as YAML).
- **Guidance** (the branch's system message, the instruction's ``guidance``, its
  ``context`` items and a requested response schema) goes to the CLI's own system-prompt
  option when it has one (Claude Code ``--append-system-prompt``, Codex
  ``-c developer_instructions=...``). Gemini CLI has none, so there it is a clearly delimited
  preamble before the instruction::

      <guidance>
      ...
      </guidance>

      the instruction

- **History** is flattened into the prompt only when there is no provider session to resume
  (a branch that has talked before without this CLI, or a resume that fell back to a new
  session). It precedes the instruction, one entry per message::

      <conversation-history>
      [user] the earlier instruction
      [assistant] the earlier answer
      [tool call shell] {"command": "ls"}
      [tool result shell] README.md
      </conversation-history>

      the instruction
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from turnlog.projections import (
    ActionRequest,
    ActionResponse,
    AnyMessage,
    AssistantResponse,
    Instruction,
    System,
    render_yaml,
)

__all__ = ["CLIPrompt", "cli_prompt", "instruction_text"]

_SCHEMA_HINT = "Answer with one JSON object that matches this JSON schema, and nothing else:"


@dataclass(frozen=True, slots=True)
class CLIPrompt:
    """What the CLI is given for one run.

    Attributes:
        text: The prompt argument.
        system: Text for the CLI's system-prompt option (None: nothing to add or no option).
        history: True when the branch history was flattened into ``text``.
    """

    text: str
    system: str | None
    history: bool


def _yaml_or_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return render_yaml(value).strip()


def instruction_text(ins: Instruction) -> str:
    """The user's request as typed: ``plain_content``, else the instruction (YAML if not a string)."""
    content = ins.content
    if content.plain_content is not None:
        return content.plain_content
    if content.instruction is None:
        return ""
    return _yaml_or_text(content.instruction)


def _guidance(system: System | None, ins: Instruction, extra: Sequence[str] = ()) -> str:
    content = ins.content
    parts: list[str] = []
    if system is not None and system.rendered:
        parts.append(str(system.rendered))
    parts += [p for p in extra if p]
    if content.guidance not in (None, ""):
        parts.append(_yaml_or_text(content.guidance))
    if content.context:
        parts.append("Context:\n" + render_yaml(list(content.context)).strip())
    if content.response_format:
        parts.append(f"{_SCHEMA_HINT}\n{orjson.dumps(content.response_format).decode()}")
    return "\n\n".join(parts)


def _short(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value, default=str).decode()


def _history_line(message: AnyMessage) -> str | None:
    if isinstance(message, Instruction):
        text = instruction_text(message)
        return f"[user] {text}" if text else None
    if isinstance(message, AssistantResponse):
        return f"[assistant] {message.response}" if message.response else None
    if isinstance(message, ActionRequest):
        c = message.content
        return f"[tool call {c.function}] {_short(c.arguments)}"
    if isinstance(message, ActionResponse):
        result = message.content
        if result.error:
            return f"[tool error {result.function}] {result.error}"
        return f"[tool result {result.function}] {_short(result.output)}"
    return None


def flatten_history(messages: Sequence[AnyMessage]) -> str:
    """The ``<conversation-history>`` block of ``messages`` ("" when there is nothing to show)."""
    lines = [line for line in (_history_line(m) for m in messages) if line]
    if not lines:
        return ""
    return "<conversation-history>\n" + "\n".join(lines) + "\n</conversation-history>"


def cli_prompt(
    messages: Sequence[AnyMessage],
    system: System | None,
    ins: Instruction,
    *,
    resume: str | None,
    system_option: str | None,
    extra_guidance: Sequence[str] = (),
) -> CLIPrompt:
    """The prompt for a run of ``ins`` (see the module docstring).

    Args:
        messages: The branch's messages before ``ins``.
        system: The branch's system message.
        ins: The new instruction.
        resume: The provider session to resume (None: the history is flattened in).
        system_option: The CLI's system-prompt option, if it has one.
        extra_guidance: More guidance text (context providers).
    """
    text = instruction_text(ins) or "(no instruction text)"
    guidance = _guidance(system, ins, extra_guidance)
    sections: list[str] = []
    history = "" if resume else flatten_history(messages)
    if history:
        sections.append(history)
    system_text: str | None = None
    if guidance and system_option:
        system_text = guidance
    elif guidance:
        sections.insert(0, f"<guidance>\n{guidance}\n</guidance>")
    sections.append(text)
    return CLIPrompt("\n\n".join(sections), system_text, bool(history))
