# Two setup-to-result commands: `make demo` and `make test`.
# Both create .venv when missing and install torch==2.13.0 FIRST: an unpinned torch pulls a
# multi-GB CUDA build; the pinned one is a CPU build available locally.
# `make test` passes no -q: pyproject's addopts has one, and a second hides the "N passed" line.
# It spreads the tests over the machine's cores (pytest-xdist, at most 4 workers); every test
# starts its servers on free ports and its files under its own tmp_path, so workers never collide.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test install clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m dllm.cli.demo

test: $(STAMP)
	$(PY) -m pytest -n auto --maxprocesses=4

clean:
	rm -rf $(VENV)
