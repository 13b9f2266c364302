"""Compare runs: summary table with differences, overlaid CDFs of TTFT, TPOT and E2E."""

from __future__ import annotations

from pathlib import Path

import _common as common
import streamlit as st

import kvsim
from kvsim import analysis, plots
from kvsim.io import load_result

METRICS = (
    "num_requests",
    "num_finished",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p50_s",
    "e2e_p99_s",
    "throughput_tokens_per_s",
    "goodput_requests_per_s",
    "slo_attainment",
    "prefix_hit_rate",
    "num_preemptions",
    "num_swaps",
    "num_evicted_blocks",
    "total_kv_blocks",
    "kv_usage_peak",
    "kv_usage_mean",
)


def add_variant(scenario: kvsim.Scenario) -> None:
    """Run the current scenario with a few overrides and add it to the session's runs."""
    with st.form("variant"):
        text = st.text_area(
            "Overrides, one `dotted.key=value` per line",
            placeholder="replicas.0.engine.enable_prefix_caching=false",
        )
        submitted = st.form_submit_button("Run variant")
    if not submitted:
        return
    overrides = [line.strip() for line in text.splitlines() if line.strip()]
    try:
        variant = common.resolve(scenario.model_dump(mode="json"), overrides, "<variant overrides>")
    except kvsim.ScenarioError as err:
        common.show_scenario_error(err)
        return
    common.run_scenario(variant, label=f"{scenario.name} [{', '.join(overrides) or 'as is'}]")


def add_folder() -> None:
    """Load a result folder written by `kvsim run --out DIR` or a sweep."""
    path = st.text_input("Saved result folder", placeholder="runs/default")
    if path and st.button("Load folder"):
        try:
            result = load_result(Path(path))
        except (kvsim.KvsimError, OSError) as err:
            st.error(f"Cannot load {path}: {err}")
            return
        common.add_run(f"folder:{Path(path).resolve()}", common.Run(f"{Path(path).name} (folder)", result))


def main() -> None:
    st.set_page_config(page_title="kvsim: compare", layout="wide")
    st.title("Compare runs")
    scenario = common.current_scenario()
    cols = st.columns(2)
    with cols[0]:
        st.markdown(f"**Variant of {scenario.name}**")
        add_variant(scenario)
    with cols[1]:
        st.markdown("**Saved results**")
        add_folder()
    runs = common.all_runs()
    if len(runs) < 2:
        st.info(
            "Compare needs two runs or more: run a variant, load a saved folder, or run scenarios on the "
            "Scenario page."
        )
        st.stop()
    labels = {key: run.label for key, run in runs.items()}
    chosen = st.multiselect(
        "Runs to compare (the first is the baseline)",
        list(labels),
        default=list(labels)[-2:],
        format_func=labels.get,
    )
    if len(chosen) < 2:
        st.info("Choose at least two runs.")
        st.stop()
    picked = {labels[k]: runs[k].result for k in chosen}
    table = analysis.compare_summaries({n: r.summary for n, r in picked.items()}, METRICS)
    common.show_table(table.reset_index(), "comparison")
    fig = plots.latency_cdfs_figure({n: r.requests[r.requests["finished"]] for n, r in picked.items()})
    common.show_figure(fig, "comparison_cdfs")


main()
