"""The layout's rules, checked: a top level of packages by concern plus a few infrastructure
modules, dependencies pointing one way between those packages, short functions and modules in
the engine and its scheduler, routers behind the view, the engine's internals reached only by
the SimPy-free replica engine (the SimPy layer waits, interrupts and routes), no torch in the
simulator."""

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
#: kvsim's packages, one concern each (README.md, "Project layout"). A new one needs a decision here.
PACKAGES = {
    "scenario",  # the schema, checks, loading, the resolved plan, the work estimate
    "model",  # model and GPU descriptions, presets, KV sizing, memory fit, MoE arithmetic
    "backends",  # what vLLM, SGLang and TensorRT-LLM default to, and their launch commands
    "workload",  # requests from a workload section: synthetic, traces, benchmark clients
    "core",  # one replica's engine, plain objects
    "kv",  # KV movement: offload tiers, swap, links
    "cost",  # how long an iteration takes
    "engine",  # SimPy: the cluster, replicas, routers
    "results",  # what a run returns: recorder, ledger, Result, saving, the printed report
    "analysis",  # numbers and figures over a run's tables
    "planning",  # many runs towards a decision: sweeps, capacity, the planner, prices
    "observe",  # a live server measured
    "validation",  # the differential harness against a real vLLM
    "cli",  # one module per command group
    "data",  # the embedded default scenario, prices and cost profiles
}
#: The only modules at the top level: infrastructure every package may use, and the public API.
TOP_LEVEL_MODULES = {
    "__init__.py",  # the public API: kvsim.run, load_scenario, Result, errors
    "__main__.py",
    "errors.py",
    "frozen.py",
    "inputs.py",
    "outputs.py",
    "limits.py",
    "paths.py",
    "units.py",
    "yaml_safe.py",
    "registry.py",
    "request.py",
}


def imported_modules(path: Path, *, runtime_only: bool = False) -> set[str]:
    """Modules ``path`` imports (``from kvsim import x`` counts as ``kvsim.x``); with
    ``runtime_only``, not those under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    if runtime_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skip |= {id(n) for n in ast.walk(node)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            if node.module == "kvsim":
                out |= {f"kvsim.{a.name}" for a in node.names}
    return out


def package_imports(package: str) -> dict[str, set[str]]:
    """Each module of ``kvsim/<package>/`` with the other kvsim packages it imports at run time."""
    out = {}
    for path in sorted((KVSIM / package).glob("*.py")):
        names = {m.split(".")[1] for m in imported_modules(path, runtime_only=True) if m.startswith("kvsim.")}
        if others := {n for n in names if n in PACKAGES and n != package}:
            out[path.name] = others
    return out


def test_the_top_level_holds_only_the_packages_and_the_infrastructure():
    # A new flat module needs a decision: which package it belongs to, or why it is infrastructure.
    modules = {p.name for p in KVSIM.glob("*.py")}
    packages = {p.name for p in KVSIM.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert (modules, packages) == (TOP_LEVEL_MODULES, PACKAGES)


def test_the_model_package_builds_on_the_infrastructure_alone():
    assert package_imports("model") == {}


def test_results_never_reach_up_to_the_analyses_or_the_planning():
    # The engine writes through results.recorder and results.ledger; analyses and figures read
    # the tables (analysis imports results, never the reverse). `Result` names the engine's
    # cluster statistics only as a type.
    up = {"analysis", "planning", "engine", "observe", "validation", "cli"}
    assert {m: p & up for m, p in package_imports("results").items() if p & up} == {}


def test_only_the_cli_reaches_the_planning():
    # planning runs the engine many times; nothing it runs may depend on it.
    users = {
        pkg
        for pkg in PACKAGES - {"planning", "cli"}
        if any("planning" in p for p in package_imports(pkg).values())
    }
    assert users == set()


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
        "import sys, kvsim, kvsim.cli, kvsim.planning.sweep, kvsim.analysis, kvsim.analysis.plots, kvsim.observe, "
        "kvsim.observe.compare, kvsim.observe.fit; "
        "kvsim.run(None, overrides=['workload.num_requests=5']); "
        "print(sorted(m for m in ('torch', 'streamlit', 'vllm', 'httpx', 'prometheus_client') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_only_the_pool_and_its_free_queue_write_a_blocks_fields():
    # A block's reference count, hash and hit count are the pool's (block_pool.py); its
    # links are the free queue's (eviction.py). Everyone else asks the pool.
    owners = {"ref_cnt": {"block_pool.py"}, "block_hash": {"block_pool.py"}, "num_hits": {"block_pool.py"}}
    owners |= {"prev": {"eviction.py"}, "next": {"eviction.py"}}
    writes = []
    for path in sorted(KVSIM.rglob("*.py")):
        if path.name == "block.py" or "validation" in path.parts:  # KVBlock itself; vLLM's own blocks
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AugAssign)
                else []
            )
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr in owners and path.name not in owners[t.attr]:
                    writes.append(f"{path.relative_to(ROOT)}:{node.lineno} .{t.attr}")
    assert writes == []
