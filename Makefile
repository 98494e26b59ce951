# One task runner; CI calls `make test` verbatim (see .ci/run and README.md).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest-xdist workers for `make test` (every test is independent: unique Redis prefixes, port 0).
TEST_WORKERS ?= 2
# The product alone (what `make demo` and `make serve` need), without the dev toolchain.
RUNTIME_STAMP := $(VENV)/.installed-runtime
# Outside clients the protocol tests drive (the official A2A/MCP JavaScript SDKs, grpc-js): tests/js.
JS_STAMP := tests/js/node_modules/.installed

.PHONY: install demo serve test lint typecheck gen gen-check bench clean

# setup.py builds the audit log's optional C extension in place: a change to it rebuilds.
$(RUNTIME_STAMP): pyproject.toml setup.py middleware/audit/_native.c
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $(RUNTIME_STAMP)

$(STAMP): $(RUNTIME_STAMP)
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

$(JS_STAMP): tests/js/package-lock.json
	npm ci --prefix tests/js --no-audit --no-fund --loglevel=error
	touch $(JS_STAMP)

install: $(STAMP) $(JS_STAMP)

## Run the reference scenario in process (no services needed).
demo: $(RUNTIME_STAMP)
	$(BIN)/agency demo

## Serve gRPC on embedded defaults (in-memory catalog, audit log in ./agency-data).
serve: $(RUNTIME_STAMP)
	$(BIN)/agency serve

## Stub drift, lint, the import contract, types, then the test suite (needs the local Redis on 127.0.0.1:6379)
## twice: as installed (the compiled audit code, if it was built) and as pure Python (AGENCY_PURE_PYTHON=1).
test: $(STAMP) $(JS_STAMP)
	$(BIN)/python scripts/gen_protos.py --check
	$(BIN)/ruff check middleware handlers tests scripts bench
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy middleware handlers
	$(BIN)/python -c "from middleware.audit.native import implementation as i; print('audit log code:', i())"
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)
	@echo "--- again as pure Python (AGENCY_PURE_PYTHON=1)"
	AGENCY_PURE_PYTHON=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS)

lint: $(STAMP)
	$(BIN)/ruff check middleware handlers tests scripts bench
	$(BIN)/ruff format --check middleware handlers tests scripts bench
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy middleware handlers

## Regenerate the checked-in gRPC stubs from proto/.
gen: $(STAMP)
	$(BIN)/python scripts/gen_protos.py

gen-check: $(STAMP)
	$(BIN)/python scripts/gen_protos.py --check

## List the benchmarks; run them with: make bench B="goals router"
bench: $(STAMP)
	$(BIN)/python -m bench $(B)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
