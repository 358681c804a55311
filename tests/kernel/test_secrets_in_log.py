"""No credential reaches the append-only log, even from a server that echoes what it received."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from turnlog.eventstore import open_store
from turnlog.kernel import Branch, iModel
from turnlog.kernel.models import RetryPolicy
from turnlog.projections import catalogue_upcasters
from turnlog.testing import FakeOpenAIServer

SECRETS = {
    "api key": "sk-APIKEY-0123456789",
    "url password": "URLPASS-0123",
    "url query": "QUERYKEY-0123",
    "header": "HEADERVAL-0123",
    "extra_body": "BODYSECRET-0123",
    "extra_args": "ARGSECRET-0123",
}


def leaked(directory: Path, name: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in directory.glob(name + "*"):
        data = path.read_bytes()
        found.update({what: path.name for what, secret in SECRETS.items() if secret.encode() in data})
    return found


async def test_secrets_never_reach_the_store_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Config, responses, errors and httpx log lines: the secret bytes are nowhere in the store."""
    script = [{"text": "x"}, {"status": 400}]
    caplog.set_level(logging.INFO, logger="httpx")
    async with FakeOpenAIServer(script, echo=True) as server:
        base = server.base_url.replace("http://", f"http://user:{SECRETS['url password']}@")
        model = iModel(
            provider="fake",
            model="m",
            base_url=f"{base}?api-key={SECRETS['url query']}&api-version=1",
            api_key=SECRETS["api key"],
            headers={"X-Custom-Auth": SECRETS["header"]},
            retry=RetryPolicy(max_attempts=1),
            extra_body={"api_key": SECRETS["extra_body"]},
            extra_args=["--api-key", SECRETS["extra_args"]],
        )
        async with open_store(f"sqlite:///{tmp_path / 's.db'}", upcasters=catalogue_upcasters()) as store:
            branch = Branch(store=store, chat_model=model)
            answer = await branch.communicate("echo")
            assert isinstance(answer, str) and "x-custom-auth" in answer  # the server did echo
            with pytest.raises(Exception, match="HTTP 400"):
                await branch.communicate("fail")
            called = [d for e, d in await branch.events() if e.type == "model.called"]
            assert [c.status for c in called] == ["ok", "error"]
            assert "<redacted>" in str(called[1].error_message)
        requests = server.requests
    assert requests[0]["body"]["extra_body"]["api_key"] == SECRETS["extra_body"]  # still sent as given
    assert leaked(tmp_path, "s.db") == {}
    logged = caplog.text
    assert "HTTP Request" in logged and not [w for w, s in SECRETS.items() if s in logged]


async def test_the_recorded_config_is_an_allow_list(tmp_path: Path) -> None:
    """Whatever a model's to_config adds, only the known-safe fields are recorded."""
    from turnlog.kernel._model_config import model_config

    class Odd:
        provider = "x"
        model = "y"

        def to_config(self) -> dict[str, object]:
            return {
                "provider": "x",
                "model": "y",
                "token": SECRETS["api key"],
                "params": {"secret": "s", "n": 1},
            }

    assert model_config(Odd()) == {"provider": "x", "model": "y", "params": {"n": 1}}


_ECHOING_CLI = r"""
import json, os, sys
key = os.environ["ANTHROPIC_API_KEY"]
sid = "5f59393c-9c56-4ffa-aae8-6be1559ce352"
print(json.dumps({"type": "system", "subtype": "init", "cwd": os.getcwd(), "session_id": sid}), flush=True)
block = {"type": "text", "text": "your key is " + key}
message = {"id": "msg_1", "role": "assistant", "content": [block], "usage": {"input_tokens": 1, "output_tokens": 1}}
print(json.dumps({"type": "assistant", "message": message, "session_id": sid}), flush=True)
print("stderr noise with " + key, file=sys.stderr, flush=True)
print(json.dumps({"type": "result", "subtype": "success", "is_error": True, "result": "bad key " + key,
                  "session_id": sid, "api_error_status": 401}), flush=True)
sys.exit(1)
"""


async def test_a_cli_that_echoes_its_key_leaves_no_trace_in_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CLI agent's credential (from its environment) is scrubbed from chunks, messages and errors."""
    import sys

    from turnlog.kernel.models import CLIError

    secret = "sk-ant-ECHOED-0123456789"
    script = tmp_path / "claude.py"
    script.write_text(_ECHOING_CLI)
    monkeypatch.setenv("TURNLOG_CLAUDE_BIN", f"{sys.executable} {script}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    model = iModel("claude_code/sonnet")
    async with open_store(f"sqlite:///{tmp_path / 's.db'}", upcasters=catalogue_upcasters()) as store:
        branch = Branch(store=store, chat_model=model)
        with pytest.raises(CLIError) as info:
            await branch.run_and_collect("what is my key?", stream_persist=True)
        assert secret not in str(info.value) and secret not in (info.value.stderr or "")
        assert "<redacted>" in str(info.value)
        texts = [str(m.content) for m in branch.messages]
        assert any("your key is <redacted>" in t for t in texts)
    for path in tmp_path.rglob("*"):
        if path.is_file() and path != script:
            assert secret.encode() not in path.read_bytes(), path
