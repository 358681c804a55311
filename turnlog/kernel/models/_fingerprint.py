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
    "FingerprintMemo",
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


_OPEN = b'{"messages":['
"""How the canonical JSON of every request starts: ``messages`` is the first of its sorted keys."""
_KEEP = 4
"""Hash states kept for the last positions of the prefix: a next turn re-renders its last messages."""


class FingerprintMemo:
    """The SHA-256 state over the messages of the last request, carried to the next one.

    A turn's request is the previous request's messages plus a few new ones, so hashing them
    all again costs O(history) per turn (about 1 ms at 2,000 turns). The memo keeps the
    messages it hashed and the hash state after each of the last few; the leading messages of
    the next request that are the same (list ``==``: a pointer test in C for the same object,
    about 10 ns a message against 250 ns to serialize one) are not serialized again. The
    fingerprint is the one ``request_fingerprint`` computes without a memo: the hash runs over
    the same canonical JSON, fed in pieces. (A message that is another object yet equal by
    value counts as the same; its bytes differ only if a number changed type, ``1`` to
    ``1.0`` or ``True``, which re-rendering one recorded message never does.)

    Message dicts must not be changed in place once they were sent (the kernel's prompt
    assembly builds new dicts for whatever changes, and the codecs build their own wire forms).
    """

    __slots__ = ("_hashed", "_states")

    def __init__(self) -> None:
        self._hashed: list[Any] = []
        self._states: dict[int, Any] = {0: hashlib.sha256(_OPEN)}

    def messages_state(self, messages: list[Any]) -> Any:
        """A fresh hash state over ``{"messages":[`` and the canonical JSON of ``messages``, joined."""
        hashed, states = self._hashed, self._states
        start = 0
        for at in sorted(states, reverse=True):  # the longest prefix still the same objects
            if at <= len(messages) and (at == 0 or hashed[at - 1] is messages[at - 1]):
                # list == compares by identity first (a pointer test in C, about 10 ns an item);
                # an item that is another object compares by value, and an equal JSON value
                # has the same canonical bytes (numbers aside: 1 == 1.0 == True)
                if (hashed if at == len(hashed) else hashed[:at]) != messages[:at]:
                    continue
                start = at
                break
        state = states[start].copy()
        dumps, sort = orjson.dumps, orjson.OPT_SORT_KEYS
        kept = {0: states[0]}
        keep_from = len(messages) - _KEEP
        for at, message in enumerate(messages[start:], start):
            if at:
                state.update(b",")
            try:
                state.update(dumps(message, option=sort))
            except TypeError as exc:
                raise TypeError(f"the model request is not JSON-serializable: {exc}") from exc
            if at + 1 >= keep_from:
                kept[at + 1] = state.copy()
        for at in range(max(1, keep_from), start + 1):  # states before the new part, if near the end
            if at in states:
                kept[at] = states[at]
        # The prefix before ``start`` equals what is hashed already: only the rest is copied
        # (O(new messages), not a copy of the whole request), plus the last few before it so
        # that the identity test above finds the caller's own objects there next time.
        keep = max(0, min(start, len(hashed)) - _KEEP - 1)
        hashed[keep:] = messages[keep:]
        self._states = kept
        return state.copy()


def request_fingerprint(request: ModelRequest, *, model: str, memo: FingerprintMemo | None = None) -> str:
    """SHA-256 hex of the canonical request sent to ``model``.

    Args:
        request: The request as sent (defaults merged).
        model: The model it is sent to.
        memo: The memo of the previous request of the same conversation: the messages they
            share are not serialized again (the same value as without it).

    Example:
        >>> req = ModelRequest(messages=[{"role": "user", "content": "hi"}])
        >>> len(request_fingerprint(req, model="gpt-4.1-mini"))
        64
    """
    canonical = canonical_request(request, model=model)
    if memo is None or not isinstance(request.messages, list):
        return hashlib.sha256(canonical_json(canonical)).hexdigest()
    del canonical["messages"]
    state = memo.messages_state(request.messages)
    state.update(b"],")
    state.update(canonical_json(canonical)[1:])  # the other keys, sorted, after "messages"
    return str(state.hexdigest())
