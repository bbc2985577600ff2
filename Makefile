# The two quickstart commands are `make demo` and `make test`; both create or reuse .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The editable install is "strict" (a link tree under build/), so a new module file needs a
# reinstall: the stamp depends on every package directory's mtime, which a new file moves.
# find descends, so nested package folders (activities/testing/ = psych_runtime.testing) count.
PKG_DIRS := $(shell find specs workflows activities workers -type d -not -name __pycache__)
STAMP := $(VENV)/.installed

.PHONY: setup path demo test check lint typecheck unit fast docs reference versions bench bench-long bench-deltas bench-startup bench-local bench-suspended clean

setup: $(STAMP)

# psych-runtime needs Python 3.11+ (pyproject's requires-python). An older interpreter is
# named before a venv is made of it, and a venv made of one is named too: pip's own
# refusal would leave that venv behind, and every later `make` would reuse it.
NEEDS_PYTHON := import sys; sys.exit(sys.version_info < (3, 11))
GOAL := $(or $(MAKECMDGOALS),setup)

$(STAMP): pyproject.toml $(PKG_DIRS)
	@test -x $(BIN)/python || $(PYTHON) -c '$(NEEDS_PYTHON)' 2>/dev/null || { \
	    echo "make: psych-runtime needs Python 3.11 or newer, and $(PYTHON) is" \
	        "$$($(PYTHON) --version 2>/dev/null || echo 'not found'):" \
	        "name a newer one, e.g. make $(GOAL) PYTHON=python3.11" >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -c '$(NEEDS_PYTHON)' || { \
	    echo "make: $(VENV) was made with $$($(BIN)/python --version 2>&1), older than" \
	        "Python 3.11: make clean, then make $(GOAL) PYTHON=python3.11 (or newer)" >&2; \
	    exit 1; }
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]' --config-settings editable_mode=strict
	@touch $(STAMP)

# `psych` (and `temporal`) live in .venv/bin: this prints the line that puts them on PATH,
# for `eval "$$(make -s path)"` (or run `source .venv/bin/activate` instead).
path: $(STAMP)
	@echo 'export PATH="$(abspath $(BIN)):$$PATH"'

demo: $(STAMP)
	$(BIN)/python examples/demo.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy
	$(BIN)/mypy tests bench examples docs/_gen

# Six processes, a module's tests in one of them (its module-scoped servers are shared),
# the files in the order tests/conftest.py gives (longest first), not xdist's own: with
# four, a fifth of the CPUs idled through the e2e files (they wait on servers), 951 s
# against 879 s. First, two processes compile pytest's rewritten test modules once, even
# where PYTHONDONTWRITEBYTECODE is set (without, each of the six compiled them all: 16 s
# of CPU apiece, 7 s with them); what fails there, the run itself reports.
unit: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -qq --collect-only tests/e2e tests/workers >/dev/null 2>&1 & \
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -qq --collect-only \
	    --ignore tests/e2e --ignore tests/workers >/dev/null 2>&1; wait; true
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -n 6 --dist loadfile --no-loadscope-reorder

test: lint typecheck docs unit

# The site in docs/ (build/site/), strict: a broken link or anchor, a page missing from the
# nav or a docstring mkdocstrings cannot read fails it; so does a generated reference page
# (Spec, CLI) that no longer matches the code. Nothing is fetched from the network.
docs: $(STAMP)
	$(BIN)/python docs/_gen/reference.py --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# Rewrite the generated reference pages (docs/reference/spec.md, cli.md) from the code.
reference: $(STAMP)
	$(BIN)/python docs/_gen/reference.py

# The fast loop: lint, types and every test that needs no Temporal server (the replay gate
# included), in about three minutes on two CPUs; `make test` stays the whole suite.
fast: $(STAMP)
	$(BIN)/pytest -n 3 -m "not server" -p no:cacheprovider

check: lint typecheck fast

# The other supported Pythons (3.12, 3.13: pyproject's classifiers), each in its own venv
# (.venv-3.12, .venv-3.13): the specs tests, the CLI import test and one e2e module.
versions:
	.ci/python-versions

bench: $(STAMP)
	$(BIN)/python -m bench

bench-long: $(STAMP)
	$(BIN)/python -m bench --long-run

# Section 10 alone (live deltas), under a minute.
bench-deltas: $(STAMP)
	$(BIN)/python -m bench._deltas

# Section 11 alone (CLI start-up), about 30 s.
bench-startup: $(STAMP)
	$(BIN)/python -m bench._startup

# Section 12 alone (local tool calls against ModelLoop, issue 27), a few minutes.
bench-local: $(STAMP)
	$(BIN)/python -m bench._local

# Section 13 alone (worker memory with many suspended Runs, issue 27).
bench-suspended: $(STAMP)
	$(BIN)/python -m bench._suspended

clean:
	rm -rf $(VENV) .venv-3.* build *.egg-info .mypy_cache .ruff_cache .pytest_cache .hypothesis
