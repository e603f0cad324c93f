# `make test` on a fresh machine: creates .venv, installs PyTorch (CPU build unless a torch is
# already importable there), the package with its test extra, and runs the whole test suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build keeps the install small where no GPU is wanted. On a machine that cannot find it on
# its default index, pass e.g. TORCH_INDEX=https://download.pytorch.org/whl/cpu.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
# The tests run on a worker process per CPU (pytest-xdist), each test file on one worker so that a file's
# fixtures are made once; the session's shared fixtures are made once for all workers (tests/conftest.py).
# TEST_WORKERS=0 runs them in this one process.
TEST_WORKERS ?= auto
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

.PHONY: test test-fast install completions clean

test: $(VENV)/.installed
	$(PYTEST)

test-fast: $(VENV)/.installed
	$(PYTEST) -m "not slow"

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH_SPEC)"
	$(PY) -m pip install -e ".[test]"
	touch $@

# The static shell completions in completions/ (bash, zsh, fish), from the CLI's definition: run after
# adding or changing a command or option (tests/test_completions.py fails until you do).
completions: $(VENV)/.installed
	$(PY) scripts/generate_completions.py

clean:
	rm -rf $(VENV) build *.egg-info
