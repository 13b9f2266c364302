"""The Scenario page (the dashboard's default): pick, upload or edit a scenario, change its
main knobs, run it. The other pages read the run made here; the view (source, knob changes)
is kept in the session and in the URL (see app.py).
"""

from __future__ import annotations

import _common as common
import pandas as pd
import streamlit as st

import kvsim
from kvsim.scenario.loading import scenario_data
from kvsim.units import format_seconds

HEADLINE = (
    ("p99 TTFT", "ttft_p99_s", format_seconds),
    ("p99 TPOT", "tpot_p99_s", format_seconds),
    ("Achieved / offered (req/s)", "achieved_requests_per_s", None),
    ("Throughput (tok/s)", "throughput_tokens_per_s", lambda v: f"{v:,.0f}"),
    ("Prefix hit rate", ("prefix_cache_hit_rate",), lambda v: f"{v:.1%}"),
    ("Preemptions", "num_preemptions", lambda v: f"{v:,}"),
    ("Peak KV usage", "kv_usage_peak", lambda v: f"{v:.1%}"),
)
#: Hover help of the headline numbers whose names alone leave them ambiguous.
HEADLINE_HELP = {
    "achieved_requests_per_s": "Offered (`offered_requests_per_s`): arrivals per second over the arrival window, "
    "first to last arrival. Achieved (`achieved_requests_per_s`): requests finished per second during the "
    "second half of that window, what the cluster kept up with while requests still arrived. Well below "
    "offered: overload.",
    "throughput_tokens_per_s": "Output tokens per simulated second over the whole run "
    "(`throughput_tokens_per_s`); `throughput_requests_per_s` in the full summary counts finished requests "
    "the same way. Not the achieved load, which counts the second half of the arrivals only.",
}


def _value(summary: dict, key: str | tuple[str, ...]) -> object:
    for k in (key,) if isinstance(key, str) else key:
        if k in summary:
            return summary[k]
    return None


def base_scenario(source: str) -> kvsim.Scenario:
    """The scenario chosen by ``source``, before knob changes; stops the page on an invalid one."""
    view = common.view()
    try:
        if source == "catalogue":
            files = common.scenario_files()
            if not files:
                st.info("No scenario files in scenarios/ yet; using the built-in default.")
                return kvsim.load_scenario(None)
            names = [p.name for p in files]
            name = st.selectbox("Scenario file", names, key=common.kept("file", names[0], options=names))
            common.keep("file", name)
            return common.load_file(files[names.index(name)])
        if source == "upload":
            # Relative trace paths in uploaded or edited YAML resolve against the repository.
            up = st.file_uploader(
                f"Scenario YAML (at most {common.MAX_SCENARIO_BYTES // 1024} KiB)", type=["yaml", "yml"]
            )
            if up is None:
                st.info("Choose a file to upload. (An uploaded scenario is not carried in the page's link.)")
                common.sync_url()
                st.stop()
            return common.parse_and_resolve(up.getvalue(), up.name)
        if source == "yaml":
            if view.get("yaml_error"):
                st.warning(view.pop("yaml_error"))
            if "yaml" not in view:
                # Start from the scenario chosen so far (every default written out).
                view["yaml"] = common.scenario_yaml(common.current_scenario())
            text = st.text_area(
                "Scenario YAML",
                height=400,
                key=common.kept("yaml", view["yaml"]),
                help="Any scenario field can be set here; `kvsim schema` lists them all. Starts from the "
                "scenario chosen before (file and knob changes). Trace paths: scenarios/ or ../shared/traces.",
            )
            common.keep("yaml", text)
            if common._yaml_param(text) is None:
                st.caption(
                    "This edit is too long to carry in the page's link; download the YAML to share it."
                )
            return common.parse_and_resolve(text.encode("utf-8"), "<edited YAML>")
        return kvsim.load_scenario(None)
    except kvsim.ScenarioError as err:
        common.show_scenario_error(err)
        common.sync_url()
        st.stop()
        raise


def show_summary(run: common.Run) -> None:
    summary = run.result.summary
    cols = [c for _ in range(2) for c in st.columns(4)]  # two rows: no value cut short
    for col, (label, key, fmt) in zip(cols, HEADLINE, strict=False):
        value = _value(summary, key)
        if key == "achieved_requests_per_s":
            offered = summary.get("offered_requests_per_s")
            text = (
                f"{value:.3g} / {offered:.3g}"
                if isinstance(value, float) and isinstance(offered, float)
                else "n/a"
            )
        else:
            text = fmt(value) if isinstance(value, int | float) and fmt else "n/a"
        col.metric(label, text, help=HEADLINE_HELP.get(key) if isinstance(key, str) else None)
    note = common.overload_note(summary)
    if note:
        st.warning(note, icon="⚠️")
    achieved, offered = summary.get("achieved_requests_per_s"), summary.get("offered_requests_per_s")
    if isinstance(achieved, float) and isinstance(offered, float) and achieved > offered * 1.005:
        st.caption(
            f"Achieved ({achieved:.3g} req/s) is above offered ({offered:.3g} req/s): achieved counts the "
            "requests that finished in the second half of the arrival window, and some of them arrived in the "
            "first half (the queue drained) or in a burst of arrivals late in the window. The cluster did not "
            "serve more than the workload offered: over the whole run it finished "
            f"{summary.get('throughput_requests_per_s', float('nan')):.3g} req/s."
        )
    with st.expander("Full summary"):
        table = pd.DataFrame(
            {
                "metric": list(summary),
                "value": [str(v) for v in summary.values()],
                "meaning": [common.summary_meaning(k) for k in summary],
            }
        )
        common.show_table(table, f"{run.result.scenario.name}_summary")


def scenario_page() -> None:
    common.show_notices()
    st.title("kvsim: LLM serving with the KV cache in view")
    st.caption(
        "Pick a scenario, adjust the main knobs, run it; then open the pages in the sidebar. "
        "Everything runs locally on the CPU; the link in the address bar reproduces this view."
    )
    view = common.view()
    codes = list(common.SOURCES)
    source = st.radio(
        "Scenario source",
        codes,
        format_func=common.SOURCES.get,
        horizontal=True,
        key=common.kept("source", "default", options=codes),
    )
    common.keep("source", source)
    base = base_scenario(source)
    base_key = common.scenario_key(base)
    if view.get("base") not in (None, base_key):
        view["set"] = {}  # another base scenario: the knob changes were made to the previous one
    view["base"] = base_key
    head = st.container()  # the Run button and the headline numbers, above the fold
    with st.expander("Main knobs", expanded=True):
        knobs = common.knob_widgets(base, key=base_key, changes=view.get("set", {}))
    changed = knobs.changed
    # A link may set fields that have no widget, or give a knob a value its widget cannot
    # hold (out of range, not an option): they stay, listed and validated, until dropped.
    extra = {k: v for k, v in view.get("set", {}).items() if k not in common.MAIN_KNOBS} | knobs.unshown
    if extra:
        st.caption("Set by the link: " + ", ".join(f"`{k}={common.link_text(v)}`" for k, v in extra.items()))
        if st.button("Drop these settings"):
            extra = {}
    changed = {**extra, **changed}
    view["set"] = changed
    try:
        scenario = common.resolve(scenario_data(base), changed, "<knobs>") if changed else base
    except kvsim.ScenarioError as err:
        common.show_scenario_error(err)
        common.sync_url()
        st.stop()
    common.set_scenario(scenario)
    yaml_text = common.scenario_yaml(scenario)
    with head:
        st.subheader(f"Scenario: {scenario.name}")
        st.markdown(common.setup_line(scenario))
        if scenario.description:
            st.caption(scenario.description)
        run = common.cached_run(scenario)
        if run is None and st.button("Run", type="primary"):
            common.run_scenario(scenario)
            common.sync_url()
            st.rerun()  # draw the page again, now with the run and without the button
        if run is not None:
            st.success(f"Run **{run.label}** is ready; see the other pages for the details.")
            show_summary(run)
    st.download_button(
        "Download resolved YAML", yaml_text, file_name=f"{scenario.name}.yaml", mime="application/x-yaml"
    )
    with st.expander("Resolved scenario (every default written out)"):
        st.code(yaml_text, language="yaml")
    common.sync_url()


scenario_page()
