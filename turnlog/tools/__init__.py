"""turnlog.tools: the turnlog command, loopback fake providers, demo and benchmarks.

The loopback fakes are importable from here, for tests and examples: ``FakeOpenAIServer``
(Chat Completions), ``FakeUpstreamServer`` (the Anthropic Messages, OpenAI Responses and
Gemini APIs in one server) and ``UpstreamThread`` (that server in a thread of its own, for
code that is not async). Each is loaded on first use, so the command starts without them.
"""

from typing import Any

from ._errors import ExportFailed, ScriptError, TurnlogError, UsageError, UserError

__all__ = [
    "ExportFailed",
    "FakeOpenAIServer",
    "FakeUpstreamServer",
    "ScriptError",
    "TurnlogError",
    "UpstreamThread",
    "UsageError",
    "UserError",
]

_LAZY = {
    "FakeOpenAIServer": "turnlog.tools._fake_openai",
    "FakeUpstreamServer": "turnlog.tools._fake_upstream",
    "UpstreamThread": "turnlog.tools._fake_upstream",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
