"""The fingerprint of a model request: what was asked, independent of who asked and how.

``model.called`` events record ``request_fingerprint(...)``; a replay computes the same
fingerprint for the request it is about to serve and compares. The fingerprint is the
SHA-256 (hex) of the canonical JSON of the provider-neutral request:

``{"model", "messages", "params", "tools", "response_format", "stream"}``

Canonical JSON means sorted keys, no insignificant whitespace, UTF-8. Secrets never enter it:
request parameters that name credentials (``api_key``, ``authorization``, headers...) are
dropped, nested ones (``extra_body={"api_key": ...}``, ``["--token", ...]``) are replaced by
``<redacted>`` (``_secrets.redact_params``), and transport headers (authorization, request ids, user agents) are not part of a
request's meaning at all. Two requests that would put the same body on the wire have the
same fingerprint, whichever process, machine or API key sent them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from ._secrets import is_secret_name, redact_params
from ._types import ModelRequest

__all__ = [
    "SECRET_PARAM_NAMES",
    "canonical_json",
    "canonical_request",
    "public_params",
    "sent_params",
    "request_fingerprint",
]

# Parameter names that carry credentials or transport details rather than request meaning.
SECRET_PARAM_NAMES: frozenset[str] = frozenset(
    {
        "api_key",
        "apikey",
        "authorization",
        "headers",
        "extra_headers",
        "default_headers",
        "password",
        "secret",
        "access_token",
        "bearer_token",
        "client_secret",
        # A CLI agent's extra environment may hold its provider's credentials.
        "env",
    }
)


def _is_secret(name: str) -> bool:
    lowered = name.lower()
    return lowered in SECRET_PARAM_NAMES or lowered.endswith(("_api_key", "_secret", "_password"))


def public_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` safe to record: secret-named entries dropped, nested secrets replaced."""
    return {
        key: redact_params(value)
        for key, value in params.items()
        if not (_is_secret(key) or is_secret_name(key))
    }


def sent_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` as a request body takes them: entries that name credentials are not sent."""
    return {key: value for key, value in params.items() if not _is_secret(key)}


def canonical_request(request: ModelRequest, *, model: str) -> dict[str, Any]:
    """The provider-neutral JSON object a fingerprint is computed over."""
    return {
        "model": model,
        "messages": request.messages,
        "params": public_params(request.params),
        "tools": request.tools or [],
        "response_format": request.response_format,
        "stream": request.stream,
    }


def canonical_json(value: Any) -> bytes:
    """Sorted-key, compact UTF-8 JSON of ``value``; a non-JSON value is a ``TypeError`` naming it."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError as exc:
        raise TypeError(f"the model request is not JSON-serializable: {exc}") from exc


def request_fingerprint(request: ModelRequest, *, model: str) -> str:
    """SHA-256 hex of the canonical request sent to ``model``.

    Example:
        >>> req = ModelRequest(messages=[{"role": "user", "content": "hi"}])
        >>> len(request_fingerprint(req, model="gpt-4.1-mini"))
        64
    """
    return hashlib.sha256(canonical_json(canonical_request(request, model=model))).hexdigest()
