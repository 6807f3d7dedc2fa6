# Two commands a user needs: `make run` and `make test`. Both install into .venv from uv.lock.
PYTHON ?= python3
VENV   := .venv
UV_VERSION := 0.13.8
STAMP  := $(VENV)/.installed-stamp
ARGS   ?=

.PHONY: install run test lint compile clean

$(STAMP): pyproject.toml uv.lock
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@$(VENV)/bin/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)
	# Installs exactly what uv.lock says (resolved once; pip's resolver backtracks for minutes here).
	$(VENV)/bin/uv sync --frozen --extra dev --python $(VENV)/bin/python
	@touch $(STAMP)

install: $(STAMP)

run: install
	$(VENV)/bin/paddle-mlops run $(ARGS)

test: install
	$(VENV)/bin/python -m pytest $(ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/paddle-mlops compile --check

compile: install
	$(VENV)/bin/paddle-mlops compile

clean:
	rm -rf $(VENV) .paddle-mlops .pytest_cache
