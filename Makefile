# Two commands a user needs: `make run` and `make test`. Both install into .venv from uv.lock.
PYTHON ?= python3
VENV   := .venv
UV_VERSION := 0.13.8
STAMP  := $(VENV)/.installed-stamp
# Parameter-server training needs a paddlepaddle built WITH_PSCORE; the last CPU wheel with it is
# 3.0.0 (3.1+ CPU wheels dropped it). .venv-ps holds the same locked runtime set with that paddle,
# for the PS test in `make test` and for local PS runs (see docs/training.md).
PS_VENV  := .venv-ps
PS_PADDLE := 3.0.0
PS_STAMP := $(PS_VENV)/.installed-stamp
ARGS   ?=

.PHONY: install ps-env run test lint compile clean

$(STAMP): pyproject.toml uv.lock
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@$(VENV)/bin/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	# Installs exactly what uv.lock says (resolved once; pip's resolver backtracks for minutes here), byte-compiled:
	# where PYTHONDONTWRITEBYTECODE is set (CI runners, containers) every step of a run would otherwise compile its
	# imports from source again (~6 s per step process on 2 cores; docs/benchmarks.md, "make run").
	$(VENV)/bin/uv sync --frozen --extra dev --compile-bytecode --python $(VENV)/bin/python
	@touch $(STAMP)

install: $(STAMP)

$(PS_STAMP): $(STAMP)
	@test -x $(PS_VENV)/bin/python || $(VENV)/bin/uv venv -q --python $(VENV)/bin/python $(PS_VENV)
	$(VENV)/bin/uv export --frozen --no-hashes --no-dev --no-emit-project --format requirements-txt -q \
	  | sed 's/^paddlepaddle==.*;/paddlepaddle==$(PS_PADDLE) ;/' > $(PS_VENV)/requirements.txt
	$(VENV)/bin/uv pip install -q --python $(PS_VENV)/bin/python -r $(PS_VENV)/requirements.txt
	@touch $(PS_STAMP)

ps-env: $(PS_STAMP)

run: install
	$(VENV)/bin/paddle-mlops run $(ARGS)

# lint first: a few seconds, and a drift or lint error fails before the long test run starts.
test: install lint ps-env
	$(VENV)/bin/python -m pytest $(ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy paddle_mlops_core paddle_mlops pipelines steps
	$(VENV)/bin/paddle-mlops compile --check
	$(VENV)/bin/paddle-mlops lint argo/

compile: install
	$(VENV)/bin/paddle-mlops compile

clean:
	rm -rf $(VENV) $(PS_VENV) .paddle-mlops .pytest_cache
