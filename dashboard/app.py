"""kvsim dashboard: the page list, and the Scenario page (pick, upload or edit a scenario, run it).

Start with ``streamlit run dashboard/app.py`` (or ``make dashboard``). The other pages
(``pages/N_Name.py``, in the sidebar) read the run made here; results are cached per
resolved scenario, so switching pages never re-runs anything. ``?set=dotted.key=value`` in the URL presets knobs of the built-in default.
"""

from __future__ import annotations

from pathlib import Path

import _common as common
import pandas as pd
import streamlit as st

import kvsim
from kvsim.scenario.loading import read_yaml
from kvsim.workload import resolve_workload_paths

SOURCES = ("Built-in default", "Catalogue (scenarios/)", "Upload a YAML file", "Edit YAML")

HEADLINE = (
    ("p99 TTFT", "ttft_p99_s", "{:.3g} s"),
    ("p99 TPOT", "tpot_p99_s", "{:.3g} s"),
    ("Throughput (tok/s)", "throughput_tokens_per_s", "{:,.0f}"),
    ("Prefix hit rate", "prefix_cache_hit_rate", "{:.1%}"),
    ("Preemptions", "num_preemptions", "{:,}"),
    ("Peak KV usage", "kv_usage_peak", "{:.1%}"),
)


def base_scenario(source: str) -> kvsim.Scenario:
    """The scenario chosen by ``source``, before knob changes; stops the page on an invalid one."""
    try:
        if source == "Catalogue (scenarios/)":
            files = common.scenario_files()
            if not files:
                st.info("No scenario files in scenarios/ yet; using the built-in default.")
                return kvsim.load_scenario(None, common.query_overrides())
            path = st.selectbox("Scenario file", files, format_func=lambda p: p.name)
            data = resolve_workload_paths(read_yaml(path), path.parent)
            return common.resolve(data, {}, str(path.relative_to(common.REPO_ROOT)))
        if source == "Upload a YAML file":
            # Relative trace paths in uploaded or edited YAML resolve against the repository.
            up = st.file_uploader(
                f"Scenario YAML (at most {common.MAX_SCENARIO_BYTES // 1024} KiB)", type=["yaml", "yml"]
            )
            if up is None:
                st.info("Choose a file to upload.")
                st.stop()
            data = resolve_workload_paths(
                common.parse_scenario_bytes(up.getvalue(), up.name), common.REPO_ROOT
            )
            return common.resolve(data, {}, up.name)
        if source == "Edit YAML":
            text = st.text_area(
                "Scenario YAML",
                value=common.scenario_yaml(kvsim.load_scenario(None)),
                height=400,
                key="yaml_editor",
                help="Any scenario field can be set here; `kvsim schema` lists them all.",
            )
            data = common.parse_scenario_bytes(text.encode("utf-8"), "<edited YAML>")
            data = resolve_workload_paths(data, common.REPO_ROOT)
            return common.resolve(data, {}, "<edited YAML>")
        return kvsim.load_scenario(None, common.query_overrides())
    except kvsim.ScenarioError as err:
        common.show_scenario_error(err)
        st.stop()
        raise


def show_summary(run: common.Run) -> None:
    summary = run.result.summary
    cols = st.columns(len(HEADLINE))
    for col, (label, key, fmt) in zip(cols, HEADLINE, strict=True):
        value = summary.get(key)
        col.metric(label, fmt.format(value) if isinstance(value, int | float) else "n/a")
    with st.expander("Full summary"):
        table = pd.DataFrame({"metric": list(summary), "value": [str(v) for v in summary.values()]})
        common.show_table(table, f"{run.result.scenario.name}_summary")


def scenario_page() -> None:
    st.title("kvsim: LLM serving with the KV cache in view")
    st.caption(
        "Pick a scenario, adjust the main knobs, run it; then open Latency spikes, Throughput vs "
        "capacity, KV cache, Compare or Calibration in the sidebar. Everything runs locally on the CPU."
    )
    source = st.radio("Scenario source", SOURCES, horizontal=True)
    base = base_scenario(source)
    st.subheader(f"Scenario: {base.name}")
    if base.description:
        st.caption(base.description)
    with st.expander("Main knobs", expanded=True):
        changed = common.knob_widgets(base, key=common.scenario_key(base))
    try:
        scenario = common.resolve(base.model_dump(mode="json"), changed, "<knobs>") if changed else base
    except kvsim.ScenarioError as err:
        common.show_scenario_error(err)
        st.stop()
    common.set_scenario(scenario)
    yaml_text = common.scenario_yaml(scenario)
    st.download_button(
        "Download resolved YAML", yaml_text, file_name=f"{scenario.name}.yaml", mime="application/x-yaml"
    )
    with st.expander("Resolved scenario (every default written out)"):
        st.code(yaml_text, language="yaml")

    run = common.cached_run(scenario)
    if run is None and st.button("Run", type="primary"):
        try:
            common.run_scenario(scenario)
        except kvsim.KvsimError as err:
            st.error(str(err))
            st.stop()
        st.rerun()  # draw the page again, now with the run and without the button
    if run is not None:
        st.success(f"Run **{run.label}** is ready; see the other pages for the details.")
        show_summary(run)


def main() -> None:
    st.set_page_config(page_title="kvsim", page_icon="🧮", layout="wide")
    pages = [st.Page(scenario_page, title="Scenario", default=True)]
    for path in sorted((Path(__file__).parent / "pages").glob("[0-9]_*.py")):
        pages.append(st.Page(path, title=path.stem.split("_", 1)[1].replace("_", " ")))
    st.navigation(pages).run()


main()
