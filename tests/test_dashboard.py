"""Each dashboard page under `streamlit.testing.v1.AppTest`: no exception, the expected elements.

Runs are small (``?set=workload.num_requests=...``). Pages are reached from the app with
``switch_page``, as in a browser session, so they share its session state (the run).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import kvsim
import kvsim.io
from kvsim.cost.profile import shipped_profiles

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

DASHBOARD = Path(__file__).resolve().parents[1] / "dashboard"
sys.path.insert(0, str(DASHBOARD))
import _common as common  # noqa: E402

NUM_REQUESTS = 120
TIMEOUT_S = 120


def _app(num_requests: int = NUM_REQUESTS) -> AppTest:
    at = AppTest.from_file(str(DASHBOARD / "app.py"), default_timeout=TIMEOUT_S)
    at.query_params["set"] = [f"workload.num_requests={num_requests}"]
    at.run()
    assert not at.exception, at.exception
    return at


def _ran() -> AppTest:
    at = _app()
    next(b for b in at.button if b.label == "Run").click()
    at.run()
    assert not at.exception, at.exception
    return at


def _page(at: AppTest, name: str) -> AppTest:
    at.switch_page(f"pages/{name}.py")
    at.run()
    assert not at.exception, at.exception
    return at


def _charts(at: AppTest) -> int:
    return len(at.get("plotly_chart"))


def _downloads(at: AppTest) -> int:
    return len(at.get("download_button"))


# --- Scenario page (app.py) -------------------------------------------------------------


def test_scenario_page_opens_on_the_default_and_runs_it() -> None:
    at = _app()
    assert at.title[0].value.startswith("kvsim")
    knobs = {w.label: w for w in at.number_input}
    assert knobs["workload.num_requests"].value == NUM_REQUESTS
    assert "Tokens per KV block" in knobs["replicas.0.engine.block_size"].help  # help from the schema
    assert _downloads(at) == 1  # resolved YAML
    next(b for b in at.button if b.label == "Run").click()
    at.run()
    assert not at.exception
    assert [m.label for m in at.metric] == ["p99 TTFT", "p99 TPOT", "Throughput (tok/s)", "Prefix hit rate",
                                            "Preemptions", "Peak KV usage"]  # fmt: skip
    (run,) = at.session_state["runs"].values()
    assert run.result.summary["num_requests"] == NUM_REQUESTS
    assert run.result.scenario == at.session_state["scenario"]


def test_catalogue_scenarios_can_be_chosen() -> None:
    files = common.scenario_files()
    if not files:
        pytest.skip("no scenarios/*.yaml yet")
    at = _app()
    at.radio[0].set_value("Catalogue (scenarios/)").run()
    assert not at.exception and not at.error
    box = at.selectbox[0]
    assert box.label == "Scenario file" and len(box.options) == len(files)
    box.select_index(len(files) - 1).run()
    assert at.session_state["scenario"] == kvsim.load_scenario(files[-1])


def test_knob_change_resolves_a_new_scenario() -> None:
    at = _app()
    next(w for w in at.number_input if w.label == "replicas.0.engine.block_size").set_value(32)
    at.run()
    assert at.session_state["scenario"].replicas[0].engine.block_size == 32
    assert "block_size: 32" in at.code[0].value


@pytest.mark.parametrize(
    ("text", "field", "rule"),
    [
        ("replicas:\n  - tp: 0\n", "replicas.0.tp", "greater than or equal to 1"),
        ("name: x\nworkload: {num_requests: [\n", "line 3, column 1", "not valid YAML"),
        ("[1, 2]\n", "<root>", "must be a YAML mapping"),
        ("model: gpt-17\n", "model", "unknown model preset"),
    ],
)
def test_invalid_yaml_shows_file_field_and_rule_not_a_traceback(text: str, field: str, rule: str) -> None:
    at = _app()
    at.radio[0].set_value("Edit YAML").run()
    at.text_area(key="yaml_editor").set_value(text).run()
    assert not at.exception
    assert len(at.error) == 1
    message = at.error[0].value
    assert "<edited YAML>" in message and field in message and rule in message
    assert not [b for b in at.button if b.label == "Run"]


def test_upload_bytes_are_size_limited_utf8_and_safe_loaded() -> None:
    with pytest.raises(common.kvsim.ScenarioError, match="limit is 262,144 bytes"):
        common.parse_scenario_bytes(b"#" * (common.MAX_SCENARIO_BYTES + 1), "big.yaml")
    with pytest.raises(common.kvsim.ScenarioError, match="not UTF-8"):
        common.parse_scenario_bytes(b"name: \xff\n", "bin.yaml")
    with pytest.raises(common.kvsim.ScenarioError, match="not valid YAML"):  # safe loader: no python tags
        common.parse_scenario_bytes(b"name: !!python/object/apply:os.system [ls]\n", "evil.yaml")
    assert common.parse_scenario_bytes(b"name: ok\n", "ok.yaml") == {"name": "ok"}


# --- other pages ------------------------------------------------------------------------


def test_latency_spikes_page_offers_a_run_when_there_is_none() -> None:
    at = _page(_app(), "1_Latency_spikes")
    assert "has not been run yet" in at.info[0].value
    at.button(key="require_run").click().run()
    assert not at.exception
    assert _charts(at) == 1


def test_latency_spikes_page() -> None:
    at = _page(_ran(), "1_Latency_spikes")
    assert _charts(at) == 1
    assert [w.label for w in at.number_input] == [
        "Window (s)",
        "TTFT spike threshold (s)",
        "ITL spike threshold (s)",
    ]
    # A threshold of 0 makes every window with samples a spike: the table explains them.
    next(w for w in at.number_input if w.label == "TTFT spike threshold (s)").set_value(0.0).run()
    assert not at.exception
    assert len(at.dataframe) == 1
    table = at.dataframe[0].value
    assert table["explanation"].str.startswith("p99 ").all()
    assert _downloads(at) == 2  # figure HTML, table CSV


def test_throughput_vs_capacity_page_runs_a_sweep() -> None:
    at = _page(_ran(), "2_Throughput_vs_capacity")
    assert at.selectbox[0].value == "Request rate"
    at.text_input[0].set_value("2, 64").run()
    at.number_input[0].set_value(60).run()
    next(b for b in at.button if b.label == "Run sweep").click().run()
    assert not at.exception
    assert _charts(at) == 1
    points = at.dataframe[0].value
    assert points["workload.arrival.rate_per_s"].tolist() == [2.0, 64.0]
    assert (points["error"] == "").all()
    assert any("Knee" in m.value for m in at.markdown)


def test_throughput_page_rejects_malformed_values() -> None:
    at = _page(_app(), "2_Throughput_vs_capacity")
    at.text_input[0].set_value("2, lots").run()
    assert not at.exception
    assert "must be float values" in at.error[0].value


def test_trace_workload_knobs_and_sweep_axis(traces_dir: Path) -> None:
    at = _app()
    at.radio[0].set_value("Edit YAML").run()
    trace = traces_dir / "mooncake" / "conversation_trace.jsonl"
    yaml_text = (
        f"name: mooncake\nworkload: {{kind: trace, path: {trace}, format: mooncake, max_requests: 40, "
        "rate_per_s: 2.0}\n"
    )
    at.text_area(key="yaml_editor").set_value(yaml_text).run()
    knobs = {w.label: w for w in at.number_input}
    assert knobs["workload.max_requests"].value == 40 and knobs["workload.rate_per_s"].value == 2.0
    at = _page(at, "2_Throughput_vs_capacity")
    assert at.text_input[0].label == "Values of workload.rate_per_s (comma-separated)"
    assert at.text_input[0].value == "1, 2, 4, 6, 8"
    assert at.number_input[0].value == 40  # workload.max_requests


def test_kv_cache_page() -> None:
    at = _page(_ran(), "3_KV_cache")
    assert _charts(at) == 3
    assert [m.label for m in at.metric] == ["KV blocks (all replicas)", "Peak KV usage", "Prefix hit rate",
                                            "Evicted blocks"]  # fmt: skip
    curve = at.dataframe[0].value
    assert curve["capacity_blocks"].iloc[-1] is None or curve["capacity_blocks"].isna().iloc[-1]  # unbounded
    assert curve["token_hit_ratio"].is_monotonic_increasing


def test_compare_page_runs_a_variant_and_compares() -> None:
    at = _page(_ran(), "4_Compare")
    assert "needs two runs" in at.info[0].value
    at.text_area[0].set_value("replicas.0.engine.enable_prefix_caching=false")
    next(b for b in at.button if b.label == "Run variant").click().run()
    assert not at.exception
    assert _charts(at) == 1
    table = at.dataframe[0].value.set_index("metric")
    assert table.loc["prefix_cache_hit_rate"].iloc[1] == 0.0  # the variant has caching off
    assert any(c.endswith("(%)") for c in table.columns)


def test_compare_page_loads_a_saved_result_folder(tmp_path: Path) -> None:
    at = _ran()
    (run,) = at.session_state["runs"].values()
    kvsim.io.save_result(run.result, tmp_path / "saved")
    at = _page(at, "4_Compare")
    at.text_input[0].set_value(str(tmp_path / "saved")).run()
    next(b for b in at.button if b.label == "Load folder").click().run()
    assert not at.exception
    labels = [r.label for r in at.session_state["runs"].values()]
    assert labels[-1] == "saved (folder)"
    table = at.dataframe[0].value.set_index("metric")
    assert table.loc["ttft_p99_s"].iloc[0] == table.loc["ttft_p99_s"].iloc[1]  # same run, saved and loaded
    at.text_input[0].set_value(str(tmp_path / "missing")).run()
    next(b for b in at.button if b.label == "Load folder").click().run()
    assert "no such result folder" in at.error[0].value


def test_compare_page_shows_invalid_overrides() -> None:
    at = _page(_ran(), "4_Compare")
    at.text_area[0].set_value("replicas.0.tp=0")
    next(b for b in at.button if b.label == "Run variant").click().run()
    assert not at.exception
    assert "replicas.0.tp" in at.error[0].value


def test_calibration_page() -> None:
    at = _page(_app(), "5_Calibration")
    profiles = shipped_profiles()
    if profiles:
        assert _charts(at) == 1
    else:
        assert "No cost profiles found" in at.info[0].value


def test_a_scenario_that_fails_while_running_shows_an_error_not_a_traceback(tmp_path: Path) -> None:
    # Valid as a scenario, but its trace file is missing: the failure comes from kvsim.run.
    missing = tmp_path / "no-such-trace.jsonl"
    at = _app()
    at.radio[0].set_value("Edit YAML").run()
    text = f"workload: {{kind: trace, format: mooncake, path: '{missing}'}}\n"
    at.text_area(key="yaml_editor").set_value(text).run()
    assert not at.exception and not at.error
    next(b for b in at.button if b.label == "Run").click()
    at.run()
    assert not at.exception
    assert any("no-such-trace" in e.value for e in at.error)
