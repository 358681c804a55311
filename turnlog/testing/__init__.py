"""turnlog.testing: what a user imports to test their own agent without a provider.

- Test models (``ChatModel``s that call no provider): ``ScriptedModel`` answers from a script
  and records each call; ``FunctionModel`` lets a function answer; ``RecordedModel`` (the
  kernel's, also used by ``execute_replay``) serves a store's recorded answers.
- Loopback fake providers that speak the real wire: ``FakeOpenAIServer`` (Chat Completions)
  and ``FakeUpstreamServer`` (Anthropic Messages, OpenAI Responses and Gemini in one server;
  ``UpstreamThread`` runs it in a thread of its own for code that is not async).
- Fake agent CLIs (Claude Code, Codex, Gemini) as real child processes:
  ``fake_cli_command("claude")`` is the command line to put in ``TURNLOG_CLAUDE_BIN``; also
  ``python -m turnlog.testing._fake_cli`` and ``turnlog fake-cli``.

In the layer order this package sits above the kernel: it imports the kernel, projections and
eventstore; the command line (``turnlog.tools``) may import it; nothing below does. Each name
is loaded on first use, so a fake CLI child process starts without the kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._errors import ScriptError, TurnlogError, UsageError

if TYPE_CHECKING:
    from turnlog.kernel import RecordedCall, RecordedModel

    from ._cli import fake_cli_command
    from ._fake_openai import FakeOpenAIServer
    from ._fake_upstream import FakeUpstreamServer, UpstreamThread
    from ._models import FunctionModel, ScriptedModel, estimate_tokens, request_text, usage_of

__all__ = [
    "FakeOpenAIServer",
    "FakeUpstreamServer",
    "FunctionModel",
    "RecordedCall",
    "RecordedModel",
    "ScriptError",
    "ScriptedModel",
    "TurnlogError",
    "UpstreamThread",
    "UsageError",
    "estimate_tokens",
    "fake_cli_command",
    "request_text",
    "usage_of",
]

_LAZY = {
    "FakeOpenAIServer": "turnlog.testing._fake_openai",
    "FakeUpstreamServer": "turnlog.testing._fake_upstream",
    "UpstreamThread": "turnlog.testing._fake_upstream",
    "FunctionModel": "turnlog.testing._models",
    "ScriptedModel": "turnlog.testing._models",
    "estimate_tokens": "turnlog.testing._models",
    "request_text": "turnlog.testing._models",
    "usage_of": "turnlog.testing._models",
    "RecordedCall": "turnlog.kernel",
    "RecordedModel": "turnlog.kernel",
    "fake_cli_command": "turnlog.testing._cli",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
