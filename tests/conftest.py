"""Shared test configuration: hermetic by default (no real provider can be reached)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# Property tests assert behaviour, not speed: a 2-core CI machine under load must not fail
# one because an example took longer than Hypothesis' default 200 ms deadline.
settings.register_profile("turnlog", deadline=None)
settings.load_profile("turnlog")

# Real providers are blocked in tests: only loopback fakes are allowed.
os.environ.setdefault("TURNLOG_ALLOW_MODEL_REQUESTS", "0")
os.environ.pop("OPENAI_API_KEY", None)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
