# All set-up on a fresh machine: `make test` or `make bm25` create .venv on first use.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
# torch 2.13.0 as pip's configured sources offer it: the CPU build on the project's machines (their pip config's
# find-links), the CUDA build from plain PyPI on Linux. A CPU build from plain PyPI:
#   make setup TORCH_SPEC="torch==2.13.0+cpu" PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
TORCH_SPEC ?= torch==2.13.0
EXTRAS     ?= test,anchor

# Data beside the checkout (../shared/data) is used when present; elsewhere datasets are downloaded.
SHARED_DATA := $(abspath ../shared/data)
ifneq ($(wildcard $(SHARED_DATA)/beir),)
export RETROMAE_IR_DATA ?= $(SHARED_DATA)/beir
export RETROMAE_IR_TOPICS ?= $(SHARED_DATA)/topics-and-qrels
export RETROMAE_IR_STS ?= $(SHARED_DATA)/sts
endif

.PHONY: setup test bm25 chain clean-venv FORCE

setup: $(STAMP)

# what was asked for (torch spec, extras): rewritten only when it changes, so `make setup EXTRAS=test,anchor,gpu`
# after a default set-up installs the gpu extra instead of finding the stamp newer than its inputs and doing nothing
SPEC      := $(VENV)/.spec
SPEC_TEXT := $(TORCH_SPEC) [$(EXTRAS)]
$(SPEC): FORCE
	@mkdir -p $(VENV)
	@echo '$(SPEC_TEXT)' | cmp -s - $@ || echo '$(SPEC_TEXT)' > $@

$(STAMP): setup.cfg pyproject.toml Makefile $(SPEC)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first and pinned, so nothing later pulls another build of it
	$(PIP) install -q "$(TORCH_SPEC)"
	# pyserini 2.4.0 declares Python>=3.12; it runs on 3.11 when installed without its deps
	$(PIP) install -q --no-deps --ignore-requires-python pyserini==2.4.0
	$(PIP) install -q -e ".[$(EXTRAS)]"
	$(PY) -m retromae_ir.hook install
	touch $(STAMP)

# the 25 slowest tests end the log: the suite must stay under 15 minutes in CI (13:08 on 2026-11-28, at 8783854)
test: setup
	$(PY) -m pytest -q --durations=25 tests

bm25: setup
	$(PY) eval/beir_all.py --retriever bm25 --datasets scifact

# the DupMAE chain on scifact, quick configuration (CHAIN_ARGS="--config short" or "--config full" for the others)
chain: setup
	$(PY) eval/chain_scifact.py $(CHAIN_ARGS)

clean-venv:
	rm -rf $(VENV)
