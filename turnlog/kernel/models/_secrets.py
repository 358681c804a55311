"""Keeping credentials out of the append-only log: names that mark secrets, URLs, values.

What a model records (``branch.created`` configurations, ``model.called`` parameters, raw
responses and error messages) can never be removed from the log without breaking its hash
chain, so every credential a model is configured with is scrubbed before it is recorded:

- ``is_secret_name``: a parameter, header, query or flag name that marks a credential
  (``api_key``, ``api-key``, ``token``, ``access_token``, ``sig``, ``password``, ``auth``...,
  case-insensitive; ``max_tokens`` is not one);
- ``scrub_url``: a URL without its user-info and with secret-looking query values replaced
  (or dropped, for a URL that is recorded as configuration);
- ``redact_params``: parameter values with nested secret-named keys (``extra_body={"api_key":
  ...}``) and the values of secret flags in argument lists (``["--api-key", "k"]``,
  ``"--token=k"``) replaced;
- ``Scrubber``: every occurrence of the configured secret values (API key, header values,
  URL credentials) replaced in any JSON-like value.

Example:
    >>> scrub_url("https://user:pw@host/v1?api-key=k&x=1")
    'https://<redacted>@host/v1?api-key=<redacted>&x=1'
    >>> Scrubber(["s3cr3t-value"])({"echo": "Bearer s3cr3t-value"})
    {'echo': 'Bearer <redacted>'}
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import SplitResult, parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

__all__ = ["REDACTED", "Scrubber", "is_secret_name", "redact_params", "scrub_url", "url_secrets"]

REDACTED = "<redacted>"
"""What a scrubbed secret is replaced with."""

_SECRET_WORDS = frozenset(
    {
        "key",
        "apikey",
        "token",
        "secret",
        "password",
        "passwd",
        "pwd",
        "pass",
        "auth",
        "authorization",
        "credential",
        "credentials",
        "sig",
        "signature",
        "cookie",
        "bearer",
        "oauth",
    }
)
_SECRET_NAMES = frozenset({"headers", "extra_headers", "default_headers", "env", "x-goog-api-key"})
_SPLIT = re.compile(r"[-_.\s]+")
_MIN_SECRET = 6
"""Shorter configured values are not scrubbed as text: replacing every "1" would garble the log."""


def is_secret_name(name: object) -> bool:
    """True when ``name`` (a parameter, header, query or ``--flag`` name) marks a credential."""
    if not isinstance(name, str):
        return False
    lowered = name.strip().lstrip("-").lower()
    if lowered in _SECRET_NAMES:
        return True
    return any(word in _SECRET_WORDS for word in _SPLIT.split(lowered))


def _split_url(url: str) -> SplitResult | None:
    try:
        return urlsplit(url)
    except ValueError:
        return None


def scrub_url(url: str, *, drop: bool = False) -> str:
    """``url`` without user-info and with secret-looking query values replaced (``drop``: removed)."""
    parts = _split_url(url)
    if parts is None:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        host = netloc.rpartition("@")[2]
        netloc = host if drop else f"{REDACTED}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(is_secret_name(name) for name, _ in pairs):
            kept = [
                (name, REDACTED if is_secret_name(name) else value)
                for name, value in pairs
                if not (drop and is_secret_name(name))
            ]
            query = urlencode(kept, safe="<>", quote_via=quote)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def url_secrets(url: str) -> list[str]:
    """The credentials in ``url``: its user-info (and password) and its secret-looking query values."""
    parts = _split_url(url)
    if parts is None:
        return []
    found: list[str] = []
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        plain = unquote(userinfo)
        # httpx sends URL credentials as Basic auth: their base64 form is a secret too.
        found += [userinfo, plain, base64.b64encode(plain.encode()).decode()]
        if parts.password:
            found += [parts.password, unquote(parts.password)]
    for raw in parts.query.split("&"):
        name, _, value = raw.partition("=")
        if value and is_secret_name(unquote(name)):
            found += [value, unquote(value)]
    return found


def redact_params(value: Any) -> Any:
    """``value`` with secret-named keys and the values of secret flags replaced, at any depth."""
    if isinstance(value, Mapping):
        return {k: REDACTED if is_secret_name(k) else redact_params(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items: list[Any] = []
        hide_next = False
        for item in value:
            if hide_next:
                items.append(REDACTED)
                hide_next = False
                continue
            if isinstance(item, str) and item.startswith("-"):
                flag, eq, _ = item.partition("=")
                if is_secret_name(flag):
                    if eq:
                        items.append(f"{flag}={REDACTED}")
                    else:
                        items.append(item)
                        hide_next = True
                    continue
            items.append(redact_params(item))
        return items
    if isinstance(value, str) and "://" in value:
        return scrub_url(value)
    return value


class Scrubber:
    """Replaces every occurrence of the given secret values in strings, keys and nested values.

    Args:
        secrets: The values (API key, header values, URL credentials); ``None``, empty and very
            short values are ignored.
    """

    __slots__ = ("_pattern", "secrets")

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        kept = {s for s in secrets if isinstance(s, str) and len(s) >= _MIN_SECRET}
        self.secrets: tuple[str, ...] = tuple(sorted(kept, key=len, reverse=True))
        self._pattern = re.compile("|".join(re.escape(s) for s in self.secrets)) if self.secrets else None

    def with_secrets(self, *more: str | None) -> Scrubber:
        """A scrubber for these secrets and ``more``."""
        return Scrubber([*self.secrets, *more])

    def __call__(self, value: Any) -> Any:
        """``value`` with every secret replaced by ``<redacted>``."""
        pattern = self._pattern
        if pattern is None:
            return value
        if isinstance(value, str):
            return pattern.sub(REDACTED, value)
        if isinstance(value, dict):
            return {self(k): self(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v) for v in value]
        return value

    def found_in(self, *values: Any) -> bool:
        """True when a secret occurs in a string, key or nested value of ``values``.

        Cheaper than scrubbing: nothing is rebuilt, and the text is searched once per secret
        (joined with NUL, which no environment value or header can hold, so no match spans
        two strings); for the few secrets of a configuration, ``in`` beats the alternation
        pattern.
        """
        if not self.secrets:
            return False
        texts: list[str] = []
        _collect_strings(values, texts)
        text = "\x00".join(texts)
        return any(secret in text for secret in self.secrets)

    def __repr__(self) -> str:
        return f"Scrubber({len(self.secrets)} secrets)"


def _collect_strings(value: Any, into: list[str]) -> None:
    """Append every string of ``value`` (dict keys included, at any depth) to ``into``."""
    if isinstance(value, str):
        into.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _collect_strings(key, into)
            _collect_strings(item, into)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect_strings(item, into)
