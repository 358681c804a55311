"""``run()`` records the CLIs signed in with their subscriptions at the wire (issue 25).

Codex signed in with a ChatGPT account talks to the ChatGPT backend's Responses API
(``/backend-api/codex/responses``, its bearer token and ``chatgpt-account-id``, zstd-compressed
bodies); Gemini CLI signed in with Google talks to Code Assist (``/v1internal:...``, the Gemini
API in an envelope, its Google access token). Each real CLI runs offline under ``Branch.run``
against the fake upstream, which also answers what the logins ask first (the ChatGPT account
check, ``loadCodeAssist``). Every model call is recorded in the run's wire streams, no credential
reaches the log, the upstream still got the CLI's own credentials, and the answer is the one the
CLI gives without the recorder.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import anyio
import orjson
import pytest

from turnlog.eventstore import EventStore, open_store
from turnlog.kernel import Branch
from turnlog.kernel.wire import read_wire_calls
from turnlog.projections import catalogue_upcasters
from turnlog.testing import FakeUpstreamServer, UpstreamThread

from . import branchkit as kit
from .conftest import RealCLI, _base_env, _dirs

ACCOUNT_ID = "acct-fake-login-4242"
REFRESH_TOKEN = "rt-fake-refresh-token-0042"
GOOGLE_TOKEN = "ya29.fake-google-access-token-0042"
ANSWER = "Hello from the subscription backend."


def _jwt(claims: dict[str, Any]) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}.unsigned"


def chatgpt_tokens() -> dict[str, str]:
    """A ChatGPT login Codex accepts offline: unexpired JWTs naming the account and the plan."""
    now = int(time.time())
    auth = {"chatgpt_account_id": ACCOUNT_ID, "chatgpt_plan_type": "plus", "chatgpt_user_id": "user-fake"}
    claims = {"exp": now + 30 * 86400, "iat": now, "https://api.openai.com/auth": auth}
    return {
        "id_token": _jwt({**claims, "email": "someone@example.test"}),
        "access_token": _jwt(claims),
        "refresh_token": REFRESH_TOKEN,
        "account_id": ACCOUNT_ID,
    }


@pytest.fixture
def login_upstream() -> Iterator[FakeUpstreamServer]:
    """A fake upstream that takes any credential (the logins' tokens are not API keys)."""
    with UpstreamThread(FakeUpstreamServer()) as server:
        yield server


@pytest.fixture
def chatgpt_accounts() -> Iterator[FakeUpstreamServer]:
    """The ChatGPT backend's account check, on a host of its own.

    Not the model calls' host: Codex sends a call whose host is its ``chatgpt_base_url``'s to
    the backend origin the account check names (``https://chatgpt.com``), out of reach offline.
    """
    with UpstreamThread(FakeUpstreamServer()) as server:
        yield server


@pytest.fixture
def codex_chatgpt(
    realcli_prefix: Path,
    login_upstream: FakeUpstreamServer,
    chatgpt_accounts: FakeUpstreamServer,
    tmp_path: Path,
) -> RealCLI:
    """Codex signed in with ChatGPT (``auth.json`` with tokens, no API key), its backend the fake.

    ``chatgpt_base_url`` (the account check) and ``openai_base_url`` (the model calls, the
    ChatGPT backend's ``/backend-api/codex``) name fake upstreams instead of chatgpt.com.
    """
    home, work = _dirs(tmp_path, "codex")
    codex_home = home / ".codex"
    codex_home.mkdir()
    tokens = chatgpt_tokens()
    last_refresh = datetime.now(UTC).isoformat().replace("+00:00", "Z")  # no refresh is attempted
    auth = {"auth_mode": "chatgpt", "OPENAI_API_KEY": None, "tokens": tokens, "last_refresh": last_refresh}
    (codex_home / "auth.json").write_text(json.dumps(auth), encoding="utf-8")
    (codex_home / "config.toml").write_text(
        f'model = "gpt-5.5"\nchatgpt_base_url = "{chatgpt_accounts.base_url}/backend-api/"\n'
        f'openai_base_url = "{login_upstream.base_url}/backend-api/codex"\n',
        encoding="utf-8",
    )
    env = _base_env(home) | {"CODEX_HOME": str(codex_home)}
    return RealCLI("codex", realcli_prefix / "node_modules" / ".bin" / "codex", env, home, work)


def _gemini_user_settings(home: Path, auth: str) -> None:
    """The user's ``~/.gemini/settings.json``: ``auth`` chosen, one attempt, nothing sent home."""
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(
        json.dumps(
            {
                "security": {"auth": {"selectedType": auth}},
                "general": {"maxAttempts": 1},
                "privacy": {"usageStatisticsEnabled": False},
                "telemetry": {"enabled": False},
            }
        ),
        encoding="utf-8",
    )


@pytest.fixture
def gemini_google(realcli_prefix: Path, login_upstream: FakeUpstreamServer, tmp_path: Path) -> RealCLI:
    """Gemini CLI signed in with Google (``oauth-personal``): Code Assist at the fake upstream.

    The access token comes from ``GOOGLE_CLOUD_ACCESS_TOKEN`` (with ``GOOGLE_GENAI_USE_GCA``):
    a token cached in ``oauth_creds.json`` is first checked at oauth2.googleapis.com, which an
    offline test cannot reach.
    """
    home, work = _dirs(tmp_path, "gemini")
    _gemini_user_settings(home, "oauth-personal")
    env = _base_env(home) | {
        "CODE_ASSIST_ENDPOINT": login_upstream.base_url,
        "GOOGLE_GENAI_USE_GCA": "true",
        "GOOGLE_CLOUD_ACCESS_TOKEN": GOOGLE_TOKEN,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_CLI_NO_RELAUNCH": "true",
    }
    return RealCLI("gemini", realcli_prefix / "node_modules" / ".bin" / "gemini", env, home, work)


async def _everything(store: EventStore) -> bytes:
    return b"\n".join([orjson.dumps([e.stream, e.data, e.meta]) async for e in store.read_all()])


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


async def _recorded_login_run(
    store: EventStore, cli: RealCLI, provider: str, upstream: FakeUpstreamServer, path: str
) -> tuple[Branch, list[Any]]:
    # without the recorder first: the answer the CLI gives, and no wire call
    upstream.set_script([{"text": ANSWER}])
    plain = Branch(store=store)
    text = await plain.run_and_collect("say hello", chat_model=kit.model_of(cli, provider), record_wire=False)
    assert text == ANSWER
    assert await read_wire_calls(store, kit.last_run(plain).run_id) == []
    upstream.requests.clear()
    upstream.set_script([{"text": ANSWER}])
    branch = Branch(store=store)
    answer = await branch.run_and_collect("say hello", chat_model=kit.model_of(cli, provider))
    assert answer == text
    run = kit.last_run(branch)
    calls = await read_wire_calls(store, run.run_id)
    model_calls = [r for r in list(upstream.requests) if r["entry"] is not None]
    assert [r["path"].split("?")[0] for r in model_calls] == [path]
    assert calls and all(call.stream.startswith(f"run-{run.run_id}-wire-") for call in calls)
    assert calls[-1].status == "ok" and ANSWER in calls[-1].text, calls
    return branch, calls


async def test_codex_signed_in_with_chatgpt_is_recorded_at_the_wire(
    store: EventStore, codex_chatgpt: RealCLI, login_upstream: FakeUpstreamServer
) -> None:
    await _recorded_login_run(store, codex_chatgpt, "codex", login_upstream, "/backend-api/codex/responses")
    # the ChatGPT backend got Codex's own credentials through the recorder
    tokens = chatgpt_tokens()
    sent = next(r for r in list(login_upstream.requests) if r["entry"] is not None)
    assert sent["credentials"]["authorization"]["present"]
    assert sent["credentials"]["chatgpt-account-id"]["sha256"] == _sha(ACCOUNT_ID)
    assert sent["headers"].get("content-encoding") == "zstd"  # recorded from the decompressed body
    # and no credential reached the log
    logged = await _everything(store)
    bearer = tokens["access_token"]
    for secret in (bearer, bearer.split(".")[1], ACCOUNT_ID, REFRESH_TOKEN, tokens["id_token"]):
        assert secret.encode() not in logged


async def test_gemini_signed_in_with_google_is_recorded_at_the_wire(
    store: EventStore, gemini_google: RealCLI, login_upstream: FakeUpstreamServer
) -> None:
    _branch, calls = await _recorded_login_run(
        store, gemini_google, "gemini", login_upstream, "/v1internal:streamGenerateContent"
    )
    sent = next(r for r in list(login_upstream.requests) if r["entry"] is not None)
    assert sent["credentials"]["authorization"]["sha256"] == _sha(f"Bearer {GOOGLE_TOKEN}")
    assert sent["body"]["project"] and sent["body"]["request"]["contents"]
    # the recorded call is Gemini's, unwrapped: its model, usage and the text of the stream
    events = [e async for e in store.read_stream(calls[-1].stream)]
    closing = events[-1].data
    assert closing["provider"] == "code_assist" and closing["model"] == sent["body"]["model"]
    assert closing["usage"]["output_tokens"] and closing["stream"]
    assert "user_prompt_id" in closing["params"]
    assert GOOGLE_TOKEN.encode() not in await _everything(store)


@pytest.fixture
def login_proxy(login_upstream: FakeUpstreamServer, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``turnlog proxy`` in front of the fake upstream (every API, the logins' included)."""
    yield from _turnlog_proxy(tmp_path / "proxied.db", login_upstream.base_url)


def _turnlog_proxy(db: Path, upstream: str) -> Iterator[tuple[str, Path]]:
    """``turnlog proxy --store db --upstream upstream`` as a process: its URL and store, then its end."""
    argv = [
        sys.executable,
        "-m",
        "turnlog",
        "proxy",
        "--store",
        str(db),
        "--port",
        "0",
        "--upstream",
        upstream,
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    ) as process:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("turnlog proxy listening on http://127.0.0.1:"), line
        try:
            yield line.rsplit(" ", 1)[1], db
        finally:
            process.terminate()
            process.wait(timeout=30)


async def _proxied_calls(db: Path) -> list[dict[str, Any]]:
    async with open_store(f"sqlite:///{db}", upcasters=catalogue_upcasters()) as opened:
        return [dict(e.data) async for e in opened.read_all(types=["model.called"])]


@pytest.mark.parametrize("login", ["codex_chatgpt", "gemini_google"])
async def test_turnlog_proxy_records_the_logins(
    login: str,
    login_proxy: tuple[str, Path],
    login_upstream: FakeUpstreamServer,
    request: pytest.FixtureRequest,
) -> None:
    cli: RealCLI = request.getfixturevalue(login)
    url, db = login_proxy
    login_upstream.set_script([{"text": ANSWER}])
    if login == "codex_chatgpt":
        args = ["exec", "--json", "--skip-git-repo-check"]
        args += ["-c", f'openai_base_url="{url}/backend-api/codex"', "say hello"]
        done = await anyio.to_thread.run_sync(lambda: cli.run(args))
    else:
        env = {"CODE_ASSIST_ENDPOINT": url}
        done = await anyio.to_thread.run_sync(
            lambda: cli.run(["-p", "say hello", "-o", "stream-json"], env=env)
        )
    assert done.returncode == 0, done.stderr[-2000:]
    said = "".join(
        str(line.get("content", "")) for line in done.of_type("message") if line.get("role") == "assistant"
    )
    assert ANSWER in (done.stdout if login == "codex_chatgpt" else said)
    provider = "chatgpt" if login == "codex_chatgpt" else "code_assist"
    calls = [c for c in await _proxied_calls(db) if c["provider"] == provider]
    assert [c["status"] for c in calls][-1:] == ["ok"], calls
    logged = orjson.dumps(calls)
    assert ACCOUNT_ID.encode() not in logged and GOOGLE_TOKEN.encode() not in logged


@pytest.fixture
def codex_api_key(realcli_prefix: Path, login_upstream: FakeUpstreamServer, tmp_path: Path) -> RealCLI:
    """Codex on its built-in ``openai`` provider with an API key, ``openai_base_url`` the fake."""
    home, work = _dirs(tmp_path, "codex")
    codex_home = home / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        f'model = "gpt-5.5"\nopenai_base_url = "{login_upstream.base_url}/v1"\n', encoding="utf-8"
    )
    env = _base_env(home) | {"CODEX_HOME": str(codex_home), "OPENAI_API_KEY": "sk-built-in-provider-key"}
    return RealCLI("codex", realcli_prefix / "node_modules" / ".bin" / "codex", env, home, work)


async def test_codex_built_in_provider_is_recorded_through_openai_base_url(
    store: EventStore, codex_api_key: RealCLI, login_upstream: FakeUpstreamServer
) -> None:
    """The pinned Codex reads ``openai_base_url`` only (not ``OPENAI_BASE_URL``): the recorder sets it."""
    await _recorded_login_run(store, codex_api_key, "codex", login_upstream, "/v1/responses")
    assert b"sk-built-in-provider-key" not in await _everything(store)


VERTEX_KEY = "AIza-fake-vertex-express-key-0042"
DECOY_KEY = "AIza-fake-gemini-api-key-never-used"


@pytest.fixture
def vertex_upstream() -> Iterator[FakeUpstreamServer]:
    """A fake upstream that takes only the Vertex AI express key (``x-goog-api-key``)."""
    with UpstreamThread(FakeUpstreamServer(api_key=VERTEX_KEY)) as server:
        yield server


def _gemini_vertex(prefix: Path, upstream: FakeUpstreamServer, tmp_path: Path, chosen_by: str) -> RealCLI:
    """Gemini CLI on Vertex AI in express mode (``GOOGLE_API_KEY``), Vertex AI at the fake.

    ``chosen_by`` says what selects Vertex AI: ``env`` (``GOOGLE_GENAI_USE_VERTEXAI``, no auth
    type in the settings) or ``workspace`` (the run directory's ``.gemini/settings.json`` says
    ``vertex-ai`` over the user's ``gemini-api-key``, with a Gemini API key at hand too).
    """
    home, work = _dirs(tmp_path, "gemini")
    user: dict[str, Any] = {
        "general": {"maxAttempts": 1},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }
    env = _base_env(home) | {
        "GOOGLE_API_KEY": VERTEX_KEY,
        "GOOGLE_VERTEX_BASE_URL": upstream.base_url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_CLI_NO_RELAUNCH": "true",
    }
    if chosen_by == "env":
        env["GOOGLE_GENAI_USE_VERTEXAI"] = "true"
    else:
        user["security"] = {"auth": {"selectedType": "gemini-api-key"}}
        env["GEMINI_API_KEY"] = DECOY_KEY
        workspace = work / ".gemini" / "settings.json"
        workspace.parent.mkdir()
        workspace.write_text(
            json.dumps({"security": {"auth": {"selectedType": "vertex-ai"}}}), encoding="utf-8"
        )
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text(json.dumps(user), encoding="utf-8")
    return RealCLI("gemini", prefix / "node_modules" / ".bin" / "gemini", env, home, work)


@pytest.mark.parametrize("chosen_by", ["env", "workspace"])
async def test_gemini_on_vertex_ai_is_recorded_at_the_wire(
    store: EventStore,
    realcli_prefix: Path,
    vertex_upstream: FakeUpstreamServer,
    tmp_path: Path,
    chosen_by: str,
) -> None:
    """Vertex AI (express mode), chosen by the environment or by the workspace's settings file."""
    cli = _gemini_vertex(realcli_prefix, vertex_upstream, tmp_path, chosen_by)
    vertex_upstream.set_script([{"text": ANSWER}])
    branch = Branch(store=store)
    answer = await branch.run_and_collect("say hello", chat_model=kit.model_of(cli, "gemini"))
    assert answer == ANSWER
    run = kit.last_run(branch)
    calls = await read_wire_calls(store, run.run_id)
    model_calls = [r for r in list(vertex_upstream.requests) if r["entry"] is not None]
    assert [r["path"].split("?")[0].rsplit("/", 1)[0] for r in model_calls] == [
        "/v1beta1/publishers/google/models"
    ]
    # every call the CLI made went through the recorder: the routing call and the answer
    assert len(calls) == len(vertex_upstream.requests) >= 1, (calls, list(vertex_upstream.requests))
    assert all(call.stream.startswith(f"run-{run.run_id}-wire-") for call in calls)
    assert calls[-1].status == "ok" and ANSWER in calls[-1].text, calls
    # the upstream got the CLI's own Vertex credentials, and the log none
    sent = model_calls[0]
    assert sent["credentials"]["x-goog-api-key"]["sha256"] == _sha(VERTEX_KEY)
    events = [e async for e in store.read_stream(calls[-1].stream)]
    closing = events[-1].data
    assert closing["provider"] == "gemini" and closing["status"] == "ok" and closing["stream"]
    assert closing["model"] == sent["path"].split("/models/")[1].split(":")[0]
    logged = await _everything(store)
    assert VERTEX_KEY.encode() not in logged and DECOY_KEY.encode() not in logged


ADC_TOKEN = "ya29.fake-metadata-server-token-0042"
PROJECT = "turnlog-fake-project"
LOCATION = "us-central1"


class _MetadataHandler(BaseHTTPRequestHandler):
    """The GCE metadata server's answers Application Default Credentials ask for.

    google-auth-library (inside the CLI) finds no credentials file, so it asks the metadata
    server: the project id and the default service account's access token, each request
    carrying ``Metadata-Flavor: Google``, the answers too.
    """

    answers: ClassVar[dict[str, tuple[bytes, bytes]]] = {
        "/computeMetadata/v1/project/project-id": (b"text/plain", PROJECT.encode()),
        "/computeMetadata/v1/instance/service-accounts/default/token": (
            b"application/json",
            json.dumps({"access_token": ADC_TOKEN, "expires_in": 3599, "token_type": "Bearer"}).encode(),
        ),
    }

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        self.server.asked.append(path)  # type: ignore[attr-defined]
        known = self.answers.get(path.rstrip("/"))
        if path.rstrip("/") == "/computeMetadata/v1/instance":  # the library's "on GCE?" ping
            known = (b"text/plain", b"")
        if known is None or self.headers.get("metadata-flavor") != "Google":
            self.send_response(404)
            self.end_headers()
            return
        kind, body = known
        self.send_response(200)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Type", kind.decode())
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def metadata_server() -> Iterator[ThreadingHTTPServer]:
    """A loopback stand-in for the GCE metadata server (``GCE_METADATA_HOST``)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _MetadataHandler)
    server.asked = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def adc_upstream() -> Iterator[FakeUpstreamServer]:
    """A fake Vertex AI that takes only the metadata server's access token (a bearer token)."""
    with UpstreamThread(FakeUpstreamServer(api_key=ADC_TOKEN)) as server:
        yield server


@pytest.fixture
def gemini_adc(
    realcli_prefix: Path,
    adc_upstream: FakeUpstreamServer,
    metadata_server: ThreadingHTTPServer,
    tmp_path: Path,
) -> RealCLI:
    """Gemini CLI on Vertex AI with a project and a location, signed in by ADC (no key, no file)."""
    home, work = _dirs(tmp_path, "gemini")
    _gemini_user_settings(home, "vertex-ai")
    host, port = metadata_server.server_address[:2]
    env = _base_env(home) | {
        "GOOGLE_CLOUD_PROJECT": PROJECT,
        "GOOGLE_CLOUD_LOCATION": LOCATION,
        "GOOGLE_VERTEX_BASE_URL": adc_upstream.base_url,
        "GCE_METADATA_HOST": f"{host!s}:{port}",
        "METADATA_SERVER_DETECTION": "ping-only",
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_CLI_NO_RELAUNCH": "true",
    }
    return RealCLI("gemini", realcli_prefix / "node_modules" / ".bin" / "gemini", env, home, work)


def _adc_model_calls(
    upstream: FakeUpstreamServer, metadata_server: ThreadingHTTPServer
) -> list[dict[str, Any]]:
    """The upstream's scripted calls, checked: the project's path, the metadata server's token."""
    # the token came from the metadata server, as on a Google Cloud machine
    asked: list[str] = metadata_server.asked  # type: ignore[attr-defined]
    assert "/computeMetadata/v1/instance/service-accounts/default/token" in asked
    model_calls = [r for r in list(upstream.requests) if r["entry"] is not None]
    assert [r["path"].split("?")[0].rsplit("/", 1)[0] for r in model_calls] == [
        f"/v1beta1/projects/{PROJECT}/locations/{LOCATION}/publishers/google/models"
    ]
    assert model_calls[0]["credentials"]["authorization"]["sha256"] == _sha(f"Bearer {ADC_TOKEN}")
    return model_calls


async def test_gemini_on_vertex_ai_with_a_project_and_adc_is_recorded_at_the_wire(
    store: EventStore,
    gemini_adc: RealCLI,
    adc_upstream: FakeUpstreamServer,
    metadata_server: ThreadingHTTPServer,
) -> None:
    """Vertex AI with a project and a location, signed in by Application Default Credentials.

    The CLI's google-auth-library gets its token from the (fake) metadata server, calls the
    project's regional path with it as a bearer token, and the recorder forwards both as the
    CLI sent them: the path with its project and location, the token to the upstream only.
    """
    adc_upstream.set_script([{"text": ANSWER}])
    branch = Branch(store=store)
    answer = await branch.run_and_collect("say hello", chat_model=kit.model_of(gemini_adc, "gemini"))
    assert answer == ANSWER
    _adc_model_calls(adc_upstream, metadata_server)
    run = kit.last_run(branch)
    calls = await read_wire_calls(store, run.run_id)
    assert len(calls) == len(adc_upstream.requests) >= 1, (calls, list(adc_upstream.requests))
    assert all(call.stream.startswith(f"run-{run.run_id}-wire-") for call in calls)
    assert calls[-1].status == "ok" and ANSWER in calls[-1].text, calls
    closing = [e async for e in store.read_stream(calls[-1].stream)][-1].data
    assert closing["provider"] == "gemini" and closing["status"] == "ok"
    assert ADC_TOKEN.encode() not in await _everything(store)


@pytest.fixture
def adc_proxy(adc_upstream: FakeUpstreamServer, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``turnlog proxy`` whose ``gemini`` upstream is the fake Vertex AI."""
    yield from _turnlog_proxy(tmp_path / "proxied.db", f"gemini={adc_upstream.base_url}")


async def test_turnlog_proxy_records_gemini_on_vertex_ai_with_adc(
    gemini_adc: RealCLI,
    adc_proxy: tuple[str, Path],
    adc_upstream: FakeUpstreamServer,
    metadata_server: ThreadingHTTPServer,
) -> None:
    """The same CLI pointed at ``turnlog proxy`` by ``GOOGLE_VERTEX_BASE_URL`` (docs/proxy.md)."""
    url, db = adc_proxy
    adc_upstream.set_script([{"text": ANSWER}])
    args = ["-p", "say hello", "-o", "stream-json"]
    done = await anyio.to_thread.run_sync(lambda: gemini_adc.run(args, env={"GOOGLE_VERTEX_BASE_URL": url}))
    assert done.returncode == 0, done.stderr[-2000:]
    said = "".join(
        str(line.get("content", "")) for line in done.of_type("message") if line.get("role") == "assistant"
    )
    assert ANSWER in said
    _adc_model_calls(adc_upstream, metadata_server)
    calls = [c for c in await _proxied_calls(db) if c["provider"] == "gemini"]
    assert len(calls) == len(adc_upstream.requests), (calls, list(adc_upstream.requests))
    assert calls[-1]["status"] == "ok", calls
    async with open_store(f"sqlite:///{db}") as opened:
        logged = b"\n".join([orjson.dumps([e.stream, e.data, e.meta]) async for e in opened.read_all()])
    assert ADC_TOKEN.encode() not in logged
