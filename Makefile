# The two commands of a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The demo needs the package and rich, not the test toolchain (pytest, mypy, playwright, the
# provider SDKs...): its own stamp keeps a fresh `make demo` to a few small wheels.
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test lint typecheck install bench clean realcli

# The venv is made without pip: ensurepip would unpack pip and setuptools into it first, about
# 4 s of CPU, a third of a fresh `make demo`. The package is a PEP 660 editable install (the
# build backend comes from pip's cache through build isolation).
$(BIN)/python:
	$(PYTHON) -m venv --without-pip $(VENV)

# `make test` uses the venv's own pip, given one by ensurepip when the venv has none yet.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip --version >/dev/null 2>&1 || $(BIN)/python -m ensurepip --default-pip >/dev/null
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# The demo's install: the venv's pip if it has one, else the host python's pip aimed at the venv
# (--python, pip 22.3 or later), else ensurepip. (--no-compile was measured too: it saved about
# 1.5 s of CPU in pip and moved about 1 s into the demo's own run, inside its time budget.)
DEMO_PIP_ARGS := install --quiet --disable-pip-version-check -e '.[demo]'
$(DEMO_STAMP): $(BIN)/python pyproject.toml
	@if $(BIN)/python -m pip --version >/dev/null 2>&1; then \
		$(BIN)/python -m pip $(DEMO_PIP_ARGS); \
	else \
		$(PYTHON) -m pip --python $(BIN)/python $(DEMO_PIP_ARGS) 2>/dev/null || { \
			$(BIN)/python -m ensurepip --default-pip >/dev/null && $(BIN)/python -m pip $(DEMO_PIP_ARGS); }; \
	fi
	touch $(DEMO_STAMP)

install: $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/turnlog demo
	@echo "(turnlog is in $(BIN): run $(BIN)/turnlog, or 'source $(BIN)/activate' to have it on PATH)"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy --strict over the whole package (configuration in pyproject.toml).
typecheck: $(STAMP)
	$(BIN)/mypy

# The pinned real Claude Code / Codex / Gemini CLIs (tests/realcli/package-lock.json), installed
# into a cache outside the repository; without node/npm the real-CLI tests skip with a reason.
realcli:
	@if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then \
		tests/realcli/install.sh >/dev/null || \
			echo "realcli: install failed: the real-CLI tests will say why"; \
	else \
		echo "realcli: node/npm not found: the real-CLI tests will be skipped"; \
	fi

# The tests run in parallel (pytest-xdist): most of them wait on child processes, sockets and
# fsync rather than on the CPU, so 4 workers beat 2 even on 2 cores. Tests that share something
# (a port, a file, a process-wide setting) carry @pytest.mark.xdist_group and run on one
# worker. TEST_WORKERS=0 runs them in this process, one after the other. Tests marked `serial`
# hold the shared PostgreSQL server in one long transaction (which holds back every global
# reader on it), so they run first, alone.
TEST_WORKERS ?= 4

test: $(STAMP) realcli
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -m serial
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=15 -m "not serial"

bench: $(STAMP)
	$(BIN)/turnlog bench append

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
