"""Throughput against capacity: sweep request rate, GPU memory, KV blocks, replicas or KV dtype."""

from __future__ import annotations

from dataclasses import dataclass

import _common as common
import pandas as pd
import streamlit as st

import kvsim
from kvsim import analysis, plots

#: Summary metrics kept per sweep point.
SWEEP_METRICS = (
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
)


@dataclass(frozen=True)
class Axis:
    """A quantity to sweep: its dotted path, axis title, value type, and whether more of it is more load."""

    path: str
    title: str
    load_axis: bool
    kind: type = float


CAPACITY_AXES = {
    "GPU memory utilization": Axis(
        "replicas.0.engine.gpu_memory_utilization", "gpu_memory_utilization (fraction of GPU memory)", False
    ),
    "KV capacity (blocks)": Axis(
        "replicas.0.engine.num_gpu_blocks_override", "KV capacity (blocks per replica)", False, int
    ),
    "Replicas": Axis("replicas.0.count", "replicas (count)", load_axis=False, kind=int),
    "KV cache dtype": Axis("replicas.0.engine.kv_cache_dtype", "KV cache dtype", False, kind=str),
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
    head = {"Request rate": Axis(rate, "request rate (req/s)", load_axis=True)} if rate else {}
    return head | CAPACITY_AXES


def _value(scenario: kvsim.Scenario, path: str) -> object:
    node: object = scenario
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else getattr(node, part, None)
    return node


def default_values(scenario: kvsim.Scenario, axis: Axis) -> str:
    if axis.load_axis:
        rate = _value(scenario, axis.path)
        factors = (0.5, 1, 2, 3, 4)
        return ", ".join(f"{rate * f:g}" for f in factors) if isinstance(rate, float) else "1, 2, 4, 8, 16"
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
            point = common.resolve(
                scenario.model_dump(mode="json"), overrides, f"sweep point {axis.path}={v}"
            )
            run = common.run_scenario(point, label=f"{scenario.name} [{axis.path.rsplit('.', 1)[-1]}={v}]")
            row |= {k: run.result.summary.get(k) for k in SWEEP_METRICS}
            row["error"] = ""
        except kvsim.KvsimError as err:
            row["error"] = str(err).replace("\n", " ")
        rows.append(row)
    outer.empty()
    return pd.DataFrame(rows)


def main() -> None:
    st.set_page_config(page_title="kvsim: throughput vs capacity", layout="wide")
    st.title("Throughput against capacity")
    scenario = common.current_scenario()
    st.caption(f"Sweeps one knob of scenario **{scenario.name}**; every point is a full run.")
    cols = st.columns([1, 2, 1])
    axes = axes_for(scenario)
    name = cols[0].selectbox("Sweep over", list(axes))
    axis = axes[name]
    text = cols[1].text_input(
        f"Values of {axis.path} (comma-separated)", value=default_values(scenario, axis)
    )
    n_path = count_path(scenario)
    current_n = _value(scenario, n_path) if n_path else None
    n = cols[2].number_input(
        "Requests per point",
        min_value=10,
        value=min(current_n if isinstance(current_n, int) else 500, 500),
        step=50,
        disabled=n_path is None,
        help=f"Fewer requests make the sweep faster ({n_path or 'not settable for this workload'}).",
    )
    try:
        values = parse_values(text, axis)
    except ValueError:
        st.error(
            f"Values of {axis.path} must be {axis.kind.__name__} values separated by commas, got {text!r}."
        )
        st.stop()
    count = {n_path: int(n)} if n_path else {}
    key = ("sweep", common.scenario_key(scenario), axis.path, tuple(values), tuple(count.items()))
    sweeps = st.session_state.setdefault("sweeps", {})
    if key not in sweeps:
        if not st.button("Run sweep", type="primary"):
            st.stop()
        sweeps[key] = run_sweep(scenario, axis, values, count)
    points = sweeps[key]
    ok_points = points[points["error"] == ""].copy()
    failed = points[points["error"] != ""]
    if len(failed):
        st.warning(f"{len(failed)} point(s) failed; see the table.")
    slo = scenario.slo
    if ok_points.empty:
        common.show_table(points, f"{scenario.name}_sweep")
        return
    ok_points["meets_slo"] = analysis.meets_slo(ok_points, ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s)
    knee = (
        analysis.find_knee(ok_points["x"], ok_points["meets_slo"], load_axis=axis.load_axis)
        if axis.kind is not str
        else None
    )
    if axis.kind is not str:
        what = "highest load" if axis.load_axis else "least capacity"
        st.markdown(
            f"**Knee** ({what} meeting p99 TTFT ≤ {slo.ttft_s:g} s and p99 TPOT ≤ {slo.tpot_s:g} s): "
            + (f"{axis.path} = **{knee:g}**" if knee is not None else "none of the points meets the SLO")
        )
        if knee is not None and bool(ok_points["meets_slo"].all()):
            st.caption("Every point meets the SLO: the knee lies beyond the swept range; extend the values.")
    fig = plots.throughput_capacity_figure(
        ok_points, x="x", x_title=axis.title, ttft_slo_s=slo.ttft_s, tpot_slo_s=slo.tpot_s, knee_x=knee
    )
    common.show_figure(fig, f"{scenario.name}_sweep_{axis.path}")
    common.show_table(points.rename(columns={"x": axis.path}), f"{scenario.name}_sweep_{axis.path}")


main()
