"""Shared test configuration: hermetic by default (no real provider can be reached)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# Property tests assert behaviour, not speed: a 2-core CI machine under load must not fail
# one because an example took longer than Hypothesis' default 200 ms deadline.
settings.register_profile("turnlog", deadline=None)
settings.load_profile("turnlog")

# Hundreds of tests start ``python -m turnlog ...`` in a child process. With
# PYTHONDONTWRITEBYTECODE set (some shells and sandboxes set it), every child compiled turnlog
# from source again: about 0.2 s of CPU each. Children (and this process) keep their bytecode in
# one cache outside the source tree instead, so the tree stays clean and each module is
# compiled once; CPython checks each cached file against its source as usual.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    _PYCACHE = Path(tempfile.gettempdir()) / f"turnlog-tests-pycache-{os.getuid()}"
    os.environ["PYTHONPYCACHEPREFIX"] = str(_PYCACHE)
    sys.pycache_prefix = str(_PYCACHE)
    sys.dont_write_bytecode = False

# Real providers are blocked in tests: only loopback fakes are allowed.
os.environ.setdefault("TURNLOG_ALLOW_MODEL_REQUESTS", "0")
os.environ.pop("OPENAI_API_KEY", None)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
