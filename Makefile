# onceonly: `make run` starts the local stack, `make test` runs the suite on a real broker.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
JARS   := .run/kafka.classpath

.PHONY: run test lint bench install jars clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

jars: $(STAMP)
	$(BIN)/onceonly broker --fetch-only

run: $(STAMP) jars
	$(BIN)/onceonly up

test: $(STAMP) jars
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP) jars
	$(BIN)/python -m bench.ingest

clean:
	rm -rf .run .pytest_cache .mypy_cache .ruff_cache
