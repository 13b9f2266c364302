"""Compare runs: a baseline chosen explicitly, metric deltas beside the scenario diff, overlaid CDFs.

Runs come from this browser session only (runs made here, variants run here), from result
archives uploaded here, and from result folders in the allowed folders (`_paths`). When the
baseline is an observation of a live server (`kvsim observe`), every run compared with it is
read as kvsim's prediction of it (`kvsim.observe.compare`): percentiles side by side with
their errors, each request's TTFT, and the server's KV usage, running and waiting requests
against the simulation's; a button simulates an observation's own scenario.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import _common as common
import _paths
import pandas as pd
import streamlit as st

import kvsim
from kvsim import analysis
from kvsim.analysis import plots
from kvsim.observe.compare import compare_results
from kvsim.observe.record import is_observation
from kvsim.results.io import RESULT_FILES, load_result
from kvsim.scenario.loading import scenario_data

METRICS = (
    "num_requests",
    "num_finished",
    "offered_requests_per_s",
    "achieved_requests_per_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p50_s",
    "e2e_p99_s",
    "throughput_tokens_per_s",
    "goodput_requests_per_s",
    "slo_attainment",
    "prefix_cache_hit_rate",
    "num_preemptions",
    "num_swaps",
    "num_evicted_blocks",
    "total_kv_blocks",
    "kv_usage_peak",
    "kv_usage_mean",
)
#: Result folders listed from the allowed folders, at most, and how deep they are looked for.
MAX_LISTED_FOLDERS = 200
MAX_DEPTH = 4


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
        variant = common.resolve(scenario_data(scenario), overrides, "<variant overrides>")
    except kvsim.ScenarioError as err:
        common.show_scenario_error(err)
        return
    common.run_scenario(variant, label=f"{scenario.name} [{', '.join(overrides) or 'as is'}]")


def result_folders() -> list[Path]:
    """Result folders (holding summary.json and scenario.yaml) in the folders listed at start-up and uploads."""
    found: list[Path] = []
    roots = [*_paths.startup_folders(), _paths.upload_root()]
    for root in roots:
        root = Path(os.path.realpath(root))
        if not root.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            depth = len(Path(dirpath).relative_to(root).parts)
            if depth >= MAX_DEPTH:
                dirnames.clear()
            if "summary.json" in filenames and "scenario.yaml" in filenames:
                found.append(Path(dirpath))
            if len(found) >= MAX_LISTED_FOLDERS:
                return sorted(found)
    return sorted(found)


def load_folder(text: str) -> None:
    try:
        folder = _paths.confine_files(text, RESULT_FILES)  # links in it that lead out are refused too
        result = load_result(folder)
    except _paths.PathNotAllowed as err:
        st.error(f"Cannot load: {err}")
        return
    except kvsim.KvsimError as err:
        st.error(f"Cannot load {text}: {common.safe_error(err)}")
        return
    except OSError:
        st.error(f"Cannot load {text}: the folder cannot be read")
        return
    common.add_run(f"folder:{folder}", common.Run(f"{folder.name} (folder)", result))


def add_saved() -> None:
    """Load a result folder (from the allowed folders) or an uploaded result archive."""
    folders = result_folders()
    if folders:
        picked = st.selectbox("Result folders in the allowed folders", [None, *folders],
                              format_func=lambda p: "choose one" if p is None else str(p))  # fmt: skip
        if picked is not None and st.button("Load this folder"):
            load_folder(str(picked))
    path = st.text_input(
        "Result folder (kvsim run --out DIR, or a sweep point)",
        placeholder="runs/default",
        help="In scenarios/, ../shared/traces, the upload area or a folder given at start-up with --allow "
        "(make dashboard allows runs/).",
    )
    if path and st.button("Load folder"):
        load_folder(path)
    up = st.file_uploader(
        f"Or upload a result folder as a .zip (its five files; at most {common.MAX_UPLOAD_MIB} MiB)",
        type=["zip"],
    )
    if up is not None:
        key = f"archive:{hashlib.sha256(up.getvalue()).hexdigest()[:16]}"
        if key not in common.all_runs():
            try:
                folder = common.unpack_result_archive(up.getvalue(), up.name, common.session_folder())
                result = load_result(folder)
            except ValueError as err:
                st.error(str(err))
                return
            except kvsim.KvsimError as err:
                st.error(f"{up.name}: {common.safe_error(err).split(': ', 1)[-1]}")
                return
            common.add_run(key, common.Run(f"{Path(up.name).stem} (upload)", result))


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to the leaves of plain data (lists indexed)."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out |= flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(data, list):
        out = {}
        for i, v in enumerate(data):
            out |= flatten(v, f"{prefix}.{i}")
        return out
    return {prefix: data}


def scenario_diff(base: kvsim.Scenario, other: kvsim.Scenario) -> pd.DataFrame:
    """Fields whose values differ between two resolved scenarios (name and description left out)."""
    a, b = flatten(base.model_dump(mode="json")), flatten(other.model_dump(mode="json"))
    rows = [
        {"field": k, "baseline": common.json_text(a.get(k)), "run": common.json_text(b.get(k))}
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k) and k not in ("name", "description")
    ]
    return pd.DataFrame(rows, columns=["field", "baseline", "run"])


def delta_table(picked: dict[str, kvsim.Result], baseline: str) -> pd.DataFrame:
    """Metrics (rows) per run, each run's change against the baseline in % right beside it."""
    metrics = [m for m in METRICS if any(m in r.summary for r in picked.values())]
    table = analysis.compare_summaries({n: r.summary for n, r in picked.items()}, metrics)
    order = [baseline]
    for n in picked:
        if n != baseline:
            order += [n, f"{n} vs {baseline} (%)"]
    out = table[order].reset_index()
    return out.assign(meaning=[common.summary_meaning(str(m)) for m in out["metric"]])


def prediction_table(cmp_metrics: pd.DataFrame) -> pd.DataFrame:
    """The comparison's rows as shown: observed, kvsim, error (% or points), target, verdict."""
    rows = []
    for row in cmp_metrics.to_dict(orient="records"):
        points = row["kind"] == "points"
        target = row["target"]
        rows.append(
            {
                "metric": row["label"],
                "observed": row["observed"],
                "kvsim": row["simulated"],
                "error": row["error"] if points else 100.0 * row["error"],
                "unit": "points" if points else "%",
                "target (±)": None if target is None else (target if points else 100.0 * target),
                "within target": row["within_target"],
            }
        )
    return pd.DataFrame(rows)


def simulate_buttons(runs: dict[str, common.Run]) -> None:
    """One button per observation of this session: simulate its scenario (kvsim's prediction)."""
    for key, run in runs.items():
        if is_observation(run.result.summary):
            name = run.result.scenario.name
            if st.button(f"Simulate {run.label}'s scenario", key=f"simulate:{key}",
                         help="kvsim on the observation's requests and deployment: its prediction"):  # fmt: skip
                common.run_scenario(run.result.scenario, label=f"kvsim: {name}")
                st.rerun()


def observed_section(label: str, observed: kvsim.Result, predictions: dict[str, kvsim.Result]) -> None:
    """The observation against each run compared with it (see the module docstring)."""
    st.subheader(f"{label}: the server against kvsim")
    st.caption(
        f"Observed with kvsim observe at {observed.summary.get('observed_url', '?')} (model "
        f"{observed.summary.get('observed_model', '?')}, server version "
        f"{observed.summary.get('observed_server_version') or 'unknown'}); the runs compared with it are "
        "read as kvsim's predictions of it. Errors: kvsim / observed - 1 (shares: difference in points)."
    )
    if not predictions:
        st.info("Compare the observation with a simulation: simulate its scenario (the button under Saved "
                "results), or load a result folder of kvsim run on the same scenario.")  # fmt: skip
        return
    for name, predicted in predictions.items():
        cmp = compare_results(observed, predicted)
        st.markdown(f"**{name}** as the prediction")
        fmt = {"observed": st.column_config.NumberColumn(format="%.4g"),
               "kvsim": st.column_config.NumberColumn(format="%.4g"),
               "error": st.column_config.NumberColumn(format="%+.1f")}  # fmt: skip
        common.show_table(prediction_table(cmp.metrics), f"prediction_{name}", column_config=fmt)
        req = cmp.as_dict()["requests"]
        series = cmp.series_errors
        st.caption(
            f"{req['num_paired']} requests finished on both sides; median |error| per request: TTFT "
            f"{100 * req['ttft_median_abs_error']:.1f}%, TPOT {100 * req['tpot_median_abs_error']:.1f}%, E2E "
            f"{100 * req['e2e_median_abs_error']:.1f}%. At the {len(cmp.series)} scrapes of the server's metrics, "
            f"mean |difference|: KV usage {series['kv_usage_mean_abs_diff']:.2f} points, running "
            f"{series['running_mean_abs_diff']:.2f}, waiting {series['waiting_mean_abs_diff']:.2f} requests."
        )
        cols = st.columns([2, 3])
        with cols[0]:
            common.show_figure(plots.observed_ttft_scatter_figure(cmp.requests), f"observed_ttft_{name}")
        with cols[1]:
            common.show_figure(plots.observed_series_figure(cmp.series), f"observed_series_{name}")


def main() -> None:
    st.set_page_config(page_title="kvsim: compare", layout="wide")
    common.show_notices()
    st.title("Compare runs")
    scenario = common.current_scenario()
    cols = st.columns(2)
    with cols[0]:
        st.markdown(f"**Variant of {scenario.name}**")
        add_variant(scenario)
    with cols[1]:
        st.markdown("**Saved results**")
        add_saved()
        simulate_buttons(common.all_runs())
    runs = common.all_runs()
    if len(runs) < 2:
        st.info(
            "Compare needs two runs or more: run a variant, load a saved folder or archive, or run scenarios "
            "on the Scenario page."
        )
        common.sync_url()
        st.stop()
    labels = {key: run.label for key, run in runs.items()}
    keys = list(labels)
    view = common.view()
    if view.get("cmp.base") is not None and view.get("cmp.base") not in keys:  # a run no longer kept
        view.pop("cmp.base", None)
        st.session_state.pop("w:cmp.base", None)
    base_key = st.selectbox(
        "Baseline run", keys, index=None, placeholder="Choose the baseline", format_func=labels.get,
        key=common.kept("cmp.base", None),
    )  # fmt: skip
    common.keep("cmp.base", base_key)
    if base_key is None:
        st.info("Choose the baseline: every other run is compared against it.")
        common.sync_url()
        st.stop()
    others_all = [k for k in keys if k != base_key]
    kept_others = [k for k in str(view.get("cmp.others", "")).split(",") if k in others_all]
    if "w:cmp.others" in st.session_state:
        st.session_state["w:cmp.others"] = [k for k in st.session_state["w:cmp.others"] if k in others_all]
    chosen = st.multiselect(
        "Compare with", others_all, format_func=labels.get,
        key=common.kept("cmp.others", kept_others or others_all[-1:]),
    )  # fmt: skip
    common.keep("cmp.others", ",".join(chosen))
    if not chosen:
        st.info("Choose at least one run to compare with the baseline.")
        common.sync_url()
        st.stop()
    picked = {labels[k]: runs[k].result for k in [base_key, *chosen]}
    base_label = labels[base_key]
    table = delta_table(picked, base_label)
    cols = st.columns([3, 2])
    with cols[0]:
        st.markdown("**Metrics, and each run's change against the baseline (%)**")
        pct = {
            c: st.column_config.NumberColumn(c, format="%+.1f %%") for c in table.columns if c.endswith("(%)")
        }
        common.show_table(table, "comparison", column_config=pct)
    with cols[1]:
        for k in chosen:
            st.markdown(f"**Scenario changes: {labels[k]}** against the baseline")
            diff = scenario_diff(runs[base_key].result.scenario, runs[k].result.scenario)
            if diff.empty:
                st.caption("Same scenario (runs differ only in name or origin).")
            else:
                st.dataframe(diff, hide_index=True, width="stretch")
    finished = {n: r.requests[r.requests["finished"].to_numpy(bool)] for n, r in picked.items()}
    fig = plots.latency_cdfs_figure(finished)
    common.show_figure(fig, "comparison_cdfs")
    base = runs[base_key].result
    if is_observation(base.summary):
        predictions = {
            labels[k]: runs[k].result for k in chosen if not is_observation(runs[k].result.summary)
        }
        observed_section(base_label, base, predictions)
    common.sync_url()


main()
