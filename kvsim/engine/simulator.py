"""`run`: build the cluster a scenario describes, simulate it, return a `Result`.

    scenario -> requests (workload) -> arrivals -> router -> replicas -> Result

Pure: no files written, nothing printed. Every random draw comes from generators spawned
from the scenario's seed, so the same scenario gives the same Result bit for bit.
"""

from __future__ import annotations

import gc
import math
from collections import defaultdict
from collections.abc import Callable, Generator, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import simpy

from kvsim.config import ReplicaGroup, Scenario
from kvsim.core.block_pool import BlockPool
from kvsim.core.offload import HostTier
from kvsim.core.request_state import Request, Status
from kvsim.core.scheduler import Scheduler
from kvsim.cost.factory import build_cost_model
from kvsim.engine.recorder import Recorder
from kvsim.engine.replica import Replica
from kvsim.engine.router import LeastLoadedRouter, make_router
from kvsim.kv_sizing import GIB, engine_kv_capacity
from kvsim.presets import resolve_gpu, resolve_model
from kvsim.request import RequestSpec
from kvsim.result import REQUEST_COLUMNS, Result, summarize
from kvsim.scenario_io import load_scenario
from kvsim.specs import ModelSpec
from kvsim.workload import Workload, generate_workload

#: progress(sim_time_s, num_finished, num_requests)
ProgressFn = Callable[[float, int, int], None]


def _build_replica(
    env: simpy.Environment,
    index: int,
    name: str,
    group: ReplicaGroup,
    model: ModelSpec,
    scenario: Scenario,
    recorder: Recorder,
    base_dir: Path | None,
    on_finish: Callable[[Request], None],
    on_handoff: Callable[[Request], None],
) -> Replica:
    gpu = resolve_gpu(group.gpu)
    eng = group.engine
    cap = engine_kv_capacity(model, gpu, group.tp, eng)
    pool = BlockPool(
        cap.num_blocks, enable_caching=eng.enable_prefix_caching, eviction_policy=eng.eviction_policy
    )
    num_host_blocks = int(eng.swap_space_gib * GIB // cap.bytes_per_block_per_shard)
    offload_blocks = int(eng.cpu_offload_gib * GIB // cap.bytes_per_block_per_shard)
    if offload_blocks and eng.enable_prefix_caching:
        pool.offload = HostTier(offload_blocks)
    sched = Scheduler(
        eng,
        pool,
        sliding_window=model.sliding_window,
        num_host_blocks=num_host_blocks,
        max_model_len=eng.max_model_len or model.max_model_len,
        role=group.role,
    )
    cost = build_cost_model(
        group.cost_model,
        model=model,
        gpu=gpu,
        tp=group.tp,
        kv_cache_dtype=eng.kv_cache_dtype,
        base_dir=base_dir,
    )
    return Replica(
        env,
        index,
        name,
        sched,
        cost,
        recorder,
        block_bytes_per_shard=cap.bytes_per_block_per_shard,
        tp=group.tp,
        fast_forward=scenario.sim.fast_forward,
        max_time_s=scenario.sim.max_time_s,
        on_finish=on_finish,
        on_handoff=on_handoff if group.role == "prefill" else None,
    )


def _replica_layout(scenario: Scenario) -> list[tuple[str, ReplicaGroup]]:
    return [(f"{g.name}-{i}", g) for g in scenario.replicas for i in range(g.count)]


def scenario_workload(scenario: Scenario, *, base_dir: Path | None = None) -> Workload:
    """The requests `run` simulates for ``scenario``: its workload drawn from the seed's
    first child generator (bit for bit the requests the run uses)."""
    workload_seed = np.random.SeedSequence(scenario.seed).spawn(1)[0]
    return generate_workload(scenario.workload, np.random.default_rng(workload_seed), base_dir=base_dir)


def run(
    scenario: Scenario | str | Path | Mapping[str, Any] | None = None,
    *,
    overrides: Iterable[str] | Mapping[str, Any] = (),
    requests: list[RequestSpec] | None = None,
    base_dir: Path | None = None,
    progress: ProgressFn | None = None,
) -> Result:
    """Simulate a scenario and return its `Result`.

    ``scenario`` is a `Scenario`, a path to a YAML file, a mapping, or None for the
    embedded default. ``requests`` replaces the workload section's requests (for tests
    and custom generators). ``base_dir`` resolves relative trace paths; it defaults to
    the scenario file's folder.
    """
    if isinstance(scenario, str | Path) and base_dir is None:
        base_dir = Path(scenario).resolve().parent
    # Always through load_scenario: a Scenario built in code also gets the checks that
    # need the presets and profiles (unknown names, TP, memory, profile matching).
    scenario = load_scenario(scenario, overrides, base_dir=base_dir)
    model = resolve_model(scenario.model)
    if requests is not None:
        specs, workload_summary = (
            requests,
            {"workload_kind": "custom", "workload_num_requests": len(requests)},
        )
    else:
        workload = scenario_workload(scenario, base_dir=base_dir)
        specs, workload_summary = workload.requests, workload.info.summary()

    env = simpy.Environment()
    layout = _replica_layout(scenario)
    recorder = Recorder([name for name, _ in layout])
    all_reqs: dict[int, Request] = {}
    children: dict[int, list[RequestSpec]] = defaultdict(list)
    roots: list[RequestSpec] = []
    shared_ids = _shared_content_ids(specs)
    salt_by_tenant = scenario.replicas[0].engine.cache_isolation == "tenant"  # one mode (validated)
    for spec in specs:
        if spec.request_id in all_reqs:
            raise ValueError(f"duplicate request_id {spec.request_id}")
        all_reqs[spec.request_id] = Request(
            spec, shared_content_ids=shared_ids, salt_by_tenant=salt_by_tenant
        )
        (children[spec.parent_id] if spec.parent_id is not None else roots).append(spec)
    num_requests = len(specs)
    state = {"finished": 0, "iters": 0}
    max_time = scenario.sim.max_time_s

    def on_finish(req: Request) -> None:
        state["finished"] += 1
        for child in children.pop(req.request_id, ()):
            if req.status is Status.FINISHED:
                env.process(_release(child, req.finish_s + child.think_time_s))
        if progress is not None and state["finished"] % 64 == 0:
            progress(env.now, state["finished"], num_requests)

    def on_handoff(req: Request) -> None:
        # Disaggregated serving: the prompt's KV goes from its prefill replica to the
        # least-loaded decode replica over the KV link, then decoding resumes there.
        source = replicas[req.replica]
        num_bytes = (
            req.num_computed_tokens * source.block_bytes_per_shard * source.tp / source.scheduler.block_size
        )
        delay = scenario.kv_transfer.latency_s + num_bytes / scenario.kv_transfer.bandwidth_bytes_per_s
        num_blocks = -(-req.num_computed_tokens // source.scheduler.block_size)
        recorder.add_event(env.now, source.index, "kv_transfer", req.request_id, num_blocks, num_bytes)
        req.prefill_replica = req.replica
        env.process(_deliver(req, delay))

    def _deliver(req: Request, delay: float) -> Generator[simpy.Event, Any, None]:
        yield env.timeout(delay)
        req.kv_transferred = True
        decode_router.route(req).submit(req)

    replicas = [
        _build_replica(env, i, name, group, model, scenario, recorder, base_dir, on_finish, on_handoff)
        for i, (name, group) in enumerate(layout)
    ]
    entry = [r for r, (_, g) in zip(replicas, layout, strict=True) if g.role in ("both", "prefill")]
    router = make_router(scenario.router, entry)
    decoders = [r for r, (_, g) in zip(replicas, layout, strict=True) if g.role == "decode"]
    decode_router = LeastLoadedRouter(decoders)  # used only when disaggregated

    def _submit(spec: RequestSpec, at: float) -> None:
        req = all_reqs[spec.request_id]
        req.arrival_s = at
        router.route(req).submit(req)

    def _release(spec: RequestSpec, at: float) -> Generator[simpy.Event, Any, None]:
        if max_time is not None and at >= max_time:
            return
        yield env.timeout(max(at - env.now, 0.0))
        _submit(spec, at)

    def _arrivals() -> Generator[simpy.Event, Any, None]:
        for spec in sorted(roots, key=lambda s: (s.arrival_s, s.request_id)):
            at = spec.arrival_s
            if max_time is not None and at >= max_time:
                return
            if at > env.now:
                yield env.timeout(at - env.now)
            _submit(spec, at)

    env.process(_arrivals())
    # The run allocates millions of long-lived objects (requests, block hashes) and no
    # garbage cycles: the cyclic collector would only rescan them, ever more slowly.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        env.run()
    finally:
        if gc_was_enabled:
            gc.enable()
    if progress is not None:
        progress(env.now, state["finished"], num_requests)

    req_df = _requests_frame(list(all_reqs.values()), [name for name, _ in layout])
    it_df = recorder.iterations_frame(
        [r.scheduler.pool.num_blocks for r in replicas], [r.scheduler.block_size for r in replicas]
    )
    ev_df = recorder.events_frame()
    sim_time = float((it_df["start_s"] + it_df["duration_s"]).max()) if len(it_df) else 0.0
    scheds = [r.scheduler for r in replicas]
    summary = summarize(
        scenario,
        req_df,
        it_df,
        ev_df,
        prefix_queries_tokens=sum(s.prefix_queries_tokens for s in scheds),
        prefix_hits_tokens=sum(s.prefix_hits_tokens for s in scheds),
        recompute_queries_tokens=sum(s.recompute_queries_tokens for s in scheds),
        recompute_hits_tokens=sum(s.recompute_hits_tokens for s in scheds),
        total_kv_blocks=sum(s.pool.num_blocks for s in scheds),
        sim_time_s=sim_time,
    )
    summary.update(workload_summary)
    return Result(scenario=scenario, requests=req_df, iterations=it_df, events=ev_df, summary=summary)


def _shared_content_ids(specs: list[RequestSpec]) -> set[int]:
    """Content ids found in more than one request's tokens (prompt or output)."""
    seen: set[int] = set()
    shared: set[int] = set()
    for spec in specs:
        ids = {seg.content_id for seg in spec.prompt}
        ids.add(spec.output_segment.content_id)
        shared |= seen & ids
        seen |= ids
    return shared


def _requests_frame(reqs: list[Request], names: list[str]) -> pd.DataFrame:
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
            "prefix_hit_tokens": col("prefix_hit_tokens", np.int64),
            "recompute_hit_tokens": col("recompute_hit_tokens", np.int64),
            "offload_hit_tokens": col("offload_hit_tokens", np.int64),
            "num_preemptions": col("num_preemptions", np.int64),
            "num_swaps": col("num_swaps", np.int64),
            "finished": finished,
        }
    )
    df = df.sort_values("request_id", kind="stable", ignore_index=True)
    assert list(df.columns) == list(REQUEST_COLUMNS)
    return df
