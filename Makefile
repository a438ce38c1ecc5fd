# Two commands from a fresh clone: `make run` and `make test` (both idempotent).
PYTHON      ?= python3.11
VENV        := .venv
LLVM_CONFIG ?= /usr/lib/llvm-19/bin/llvm-config
export DAGSTER_HOME ?= $(CURDIR)/.dagster_home
STAMP       := $(VENV)/.installed
SOURCES     := pyproject.toml CMakeLists.txt $(wildcard difftune_pipeline/engine/native/*)

.PHONY: setup run lint test test-all ui bench screenshots chromium clean

setup: $(STAMP) $(DAGSTER_HOME)/dagster.yaml

$(LLVM_CONFIG):
	apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends llvm-19-dev llvm-19

$(STAMP): $(SOURCES) | $(LLVM_CONFIG)
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip==25.3
	LLVM_CONFIG=$(LLVM_CONFIG) $(VENV)/bin/pip install -q -e '.[dev]'
	touch $(STAMP)

$(DAGSTER_HOME)/dagster.yaml: dagster_instance.yaml
	mkdir -p $(DAGSTER_HOME)
	cp dagster_instance.yaml $@

run: setup
	@$(VENV)/bin/difftune materialize

lint: setup
	$(VENV)/bin/ruff check difftune_pipeline tests bench
	$(VENV)/bin/ruff format --check difftune_pipeline tests bench

test: lint chromium
	$(VENV)/bin/pytest -m "not slow" --durations=25

test-all: lint chromium
	$(VENV)/bin/pytest

ui: setup
	$(VENV)/bin/difftune ui --host 127.0.0.1 --port 3000

chromium:
	command -v chromium >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium)

screenshots: setup chromium
	$(VENV)/bin/python bench/ui_screenshots.py

bench: setup
	$(VENV)/bin/python bench/engine_exactness.py
	$(VENV)/bin/python bench/engine_speed.py
	$(VENV)/bin/python bench/ingest_throughput.py
	$(VENV)/bin/python bench/prediction_invariance.py

clean:
	rm -rf build $(VENV) $(DAGSTER_HOME) warehouse/difftune.duckdb warehouse/models
