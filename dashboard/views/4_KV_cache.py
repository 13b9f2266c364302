"""KV cache: blocks used, cached and free over time; prefix hit rate; hit ratio against cache size."""

from __future__ import annotations

import _common as common
import numpy as np
import pandas as pd
import streamlit as st

import kvsim
from kvsim import analysis
from kvsim.analysis import plots
from kvsim.analysis.cache_curve import cache_curve
from kvsim.engine.simulator import scenario_workload
from kvsim.scenario.loading import parse_yaml, scenario_data

#: The summary's prefix hit rate, under its new name or its old one.
HIT_RATE_KEYS = ("prefix_cache_hit_rate",)


@st.cache_data(show_spinner="Replaying the workload against LRU caches ...", max_entries=8)
def hit_curve(
    scenario_yaml: str, capacities: tuple[int | None, ...], admitted: tuple[int, ...]
) -> pd.DataFrame:
    """Cache-only hit ratios of the run's admitted requests (first replica group's block size and policy).

    The requests are those the run simulated (`kvsim.engine.simulator.scenario_workload`).
    Requests the run never admitted (rejected, or cut off by sim.max_time_s) are left out,
    as they are from the run's hit rate.
    """
    scenario = kvsim.load_scenario(parse_yaml(scenario_yaml, "<current scenario>"))
    keep = set(admitted)
    specs = [r for r in scenario_workload(scenario).requests if r.request_id in keep]
    engine = scenario.replicas[0].engine
    points = cache_curve(specs, list(capacities), block_size=engine.block_size, policy=engine.eviction_policy,
                         partial_blocks=False)  # fmt: skip
    return pd.DataFrame([p.as_dict() for p in points])


def main() -> None:
    st.set_page_config(page_title="kvsim: KV cache", layout="wide")
    common.show_notices()
    st.title("KV cache")
    run = common.require_run()
    res = run.result
    summary = res.summary
    cols = st.columns(4)
    cols[0].metric("KV blocks (all replicas)", f"{summary.get('total_kv_blocks', 0):,}")
    cols[1].metric("Peak KV usage", f"{summary.get('kv_usage_peak', 0.0):.1%}")
    hit_rate = next((summary[k] for k in HIT_RATE_KEYS if k in summary), 0.0)
    cols[2].metric("Prefix hit rate", f"{hit_rate:.1%}")
    cols[3].metric("Evicted blocks", f"{summary.get('num_evicted_blocks', 0):,}")

    kv = analysis.kv_blocks_over_time(res.iterations)
    common.show_figure(plots.kv_blocks_figure(kv), f"{res.scenario.name}_kv_blocks")

    span = (
        float(res.requests["first_scheduled_s"].max())
        if res.requests["first_scheduled_s"].notna().any()
        else 0.0
    )
    window_s = st.number_input(
        "Hit-rate window (s)",
        min_value=0.001,
        value=analysis.nice_window(span, 40),
        format="%.4g",
        help="Requests first scheduled within this window count towards each point.",
    )
    hr = analysis.prefix_hit_rate_over_time(res.requests, window_s=window_s, step_s=window_s / 2)
    fig = plots.prefix_hit_rate_figure(hr, overall=hit_rate)
    common.show_figure(fig, f"{res.scenario.name}_prefix_hit_rate")

    st.subheader("How much cache does this reuse need?")
    num_replicas = max(1, int(summary.get("num_replicas", 1)))
    per_replica = int(summary.get("total_kv_blocks", 0)) // num_replicas
    top = max(per_replica * 8, 1024)
    capacities = (*sorted({int(c) for c in np.geomspace(16, top, 12)}), None)
    admitted = res.requests.loc[res.requests["first_scheduled_s"].notna()]
    try:  # a run loaded from a result folder may name trace files outside the allowed folders
        replayed = common.confined_scenario(scenario_data(res.scenario), f"<scenario {res.scenario.name}>")
    except kvsim.ScenarioError as err:  # the rules name the field and the path, never a file's content
        rules = "; ".join(f"`{where}`: {rule}" for where, rule in err.problems)
        st.info(f"The cache-only replay needs the files the run's scenario names: {rules}")
        common.sync_url()
        return
    curve = hit_curve(common.scenario_yaml(replayed), capacities, tuple(admitted["request_id"].tolist()))
    st.caption(
        "Cache-only replay of the prompts the run admitted (kvsim.analysis.cache_curve) against one block cache of each "
        f"size ({res.scenario.replicas[0].engine.eviction_policy.upper()}), with {res.scenario.replicas[0].engine.block_size}-token blocks and no timing: "
        "the upper bound a timed run approaches. The diamond is this run's timed hit rate at its KV "
        "capacity per replica" + (" (requests are spread over the replicas)." if num_replicas > 1 else ".")
    )
    fig = plots.cache_curve_figure(
        curve,
        policy=res.scenario.replicas[0].engine.eviction_policy,
        run_capacity_blocks=per_replica or None,
        run_hit_rate=hit_rate,
    )
    common.show_figure(fig, f"{res.scenario.name}_cache_curve")
    common.show_table(curve, f"{res.scenario.name}_cache_curve")
    if len(admitted) and curve["prompt_tokens"].iloc[0] != int(admitted["prompt_tokens"].sum()):
        st.warning("The replayed prompts differ from the run's (trace paths or generator changed).")
    common.sync_url()


main()
