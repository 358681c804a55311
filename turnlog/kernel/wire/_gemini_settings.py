"""Gemini CLI's auth type and environment, as the pinned CLI (0.61) works them out at start.

The recorder must forward a Gemini CLI's calls where the CLI would have sent them, and that
depends on its auth type (API key, Google login / Code Assist, Vertex AI), which the CLI takes
from its merged settings, else from its environment (``getAuthTypeFromEnv``). This module does
what the CLI's ``loadSettings`` and ``loadEnvironment`` do, in the same order:

1. The settings files (``packages/cli/src/config/settings.ts``), merged lowest first:
   schema defaults < system defaults < user < workspace < system. The system settings
   (``GEMINI_CLI_SYSTEM_SETTINGS_PATH``, else ``/etc/gemini-cli/settings.json``) override
   everything; the system defaults (``GEMINI_CLI_SYSTEM_DEFAULTS_PATH``, else
   ``system-defaults.json`` beside the system settings) are below the user's. Both are read
   only when the file and every directory above it are owned by root and not writable by
   group or others (the CLI skips them otherwise, with a warning). The user's is
   ``$GEMINI_CLI_HOME/.gemini/settings.json`` (``HOME`` without it); the workspace's is
   ``<cwd>/.gemini/settings.json`` of the CLI's working directory (not searched for upwards;
   none when the working directory is the home directory), used only in a trusted workspace.
   Files may hold comments; ``$VAR``, ``${VAR}`` and ``${VAR:-default}`` in their strings are
   expanded from the environment.
2. The workspace's trust (``checkPathTrust``): ``GEMINI_RESTRICTED_MODE=true`` or
   ``GEMINI_CLI_TRUST_WORKSPACE=false`` distrust it, ``GEMINI_CLI_TRUST_WORKSPACE=true`` trusts
   it, so does ``security.folderTrust.enabled: false`` in the settings other than the
   workspace's, else the longest matching rule of ``trustedFolders.json``
   (``GEMINI_CLI_TRUSTED_FOLDERS_PATH``) decides; no rule: untrusted. ``--skip-trust`` does
   not count here: the CLI loads its settings before it reads its arguments (checked with
   the pinned CLI: with ``--skip-trust`` alone the run goes ahead without the workspace's
   settings).
3. The ``.env`` file (``findEnvFile``): from the working directory upwards, ``.gemini/.env``
   (trusted workspaces only) then ``.env``, else the home directory's; its variables fill in
   those the environment lacks (untrusted: only the four auth variables, sanitised; a
   project ``.env`` leaves out ``advanced.excludedEnvVars``).

Left out: Cloud Shell's project juggling and the IDE's trust (neither changes the upstream).
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

__all__ = ["GeminiStart", "gemini_start"]

_DEFAULT_EXCLUDED_ENV = (
    "DEBUG",
    "DEBUG_MODE",
    "GEMINI_CLI_IDE_SERVER_STDIO_COMMAND",
    "GEMINI_CLI_IDE_SERVER_STDIO_ARGS",
)
_AUTH_ENV = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION")
_TRUST_LEVELS = ("TRUST_FOLDER", "TRUST_PARENT", "DO_NOT_TRUST")


@dataclass(frozen=True, slots=True)
class GeminiStart:
    """What Gemini CLI works out at start: its auth type and its environment.

    Attributes:
        auth: The auth type (``gemini-api-key``, ``oauth-personal``, ``vertex-ai``,
            ``gateway``, ``compute-default-credentials``), or None (the CLI stops: no auth).
        env: The environment after the ``.env`` file filled in what it lacked.
        trusted: Whether the workspace is trusted (its settings and ``.gemini/.env`` count).
    """

    auth: str | None
    env: dict[str, str]
    trusted: bool


def gemini_start(env: Mapping[str, str], cwd: str | None = None, args: Sequence[str] = ()) -> GeminiStart:
    """The auth type Gemini CLI started in ``cwd`` with ``env`` and ``args`` will use.

    The settings' ``security.auth.selectedType``, else the environment's choice (the ``.env``
    file's included): ``GOOGLE_GENAI_USE_GCA``, ``GOOGLE_GENAI_USE_VERTEXAI``,
    ``GOOGLE_GEMINI_BASE_URL`` (gateway), ``GEMINI_API_KEY``, Cloud Shell / compute ADC.
    A settings file that cannot be read or parsed counts as empty (the CLI stops on it anyway).
    """
    workdir = os.path.abspath(cwd or os.getcwd())
    env = dict(env)
    home = env.get("GEMINI_CLI_HOME") or env.get("HOME") or str(Path.home())
    system_path = env.get("GEMINI_CLI_SYSTEM_SETTINGS_PATH") or _system_settings_path()
    defaults_path = env.get("GEMINI_CLI_SYSTEM_DEFAULTS_PATH") or os.path.join(
        os.path.dirname(system_path), "system-defaults.json"
    )
    system = _load(system_path, env) if _secure_system_file(system_path) else {}
    system_defaults = _load(defaults_path, env) if _secure_system_file(defaults_path) else {}
    user = _load(os.path.join(home, ".gemini", "settings.json"), env)
    at_home = _same_dir(workdir, home)
    workspace = {} if at_home else _load(os.path.join(workdir, ".gemini", "settings.json"), env)
    trusted = _trusted(merge(_SCHEMA_DEFAULTS, system_defaults, user, system), workdir, env, home)
    merged = merge(_SCHEMA_DEFAULTS, system_defaults, user, workspace if trusted else {}, system)
    env = _with_env_file(env, merged, workdir, home, trusted=trusted, args=args)
    chosen = _get(merged, "security", "auth", "selectedType")
    if isinstance(chosen, str) and chosen:
        return GeminiStart(chosen, env, trusted)
    return GeminiStart(_auth_from_env(env), env, trusted)


def _auth_from_env(env: Mapping[str, str]) -> str | None:
    """``getAuthTypeFromEnv``: the environment's choice when the settings make none."""
    if env.get("GOOGLE_GENAI_USE_GCA") == "true":
        return "oauth-personal"
    if env.get("GOOGLE_GENAI_USE_VERTEXAI") == "true":
        return "vertex-ai"
    if env.get("GOOGLE_GEMINI_BASE_URL"):
        return "gateway"
    if env.get("GEMINI_API_KEY"):
        return "gemini-api-key"
    if env.get("CLOUD_SHELL") == "true" or env.get("GEMINI_CLI_USE_COMPUTE_ADC") == "true":
        return "compute-default-credentials"
    return None


def _before_dashes(args: Sequence[str]) -> list[str]:
    args = list(args)
    return args[: args.index("--")] if "--" in args else args


# -------------------------------------------------------------------------------- the files


#: The schema defaults that bear on the auth type (``security.folderTrust.enabled``).
_SCHEMA_DEFAULTS: dict[str, Any] = {"security": {"folderTrust": {"enabled": True}, "auth": {}}}


def _system_settings_path() -> str:
    if sys.platform == "darwin":
        return "/Library/Application Support/GeminiCli/settings.json"
    if sys.platform == "win32":
        return "C:\\ProgramData\\gemini-cli\\settings.json"
    return "/etc/gemini-cli/settings.json"


def _load(path: str, env: Mapping[str, str]) -> dict[str, Any]:
    """One settings file: comments stripped, variables expanded; {} when absent or unreadable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return {}
    try:
        value = orjson.loads(strip_json_comments(text))
    except orjson.JSONDecodeError:
        return {}
    return _expand(value, env) if isinstance(value, dict) else {}


def strip_json_comments(text: str) -> str:
    """``text`` with its ``//`` and ``/* */`` comments blanked (as npm's strip-json-comments).

    Comments inside strings stay; a blanked comment keeps its newlines, so error positions hold.
    """
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
            continue
        if c == '"':
            in_string = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\r\n]", " ", text[i:end]))
            i = end
        else:
            out.append(c)
            i += 1
    return "".join(out)


_VARIABLE = re.compile(r"\$(?:(\w+)|{([^}]+?)(?::-([^}]*))?})")


def _expand(value: Any, env: Mapping[str, str]) -> Any:
    """``resolveEnvVarsInObject``: ``$VAR``, ``${VAR}``, ``${VAR:-default}`` in every string."""
    if isinstance(value, str):

        def one(match: re.Match[str]) -> str:
            name = match.group(1) or match.group(2) or ""
            if name in env:
                return env[name]
            return match.group(3) if match.group(3) is not None else match.group(0)

        return _VARIABLE.sub(one, value)
    if isinstance(value, list):
        return [_expand(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, env) for k, v in value.items()}
    return value


def merge(*sources: Mapping[str, Any]) -> dict[str, Any]:
    """``customDeepMerge``: objects merged key by key, anything else replaced (later wins).

    JSON ``null`` replaces too (only a missing key leaves the value below it); the CLI's
    array strategies (concat, union) bear on no key read here.
    """
    out: dict[str, Any] = {}
    for source in sources:
        _merge_into(out, source)
    return out


def _merge_into(target: dict[str, Any], source: Mapping[str, Any]) -> None:
    for key, value in source.items():
        if key in ("__proto__", "constructor", "prototype"):
            continue
        if isinstance(value, dict):
            below = target.get(key)
            if not isinstance(below, dict):
                below = target[key] = {}
            _merge_into(below, value)
        else:
            target[key] = value


def _get(settings: Mapping[str, Any], *keys: str) -> Any:
    value: Any = settings
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _same_dir(a: str, b: str) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False


def _secure_system_file(path: str) -> bool:
    """``isFileAndDirectorySecureSync`` on POSIX: root owns the file and every directory above.

    And none is writable by group or others; a symlink among them must be root's too. The
    path as given and the path it resolves to are both checked. A missing file is "secure"
    for the CLI, and reads as empty.
    """
    if sys.platform == "win32":  # the CLI asks the ACLs; not modelled: trust the file
        return True
    given = os.path.abspath(path)
    if not os.path.exists(given):
        return True
    real = os.path.realpath(given)
    return all(_secure_chain(p) for p in dict.fromkeys((given, real)))


def _secure_chain(path: str) -> bool:
    chain = [path]
    parent = os.path.dirname(path)
    while True:
        chain.append(parent)
        nxt = os.path.dirname(parent)
        if nxt == parent:
            break
        parent = nxt
    for item in chain:
        try:
            if os.path.islink(item) and os.lstat(item).st_uid != 0:
                return False
            st = os.stat(item)
        except FileNotFoundError:
            continue
        except OSError:
            return False
        if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return False
    return True


# -------------------------------------------------------------------------------- the trust


def _trusted(settings: Mapping[str, Any], workdir: str, env: Mapping[str, str], home: str) -> bool:
    """``checkPathTrust`` for the working directory (undecided counts as untrusted)."""
    if env.get("GEMINI_RESTRICTED_MODE") == "true" or env.get("GEMINI_CLI_TRUST_WORKSPACE") == "false":
        return False
    if env.get("GEMINI_CLI_TRUST_WORKSPACE") == "true":
        return True
    enabled = _get(settings, "security", "folderTrust", "enabled")
    if enabled is not None and not enabled:
        return True  # folder trust off: every folder is trusted
    return _trusted_by_file(workdir, env, home)


def _trusted_by_file(workdir: str, env: Mapping[str, str], home: str) -> bool:
    """The longest rule of ``trustedFolders.json`` that holds the working directory."""
    if env.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH"):
        path = env["GEMINI_CLI_TRUSTED_FOLDERS_PATH"]
    elif env.get("SANDBOX") == "sandbox-exec":
        path = os.path.join(home, ".cache", ".gemini", "trustedFolders.json")
    else:
        path = os.path.join(home, ".gemini", "trustedFolders.json")
    try:
        rules = orjson.loads(strip_json_comments(Path(path).read_text(encoding="utf-8")))
    except (OSError, orjson.JSONDecodeError):
        return False  # absent: no rule; unreadable: the CLI stops
    if not isinstance(rules, dict) or any(level not in _TRUST_LEVELS for level in rules.values()):
        return False  # the CLI stops on an invalid file
    location = os.path.realpath(workdir)
    best, level = -1, None
    for rule, trust in rules.items():
        base = os.path.dirname(rule) if trust == "TRUST_PARENT" else rule
        root = os.path.realpath(os.path.abspath(os.path.join(workdir, base)))
        if _within(root, location) and len(rule) > best:
            best, level = len(rule), trust
    return level in ("TRUST_FOLDER", "TRUST_PARENT")


def _within(parent: str, child: str) -> bool:
    relative = os.path.relpath(child, parent)
    return relative != ".." and not relative.startswith(".." + os.sep) and not os.path.isabs(relative)


# ------------------------------------------------------------------------------ the .env file


def _with_env_file(
    env: dict[str, str],
    settings: Mapping[str, Any],
    workdir: str,
    home: str,
    *,
    trusted: bool,
    args: Sequence[str],
) -> dict[str, str]:
    """``loadEnvironment``: the ``.env`` file's variables where ``env`` has none."""
    ignore_local = bool(_get(settings, "advanced", "ignoreLocalEnv")) or "--ignore-env" in _before_dashes(
        args
    )
    path = _find_env_file(workdir, home, trusted=trusted, ignore_local=ignore_local)
    if path is None:
        return env
    try:
        parsed = parse_dotenv(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return env  # the CLI ignores an unreadable .env
    excluded = _get(settings, "advanced", "excludedEnvVars")
    if not isinstance(excluded, list):
        excluded = list(_DEFAULT_EXCLUDED_ENV)
    project_file = ".gemini" not in path
    out = dict(env)
    for key, value in parsed.items():
        if not trusted:
            if key not in _AUTH_ENV:
                continue
            value = re.sub(r"[^a-zA-Z0-9\-_./]", "", value)
        if project_file and key in excluded:
            continue
        out.setdefault(key, value)
    return out


def _find_env_file(workdir: str, home: str, *, trusted: bool, ignore_local: bool) -> str | None:
    """``findEnvFile``: the ``.env`` file the CLI reads, from ``workdir`` upwards, then home's."""
    current = os.path.abspath(workdir)
    while True:
        if trusted and os.path.exists(os.path.join(current, ".gemini", ".env")):
            return os.path.join(current, ".gemini", ".env")
        candidate = os.path.join(current, ".env")
        if os.path.exists(candidate) and (not ignore_local or current == home):
            return candidate
        parent = os.path.dirname(current)
        if parent == current or not parent:
            break
        current = parent
    if trusted and os.path.exists(os.path.join(home, ".gemini", ".env")):
        return os.path.join(home, ".gemini", ".env")
    at_home = os.path.join(home, ".env")
    return at_home if os.path.exists(at_home) else None


_DOTENV_LINE = re.compile(
    r"^\s*(?:export\s+)?([\w.-]+)(?:\s*=\s*?|:\s+?)(\s*'(?:\\'|[^'])*'|\s*\"(?:\\\"|[^\"])*\""
    r"|\s*`(?:\\`|[^`])*`|[^#\r\n]+)?\s*(?:#.*)?$",
    re.MULTILINE,
)


def parse_dotenv(text: str) -> dict[str, str]:
    """Parse a .env file as npm dotenv does: ``KEY=value`` lines, quotes stripped, newline escapes in double quotes."""
    out: dict[str, str] = {}
    text = re.sub(r"\r\n?", "\n", text)
    for match in _DOTENV_LINE.finditer(text):
        value = (match.group(2) or "").strip()
        quote = value[:1]
        value = re.sub(r"^(['\"`])([\s\S]*)\1$", r"\2", value, flags=re.MULTILINE)
        if quote == '"':
            value = value.replace("\\n", "\n").replace("\\r", "\r")
        out[match.group(1)] = value
    return out
