# Origin's tasks.  A fresh machine needs only python3 (3.11+) and make: the
# first target that needs the virtual environment builds it.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
BENCH_MB ?= 200

.PHONY: help run test soak bench pyz e2e clean version

help:  ## list the targets
	@grep -E '^[a-z]+:.*##' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/'

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

run: $(VENV)/.installed  ## archive this machine's agent logs into $ORIGIN_HOME (~/.origin), then show the status
	$(BIN)/origin sync
	$(BIN)/origin status

test: $(VENV)/.installed  ## the whole CI suite
	$(BIN)/python -m pytest -q -m "not soak and not slow"

soak: $(VENV)/.installed  ## the long reliability tier
	$(BIN)/python -m pytest -q -m soak

bench: $(VENV)/.installed  ## ingest, re-sync and search figures (BENCH_MB=2000 for full scale)
	BENCH_MB=$(BENCH_MB) $(BIN)/python tests/bench.py

pyz: $(VENV)/.installed  ## dist/origin.pyz (for this platform and Python minor), then smoke-run it
	$(BIN)/pip install -q 'shiv>=1.0.8'
	mkdir -p dist
	$(BIN)/shiv -c origin -o dist/origin.pyz -p '/usr/bin/env python3' --reproducible .
	$(BIN)/python -m pytest -q -m slow tests/test_pyz.py

version:  ## print the version
	@$(PY) origin.py --version

clean:  ## remove the virtual environment and build output
	rm -rf $(VENV) dist build .pytest_cache .hypothesis
