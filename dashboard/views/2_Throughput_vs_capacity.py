"""Throughput against capacity: sweep request rate, GPU memory, KV blocks, replicas or KV dtype.

Each point is a full run of the whole workload (a trace is replayed whole unless the user
shortens it, and then the page says how much of it was kept). The chart sets offered
against achieved load, marks overloaded points, and the knee counts only points that are
not overloaded. A sweep written by ``kvsim sweep --out DIR`` can be opened too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import _common as common
import _paths
import pandas as pd
import streamlit as st

import kvsim
from kvsim import analysis
from kvsim.analysis import plots
from kvsim.inputs import check_input
from kvsim.planning.capacity import trace_share_kept
from kvsim.scenario.loading import scenario_data
from kvsim.scenario.schema import SloConfig

#: Summary metrics kept per sweep point.
SWEEP_METRICS = (
    "offered_requests_per_s",
    "achieved_requests_per_s",
    "overloaded",
    "throughput_tokens_per_s",
    "throughput_requests_per_s",
    "goodput_requests_per_s",
    "slo_attainment",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p99_s",
    "num_preemptions",
    "prefix_cache_hit_rate",
    "kv_usage_peak",
    "total_kv_blocks",
    "backlog_growth_requests_per_s",
    "trace_num_rows",
    "trace_num_requests",
    "trace_num_dropped",
)


@dataclass(frozen=True)
class Axis:
    """A quantity to sweep: its dotted path, whether more of it is more load, and its value type."""

    path: str
    load_axis: bool
    kind: type = float


CAPACITY_AXES = {
    "GPU memory utilization": Axis("replicas.0.engine.gpu_memory_utilization", False),
    "KV capacity (blocks)": Axis("replicas.0.engine.num_gpu_blocks_override", False, int),
    "Replicas": Axis("replicas.0.count", False, int),
    "KV cache dtype": Axis("replicas.0.engine.kv_cache_dtype", False, str),
}


def rate_path(scenario: kvsim.Scenario) -> str | None:
    """Where the scenario's request rate is set: an arrival process's rate, or a trace's rate override."""
    workload = scenario.workload
    if hasattr(getattr(workload, "arrival", None), "rate_per_s"):
        return "workload.arrival.rate_per_s"
    if workload.kind == "trace":
        return "workload.rate_per_s"
    return None  # ramps and diurnal profiles have no single rate


def count_path(scenario: kvsim.Scenario) -> str | None:
    """Where the number of requests is set: a synthetic workload's count or a trace's first N."""
    if hasattr(scenario.workload, "num_requests"):
        return "workload.num_requests"
    return "workload.max_requests" if scenario.workload.kind == "trace" else None


def axes_for(scenario: kvsim.Scenario) -> dict[str, Axis]:
    rate = rate_path(scenario)
    head = {"Request rate": Axis(rate, load_axis=True)} if rate else {}
    return head | CAPACITY_AXES


def axis_title(scenario: kvsim.Scenario, axis: Axis) -> str:
    if axis.path.endswith("num_gpu_blocks_override"):
        return "KV blocks per replica (count)"
    if axis.path == "workload.rate_per_s":
        return "request rate (req/s)"
    return common.knob_axis_title(scenario, axis.path)


def _value(scenario: kvsim.Scenario, path: str) -> object:
    node: object = scenario
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else getattr(node, part, None)
    return node


def trace_rate(scenario: kvsim.Scenario) -> float | None:
    """A trace's mean arrival rate as replayed (for the default rate values)."""
    stats = st.session_state.setdefault("trace_rates", {})
    key = common.scenario_key(scenario)
    if key not in stats:
        run = common.cached_run(scenario)
        rate = run.result.summary.get("offered_requests_per_s") if run else None
        stats[key] = rate if isinstance(rate, float) else None
    return stats[key]


def default_values(scenario: kvsim.Scenario, axis: Axis) -> str:
    if axis.load_axis:
        rate = _value(scenario, axis.path)
        if not isinstance(rate, float) and axis.path == "workload.rate_per_s":
            rate = trace_rate(scenario)
        factors = (0.5, 1, 2, 3, 4)
        return ", ".join(f"{rate * f:.3g}" for f in factors) if isinstance(rate, float) else "1, 2, 4, 6, 8"
    if axis.path.endswith("gpu_memory_utilization"):
        return "0.5, 0.6, 0.7, 0.8, 0.9"
    if axis.path.endswith("num_gpu_blocks_override"):
        return "500, 1000, 2000, 4000, 8000"
    if axis.path == "replicas.0.count":
        return ", ".join(str(scenario.replicas[0].count * f) for f in (1, 2, 4))
    return "fp16, fp8"


def parse_values(text: str, axis: Axis) -> list[float | int | str]:
    """Comma-separated values of the axis's type; raises ValueError on a malformed one."""
    return [axis.kind(t.strip()) for t in text.split(",") if t.strip()]


def run_sweep(scenario: kvsim.Scenario, axis: Axis, values: list, count: dict[str, int]) -> pd.DataFrame:
    """One run per value (cached like every run); failed points keep their error."""
    rows = []
    outer = st.progress(0, text="Sweep")
    for i, v in enumerate(values):
        overrides = {axis.path: v} | count
        outer.progress(i / len(values), text=f"Point {i + 1} of {len(values)}: {axis.path} = {v}")
        row: dict = {"x": v}
        try:
            point = common.resolve(scenario_data(scenario), overrides, f"sweep point {axis.path}={v}")
            run = common.run_scenario(point, label=f"{scenario.name} [{axis.path.rsplit('.', 1)[-1]}={v}]")
            row |= {k: run.result.summary.get(k) for k in SWEEP_METRICS}
            row["error"] = ""
        except kvsim.KvsimError as err:
            row["error"] = common.safe_error(err).replace("\n", " ")
        rows.append(row)
    outer.empty()
    return pd.DataFrame(rows)


def show_points(points: pd.DataFrame, *, x: str, x_title: str, load_axis: bool, numeric: bool,
                slo: SloConfig, name: str) -> None:  # fmt: skip
    """Knee, figure and table of sweep points (column ``x`` holds the swept value)."""
    ok_points = points[points["error"].fillna("") == ""].copy()
    failed = points[points["error"].fillna("") != ""]
    if len(failed):
        st.warning(f"{len(failed)} point(s) failed; see the table.")
    shown = points.drop(columns=["x"])
    if ok_points.empty:
        common.show_table(shown, name, column_config=common.summary_column_help(shown.columns))
        return
    overloaded = ok_points["overloaded"].fillna(False).astype(bool) if "overloaded" in ok_points else False
    ok_points["meets_slo"] = analysis.meets_slo(ok_points, ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s)
    ok_points["counts"] = ok_points["meets_slo"] & ~overloaded
    knee = analysis.find_knee(ok_points[x], ok_points["counts"], load_axis=load_axis) if numeric else None
    if numeric:
        what = "highest load" if load_axis else "least capacity"
        st.markdown(
            f"**Knee** ({what} meeting p99 TTFT ≤ {slo.ttft_s:g} s and p99 TPOT ≤ {slo.tpot_s:g} s, not "
            "overloaded): "
            + (f"{x_title} = **{knee:g}**" if knee is not None else "none of the points qualifies")
        )
        if knee is not None and bool(ok_points["counts"].all()):
            st.caption("Every point qualifies: the knee lies beyond the swept range; extend the values.")
    n_over = int(overloaded.sum()) if not isinstance(overloaded, bool) else 0
    if n_over:
        st.warning(
            f"{n_over} point(s) overloaded (backlog still growing when the arrivals ended: achieved below "
            "offered load); their percentiles grow with the run's length and they never count for the knee.",
            icon="⚠️",
        )
    fig = plots.throughput_capacity_figure(
        ok_points, x=x, x_title=x_title, ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s, knee_x=knee
    )
    common.show_figure(fig, name)
    common.show_table(shown, name, column_config=common.summary_column_help(shown.columns))


def sweep_folder_section(scenario: kvsim.Scenario) -> None:
    """Open a sweep written by `kvsim sweep --out DIR` (from the allowed folders).

    The folder is typed in an expander (open when a folder is set, e.g. by a link); the
    sweep is drawn below it, on the page.
    """
    opened = bool(common.view().get("sweep.folder"))
    with st.expander("Open a sweep folder written by `kvsim sweep --out DIR`", expanded=opened):
        text = st.text_input(
            "Sweep folder",
            key=common.kept("sweep.folder", ""),
            placeholder="runs/capacity",
            help="A folder holding results.parquet, in scenarios/, ../shared/traces, the upload area or a "
            "folder given at start-up with --allow (make dashboard allows runs/).",
        )
        common.keep("sweep.folder", text)
    if not text:
        return
    st.subheader(f"Sweep in {Path(text).name}/")
    try:
        folder = _paths.confine_files(text, ["results.parquet"])
        check_input(folder / "results.parquet")  # a regular file: never a FIFO that blocks the page
        table = pd.read_parquet(folder / "results.parquet")
    except _paths.PathNotAllowed as err:
        st.error(str(err))
        return
    except (OSError, ValueError):
        st.error(f"{text}: no readable results.parquet there (is it a `kvsim sweep` output folder?)")
        return
    cols = list(table.columns)
    knobs = cols[cols.index("index") + 1 : cols.index("status")] if {"index", "status"} <= set(cols) else []
    if not knobs:
        st.error(f"{text}: results.parquet is not a sweep table (no override columns)")
        return
    x = st.selectbox("Swept knob", knobs, key=common.kept("sweep.folder_x", knobs[0], options=knobs))
    common.keep("sweep.folder_x", x)
    # Written by `kvsim sweep`: a failed point's error may quote a trace; the page names the file only.
    errors = table["error"].fillna("").astype(str).map(common.safe_error_text)
    points = table.assign(x=table[x], error=errors)
    points.loc[table["status"] != "ok", "error"] = points["error"].where(points["error"] != "", "not run")
    shares = [trace_share_kept(r) for r in table.to_dict("records")]
    if any(s is not None and s < 1 for s in shares):
        kept = min(s for s in shares if s is not None)
        st.warning(f"Some points replay only part of their trace (down to {kept:.1%}).", icon="⚠️")
    show_points(points, x="x", x_title=common.knob_axis_title(scenario, x) if common._walk(scenario, x) else x,
                load_axis=x.rsplit(".", 1)[-1] in ("rate_per_s", "time_scale"),
                numeric=pd.api.types.is_numeric_dtype(points["x"]), slo=scenario.slo,
                name=f"sweep_{Path(text).name}")  # fmt: skip


def main() -> None:
    st.set_page_config(page_title="kvsim: throughput vs capacity", layout="wide")
    common.show_notices()
    st.title("Throughput against capacity")
    scenario = common.current_scenario()
    st.caption(
        f"Sweeps one knob of scenario **{scenario.name}**; every point is a full run of the whole workload."
    )
    cols = st.columns([1, 2, 1])
    axes = axes_for(scenario)
    names = list(axes)
    name = cols[0].selectbox("Sweep over", names, key=common.kept("sweep.axis", names[0], options=names))
    common.keep("sweep.axis", name)
    axis = axes[name]
    title = axis_title(scenario, axis)
    values_key = f"sweep.values.{axis.path}"
    text = cols[1].text_input(
        f"Values of {title} (comma-separated)",
        key=common.kept(values_key, default_values(scenario, axis)),
        help=f"`{axis.path}`",
    )
    common.keep(values_key, text)
    n_path = count_path(scenario)
    current_n = _value(scenario, n_path) if n_path else None
    is_trace = scenario.workload.kind == "trace"
    whole = current_n if isinstance(current_n, int) else 0
    n = cols[2].number_input(
        "Requests per point (0: the whole workload)",
        min_value=0,
        step=50,
        key=common.kept("sweep.count", 0, min_value=0),
        disabled=n_path is None,
        help=f"0 runs every request of the workload ({n_path or 'not settable for this workload'}); fewer "
        "requests make the sweep faster but a short run of an overloaded system can look fine.",
    )
    common.keep("sweep.count", int(n))
    try:
        values = parse_values(text, axis)
    except ValueError:
        st.error(
            f"Values of {axis.path} must be {axis.kind.__name__} values separated by commas, got {text!r}."
        )
        common.sync_url()
        st.stop()
    count = {n_path: int(n)} if n_path and n and int(n) != whole else {}
    if count and is_trace:
        st.warning(
            f"Each point replays only the first {int(n):,} requests of the trace; the share kept is shown "
            "after the run. A shortened trace can hide overload: set 0 for the whole trace.",
            icon="⚠️",
        )
    key = ("sweep", common.scenario_key(scenario), axis.path, tuple(values), tuple(count.items()))
    sweeps = st.session_state.setdefault("sweeps", {})
    if key not in sweeps and st.button("Run sweep", type="primary"):
        sweeps[key] = run_sweep(scenario, axis, values, count)
    if key in sweeps:
        points = sweeps[key]
        shares = [trace_share_kept(r) for r in points.to_dict("records")]
        if count and any(s is not None for s in shares):
            kept = [s for s in shares if s is not None]
            st.warning(f"The points replayed {min(kept):.1%} of the trace.", icon="⚠️")
        show_points(points.rename(columns={"x": axis.path}).assign(x=points["x"]), x="x", x_title=title,
                    load_axis=axis.load_axis, numeric=axis.kind is not str, slo=scenario.slo,
                    name=f"{scenario.name}_sweep_{axis.path}")  # fmt: skip
    sweep_folder_section(scenario)
    common.sync_url()


main()
