"""Shared test helpers."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from kvsim.request import RequestSpec, Segment

#: Summary keys every summary.json must hold (the headline figures users read first).
REQUIRED_SUMMARY_KEYS = (
    "num_requests",
    "num_finished",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "e2e_p99_s",
    "throughput_tokens_per_s",
    "prefix_cache_hit_rate",
    "num_preemptions",
    "kv_usage_peak",
)

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
TRACES = SHARED / "traces"


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as the module ``name``, loaded once per process: registered in
    sys.modules under that name, as the scripts' process pools pickle their functions by it."""
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    where = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert where is not None and where.loader is not None
    module = importlib.util.module_from_spec(where)
    sys.modules[name] = module
    where.loader.exec_module(module)
    return module


def spec(
    rid: int, prompt: int | list[tuple[int, int]], output: int, arrival: float = 0.0, **kw
) -> RequestSpec:
    """A request; ``prompt`` is a token count (unique content) or (content_id, tokens) pairs."""
    segs = [Segment(1000 + rid, prompt)] if isinstance(prompt, int) else [Segment(c, n) for c, n in prompt]
    return RequestSpec(request_id=rid, arrival_s=arrival, prompt=tuple(segs), output_tokens=output, **kw)


@pytest.fixture
def traces_dir() -> Path:
    if not TRACES.is_dir():
        pytest.skip(f"real traces not found at {TRACES} (they live in ../shared beside the repo)")
    return TRACES


#: CI sets this (.ci/run): every prerequisite is installed there, so a test that skips
#: (no chromium, no .venv-vllm, no traces, no torch, no aiconfigurator-core) is a failure of
#: the set-up, reported as a failed test with its skip reason, not a quiet "s".
FAIL_ON_SKIP = os.environ.get("KVSIM_FAIL_ON_SKIP", "") not in ("", "0")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if FAIL_ON_SKIP and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped where KVSIM_FAIL_ON_SKIP=1 requires every test to run: {reason}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print what the fuzz tests generated (tests/test_fuzz_inputs.py), for CI logs.

    Each fuzz test records ``("fuzz", {...})`` with ``record_property``; user properties
    travel with the test reports, so this also works under pytest-xdist.
    """
    rows, machines = [], []
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            props = getattr(report, "user_properties", ())
            rows += [value for name, value in props if name == "fuzz"]
            machines += [value for name, value in props if name == "steps"]
    if machines:
        terminalreporter.write_sep("-", "state machines")
        for m in sorted(machines, key=lambda m: m["machine"]):
            terminalreporter.write_line(f"{m['steps']:>6} steps of the {m['machine']} state machine")
        terminalreporter.write_line(f"{sum(m['steps'] for m in machines):>6} state-machine steps in total")
    if not rows:
        return
    terminalreporter.write_sep("-", "fuzzed inputs")
    for row in sorted(rows, key=lambda r: r["kind"]):
        terminalreporter.write_line(
            f"{row['inputs']:>6} {row['kind']}: {row['ok']} ok, {row['errors']} KvsimError; "
            f"{row['wall_s']:.1f} s, slowest input {row['slowest_s']:.3f} s"
        )
    scenarios = sum(r["inputs"] for r in rows if "scenario" in r["kind"])
    wall = sum(r["wall_s"] for r in rows)
    terminalreporter.write_line(
        f"{scenarios:>6} scenario documents in total; all fuzz tests {wall:.1f} s of test time"
    )
