"""Gemini CLI's auth type as the pinned CLI works it out: settings files, trust, ``.env``, env."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from turnlog.kernel.wire import _gemini_settings as gs
from turnlog.kernel.wire import wire_target
from turnlog.kernel.wire._gemini_settings import gemini_start, merge, parse_dotenv, strip_json_comments


def _write(path: Path, value: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value if isinstance(value, str) else json.dumps(value), encoding="utf-8")
    return path


def _auth(kind: str) -> dict[str, Any]:
    return {"security": {"auth": {"selectedType": kind}}}


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A home, a workspace under it, and an environment naming them (system files elsewhere)."""
    home = tmp_path / "home"
    work = home / "projects" / "app"
    work.mkdir(parents=True)
    env = {
        "HOME": str(home),
        "GEMINI_CLI_SYSTEM_SETTINGS_PATH": str(tmp_path / "etc" / "settings.json"),
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }
    return home, work, env


@pytest.fixture
def secure(monkeypatch: pytest.MonkeyPatch) -> None:
    """System files count as root's (tmp_path is under the world-writable /tmp)."""
    monkeypatch.setattr(gs, "_secure_system_file", lambda path: True)


def test_the_settings_merge_system_over_workspace_over_user_over_system_defaults(
    dirs: tuple[Path, Path, dict[str, str]], tmp_path: Path, secure: None
) -> None:
    home, work, env = dirs
    assert gemini_start(env, str(work)).auth is None  # nothing chosen: the CLI stops
    _write(tmp_path / "etc" / "system-defaults.json", _auth("gateway"))
    assert gemini_start(env, str(work)).auth == "gateway"
    _write(home / ".gemini" / "settings.json", _auth("gemini-api-key"))
    assert gemini_start(env, str(work)).auth == "gemini-api-key"
    _write(work / ".gemini" / "settings.json", _auth("vertex-ai"))
    assert gemini_start(env, str(work)).auth == "vertex-ai"
    _write(tmp_path / "etc" / "settings.json", _auth("oauth-personal"))
    assert gemini_start(env, str(work)).auth == "oauth-personal"
    # the defaults file beside the system settings, or where GEMINI_CLI_SYSTEM_DEFAULTS_PATH says
    moved = {**env, "GEMINI_CLI_SYSTEM_DEFAULTS_PATH": str(tmp_path / "nowhere.json")}
    (tmp_path / "etc" / "settings.json").unlink()
    for path in (home / ".gemini" / "settings.json", work / ".gemini" / "settings.json"):
        path.unlink()
    assert gemini_start(moved, str(work)).auth is None


def test_the_settings_choice_wins_over_the_environment_s(dirs: tuple[Path, Path, dict[str, str]]) -> None:
    home, work, env = dirs
    env = {**env, "GOOGLE_GENAI_USE_VERTEXAI": "true", "GEMINI_API_KEY": "k"}
    assert gemini_start(env, str(work)).auth == "vertex-ai"
    _write(work / ".gemini" / "settings.json", _auth("gemini-api-key"))
    assert gemini_start(env, str(work)).auth == "gemini-api-key"
    # a null in a higher file clears the choice: the environment's counts again
    _write(work / ".gemini" / "settings.json", {"security": {"auth": {"selectedType": None}}})
    _write(home / ".gemini" / "settings.json", _auth("oauth-personal"))
    assert gemini_start(env, str(work)).auth == "vertex-ai"


def test_the_environment_s_choice_in_the_cli_s_order(dirs: tuple[Path, Path, dict[str, str]]) -> None:
    _home, work, env = dirs
    cases = [
        ({"GOOGLE_GENAI_USE_GCA": "true", "GOOGLE_GENAI_USE_VERTEXAI": "true"}, "oauth-personal"),
        ({"GOOGLE_GENAI_USE_VERTEXAI": "true", "GOOGLE_GEMINI_BASE_URL": "http://g"}, "vertex-ai"),
        ({"GOOGLE_GEMINI_BASE_URL": "http://g", "GEMINI_API_KEY": "k"}, "gateway"),
        ({"GEMINI_API_KEY": "k"}, "gemini-api-key"),
        ({"GEMINI_CLI_USE_COMPUTE_ADC": "true"}, "compute-default-credentials"),
        ({"GOOGLE_GENAI_USE_VERTEXAI": "TRUE"}, None),  # the CLI compares with "true" exactly
    ]
    for extra, expected in cases:
        assert gemini_start({**env, **extra}, str(work)).auth == expected, extra


def test_the_workspace_is_the_run_directory_and_not_the_home(dirs: tuple[Path, Path, dict[str, str]]) -> None:
    home, work, env = dirs
    _write(home / "projects" / ".gemini" / "settings.json", _auth("vertex-ai"))  # not searched upwards
    assert gemini_start(env, str(work)).auth is None
    _write(home / ".gemini" / "settings.json", _auth("gemini-api-key"))
    assert gemini_start(env, str(home)).auth == "gemini-api-key"  # at home: the user's file only
    # GEMINI_CLI_HOME moves the user's settings
    other = home / "elsewhere"
    _write(other / ".gemini" / "settings.json", _auth("oauth-personal"))
    assert gemini_start({**env, "GEMINI_CLI_HOME": str(other)}, str(work)).auth == "oauth-personal"


def test_an_untrusted_workspace_s_settings_do_not_count(dirs: tuple[Path, Path, dict[str, str]]) -> None:
    home, work, env = dirs
    _write(work / ".gemini" / "settings.json", _auth("vertex-ai"))
    untrusted = {k: v for k, v in env.items() if k != "GEMINI_CLI_TRUST_WORKSPACE"}
    start = gemini_start(untrusted, str(work))
    assert (start.auth, start.trusted) == (None, False)  # no rule: not trusted
    assert gemini_start({**untrusted, "GEMINI_CLI_TRUST_WORKSPACE": "false"}, str(work)).auth is None
    assert gemini_start({**env, "GEMINI_RESTRICTED_MODE": "true"}, str(work)).auth is None
    # --skip-trust lets the run go ahead, but the CLI loaded its settings before reading it
    assert gemini_start(untrusted, str(work), ["--skip-trust"]).auth is None
    # the trusted folders file: the longest rule that holds the directory decides
    folders = home / ".gemini" / "trustedFolders.json"
    _write(folders, {str(home): "TRUST_FOLDER"})
    assert gemini_start(untrusted, str(work)).auth == "vertex-ai"
    _write(folders, {str(home): "TRUST_FOLDER", str(work): "DO_NOT_TRUST"})
    assert gemini_start(untrusted, str(work)).auth is None
    _write(folders, {str(home): "DO_NOT_TRUST", str(work / "sub"): "TRUST_PARENT"})
    assert gemini_start(untrusted, str(work)).auth == "vertex-ai"
    _write(folders, {str(work): "TRUST_ME"})  # an invalid file: the CLI stops
    assert gemini_start(untrusted, str(work)).auth is None
    moved = {
        **untrusted,
        "GEMINI_CLI_TRUSTED_FOLDERS_PATH": str(_write(home / "t.json", {str(work): "TRUST_FOLDER"})),
    }
    assert gemini_start(moved, str(work)).auth == "vertex-ai"
    # folder trust switched off (not by the workspace itself): every folder is trusted
    _write(home / ".gemini" / "settings.json", {"security": {"folderTrust": {"enabled": False}}})
    assert gemini_start(untrusted, str(work)).auth == "vertex-ai"


def test_system_files_count_only_when_root_owns_them_and_their_directories(
    dirs: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    _home, work, env = dirs
    system = _write(tmp_path / "etc" / "settings.json", _auth("vertex-ai"))
    # under /tmp (writable by others): skipped, as the CLI skips it with a warning
    assert gemini_start(env, str(work)).auth is None
    assert not gs._secure_system_file(str(system))
    assert gs._secure_system_file(str(tmp_path / "absent.json"))  # no file: nothing to distrust


def test_settings_files_may_hold_comments_and_variables(dirs: tuple[Path, Path, dict[str, str]]) -> None:
    home, work, env = dirs
    text = '{\n  // the login\n  "security": {"auth": /* chosen */ {"selectedType": "${AUTH:-gemini-api-key}"}},\n'
    text += '  "url": "http://x//y"\n}'
    _write(home / ".gemini" / "settings.json", text)
    assert gemini_start(env, str(work)).auth == "gemini-api-key"
    assert gemini_start({**env, "AUTH": "vertex-ai"}, str(work)).auth == "vertex-ai"
    assert json.loads(strip_json_comments(text))["url"] == "http://x//y"
    _write(home / ".gemini" / "settings.json", '{"security": ')  # broken: read as empty
    assert gemini_start(env, str(work)).auth is None


def test_the_env_file_fills_in_the_environment(dirs: tuple[Path, Path, dict[str, str]]) -> None:
    home, work, env = dirs
    _write(work / ".env", "GOOGLE_GENAI_USE_VERTEXAI=true\nGOOGLE_CLOUD_LOCATION=us # the REP\nDEBUG=1\n")
    start = gemini_start(env, str(work))
    assert start.auth == "vertex-ai" and start.env["GOOGLE_CLOUD_LOCATION"] == "us"
    assert "DEBUG" not in start.env  # excluded from a project .env
    assert gemini_start({**env, "GOOGLE_GENAI_USE_VERTEXAI": "false"}, str(work)).auth is None  # env wins
    # .gemini/.env comes first in a trusted workspace, and is skipped in an untrusted one
    _write(work / ".gemini" / ".env", "GOOGLE_GENAI_USE_GCA=true\n")
    assert gemini_start(env, str(work)).auth == "oauth-personal"
    untrusted = {k: v for k, v in env.items() if k != "GEMINI_CLI_TRUST_WORKSPACE"}
    start = gemini_start(untrusted, str(work))
    assert start.auth is None and "GOOGLE_CLOUD_LOCATION" in start.env  # only the auth variables
    # --ignore-env: a project .env is skipped; the home directory's is still read
    _write(home / ".env", "GEMINI_API_KEY=from-home\n")
    assert gemini_start(env, str(work), ["--ignore-env"]).auth == "oauth-personal"
    (work / ".gemini" / ".env").unlink()
    assert gemini_start(env, str(work), ["--ignore-env"]).auth == "gemini-api-key"


def test_dotenv_and_merge_follow_the_cli_s_libraries() -> None:
    # the same as npm dotenv's parse gives (checked with node)
    text = "export A=1\nB = 'two words'\nC=\"x\\ny\"\n# D=4\nE=5 # note\nG=\nH=a=b\n  I = spaced  \nK=`t`\n"
    assert parse_dotenv(text) == {
        "A": "1",
        "B": "two words",
        "C": "x\ny",
        "E": "5",
        "G": "",
        "H": "a=b",
        "I": "spaced",
        "K": "t",
    }
    assert merge({"a": {"b": 1, "c": 2}}, {"a": {"b": None}}, {"a": "flat"}, {"a": {"d": 3}}) == {
        "a": {"d": 3}
    }


def test_wire_target_follows_the_workspace_and_the_env_file(dirs: tuple[Path, Path, dict[str, str]]) -> None:
    _home, work, env = dirs
    _write(work / ".gemini" / "settings.json", _auth("vertex-ai"))
    target = wire_target("gemini", {**env, "GOOGLE_API_KEY": "k"}, str(work))
    assert target is not None and (target.api, target.upstream) == (
        "gemini",
        "https://aiplatform.googleapis.com",
    )
    assert target.options("http://h", {})["env"] == {"GOOGLE_VERTEX_BASE_URL": "http://h"}
    # the .env file names the location, and the CLI maps the multi-region to its REP endpoint
    _write(work / ".gemini" / ".env", "GOOGLE_CLOUD_LOCATION=eu\n")
    target = wire_target("gemini", {**env, "GOOGLE_API_KEY": "k"}, str(work))
    assert target is not None and target.upstream == "https://aiplatform.eu.rep.googleapis.com"
    regional = {**env, "GOOGLE_CLOUD_PROJECT": "p", "GOOGLE_CLOUD_LOCATION": "europe-west4"}
    target = wire_target("gemini", regional, str(work))
    assert target is not None and target.upstream == "https://europe-west4-aiplatform.googleapis.com"
    # express mode (an API key) drops the project and location: the global host
    target = wire_target("gemini", {**regional, "GOOGLE_API_KEY": "k"}, str(work))
    assert target is not None and target.upstream == "https://aiplatform.googleapis.com"
    _write(work / ".gemini" / "settings.json", _auth("compute-default-credentials"))
    target = wire_target("gemini", env, str(work))
    assert target is not None and target.api == "code_assist"
