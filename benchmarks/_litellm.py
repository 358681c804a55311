"""The LiteLLM proxy as a peer of ``turnlog proxy``: found, configured and started on loopback.

LiteLLM's pins clash with the dev extra (it wants openai<3; dev installs openai 3), so it lives in a venv of its own under the cache
directory (``.ci/run`` installs it there with ``pip install 'litellm[proxy]==1.106.12'``);
``TURNLOG_LITELLM`` names its
``litellm`` executable, else ``~/.cache/turnlog/litellm-VERSION/bin/litellm`` is used when it
exists. It runs offline: the master key comes from ``LITELLM_MASTER_KEY`` and the model cost
map from the copy inside the package (``LITELLM_LOCAL_MODEL_COST_MAP``).

Every model it serves is an Anthropic model on the given upstream (the loopback fake), so
clients reach it with the Anthropic SDK (``/v1/messages``) or the OpenAI SDK
(``/v1/chat/completions``, which LiteLLM translates to Anthropic Messages).
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx

__all__ = ["LITELLM_VERSION", "MASTER_KEY", "MODEL", "RETRY_BACKOFF_OFF", "find_litellm", "running_litellm"]

LITELLM_VERSION = "1.106.12"
#: The key clients send to the LiteLLM proxy (it is its master key; offline, loopback only).
MASTER_KEY = "sk-turnlog-litellm-0123456789"
#: The model name clients ask for; LiteLLM maps it to ``anthropic/MODEL`` on the upstream.
MODEL = "claude-sonnet-4-5"
#: LiteLLM's retry back-off set to nothing (its constants read these variables): a failing
#: upstream is still tried 1 + ``num_retries`` (2) times, without the 0.5 s * 2^n + up to
#: 0.75 s of jitter between the tries (about 2.5 s per failed request).
RETRY_BACKOFF_OFF = {"INITIAL_RETRY_DELAY": "0", "JITTER": "0"}


def find_litellm() -> Path | None:
    """The ``litellm`` executable of the LiteLLM venv, or None when it is not installed."""
    named = os.environ.get("TURNLOG_LITELLM")
    if named:
        return Path(named)
    cache = Path(os.environ.get("TURNLOG_CACHE") or Path.home() / ".cache" / "turnlog")
    found = cache / f"litellm-{LITELLM_VERSION}" / "bin" / "litellm"
    return found if found.exists() else None


def _config(upstream: str, upstream_key: str) -> str:
    return (
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: anthropic/{MODEL}\n"
        f"      api_base: {upstream}\n"
        f"      api_key: {upstream_key}\n"
        "litellm_settings:\n"
        "  drop_params: true\n"
        "  telemetry: false\n"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def running_litellm(
    executable: Path,
    upstream: str,
    workdir: Path,
    *,
    upstream_key: str = "sk-upstream-0123456789",
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[str]:
    """The LiteLLM proxy in front of ``upstream``, yielding its base URL once it answers.

    It starts slowly (some seconds of imports), hence the generous wait. ``env`` adds
    variables of its process (e.g. ``RETRY_BACKOFF_OFF``: its retries without their waits).
    """
    config = workdir / "litellm.yaml"
    config.write_text(_config(upstream, upstream_key))
    port = _free_port()
    env = {
        **os.environ,
        "LITELLM_MASTER_KEY": MASTER_KEY,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
        "NO_DOCS": "True",
        **(env or {}),
    }
    argv = [str(executable), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    log = (workdir / "litellm.log").open("wb")
    process = await anyio.open_process(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            with anyio.fail_after(180):
                while True:
                    if process.returncode is not None:
                        text = (workdir / "litellm.log").read_text(errors="replace")[-2000:]
                        raise RuntimeError(f"the LiteLLM proxy exited with {process.returncode}: {text}")
                    try:
                        if (await client.get(f"{base}/health/liveliness")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    await anyio.sleep(0.2)  # a process starting up announces nothing to await
        yield base
    finally:
        if process.returncode is None:
            process.terminate()
        with anyio.move_on_after(20, shield=True) as scope:
            await process.wait()
        if scope.cancelled_caught:
            process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()
        await process.aclose()
        log.close()
