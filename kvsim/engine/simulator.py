"""`run`: simulate the cluster a scenario describes and return its `Result`.

    scenario ──load──> Scenario ──resolve──> Plan ──> Cluster(plan, requests) ──run──> Result

Pure: no files written, nothing printed. Every random draw comes from generators spawned
from the scenario's seed, so the same scenario gives the same Result bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kvsim.analysis.side_channel import side_channel_summary
from kvsim.engine.cluster import Cluster, ProgressFn, RunStopped, RunWatch, cyclic_gc_paused
from kvsim.engine.replica_engine import ReplicaEngine
from kvsim.engine.routers import Router
from kvsim.engine.sources import BenchClientSource
from kvsim.engine.wiring import CostModelSource
from kvsim.request import RequestSpec
from kvsim.results.requests import requests_frame
from kvsim.results.result import Result, summarize
from kvsim.scenario.estimate import check_work, estimate_work
from kvsim.scenario.loading import load_scenario
from kvsim.scenario.resolved import resolve_plan
from kvsim.scenario.schema import Scenario
from kvsim.workload import Workload, generate_workload

__all__ = ["ProgressFn", "RunStopped", "RunWatch", "run", "scenario_workload"]


def scenario_workload(scenario: Scenario, *, base_dir: Path | None = None) -> Workload:
    """The requests `run` simulates for ``scenario``: its workload drawn from the seed's
    first child generator (bit for bit the requests the run uses)."""
    workload_seed = np.random.SeedSequence(scenario.seed).spawn(1)[0]
    return generate_workload(
        scenario.workload, np.random.default_rng(workload_seed), base_dir=base_dir, seed=scenario.seed
    )


def run(
    scenario: Scenario | str | Path | Mapping[str, Any] | None = None,
    *,
    overrides: Iterable[str] | Mapping[str, Any] = (),
    requests: Sequence[RequestSpec] | None = None,
    base_dir: Path | None = None,
    progress: ProgressFn | None = None,
    router: Router | None = None,
    cost_model: CostModelSource | None = None,
    force: bool = False,
    watch: RunWatch | None = None,
    engine: type[ReplicaEngine] = ReplicaEngine,
) -> Result:
    """Simulate a scenario and return its `Result`.

    ``scenario`` is a `Scenario`, a path to a YAML file, a mapping, or None for the
    embedded default. ``requests`` replaces the workload section's requests (for tests
    and custom generators). ``base_dir`` resolves relative trace paths; it defaults to
    the scenario file's folder. ``router`` replaces the scenario's router with your own
    (any object with ``route(req, view)``, see `kvsim.engine.routers`); ``cost_model``
    replaces every replica's cost model with an instance, or with a function of the
    replica group's `kvsim.scenario.resolved.GroupPlan` returning one. Unless ``force``, a run whose
    estimated size exceeds ``sim.max_requests`` or ``sim.max_memory_gib`` is refused
    (`kvsim.scenario.estimate`) before anything is built. ``watch`` looks at the run as it goes and
    may end it early: then `kvsim.engine.cluster.RunStopped` is raised instead of a Result
    (`kvsim.results.overload.DivergenceWatch`, used by `kvsim.planning.planner`). ``engine`` is the
    class each replica's engine is built from (`kvsim.engine.replica_engine.ReplicaEngine`,
    or a subclass: the tests' step-by-step oracle is one).
    """
    source = _source_name(scenario)
    if isinstance(scenario, str | Path) and base_dir is None:
        base_dir = Path(scenario).resolve().parent
    # Always through load_scenario: a Scenario built in code also gets the checks that
    # need the presets and profiles (unknown names, TP, memory, profile matching).
    scenario = load_scenario(scenario, overrides, base_dir=base_dir)
    plan = resolve_plan(scenario)
    if not force:
        estimate = estimate_work(
            plan, num_requests=None if requests is None else len(requests), base_dir=base_dir
        )
        check_work(estimate, plan, source)
    with cyclic_gc_paused():  # from the first request built to the last table row
        specs, workload_summary, sender = _requests(scenario, requests, base_dir)
        cluster = Cluster(
            plan,
            specs,
            router=router,
            cost_model=cost_model,
            base_dir=base_dir,
            progress=progress,
            source=sender,
            watch=watch,
            engine=engine,
        )
        if sender is not None:
            cluster.ledger.mark_warmup(sender.client.unmeasured)
        cluster.run()
        return _result(cluster, workload_summary, specs, release_requests=True)


def _requests(
    scenario: Scenario, requests: Sequence[RequestSpec] | None, base_dir: Path | None
) -> tuple[list[RequestSpec], dict[str, Any], BenchClientSource | None]:
    """The run's requests (the workload's, or ``requests``), the workload's summary, and
    the benchmark client that sends them closed-loop, if the workload has one."""
    if requests is not None:
        specs = list(requests)
        return specs, {"workload_kind": "custom", "workload_num_requests": len(specs)}, None
    workload = scenario_workload(scenario, base_dir=base_dir)
    specs = list(workload.requests)
    sender = BenchClientSource(specs, workload.client) if workload.client is not None else None
    return specs, dict(workload.info.summary()), sender


def _source_name(scenario: Scenario | str | Path | Mapping[str, Any] | None) -> str:
    """How errors name the scenario ``run`` was given."""
    if isinstance(scenario, str | Path):
        return str(scenario)
    if isinstance(scenario, Scenario):
        return f"<scenario {scenario.name}>"
    return "<embedded default scenario>" if scenario is None else "<dict>"


def _result(
    cluster: Cluster,
    workload_summary: Mapping[str, Any],
    specs: Sequence[RequestSpec],
    *,
    release_requests: bool = False,
) -> Result:
    """The run's `Result`. ``release_requests``: drop the cluster's request objects once
    their table is built (nothing reads them after it), before the other tables are built:
    the peak memory of a large run is lower by their size."""
    scenario = cluster.plan.scenario
    req_df = requests_frame(list(cluster.requests.values()), cluster.plan.replica_names, cluster.ledger)
    if release_requests:
        cluster.requests.clear()
    it_df = cluster.recorder.iterations_frame()
    ev_df = cluster.recorder.events_frame()
    sim_time = float((it_df["start_s"] + it_df["duration_s"]).max()) if len(it_df) else 0.0
    source = cluster.source
    measured_start = source.measured_start_s if isinstance(source, BenchClientSource) else 0.0
    summary = summarize(
        scenario,
        req_df,
        it_df,
        ev_df,
        cache=cluster.cache_stats(),
        spec=cluster.spec_stats(),
        beams=cluster.beam_stats(),
        total_kv_blocks=cluster.total_kv_blocks,
        sim_time_s=sim_time,
        cluster=cluster.stats(sim_time),
        measured_start_s=measured_start,
    )
    summary.update(workload_summary)
    side_channel = scenario.analysis.side_channel
    if side_channel is not None:
        summary.update(
            side_channel_summary(req_df, specs, attacker=side_channel.attacker, victim=side_channel.victim)
        )
    return Result(scenario=scenario, requests=req_df, iterations=it_df, events=ev_df, summary=summary)
