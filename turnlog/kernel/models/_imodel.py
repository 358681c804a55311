"""``iModel``: one handle for every provider, configured by name and stored without secrets.

``iModel("openai/gpt-4.1-mini")`` and ``iModel(provider="ollama", model="llama3.2")`` give an
OpenAI-compatible HTTP model; ``iModel("claude_code/sonnet")`` gives a CLI agent. The handle
knows its provider, model and default request parameters, merges those defaults into each
request, and round-trips through ``to_config()`` / ``iModel.from_config()`` (the JSON that
``branch.created`` records; API keys are never part of it and are re-read from the
environment or passed again when a branch is reopened).

Providers:

- ``openai``: api.openai.com, key from ``$OPENAI_API_KEY``.
- ``ollama``: ``http://127.0.0.1:11434/v1``, no key.
- ``anthropic``: the Messages API (``AnthropicModel``), key from ``$ANTHROPIC_API_KEY``.
- ``gemini_api`` (or ``google``): the Gemini API (``GeminiAPIModel``), key from
  ``$GEMINI_API_KEY`` or ``$GOOGLE_API_KEY`` (``gemini`` names the Gemini CLI agent).
- any other name with a ``base_url``: an OpenAI-compatible server; the key is optional and
  read from ``$<NAME>_API_KEY`` (e.g. ``$FAKE_API_KEY``) when not given.
- ``claude_code``, ``codex``, ``gemini``: CLI agents, resolved lazily from the provider table
  (``kernel/models/_claude_code.py`` and friends), driven through ``stream()``.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import httpx

from turnlog._errors import UsageError

from ._anthropic import ANTHROPIC_BASE_URL, AnthropicModel
from ._contract import BaseChatModel, ModelProfile, as_chat_model
from ._errors import ProviderError
from ._fingerprint import public_params, request_fingerprint
from ._gemini_api import GEMINI_BASE_URL, GeminiAPIModel
from ._http_model import HTTPChatModel
from ._openai import DEFAULT_TIMEOUT, OPENAI_BASE_URL, OpenAIChatModel
from ._retry import RetryPolicy
from ._secrets import scrub_url
from ._types import ChunkSink, ModelRequest, ModelResponse, StreamChunk

__all__ = ["API_PROVIDERS", "CLI_PROVIDERS", "iModel"]


@dataclass(frozen=True, slots=True)
class _APIProvider:
    base_url: str
    api_key_env: str | None
    require_api_key: bool
    transport: type[HTTPChatModel] = OpenAIChatModel


#: Known HTTP providers: default base URL, key variable, whether a key is required, transport.
API_PROVIDERS: Mapping[str, _APIProvider] = MappingProxyType(
    {
        "openai": _APIProvider(OPENAI_BASE_URL, "OPENAI_API_KEY", True),
        "ollama": _APIProvider("http://127.0.0.1:11434/v1", None, False),
        "anthropic": _APIProvider(ANTHROPIC_BASE_URL, "ANTHROPIC_API_KEY", True, AnthropicModel),
        # The Gemini API ("gemini" is the Gemini CLI agent); the key is $GEMINI_API_KEY or $GOOGLE_API_KEY.
        "gemini_api": _APIProvider(GEMINI_BASE_URL, "GEMINI_API_KEY", True, GeminiAPIModel),
        "google": _APIProvider(GEMINI_BASE_URL, "GEMINI_API_KEY", True, GeminiAPIModel),
    }
)

#: CLI agent providers: (module, class), imported when first used.
CLI_PROVIDERS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "claude_code": ("turnlog.kernel.models._claude_code", "ClaudeCodeModel"),
        "codex": ("turnlog.kernel.models._codex", "CodexModel"),
        "gemini": ("turnlog.kernel.models._gemini", "GeminiModel"),
    }
)

#: Parameters that choose how a verb calls the model, not what is sent (see ``stream_defaults``).
_STREAM_KEYS = ("stream", "stream_persist")

_CONFIG_KEYS = frozenset({"provider", "model", "base_url", "params", "timeout", "retry"})


def _normalize(provider: str) -> str:
    return provider.strip().lower().replace("-", "_")


def _split(provider: str | None, model: str | None) -> tuple[str, str | None]:
    if provider and "/" in provider:
        head, _, tail = provider.partition("/")
        if model and model != tail:
            raise UsageError(f"iModel: provider {provider!r} already names a model; got model={model!r} too")
        return _normalize(head), tail or None
    if provider:
        return _normalize(provider), model or None
    if model and "/" in model:
        head, _, tail = model.partition("/")
        return _normalize(head), tail or None
    return "openai", model or None


def _timeout_to_dict(timeout: httpx.Timeout) -> dict[str, float | None]:
    return {"connect": timeout.connect, "read": timeout.read, "write": timeout.write, "pool": timeout.pool}


def _load_cli_class(provider: str) -> type[Any]:
    module_name, class_name = CLI_PROVIDERS[provider]
    try:
        module = importlib.import_module(module_name)
        # Loaded by name so that importing iModel loads no CLI provider: an untyped boundary.
        cls: type[Any] = getattr(module, class_name)
        return cls
    except (ImportError, AttributeError) as exc:
        raise ProviderError(
            f"provider {provider!r} needs {module_name}.{class_name}, which is not available: {exc}",
            provider=provider,
        ) from exc


class iModel(BaseChatModel):
    """A model handle: provider, model, default parameters and the transport behind them.

    Args:
        provider: Provider name, or ``"provider/model"``.
        model: Model name, or ``"provider/model"`` when ``provider`` is not given.
        base_url: The server root (``.../v1``) for OpenAI-compatible providers.
        api_key: The API key (else read from the provider's environment variable when a
            request is made). Never stored, printed or recorded.
        timeout: HTTP timeouts (a float sets all four); default 600 s read, 5 s connect.
        retry: HTTP retry policy (default ``RetryPolicy()``).
        headers: Extra HTTP headers (never recorded).
        **params: Default request parameters (``temperature=0``, ``max_tokens=...``) for API
            providers; constructor options of the agent for CLI providers. For API providers
            ``stream=True`` makes verbs stream by default, and ``stream_persist=True`` buffers
            their chunks for ``recover`` (both are not sent as parameters).

    Example:
        ```python
        model = iModel("openai/gpt-4.1-mini", temperature=0)
        reply = await model.invoke(ModelRequest(messages=[{"role": "user", "content": "hi"}]))
        config = model.to_config()  # {"provider": "openai", "model": "gpt-4.1-mini", ...}
        same = iModel.from_config(config)
        ```
    """

    def __init__(
        self,
        provider: str | None = None,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: httpx.Timeout | float | None = None,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
        **params: Any,
    ) -> None:
        name, model_name = _split(provider, model)
        self.provider: str = name
        self._params = dict(params)
        self._base_url = base_url
        self._retry = retry
        self._timeout = (
            None
            if timeout is None
            else timeout
            if isinstance(timeout, httpx.Timeout)
            else httpx.Timeout(timeout)
        )
        self._backend: Any
        if name in CLI_PROVIDERS:
            if base_url is not None:
                raise UsageError(f"iModel: {name!r} is a CLI provider; base_url does not apply")
            cls = _load_cli_class(name)
            self._backend = cls(model=model_name, **params) if model_name else cls(**params)
            self.model: str = model_name or str(getattr(self._backend, "model", "") or "")
            return
        if not model_name:
            raise UsageError(f"iModel: provider {name!r} needs a model name (e.g. '{name}/<model>')")
        known = API_PROVIDERS.get(name)
        if known is None and base_url is None:
            raise UsageError(
                f"iModel: unknown provider {name!r}; known: "
                f"{', '.join(sorted([*API_PROVIDERS, *CLI_PROVIDERS]))}. "
                "Give base_url=... to use any OpenAI-compatible server under this name."
            )
        env = known.api_key_env if known else re.sub(r"\W", "_", name.upper()) + "_API_KEY"
        self.model = model_name
        transport = known.transport if known else OpenAIChatModel
        self._backend = transport(
            model_name,
            provider=name,
            base_url=base_url or (known.base_url if known else None),
            api_key=api_key,
            api_key_env=env,
            require_api_key=known.require_api_key if known else False,
            timeout=self._timeout or DEFAULT_TIMEOUT,
            retry=retry,
            headers=headers,
        )

    def __repr__(self) -> str:
        return f"iModel(provider={self.provider!r}, model={self.model!r})"

    @property
    def is_cli(self) -> bool:
        """True for CLI agent providers (driven with ``stream()``)."""
        return self.provider in CLI_PROVIDERS

    @property
    def endpoint(self) -> str:
        """``chat/completions`` for API providers, ``cli`` for CLI agents."""
        return "cli" if self.is_cli else str(self._backend.endpoint)

    @property
    def base_url(self) -> str | None:
        """The API root of an HTTP provider (None for CLI agents)."""
        return None if self.is_cli else self._backend.base_url

    @property
    def streams_chunks(self) -> bool:
        """True when ``invoke(request, on_chunk=...)`` hands a streamed call's deltas over."""
        return not self.is_cli and getattr(self._backend, "streams_chunks", False) is True

    @property
    def stream_defaults(self) -> dict[str, bool]:
        """The verbs' default ``stream`` / ``stream_persist`` for this model (False unless given)."""
        if self.is_cli:
            return {}
        return {key: bool(self._params[key]) for key in _STREAM_KEYS if key in self._params}

    @property
    def request_params(self) -> frozenset[str] | None:
        """The request parameters the backend takes (None: anything; see ``OpenAIChatModel``)."""
        declared = getattr(self._backend, "request_params", None)
        return declared if isinstance(declared, frozenset) else None

    @property
    def params(self) -> Mapping[str, Any]:
        """The default request parameters (read-only)."""
        return MappingProxyType(self._params)

    @property
    def profile(self) -> ModelProfile:
        """What the model behind this handle can do (``ModelProfile``), from its provider and parameters."""
        transport = type(self._backend).__name__
        if self.is_cli:
            behind = as_chat_model(self._backend).profile
            return ModelProfile(
                is_cli=True,
                endpoint="cli",
                default_params=self.params,
                system_prompt_option=behind.system_prompt_option,
                cwd=behind.cwd,
                transport=transport,
            )
        defaults = self.stream_defaults
        return ModelProfile(
            streams_chunks=self.streams_chunks,
            endpoint=self.endpoint,
            stream=defaults.get("stream", False),
            stream_persist=defaults.get("stream_persist", False),
            request_params=self.request_params,
            default_params=self.params,
            transport=transport,
        )

    @property
    def backend(self) -> Any:
        """The provider object doing the work (``OpenAIChatModel`` or a CLI model)."""
        return self._backend

    def prepare(self, request: ModelRequest) -> ModelRequest:
        """``request`` with the default parameters merged under its own."""
        if not self._params or self.is_cli:
            return request
        defaults = {k: v for k, v in self._params.items() if k not in _STREAM_KEYS}
        return dataclasses.replace(request, params={**defaults, **request.params})

    def fingerprint(self, request: ModelRequest) -> str:
        """The fingerprint of what ``invoke(request)`` sends (defaults merged)."""
        return request_fingerprint(self.prepare(request), model=self.model)

    async def invoke(self, request: ModelRequest, *, on_chunk: ChunkSink | None = None) -> ModelResponse:
        """Send one request to an API provider (defaults merged); see ``OpenAIChatModel.invoke``."""
        if self.is_cli and as_chat_model(self._backend).profile.is_cli:
            raise ProviderError(
                f"{self.provider} is a CLI agent provider: use stream(prompt)",
                provider=self.provider,
                model=self.model,
            )
        response: ModelResponse
        if on_chunk is not None and self.streams_chunks:
            response = await self._backend.invoke(self.prepare(request), on_chunk=on_chunk)
        else:
            response = await self._backend.invoke(self.prepare(request))
        return response

    def stream(
        self, prompt: str, *, resume: str | None = None, options: Mapping[str, Any] | None = None
    ) -> AsyncIterator[StreamChunk]:
        """Run a CLI agent on ``prompt`` (resuming provider session ``resume``) and yield its chunks."""
        if not self.is_cli:
            raise ProviderError(
                f"{self.provider} is an HTTP provider: use invoke(ModelRequest(..., stream=True))",
                provider=self.provider,
                model=self.model,
            )
        chunks: AsyncIterator[StreamChunk] = self._backend.stream(prompt, resume=resume, options=options)
        return chunks

    async def __aenter__(self) -> iModel:
        """Hold the backend's resources (e.g. one HTTP connection pool) until the block exits."""
        enter = getattr(self._backend, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        leave = getattr(self._backend, "__aexit__", None)
        if leave is not None:
            await leave(*exc_info)

    def to_config(self) -> dict[str, Any]:
        """A JSON object that ``from_config`` turns back into an equal handle; no secrets.

        No API key or header; ``base_url`` without user-info or secret-looking query
        parameters; parameters without secret-named entries, nested secret keys and secret
        flag values replaced by ``<redacted>``. Pass what was left out again when reopening.
        """
        config: dict[str, Any] = {
            "provider": self.provider,
            "model": self.model,
            # Credentials in the URL are not configuration: give base_url again to use them.
            "base_url": scrub_url(self._base_url, drop=True) if self._base_url else self._base_url,
            "params": public_params(self._params),
        }
        if self._timeout is not None:
            config["timeout"] = _timeout_to_dict(self._timeout)
        if self._retry is not None:
            config["retry"] = self._retry.to_dict()
        return config

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, api_key: str | None = None) -> iModel:
        """Rebuild a handle from ``to_config()`` output; the key comes from ``api_key`` or the environment."""
        unknown = sorted(set(config) - _CONFIG_KEYS)
        if unknown:
            raise UsageError(f"iModel.from_config: unknown keys {', '.join(unknown)}")
        if "provider" not in config:
            raise UsageError("iModel.from_config: the config has no 'provider'")
        timeout = config.get("timeout")
        retry = config.get("retry")
        return cls(
            provider=config["provider"],
            model=config.get("model") or None,
            base_url=config.get("base_url"),
            api_key=api_key,
            timeout=httpx.Timeout(**timeout) if timeout else None,
            retry=RetryPolicy.from_dict(retry) if retry else None,
            **dict(config.get("params") or {}),
        )
