"""The real Claude Code, Codex and Gemini CLIs, offline, against turnlog's fake upstream APIs.

Fixtures:

- ``realcli_prefix``: the directory holding the pinned CLIs (``package-lock.json`` here), installed
  by ``install.sh`` into ``${TURNLOG_CACHE:-~/.cache/turnlog}/realcli/<lock hash>`` when missing.
  Without node/npm the tests that use it skip with the reason, unless ``TURNLOG_REQUIRE_REALCLI=1``
  (CI), which makes them fail instead.
- ``upstream``: a ``FakeUpstreamServer`` on 127.0.0.1 (own thread, real socket) with an empty
  script; tests call ``upstream.set_script([...])``.
- ``claude_cli``, ``codex_cli``, ``gemini_cli``: a ``RealCLI`` (executable, hermetic environment,
  private home and working directory) pointed at ``upstream``; ``cli.run([...])`` runs it and
  parses its NDJSON.

The environment of each CLI is built from nothing (no variable of the test process leaks in
except ``PATH``'s node directory), so a developer's own keys and config never reach the CLIs:

- Claude: ``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``, ``DISABLE_TELEMETRY``,
  ``DISABLE_AUTOUPDATER``, ``DISABLE_ERROR_REPORTING``, ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC``,
  ``CLAUDE_CODE_MAX_RETRIES=0`` and a private ``HOME`` (its sessions go to ``HOME/.claude/projects/``). As root it refuses
  ``bypassPermissions``; ``Read`` runs without asking, other tools need ``--allowedTools``
  (e.g. ``--allowedTools Bash``), which works as root.
- Codex: a private ``CODEX_HOME`` whose ``config.toml`` selects the ``fake`` provider (the
  Responses API at ``upstream.openai_base_url``, key from ``FAKE_UPSTREAM_API_KEY``, no retries).
- Gemini: ``GEMINI_API_KEY``, ``GOOGLE_GEMINI_BASE_URL``, ``GEMINI_CLI_TRUST_WORKSPACE=true``,
  ``GEMINI_CLI_NO_RELAUNCH=true`` and ``HOME/.gemini/settings.json`` selecting API-key auth with
  one attempt per request and no usage statistics.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path
from typing import Any

import pytest

from turnlog.eventstore import EventStore, open_store
from turnlog.projections import catalogue_upcasters
from turnlog.testing import FakeUpstreamServer, UpstreamThread

HERE = Path(__file__).parent
FAKE_KEY = "sk-fake-upstream-key"
REQUIRED = os.environ.get("TURNLOG_REQUIRE_REALCLI") == "1"
TRANSCRIPTS = HERE / "transcripts"
CAPTURE = os.environ.get("TURNLOG_REALCLI_CAPTURE") == "1"
"""Set ``TURNLOG_REALCLI_CAPTURE=1`` to rewrite ``transcripts/`` from the real CLIs."""


def _cache_prefix() -> Path:
    explicit = os.environ.get("TURNLOG_REALCLI_PREFIX")
    if explicit:
        return Path(explicit)
    digest = sha256((HERE / "package-lock.json").read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("TURNLOG_CACHE") or Path.home() / ".cache" / "turnlog")
    return cache / "realcli" / digest


def _unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"TURNLOG_REQUIRE_REALCLI=1 but the real CLIs are unavailable: {reason}")
    pytest.skip(f"real CLIs unavailable: {reason}")


@pytest.fixture(scope="session")
def realcli_prefix() -> Path:
    """The install prefix of the pinned CLIs (``node_modules/.bin/{claude,codex,gemini}``)."""
    prefix = _cache_prefix()
    if (prefix / ".complete").exists():
        return prefix
    if shutil.which("node") is None or shutil.which("npm") is None:
        _unavailable("node and npm are not installed (run tests/realcli/install.sh on a machine with them)")
    # Parallel test workers (pytest-xdist) each ask for the prefix: one installs, the others
    # wait on the lock and then find it complete (install.sh returns at once).
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(prefix.parent / f"{prefix.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(
            ["bash", str(HERE / "install.sh")], capture_output=True, text=True, timeout=900, check=False
        )
    if done.returncode != 0 or not (prefix / ".complete").exists():
        _unavailable(f"tests/realcli/install.sh failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return prefix


@pytest.fixture
def upstream() -> Iterator[FakeUpstreamServer]:
    """A fake upstream (Anthropic, Responses, Gemini) on 127.0.0.1 with an empty script."""
    with UpstreamThread(FakeUpstreamServer(api_key=FAKE_KEY)) as server:
        yield server


@dataclass(frozen=True)
class Run:
    """One finished run of a real CLI."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def lines(self) -> list[dict[str, Any]]:
        """The JSON lines of stdout (lines that are not JSON objects are left out)."""
        out = []
        for line in self.stdout.splitlines():
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                out.append(value)
        return out

    def of_type(self, kind: str, subtype: str | None = None) -> list[dict[str, Any]]:
        """Lines whose ``type`` (and ``subtype`` when given) match."""
        return [
            line
            for line in self.lines
            if line.get("type") == kind and (subtype is None or line.get("subtype") == subtype)
        ]


@dataclass
class RealCLI:
    """A real CLI ready to run offline against the fake upstream."""

    name: str
    executable: Path
    env: dict[str, str]
    """The complete environment of the child (hermetic: built from nothing)."""
    home: Path
    workdir: Path
    """A fresh working directory (the CLIs keep sessions per directory)."""
    base_args: list[str] = field(default_factory=list)

    def run(
        self,
        args: Sequence[str],
        *,
        timeout: float = 90,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Run:
        """Run the CLI with ``args`` (stdin closed) and wait for it."""
        argv = [str(self.executable), *self.base_args, *args]
        started = time.monotonic()
        done = subprocess.run(
            argv,
            cwd=cwd or self.workdir,
            env={**self.env, **(env or {})},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Run(argv, done.returncode, done.stdout, done.stderr, time.monotonic() - started)

    def timed_lines(
        self, args: Sequence[str], *, timeout: float = 90, cwd: Path | None = None
    ) -> tuple[list[tuple[float, dict[str, Any]]], int]:
        """Run the CLI and note when each stdout JSON line arrived (seconds since the start)."""
        argv = [str(self.executable), *self.base_args, *args]
        started = time.monotonic()
        out: list[tuple[float, dict[str, Any]]] = []
        with subprocess.Popen(
            argv,
            cwd=cwd or self.workdir,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        ) as process:
            assert process.stdout is not None
            for line in process.stdout:
                if time.monotonic() - started > timeout:
                    process.kill()
                    raise TimeoutError(f"{self.name} ran longer than {timeout} s")
                try:
                    value = json.loads(line)
                except json.JSONDecodeError:
                    continue
                out.append((time.monotonic() - started, value))
            code = process.wait(timeout=timeout)
        return out, code

    def capture(self, name: str, run: Run) -> None:
        """With ``TURNLOG_REALCLI_CAPTURE=1``: keep ``run`` as ``transcripts/<cli>.<name>.ndjson``.

        The private directories become ``/tmp/realcli`` so that transcripts do not change with
        the machine; the exit status is kept beside them (``.exit``).
        """
        if not CAPTURE:
            return
        root = str(self.home.parent)
        TRANSCRIPTS.mkdir(exist_ok=True)
        stem = f"{self.name}.{name}"
        # Claude also names directories by the path with every other character as "-".
        munged = re.sub(r"[^A-Za-z0-9]", "-", root)
        text = run.stdout.replace(root, "/tmp/realcli").replace(munged, "-tmp-realcli")
        (TRANSCRIPTS / f"{stem}.ndjson").write_text(text, encoding="utf-8")
        (TRANSCRIPTS / f"{stem}.exit").write_text(f"{run.returncode}\n", encoding="utf-8")


def _base_env(home: Path) -> dict[str, str]:
    node = shutil.which("node")
    dirs = [str(Path(node).parent)] if node else []
    path = os.pathsep.join(dict.fromkeys([*dirs, "/usr/local/bin", "/usr/bin", "/bin"]))
    return {"PATH": path, "HOME": str(home), "LANG": "C.UTF-8", "TERM": "dumb", "NO_COLOR": "1", "CI": "1"}


def _dirs(tmp_path: Path, name: str) -> tuple[Path, Path]:
    home = tmp_path / f"{name}-home"
    work = tmp_path / f"{name}-work"
    home.mkdir()
    work.mkdir()
    return home, work


@pytest.fixture
def claude_cli(realcli_prefix: Path, upstream: FakeUpstreamServer, tmp_path: Path) -> RealCLI:
    """Claude Code against the fake Anthropic API."""
    home, work = _dirs(tmp_path, "claude")
    env = _base_env(home) | {
        "ANTHROPIC_BASE_URL": upstream.base_url,
        "ANTHROPIC_API_KEY": FAKE_KEY,
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # Upstream errors end the run at once instead of after ten backed-off retries.
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }
    return RealCLI("claude", realcli_prefix / "node_modules" / ".bin" / "claude", env, home, work)


def write_codex_config(codex_home: Path, base_url: str) -> None:
    """The ``config.toml`` that points Codex at the fake Responses API."""
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        "\n".join(
            [
                'model_provider = "fake"',
                'model = "gpt-5.5"',  # a model Codex has metadata for (no warning item)
                "",
                "[model_providers.fake]",
                'name = "fake upstream"',
                f'base_url = "{base_url}"',
                'env_key = "FAKE_UPSTREAM_API_KEY"',
                'wire_api = "responses"',
                "request_max_retries = 0",
                "stream_max_retries = 0",
                "",
            ]
        ),
        encoding="utf-8",
    )


@pytest.fixture
def codex_cli(realcli_prefix: Path, upstream: FakeUpstreamServer, tmp_path: Path) -> RealCLI:
    """Codex against the fake OpenAI Responses API."""
    home, work = _dirs(tmp_path, "codex")
    codex_home = home / ".codex"
    write_codex_config(codex_home, upstream.openai_base_url)
    env = _base_env(home) | {"CODEX_HOME": str(codex_home), "FAKE_UPSTREAM_API_KEY": FAKE_KEY}
    return RealCLI("codex", realcli_prefix / "node_modules" / ".bin" / "codex", env, home, work)


def write_gemini_settings(home: Path) -> None:
    """``~/.gemini/settings.json`` selecting API-key auth (headless mode exits 41 without it)."""
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(
        json.dumps(
            {
                "security": {"auth": {"selectedType": "gemini-api-key"}},
                # One attempt per request (a 429 fails at once) and no usage statistics (whose
                # upload to a Google endpoint would hold the exit of an offline CLI).
                "general": {"maxAttempts": 1},
                "privacy": {"usageStatisticsEnabled": False},
                "telemetry": {"enabled": False},
            }
        ),
        encoding="utf-8",
    )


@pytest.fixture
def gemini_cli(realcli_prefix: Path, upstream: FakeUpstreamServer, tmp_path: Path) -> RealCLI:
    """Gemini CLI against the fake Gemini API."""
    home, work = _dirs(tmp_path, "gemini")
    write_gemini_settings(home)
    env = _base_env(home) | {
        "GEMINI_API_KEY": FAKE_KEY,
        "GOOGLE_GEMINI_BASE_URL": upstream.base_url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        # Run in this process instead of relaunching node with a larger heap: halves the start-up.
        "GEMINI_CLI_NO_RELAUNCH": "true",
    }
    return RealCLI("gemini", realcli_prefix / "node_modules" / ".bin" / "gemini", env, home, work)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EventStore]:
    """A fresh SQLite store (with the catalogue's upcasters) for one test, closed after it."""
    opened = open_store(f"sqlite:///{tmp_path / 'turnlog.db'}", upcasters=catalogue_upcasters())
    try:
        yield opened
    finally:
        await opened.close()
