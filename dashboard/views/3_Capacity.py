"""Capacity: the smallest value of a knob (or the largest rate) that meets an SLO, by bisection;
and the cheapest deployment that meets it, GPU type, TP, replicas and knobs together.

The same searches as ``kvsim capacity`` (`kvsim.planning.capacity.find_capacity`) and ``kvsim plan``
(`kvsim.planning.planner.plan_deployment`): each point is a full run of the whole workload, run in
worker processes; a point counts only when every SLO bound holds and the run is not
overloaded.
"""

from __future__ import annotations

import dataclasses
import os

import _common as common
import pandas as pd
import streamlit as st
from pydantic import ValidationError

import kvsim
from kvsim.analysis import plots
from kvsim.planning.capacity import (
    CapacityError,
    CapacityPoint,
    CapacityReport,
    default_goal,
    find_capacity,
    parse_slo,
    parse_values,
)
from kvsim.planning.planner import PlanError, PlanPoint, PlanReport, PlanSpace, plan_deployment
from kvsim.scenario.loading import apply_overrides, scenario_data
from kvsim.scenario.schema import Scenario
from kvsim.units import format_seconds

#: The table's column of the share of a point's requests that finished, in percent.
SERVED = "served (%)"
#: Knobs offered by name: (dotted path, default candidates). "rate" is the workload's own rate path.
KNOBS = {
    "replicas": ("replicas.0.count", "1:8"),
    "gpu": ("replicas.0.gpu", "l4, a100-40gb, a100-80gb, h100-sxm, h200"),
    "tp": ("replicas.0.tp", "1, 2, 4, 8"),
    "memory": ("replicas.0.engine.gpu_memory_utilization", "0.5:0.95:0.05"),
    "rate": ("", "1:64"),
    "time_scale": ("workload.time_scale", "1:16"),
    "other": ("", ""),
}


def rate_path(scenario: kvsim.Scenario) -> str | None:
    arrival = getattr(scenario.workload, "arrival", None)
    if hasattr(arrival, "rate_per_s"):
        return "workload.arrival.rate_per_s"
    return "workload.rate_per_s" if scenario.workload.kind == "trace" else None


def knob_choices(scenario: kvsim.Scenario) -> dict[str, str]:
    """Knob name -> label, for the knobs this scenario has."""
    out = {}
    for name, (path, _) in KNOBS.items():
        if name == "rate":
            path = rate_path(scenario) or ""
            if not path:
                continue
        if name == "time_scale" and scenario.workload.kind != "trace":
            continue
        out[name] = f"{common.knob_label(scenario, path)} ({path})" if path else "another knob (dotted path)"
    return out


def checked_values(base: kvsim.Scenario, knob: str, values: list) -> list:
    """The candidates as the search may run them: each point resolved through the dashboard's gate.

    Every point (``base`` with ``knob`` set to a candidate) passes `common.resolve`, so a
    file a candidate names (``workload.path``, a profile, a whole workload) must lie in an
    allowed folder; `kvsim.ScenarioError` names the first that does not, before anything
    runs. A candidate whose files the gate wrote otherwise (a relative path, a link) is
    replaced by the value the gate resolved, so that the search runs what was checked.
    """
    data = scenario_data(base)
    out = []
    for value in values:
        point = common.resolve(data, {knob: value}, f"<capacity point {knob}={value}>")
        try:
            as_given: kvsim.Scenario | None = Scenario.model_validate(apply_overrides(data, {knob: value}))
        except (ValidationError, kvsim.ScenarioError):
            as_given = None
        if as_given != point:
            node: object = point.model_dump(mode="json")
            for part in knob.split("."):
                node = node[int(part)] if isinstance(node, list) else node[part]  # type: ignore[index]
            value = node
        out.append(value)
    return out


def readable_report(report: CapacityReport) -> CapacityReport:
    """The report as the page shows it: each failed point's error without a quote of any file."""
    points = [dataclasses.replace(p, error=common.safe_error_text(p.error)) for p in report.points]
    return dataclasses.replace(report, points=points)


def search(scenario: kvsim.Scenario, knob: str, values: list, slo_text: str, goal: str | None,
           jobs: int) -> CapacityReport:  # fmt: skip
    """Run the search with a progress bar (one step per point run); ``scenario`` holds the overrides."""
    bar = st.progress(0, text="Capacity search")
    runs = [0]

    def progress(point: CapacityPoint, num_candidates: int) -> None:
        runs[0] += 1
        verdict = "meets" if point.feasible else "misses"
        bar.progress(
            min(runs[0] / max(num_candidates.bit_length(), 1), 1.0),
            text=f"run {runs[0]}: {knob} = {point.value} {verdict} the SLO "
            f"(p99 TTFT {format_seconds(point.summary.get('ttft_p99_s'))})",
        )

    try:
        report = find_capacity(scenario, knob, checked_values(scenario, knob, values), parse_slo(slo_text),
                               goal=goal, jobs=jobs, progress=progress)  # fmt: skip
        return readable_report(report)
    finally:
        bar.empty()


def plan_search(
    scenario: kvsim.Scenario, space: PlanSpace, slo_text: str, search: str, jobs: int
) -> PlanReport:
    """`kvsim plan` with a progress line per run; ``scenario`` holds the overrides."""
    bar = st.progress(0, text="Planning")
    runs = [0]

    def progress(point: PlanPoint) -> None:
        runs[0] += 1
        verdict = "overloaded (stopped early)" if point.stopped else "meets" if point.feasible else "misses"
        bar.progress(
            min(runs[0] / 40, 1.0), text=f"run {runs[0]}: {point.units} x [{point.config.label()}] {verdict}"
        )

    try:
        return plan_deployment(scenario, parse_slo(slo_text), space, search=search,  # type: ignore[arg-type]
                               jobs=jobs, progress=progress)  # fmt: skip
    finally:
        bar.empty()


def _list(text: str, what: str, parse: type = str) -> tuple:
    """A comma-separated input as a tuple; ``default`` items as None; PlanError naming the input."""
    out = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        try:
            out.append(None if item == "default" else parse(item))
        except ValueError:
            raise PlanError(f"{what}: {item!r} is not a whole number (or 'default')") from None
    return tuple(out)


def plan_section(scenario: kvsim.Scenario, slo_text: str, jobs: int) -> None:
    """The cheapest deployment meeting the SLO above: GPUs, TP, replicas and a knob, with its
    cost, launch command and the Pareto front of cost against the SLO metrics."""
    st.header("Plan: the cheapest deployment that meets the SLO")
    st.caption(
        "Searches GPU types, TP degrees, replica counts and `max_num_batched_tokens` for the cheapest "
        "deployment meeting the SLO above (`kvsim plan` runs the same search, with more knobs: docs/planning.md). "
        "Prices: kvsim's example list prices (`kvsim/data/prices.yaml`)."
    )
    cols = st.columns([2, 1, 1, 1, 1])
    gpus = cols[0].text_input("GPUs", key=common.kept("plan.gpus", "h100-sxm, h200, b200"))
    tps = cols[1].text_input("TP degrees", key=common.kept("plan.tp", "1, 2, 4"))
    tokens = cols[2].text_input("max_num_batched_tokens", key=common.kept("plan.tokens", "default"))
    max_gpus = cols[3].number_input("Most GPUs", min_value=1, max_value=1024,
                                    key=common.kept("plan.max_gpus", 16, min_value=1, max_value=1024))  # fmt: skip
    search = cols[4].radio("Search", ("cheapest", "front"), key=common.kept("plan.search", "cheapest",
                           options=("cheapest", "front")), help="front: every configuration's least replica count")  # fmt: skip
    for key, value in (("plan.gpus", gpus), ("plan.tp", tps), ("plan.tokens", tokens),
                       ("plan.max_gpus", int(max_gpus)), ("plan.search", search)):  # fmt: skip
        common.keep(key, value)
    try:
        space = PlanSpace(gpus=_list(gpus, "GPUs"), tps=_list(tps, "TP degrees", int),
                          max_num_batched_tokens=_list(tokens, "max_num_batched_tokens", int),
                          max_gpus=int(max_gpus))  # fmt: skip
        space.check()
    except PlanError as err:
        st.error(str(err))
        return
    key = ("plan", common.scenario_key(scenario), repr(space), slo_text, search, jobs)
    plans = st.session_state.setdefault("plans", {})
    if key not in plans and st.button("Plan deployment", type="primary"):
        try:
            plans[key] = plan_search(scenario, space, slo_text, search, jobs)
        except kvsim.KvsimError as err:
            st.error(common.safe_error(err))
    report = plans.get(key)
    if report is None:
        return
    (st.success if report.cheapest is not None else st.warning)(report.answer_line())
    for note in report.notes:
        st.warning(note, icon="⚠️")
    best = report.cheapest
    if best is not None and best.cost is not None:
        c = best.cost
        st.markdown(
            f"{c.currency} **{c.usd_per_hour:,.2f}/hour**; per million tokens: input {c.usd_per_m_input:,.2f}, "
            f"cached input {c.usd_per_m_cached_input:,.2f}, output {c.usd_per_m_output:,.2f}; "
            f"{c.energy_j_per_output_token:.3g} J per output token (rough). Prices: {report.prices.label}."
        )
        st.code("\n\n".join(g.text() for g in report.launch(best)), language="bash")
    runs = report.runs_table()
    if len(runs):
        fig = plots.plan_pareto_figure(runs, [(b.key, b.limit, b.upper) for b in report.slo],
                                       currency=report.prices.currency)  # fmt: skip
        common.show_figure(fig, f"{scenario.name}_plan_pareto")
    common.show_table(report.configurations_table(), f"{scenario.name}_plan_configurations")
    st.caption(
        f"{len(report.outcomes)} configurations, {report.num_runs} runs ({report.num_stopped} stopped early as "
        f"overloaded), {report.wall_s:.1f} s."
    )


def main() -> None:
    st.set_page_config(page_title="kvsim: capacity", layout="wide")
    common.show_notices()
    st.title("Capacity: the least that meets the SLO")
    scenario = common.current_scenario()
    st.caption(
        f"Searches a knob of scenario **{scenario.name}** by bisection, each point a full run of the whole "
        "workload (`kvsim capacity` on the command line runs the same search). A point counts when every "
        "SLO bound holds and the run is not overloaded."
    )
    choices = knob_choices(scenario)
    cols = st.columns([2, 2, 2])
    name = cols[0].selectbox(
        "Knob",
        list(choices),
        format_func=choices.get,
        key=common.kept("cap.knob", next(iter(choices)), options=choices),
    )
    common.keep("cap.knob", name)
    path, default_values = KNOBS[name]
    if name == "rate":
        path = rate_path(scenario) or ""
    if name == "other":
        path = cols[0].text_input(
            "Dotted path", key=common.kept("cap.path", "replicas.0.engine.max_num_seqs")
        )
        common.keep("cap.path", path)
        default_values = "64, 128, 256, 512"
    values_text = cols[1].text_input(
        "Candidate values",
        key=common.kept(f"cap.values.{name}", default_values),
        help="START:STOP[:STEP] (both ends included) or a comma-separated list in order of increasing capacity.",
    )
    common.keep(f"cap.values.{name}", values_text)
    slo_text = cols[2].text_input(
        "SLO",
        key=common.kept("cap.slo", f"ttft_p99_s={scenario.slo.ttft_s:g},tpot_p99_s={scenario.slo.tpot_s:g}"),
        help="Bounds on summary keys: KEY=LIMIT or KEY<=LIMIT, KEY>=LIMIT; any percentile key "
        "(ttft_p90_s, e2e_p99_s, ...).",
    )
    common.keep("cap.slo", slo_text)
    cols = st.columns([2, 1, 1])
    overrides_text = cols[0].text_area(
        "Overrides for every point, one dotted.key=value per line (as --set)",
        key=common.kept("cap.set", ""),
        placeholder="none",
        help="For example `router.kind=least_loaded` and, on the next line, `workload.time_scale=8`.",
        height=80,
    )
    common.keep("cap.set", overrides_text)
    auto = default_goal(path) if path else "smallest"
    goal = cols[1].radio(
        "Look for the", ("smallest", "largest"), index=0 if auto == "smallest" else 1, horizontal=True,
        key=common.kept(f"cap.goal.{name}", auto, options=("smallest", "largest")),
    )  # fmt: skip
    common.keep(f"cap.goal.{name}", goal)
    jobs = cols[2].number_input(
        "Runs at once",
        min_value=1,
        max_value=max(os.cpu_count() or 1, 1),
        key=common.kept(
            "cap.jobs", min(os.cpu_count() or 1, 2), min_value=1, max_value=max(os.cpu_count() or 1, 1)
        ),
        help="Points run per bisection round, in worker processes; 1 runs the fewest points.",
    )
    common.keep("cap.jobs", int(jobs))
    overrides = [o.strip() for o in overrides_text.splitlines() if o.strip()]
    cols[0].caption(
        "Every point runs with " + ", ".join(f"`{o}`" for o in overrides)
        if overrides
        else "No overrides: every point runs the scenario as it is, but for the knob."
    )
    try:
        values = parse_values(values_text)
        parse_slo(slo_text)
    except CapacityError as err:
        st.error(str(err))
        common.sync_url()
        st.stop()
    key = ("capacity", common.scenario_key(scenario), path, tuple(map(str, values)), slo_text, tuple(overrides),
           goal, int(jobs))  # fmt: skip
    reports = st.session_state.setdefault("capacity", {})
    if key not in reports and st.button("Find capacity", type="primary"):
        try:
            # Through the dashboard's gate: the scenario with the overrides, then every candidate.
            base = common.resolve(scenario_data(scenario), overrides, "<overrides>")
            reports[key] = search(base, path, values, slo_text, goal, int(jobs))
        except kvsim.ScenarioError as err:
            common.show_scenario_error(err)
        except kvsim.KvsimError as err:
            st.error(common.safe_error(err))
    report = reports.get(key)
    if report is not None:
        if report.answer is not None:
            st.success(f"**{report.answer_line()}**")
        else:
            st.warning(report.answer_line())
        for note in report.notes:
            st.warning(note, icon="⚠️")
        table = report.table()
        numeric = pd.api.types.is_numeric_dtype(table[path])
        ok = table[table["error"] == ""]
        if len(ok):
            fig = plots.throughput_capacity_figure(
                ok.rename(columns={path: "x"}),
                x="x",
                x_title=common.knob_axis_title(scenario, path) if common._walk(scenario, path) else path,
                ttft_slo_s=next((b.limit for b in report.slo if b.key == "ttft_p99_s"), scenario.slo.ttft_s),
                tpot_slo_s=next((b.limit for b in report.slo if b.key == "tpot_p99_s"), scenario.slo.tpot_s),
                knee_x=report.answer if numeric else None,
                knee_name="answer",
            )
            common.show_figure(fig, f"{scenario.name}_capacity_{path}")
        # The share served in percent: a bare 1 for "all of them" reads as one request.
        table = table.rename(columns={"served": SERVED}).assign(**{SERVED: table["served"] * 100})
        served = st.column_config.NumberColumn(
            SERVED, format="%.1f%%", help="Share of the point's requests that finished (at least "
            f"{report.min_served:.0%} for the point to count)."
        )  # fmt: skip
        common.show_table(
            table,
            f"{scenario.name}_capacity_{path}",
            column_config=common.summary_column_help(table.columns) | {SERVED: served},
        )
    try:
        planned = common.resolve(scenario_data(scenario), overrides, "<overrides>")
    except kvsim.ScenarioError as err:
        common.show_scenario_error(err)
    else:
        plan_section(planned, slo_text, int(jobs))
    common.sync_url()


main()
