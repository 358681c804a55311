"""turnlog.tools: the turnlog command, loopback fake providers, demo and benchmarks.

``FakeOpenAIServer`` (the loopback Chat Completions server, for tests and examples) is
importable from here; it is loaded on first use, so the command starts without it.
"""

from typing import Any

__all__ = ["FakeOpenAIServer"]


def __getattr__(name: str) -> Any:
    if name == "FakeOpenAIServer":
        from turnlog.tools._fake_openai import FakeOpenAIServer

        return FakeOpenAIServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
