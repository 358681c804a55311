"""Shared test configuration: hermetic by default (no real provider can be reached)."""

from __future__ import annotations

import os

import pytest

# Real providers are blocked in tests: only loopback fakes are allowed.
os.environ.setdefault("TURNLOG_ALLOW_MODEL_REQUESTS", "0")
os.environ.pop("OPENAI_API_KEY", None)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
