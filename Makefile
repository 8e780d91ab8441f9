# Two commands on a fresh machine: `make run` (the default sweep on llvm-cpu) and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
GEN ?= gen
# seconds of interleaved timing rounds per operation: 12 operations keep `make run` near 4 minutes
BUDGET ?= 10

.PHONY: setup run test fast lint unit browser database bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@

# A dispatch that fails to compile is a recorded row, not the end of the run (the leading `-`):
# the profiler reports it with the others, and its exit status is the run's.
run: setup
	$(PY) generator.py --generated-dir $(GEN)
	-$(PY) compile.py --generated-dir $(GEN)
	$(PY) profiler.py --generated-dir $(GEN) --output $(GEN)/data.csv --time-budget=$(BUDGET) --html $(GEN)/report.html

# The lint and type gate (ruff, mypy) beside the fast lane (no IREE tool runs; each side takes
# one core for about a minute), then the tests that drive the real IREE tools: those on every
# core (one test file per worker: a file's fixtures are made once), then the few that judge one
# timing against another, alone (`serial`: a neighbour's load is not theirs to measure). The
# HTML reports' tests open them in Debian's headless chromium: installed here where missing
# (the tests skip, saying why, where it cannot be).
test: setup browser database
	$(MAKE) --no-print-directory -j2 --output-sync=target lint unit
	$(PY) -m pytest -q -m "iree and not serial" --numprocesses=auto --maxprocesses=4 --dist=loadfile
	$(PY) -m pytest -q -m "iree and serial"

# The lint gate and the fast lane alone.
fast: setup
	$(MAKE) --no-print-directory -j2 --output-sync=target lint unit

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

unit: setup
	$(PY) -m pytest -q -m "not iree"

browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; } || \
	  echo "chromium could not be installed: the browser tests will skip"

# The results store's server test starts a real PostgreSQL: Debian's, installed where missing.
database:
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  { apt-get update -qq && apt-get install -y -qq postgresql >/dev/null; } || \
	  echo "postgresql could not be installed: the server test will skip"

bench: setup
	$(PY) benchmarks/bench_matmul.py
	$(PY) benchmarks/bench_operations.py

clean:
	rm -rf $(GEN) .pytest_cache
