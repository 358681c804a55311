"""Secret names, URLs and values: what scrubbing keeps out of the log."""

from __future__ import annotations

import base64

import pytest

from turnlog.kernel.models._secrets import (
    REDACTED,
    Scrubber,
    is_secret_name,
    redact_params,
    scrub_url,
    url_secrets,
)


@pytest.mark.parametrize(
    "name",
    [
        "api_key",
        "API-Key",
        "key",
        "token",
        "access_token",
        "sig",
        "X-Goog-Api-Key",
        "--token",
        "password",
        "auth",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name", ["max_tokens", "temperature", "model", "top_p", "session_id", "monkey", "design"]
)
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name)


def test_urls_lose_user_info_and_secret_query_values() -> None:
    url = "https://alice:pa55word@example.test/v1?api-version=2&Api-Key=QSECRET&sig=S1GNATURE"
    shown = scrub_url(url)
    assert (
        "alice" not in shown
        and "pa55word" not in shown
        and "QSECRET" not in shown
        and "S1GNATURE" not in shown
    )
    assert "api-version=2" in shown and REDACTED in shown
    assert scrub_url(url, drop=True) == "https://example.test/v1?api-version=2"
    found = url_secrets(url)
    assert {"pa55word", "QSECRET", "S1GNATURE", base64.b64encode(b"alice:pa55word").decode()} <= set(found)


def test_nested_params_and_flags_are_redacted() -> None:
    params = {
        "temperature": 0,
        "extra_body": {"api_key": "B0DYSECRET", "Token": "T", "keep": [1, {"password": "x"}]},
        "extra_args": ["--model", "m", "--api-key", "ARGSECRET", "--token=TOKSECRET"],
    }
    assert redact_params(params) == {
        "temperature": 0,
        "extra_body": {"api_key": REDACTED, "Token": REDACTED, "keep": [1, {"password": REDACTED}]},
        "extra_args": ["--model", "m", "--api-key", REDACTED, f"--token={REDACTED}"],
    }


def test_scrubber_replaces_every_occurrence_in_keys_and_values() -> None:
    scrub = Scrubber(["HEADERSECRET", None, "1"]).with_secrets("sk-KEYSECRET")
    value = {"HEADERSECRET": ["Bearer sk-KEYSECRET", "x-h: HEADERSECRET"], "n": 1}
    assert scrub(value) == {REDACTED: [f"Bearer {REDACTED}", f"x-h: {REDACTED}"], "n": 1}
    assert scrub("a 1 stays") == "a 1 stays"  # too short to scrub as text


def test_scrubber_finds_a_secret_anywhere_or_says_there_is_none() -> None:
    scrub = Scrubber(["s3cr3t-value"])
    assert scrub.found_in("echo s3cr3t-value")
    assert scrub.found_in(None, {"nested": [{"s3cr3t-value": 1}]})
    assert scrub.found_in(("a", ["b", "x s3cr3t-value y"]))
    assert not scrub.found_in("s3cr3t", {"value": "-value"}, None, 42)
    # Two strings never join into a secret.
    assert not scrub.found_in("s3cr3t", "-value")
    assert not Scrubber().found_in("s3cr3t-value")
