"""The layout's rules, checked: short functions in the core, routers behind the view, the
engine's internals reached only by the cluster/replica wiring, no torch in the simulator."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

KVSIM = ROOT / "kvsim"
#: Modules that hold the engine's internals: only the cluster/replica wiring may use them.
INTERNALS = {
    "kvsim.core.block_pool",
    "kvsim.core.scheduler",
    "kvsim.core.kv_manager",
    "kvsim.core.decode_run",
    "kvsim.core.eviction",
    "kvsim.core.allocators",
    "kvsim.core.queues",
}
WIRING = {"cluster.py", "replica.py"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_no_function_in_the_core_or_engine_is_longer_than_80_lines():
    long = []
    for folder in ("core", "engine", "kv"):
        for path in sorted((KVSIM / folder).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                    if n > 80:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert long == []


def test_only_the_wiring_reaches_into_pools_and_schedulers():
    offenders = {
        path.name: sorted(imported_modules(path) & INTERNALS)
        for path in (KVSIM / "engine").glob("*.py")
        if path.name not in WIRING and imported_modules(path) & INTERNALS
    }
    assert offenders == {}


def test_routers_import_only_the_view():
    kvsim_imports = {m for m in imported_modules(KVSIM / "engine" / "routers.py") if m.startswith("kvsim")}
    assert kvsim_imports == {"kvsim.engine.view", "kvsim.registry", "kvsim.scenario.schema"}


@pytest.mark.slow
def test_the_simulator_never_imports_torch_streamlit_or_vllm():
    # Nor the observe extra's httpx and prometheus_client: reading, comparing and fitting an
    # observation need neither (kvsim.observe imports them when an observation runs).
    code = (
        "import sys, kvsim, kvsim.cli, kvsim.planning.sweep, kvsim.analysis, kvsim.analysis.plots, kvsim.observe, "
        "kvsim.observe.compare, kvsim.observe.fit; "
        "kvsim.run(None, overrides=['workload.num_requests=5']); "
        "print(sorted(m for m in ('torch', 'streamlit', 'vllm', 'httpx', 'prometheus_client') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"
