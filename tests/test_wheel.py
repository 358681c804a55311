"""The built wheel installs in a fresh virtual environment and works from there.

The wheel is built from a copy of the source tree (so no build/ or egg-info directory lands in
the working tree), installed with its runtime dependencies into a venv that has no access to
the development environment, and then exercised from a directory outside the repository:
every module of every turnlog subpackage imports, nothing is installed under a bare
top-level name, and the console script runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYER_FOLDERS = ("eventstore", "projections", "analytics", "kernel", "testing", "tools")

# Run inside the fresh venv, with -I (isolated: no cwd, no PYTHONPATH, no user site).
PROBE = textwrap.dedent(
    """
    import importlib, importlib.util, json, pkgutil, sys
    import turnlog

    roots = list(turnlog.__path__)
    modules, failures = [], {}
    for info in pkgutil.walk_packages(turnlog.__path__, "turnlog."):
        modules.append(info.name)
        try:
            module = importlib.import_module(info.name)
        except Exception as exc:
            failures[info.name] = f"{type(exc).__name__}: {exc}"
            continue
        where = getattr(module, "__file__", None) or ""
        if not where.startswith(sys.prefix):
            failures[info.name] = f"imported from outside the venv: {where}"
    bare = [name for name in ("eventstore", "projections", "kernel", "tools")
            if importlib.util.find_spec(name) is not None]
    print(json.dumps({"roots": roots, "modules": modules, "failures": failures, "bare": bare,
                      "prefix": sys.prefix}))
    """
)


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{cmd} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


def _source_packages() -> list[str]:
    """``turnlog.<dotted folder>`` for every folder with an ``__init__.py`` under a layer folder."""
    found = []
    for layer in LAYER_FOLDERS:
        for init in sorted((ROOT / "turnlog" / layer).rglob("__init__.py")):
            relative = init.parent.relative_to(ROOT)
            if "__pycache__" not in relative.parts:
                found.append(".".join(relative.parts))
    return found


def _copy_source(dest: Path) -> Path:
    ignore = shutil.ignore_patterns(
        ".git",
        ".venv",
        "build",
        "dist",
        "*.egg-info",
        "__pycache__",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        "*.db",
        "*.db-wal",
        "*.db-shm",
        "runs",
    )
    return Path(shutil.copytree(ROOT, dest, ignore=ignore))


@pytest.mark.slow
def test_wheel_installs_and_imports_in_a_fresh_venv(tmp_path: Path) -> None:
    source = _copy_source(tmp_path / "src")
    wheels = tmp_path / "wheels"
    # No build isolation: the build backend comes from this environment, which is what keeps the
    # test fast and offline for the build step.
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    _run([*build, "--wheel-dir", str(wheels), str(source)])
    (wheel,) = wheels.glob("turnlog-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    vpython = venv / "bin" / "python"
    # The outer pip installs into the fresh venv; runtime dependencies come from the package
    # index (the local pip cache makes a repeated run cheap). Byte-compiling is skipped: the
    # probe compiles what it imports anyway, and that is a third of the install time.
    pip = [sys.executable, "-m", "pip", "--python", str(vpython), "--disable-pip-version-check"]
    # with the ui extra: turnlog.tools.ui (Starlette, uvicorn) is one of the modules probed
    _run([*pip, "install", "-q", "--no-compile", f"{wheel}[ui]"])

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = _run([str(vpython), "-I", "-c", PROBE], cwd=elsewhere)
    found = json.loads(probe.stdout)

    assert found["failures"] == {}, found["failures"]
    assert found["bare"] == [], f"installed under bare top-level names: {found['bare']}"
    assert all(root.startswith(str(venv)) for root in found["roots"]), found["roots"]
    subpackages = {name.rsplit(".", 1)[0] for name in found["modules"]} | set(found["modules"])
    # Every package folder of the source tree made it into the wheel (none forgotten in pyproject).
    for package in _source_packages():
        assert package in subpackages, f"{package} is missing from the wheel"
    site = Path(found["prefix"]) / "lib"
    for folder in LAYER_FOLDERS:
        assert not list(site.glob(f"python*/site-packages/{folder}")), f"bare {folder}/ installed"

    # the browser app's assets ship inside the wheel (no CDN, no network at run time)
    static = list(site.glob("python*/site-packages/turnlog/tools/ui/static"))
    assert static, "turnlog/tools/ui/static is missing from the wheel"
    shipped = {p.name for p in static[0].iterdir()}
    assert {"app.js", "app.css"} <= shipped, shipped
    ui_help = _run([str(venv / "bin" / "turnlog"), "ui", "--help"], cwd=elsewhere)
    assert "--allow-writes" in ui_help.stdout

    # the benchmarks stay in the checkout: the installed command says so, in one line
    bench = subprocess.run(
        [str(venv / "bin" / "turnlog"), "bench", "append"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},  # the wheel's turnlog, not ours
    )
    assert bench.returncode == 2 and "runs from a source checkout" in bench.stderr, bench.stderr
    assert not list(site.glob("python*/site-packages/benchmarks")), "benchmarks/ installed"

    help_run = _run([str(venv / "bin" / "turnlog"), "--help"], cwd=elsewhere)
    assert "usage: turnlog" in help_run.stdout
    # python -m turnlog and turnlog.__version__ work from the wheel too
    version = _run([str(vpython), "-I", "-m", "turnlog", "--version"], cwd=elsewhere)
    assert version.stdout.startswith("turnlog ") and version.stdout.split()[1][:1].isdigit()
