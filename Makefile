# Set-up and everyday commands. Everything a fresh clone needs is installed from here.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DIR ?= demo-output

.PHONY: demo test test-main test-oldest test-fast lint format bench clean

# Python caches compiled modules (__pycache__/*.pyc) here as it does for users, also where the
# environment says not to (PYTHONDONTWRITEBYTECODE): the processes the suite starts then
# import snap compiled, and later pytest runs take the rewritten test modules cached (one
# pair on 2 cores, 2026-12-03, main suite: 1,872 -> 1,672 CPU-s, 1,066 -> 924 s; and it
# found a bug only cached bytecode shows: see snapshot_cli/writers/bytecode.py).
unexport PYTHONDONTWRITEBYTECODE

# A venv whose making failed is removed, not kept: a later make (with another PYTHON, or
# after installing python3-venv) found it and failed as before ("No module named pip", or the
# old Python's "requires a different Python"), saying nothing of the venv.
$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null || { \
		echo "make: snap needs Python 3.10 or newer; $(PYTHON) is $$($(PYTHON) -V 2>&1):" \
			"give another, e.g. make $(MAKECMDGOALS) PYTHON=python3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); echo "make: $(PYTHON) -m venv failed" \
		"(on Debian and Ubuntu: apt install python3-venv); $(VENV) removed" >&2; exit 1; }
	$(BIN)/python -m pip install --quiet --upgrade pip || { rm -rf $(VENV); \
		echo "make: pip could not be upgraded in $(VENV); it was removed: run make again" >&2; \
		exit 1; }

# setup.py, snapshot_cli/*.c and the headers they include (*.h): the compiled parts, built by the install
CSOURCES := $(wildcard snapshot_cli/*.c snapshot_cli/*.h)
$(VENV)/.installed: pyproject.toml setup.py $(CSOURCES) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# --no-compile: pip would compile every module of every package (21,582 files with the test
# extras; 106 -> 42 s of a fresh install on 2 cores, 2026-12-03); Python compiles and caches
# the few thousand a run imports, once, as they are first imported (torch ~2.6 CPU-s,
# tensorflow ~10).
$(VENV)/.installed-test: pyproject.toml setup.py $(CSOURCES) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --no-compile -e '.[test]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/python examples/quickstart/make_inputs.py $(DEMO_DIR)/raw 500
	$(BIN)/snap create examples/quickstart/pipeline.py:preprocess $(DEMO_DIR)/snapshot \
		--input '$(DEMO_DIR)/raw/*.bin' --param size=64
	$(BIN)/snap inspect $(DEMO_DIR)/snapshot
	$(BIN)/python examples/quickstart/replay.py $(DEMO_DIR)/snapshot

# Two pytest runs (pytest-xdist; an idle worker takes tests from a busy one): most tests,
# then the storage backends, each worker with servers of its own, in processes apart from
# the rest (their hdfs:// tests load a JVM, after which a process must not fork: see
# tests/conftest.py). WORKERS is one more than CI's 2 cores: a third of the suite's time
# waits on subprocesses and servers. On 2 cores (2026-12-02) the main suite took 12:22 in 2
# workers and 10:55 in 3, the backends 3:42 and 2:45.
#
# The oldest versions' run (test-oldest) runs beside the rest: its venv takes its
# dependencies while pip installs the main venv's (one core), then snap is built into it
# (after the main venv's editable build: two builds at once write the tree's egg-info and
# build/ together) and its tests run beside ruff, mypy and the main suite at a lower priority
# (nice 10), their output printed at the end. Clean clones on 2 cores, 2026-12-03: beside
# the main suite 1,229 s (same priority) and 1,234 s (nice 10), the main suite 941 and 927 s
# and the backends 215 and 239 s after it; beside the backends at nice 10 1,323 s (main
# suite 954 s, backends 276 s: their servers' tests wait on answers a busy machine gives
# slowly, as at the same priority before, 276-318 s against 165 s alone); 1,287 s before
# (the oldest venv built after the main venv, its tests beside the backends).
WORKERS ?= 3
test:
	@$(MAKE) --no-print-directory $(OLDEST)/.deps > .oldest-build.log 2>&1 & pid=$$!; \
	$(MAKE) --no-print-directory $(VENV)/.installed-test; installed=$$?; \
	wait $$pid; deps=$$?; cat .oldest-build.log; rm -f .oldest-build.log; \
	[ $$installed -eq 0 ] && [ $$deps -eq 0 ]
	@echo "running test-oldest in the background (its output follows the rest) while:"; \
	nice -n 10 $(MAKE) --no-print-directory test-oldest OLDEST_WORKERS=2 > .oldest.log 2>&1 & \
	pid=$$!; \
	$(MAKE) --no-print-directory test-main; tests=$$?; \
	wait $$pid; oldest=$$?; cat .oldest.log; rm -f .oldest.log; \
	[ $$tests -eq 0 ] && [ $$oldest -eq 0 ]

# make test without the oldest versions' run: lint, types, the main suite, the backends.
test-main: $(VENV)/.installed-test
	$(BIN)/ruff check snapshot_cli tests examples benchmarks
	$(BIN)/ruff format --check snapshot_cli tests examples benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist worksteal --ignore=tests/backends --ignore=tests/infra
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist worksteal tests/backends tests/infra

# The core tests against the oldest versions pyproject.toml allows (every dependency at its
# minimum, tests/oldest.py), in a venv of their own: the minimums stay true. Under the oldest
# Python it allows (3.10) where this machine has one (on PATH, or installed by pyenv), else
# under $(PYTHON); the run prints which.
OLDEST ?= .venv-oldest
OLDEST_PYTHON ?= $(or $(shell for p in python3.10 \
	$$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.10.*/bin/python3.10 2>/dev/null); do \
	$$p -c '' >/dev/null 2>&1 && echo $$p && break; done),$(PYTHON))
OLDEST_TESTS := tests/commands tests/test_ipc_blocks.py tests/test_manifest.py \
	tests/test_keywords.py tests/writers/test_convert.py tests/writers/test_records.py \
	tests/writers/test_create.py tests/readers/test_loader.py tests/readers/test_window.py \
	tests/test_stored_types.py

# its dependencies (snap's at their minimums, and pytest's), then snap itself, editable
$(OLDEST)/.deps: pyproject.toml tests/oldest.py
	$(OLDEST_PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --upgrade pip
	$(OLDEST)/bin/python tests/oldest.py > $(OLDEST)/constraints.txt
	$(OLDEST)/bin/python -m pip install --quiet --no-compile -r $(OLDEST)/constraints.txt \
		pytest pytest-xdist hypothesis
	touch $@

$(OLDEST)/.installed: $(OLDEST)/.deps setup.py $(CSOURCES)
	$(OLDEST)/bin/python -m pip install --quiet --no-compile --no-deps -e .
	touch $@

OLDEST_WORKERS ?= $(WORKERS)
test-oldest: $(OLDEST)/.installed
	$(OLDEST)/bin/python --version
	$(OLDEST)/bin/python -m pip list --format=freeze | grep -i -E "^(click|pyarrow|fsspec|numpy)=="
	$(OLDEST)/bin/python -m pytest -q -n $(OLDEST_WORKERS) --dist worksteal $(OLDEST_TESTS)

# The edit-test loop: lint, types, and the tests that need no server, no kill, no slow sweep.
test-fast: $(VENV)/.installed-test
	$(BIN)/ruff check snapshot_cli tests examples benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -m "not slow" --ignore=tests/backends --ignore=tests/reliability \
		--ignore=tests/test_readme.py

lint: $(VENV)/.installed-test
	$(BIN)/ruff check snapshot_cli tests examples benchmarks

format: $(VENV)/.installed-test
	$(BIN)/ruff format snapshot_cli tests examples benchmarks
	$(BIN)/ruff check --fix snapshot_cli tests examples benchmarks

# The peers' packages. LitData's own requirements pull a CUDA build of torch (through
# torchvision), so it is installed without them, beside the CPU torch of the test extras.
$(VENV)/.installed-bench: pyproject.toml $(VENV)/.installed-test
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m pip install --quiet --no-deps litdata lightning-utilities obstore tifffile
	touch $@

bench: $(VENV)/.installed-bench
	$(BIN)/python benchmarks/create.py --ray
	$(BIN)/python benchmarks/replay.py
	$(BIN)/python benchmarks/small_records.py
	$(BIN)/python benchmarks/shapes.py
	$(BIN)/python benchmarks/remote.py
	$(BIN)/python benchmarks/device.py --codec zstd
	$(BIN)/python benchmarks/peers.py --plot docs/peers.png

clean:
	rm -rf $(VENV) $(OLDEST) $(DEMO_DIR) .pytest_cache .ruff_cache build snapshot_cli/_gather*.so snapshot_cli/_shuffle*.so snapshot_cli/_decode*.so snapshot_cli/_ragged*.so
