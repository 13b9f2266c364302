"""`run`: simulate the cluster a scenario describes and return its `Result`.

    scenario ──load──> Scenario ──resolve──> Plan ──> Cluster(plan, requests) ──run──> Result

Pure: no files written, nothing printed. Every random draw comes from generators spawned
from the scenario's seed, so the same scenario gives the same Result bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvsim.analysis.side_channel import side_channel_summary
from kvsim.core.request_state import Request, Status
from kvsim.engine.cluster import Cluster, CostModelSource, ProgressFn, RunStopped, RunWatch, cyclic_gc_paused
from kvsim.engine.routers import Router
from kvsim.engine.sources import BenchClientSource, RequestSource
from kvsim.request import RequestSpec
from kvsim.results.ledger import RequestLedger
from kvsim.results.result import REQUEST_COLUMNS, Result, summarize
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
    lazy_decodes: bool = True,
) -> Result:
    """Simulate a scenario and return its `Result`.

    ``scenario`` is a `Scenario`, a path to a YAML file, a mapping, or None for the
    embedded default. ``requests`` replaces the workload section's requests (for tests
    and custom generators). ``base_dir`` resolves relative trace paths; it defaults to
    the scenario file's folder. ``router`` replaces the scenario's router with your own
    (any object with ``route(req, view)``, see `kvsim.engine.routers`); ``cost_model``
    replaces every replica's cost model with an instance, or with a function of the
    replica group's `kvsim.plan.GroupPlan` returning one. Unless ``force``, a run whose
    estimated size exceeds ``sim.max_requests`` or ``sim.max_memory_gib`` is refused
    (`kvsim.estimate`) before anything is built. ``watch`` looks at the run as it goes and
    may end it early: then `kvsim.engine.cluster.RunStopped` is raised instead of a Result
    (`kvsim.overload.DivergenceWatch`, used by `kvsim.planner`). ``lazy_decodes`` False
    walks every running request in every iteration instead of advancing plain decoders
    lazily (`kvsim.core.cohort`): slower, the same Result bit for bit (the reference tests
    compare the default with).
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
        sender: RequestSource | None = None
        if requests is None:
            workload = scenario_workload(scenario, base_dir=base_dir)
            specs, workload_summary = workload.requests, workload.info.summary()
            if workload.client is not None:  # a benchmark client sends them, closed loop
                sender = BenchClientSource(specs, workload.client)
        else:
            specs = list(requests)
            workload_summary = {"workload_kind": "custom", "workload_num_requests": len(specs)}
        cluster = Cluster(
            plan,
            specs,
            router=router,
            cost_model=cost_model,
            base_dir=base_dir,
            progress=progress,
            source=sender,
            watch=watch,
            lazy_decodes=lazy_decodes,
        )
        if isinstance(sender, BenchClientSource):
            cluster.ledger.mark_warmup(sender.client.unmeasured)
        cluster.run()
        return _result(cluster, workload_summary, specs, release_requests=True)


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


def requests_frame(
    reqs: list[Request], names: list[str], ledger: RequestLedger | None = None
) -> pd.DataFrame:
    """The request table (`kvsim.result.REQUEST_COLUMNS`), ordered by request id.

    ``ledger`` holds the cluster layer's columns for ``reqs`` in the same order (None: a
    table without rejections, router expectations, tiers or transfers).
    """
    if ledger is None:
        ledger = RequestLedger({r.request_id: r for r in reqs})

    def col(attr: str, dtype: Any) -> np.ndarray:
        return np.asarray([getattr(r, attr) for r in reqs], dtype=dtype)

    arrival = col("arrival_s", np.float64)
    first_sched = col("first_scheduled_s", np.float64)
    first_tok = col("first_token_s", np.float64)
    finish = col("finish_s", np.float64)
    out_tokens = col("num_output_tokens", np.int64)
    finished = np.asarray([r.status is Status.FINISHED for r in reqs], dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out_tokens > 1, (finish - first_tok) / np.maximum(out_tokens - 1, 1), math.nan)
    tpot = np.where(finished, tpot, math.nan)
    replica_names = np.asarray([*names, ""], dtype=object)
    df = pd.DataFrame(
        {
            "request_id": col("request_id", np.int64),
            "replica_id": replica_names[col("replica", np.int64)],
            "prefill_replica_id": replica_names[col("prefill_replica", np.int64)],
            "tenant": pd.Series([r.spec.tenant for r in reqs], dtype=object),
            "priority": col("priority", np.int64),
            "arrival_s": arrival,
            "first_scheduled_s": first_sched,
            "first_token_s": first_tok,
            "finish_s": finish,
            "queueing_s": first_sched - arrival,
            "ttft_s": first_tok - arrival,
            "tpot_s": tpot,
            "max_itl_s": col("max_itl_s", np.float64),
            "e2e_s": np.where(finished, finish - arrival, math.nan),
            "prompt_tokens": col("prompt_tokens", np.int64),
            "output_tokens": out_tokens,
            "prefix_cache_hits_tokens": col("prefix_cache_hits_tokens", np.int64),
            "recompute_hits_tokens": col("recompute_hits_tokens", np.int64),
            "offload_hits_tokens": col("offload_hits_tokens", np.int64),
            "evicted_miss_tokens": col("evicted_miss_tokens", np.int64),
            "num_preemptions": col("num_preemptions", np.int64),
            "num_swaps": col("num_swaps", np.int64),
            "finished": finished,
            "rejected": np.asarray([r.status is Status.REJECTED for r in reqs], dtype=bool),
            "reject_reason": pd.Series(ledger.reject_reason, dtype=object),
            "router_expected_hits_tokens": ledger.expected_hits_tokens,
            "dram_hits_tokens": ledger.tier_hits_tokens["dram"],
            "nvme_hits_tokens": ledger.tier_hits_tokens["nvme"],
            "shared_pool_hits_tokens": ledger.tier_hits_tokens["shared_pool"],
            "kv_transfer_s": ledger.kv_transfer_s,
            "kv_transfer_queueing_s": ledger.kv_transfer_queueing_s,
            "warmup": ledger.warmup,
            "client_queue_s": ledger.client_queue_s,
        }
    )
    if not df["request_id"].is_monotonic_increasing:
        df = df.sort_values("request_id", kind="stable", ignore_index=True)
    assert list(df.columns) == list(REQUEST_COLUMNS)
    return df
