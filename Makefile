# The two commands of a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The demo needs the package and rich, not the test toolchain (pytest, mypy, playwright, the
# provider SDKs...): its own stamp keeps a fresh `make demo` to a few small wheels.
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test lint typecheck install bench clean realcli

# The venv's own pip installs the package (a PEP 660 editable install; the build backend comes
# from pip's cache through build isolation), so no pip/setuptools upgrade is paid for first.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

$(DEMO_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[demo]'
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
# reader on it), so they run first, alone as far as the server is concerned: mypy (one core,
# no server) runs beside them, its report printed after theirs, and either failure fails.
TEST_WORKERS ?= 4

test: $(STAMP) realcli
	$(BIN)/ruff check .
	@typed=$$(mktemp); \
	$(BIN)/mypy >"$$typed" 2>&1 & mypy=$$!; \
	echo "$(BIN)/python -m pytest -q -m serial  (with $(BIN)/mypy beside it)"; \
	$(BIN)/python -m pytest -q -m serial; serial=$$?; \
	wait $$mypy; mypy=$$?; \
	echo "$(BIN)/mypy:"; cat "$$typed"; rm -f "$$typed"; \
	[ $$serial -eq 0 ] && [ $$mypy -eq 0 ]
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=15 -m "not serial"

bench: $(STAMP)
	$(BIN)/turnlog bench append

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
