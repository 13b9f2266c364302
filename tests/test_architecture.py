"""The layout's rules, checked: short functions and modules in the engine and its scheduler,
routers behind the view, the engine's internals reached only by the SimPy-free replica
engine (the SimPy layer waits, interrupts and routes), no torch in the simulator."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

KVSIM = ROOT / "kvsim"
#: Modules that hold the engine's internals: in the engine layer only the SimPy-free
#: replica engine and the code that builds it may use them.
INTERNALS = {
    "kvsim.core.block_pool",
    "kvsim.core.scheduler",
    "kvsim.core.kv_manager",
    "kvsim.core.decode_run",
    "kvsim.core.cohort",
    "kvsim.core.eviction",
    "kvsim.core.allocators",
    "kvsim.core.queues",
    "kvsim.core.hybrid_kv",
}
ENGINE_CORE = {"replica_engine.py", "build.py"}
#: What the SimPy layer may take from the core: plain data (outcomes, request state, counters).
CORE_DATA = {"kvsim.core.outcome", "kvsim.core.request_state", "kvsim.core.beam_search"}
#: The engine and its scheduler, held to short functions and modules.
ENGINE_FOLDERS = ("core", "core/scheduler", "engine", "kv")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def _engine_modules() -> list[Path]:
    return [p for folder in ENGINE_FOLDERS for p in sorted((KVSIM / folder).glob("*.py"))]


def test_no_function_in_the_engine_or_its_scheduler_is_longer_than_60_lines():
    long = []
    for path in _engine_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > 60:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert long == []


def test_no_module_of_the_engine_or_its_scheduler_is_longer_than_500_lines():
    long = {
        str(p.relative_to(ROOT)): n for p in _engine_modules() if (n := len(p.read_text().splitlines())) > 500
    }
    assert long == {}


def test_only_the_replica_engine_reaches_into_pools_and_schedulers():
    offenders = {
        path.name: sorted(imported_modules(path) & INTERNALS)
        for path in (KVSIM / "engine").glob("*.py")
        if path.name not in ENGINE_CORE and imported_modules(path) & INTERNALS
    }
    assert offenders == {}


def test_the_replica_engine_runs_without_simpy_and_the_simpy_layer_sees_only_core_data():
    for name in ENGINE_CORE:
        assert "simpy" not in imported_modules(KVSIM / "engine" / name), name
    offenders = {}
    for path in (KVSIM / "engine").glob("*.py"):
        mods = imported_modules(path)
        if "simpy" in mods:
            core = {m for m in mods if m.startswith("kvsim.core")} - CORE_DATA
            if core:
                offenders[path.name] = sorted(core)
    assert offenders == {}


def test_the_architecture_rules_can_fail(tmp_path: Path) -> None:
    """The checks above are not vacuous: a SimPy module importing the scheduler is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("import simpy\nfrom kvsim.core.scheduler import Scheduler\n")
    assert "kvsim.core.scheduler" in imported_modules(bad) & INTERNALS
    assert {m for m in imported_modules(bad) if m.startswith("kvsim.core")} - CORE_DATA


def test_routers_import_only_the_view():
    kvsim_imports = {m for m in imported_modules(KVSIM / "engine" / "routers.py") if m.startswith("kvsim")}
    assert kvsim_imports == {"kvsim.engine.view", "kvsim.registry", "kvsim.scenario.schema"}


@pytest.mark.slow
def test_the_simulator_never_imports_torch_streamlit_or_vllm():
    # Nor the observe extra's httpx and prometheus_client: reading, comparing and fitting an
    # observation need neither (kvsim.observe imports them when an observation runs).
    code = (
        "import sys, kvsim, kvsim.cli, kvsim.sweep, kvsim.analysis, kvsim.plots, kvsim.observe, "
        "kvsim.observe.compare, kvsim.observe.fit; "
        "kvsim.run(None, overrides=['workload.num_requests=5']); "
        "print(sorted(m for m in ('torch', 'streamlit', 'vllm', 'httpx', 'prometheus_client') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"
