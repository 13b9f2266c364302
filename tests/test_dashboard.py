"""Each dashboard page under `streamlit.testing.v1.AppTest`: no exception, the expected elements.

Runs are small (``?set=workload.num_requests=...``). Pages are reached from the app with
``switch_page``, as in a browser session, so they share its session state (the view, the
runs). The security tests ask for /etc/passwd through every path input and check that no
line of it reaches the page.
"""

from __future__ import annotations

import io
import os
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from google.protobuf import text_format

import kvsim
import kvsim.results.io
from kvsim.cost.profile import shipped_profiles
from kvsim.planning.capacity import find_capacity, parse_slo, parse_values
from kvsim.planning.planner import PlanSpace, plan_deployment

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

DASHBOARD = Path(__file__).resolve().parents[1] / "dashboard"
sys.path.insert(0, str(DASHBOARD))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402
import _paths  # noqa: E402

NUM_REQUESTS = 120
TIMEOUT_S = 120
PASSWD = Path("/etc/passwd")


def _app(num_requests: int | None = NUM_REQUESTS, **params: str | list[str]) -> AppTest:
    at = AppTest.from_file(str(DASHBOARD / "app.py"), default_timeout=TIMEOUT_S)
    if num_requests is not None:
        at.query_params["set"] = [f"workload.num_requests={num_requests}"]
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, at.exception
    return at


def _ran(**params: str | list[str]) -> AppTest:
    at = _app(**params)
    next(b for b in at.button if b.label == "Run").click()
    at.run()
    assert not at.exception, at.exception
    return at


def _page(at: AppTest, name: str) -> AppTest:
    at.switch_page(f"views/{name}.py" if name != "app" else "views/scenario.py")
    at.run()
    assert not at.exception, at.exception
    return at


def _knob(at: AppTest, path: str, kind: str = "number_input"):
    return next(w for w in getattr(at, kind) if str(w.key).endswith(f":{path}"))


def _charts(at: AppTest) -> int:
    return len(at.get("plotly_chart"))


def _downloads(at: AppTest) -> int:
    return len(at.get("download_button"))


def _page_text(at: AppTest) -> str:
    """Everything the page sends to the browser, as text (every element's message)."""
    out = []

    def walk(node) -> None:
        proto = getattr(node, "proto", None)
        if proto is not None:
            out.append(text_format.MessageToString(proto, as_utf8=True))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at._tree)
    return "\n".join(out)


# --- Scenario page (app.py) -------------------------------------------------------------


def test_scenario_page_opens_on_the_default_and_runs_it() -> None:
    at = _app()
    assert at.title[0].value.startswith("kvsim")
    knob = _knob(at, "workload.num_requests")
    assert knob.value == NUM_REQUESTS
    assert knob.label == "Number of prompts sent"  # labels from the schema's descriptions
    block = _knob(at, "replicas.0.engine.block_size")
    assert block.label == "Tokens per KV block" and "`replicas.0.engine.block_size`" in block.help
    assert _downloads(at) == 1  # resolved YAML
    # The Run button comes before the knobs (above the fold).
    order = [type(e).__name__ for e in at.main]
    next(b for b in at.button if b.label == "Run").click()
    at.run()
    assert not at.exception
    assert [m.label for m in at.metric] == ["p99 TTFT", "p99 TPOT", "Achieved / offered (req/s)", "Throughput (tok/s)",
                                            "Prefix hit rate", "Preemptions", "Peak KV usage"]  # fmt: skip
    assert " / " in at.metric[2].value
    (run,) = at.session_state["runs"].values()
    assert run.result.summary["num_requests"] == NUM_REQUESTS
    assert run.result.scenario == at.session_state["scenario"]
    assert order  # the page drew


def test_catalogue_scenarios_can_be_chosen() -> None:
    files = common.scenario_files()
    at = _app()
    at.radio[0].set_value("catalogue").run()
    assert not at.exception and not at.error
    box = at.selectbox(key="w:file")
    assert box.label == "Scenario file" and len(box.options) == len(files)
    box.set_value(files[-1].name).run()
    assert at.session_state["scenario"] == kvsim.load_scenario(files[-1])
    assert at.query_params["file"] == [files[-1].name] or at.query_params["file"] == files[-1].name


def test_knob_change_resolves_a_new_scenario_and_the_router_is_a_knob() -> None:
    at = _app()
    _knob(at, "replicas.0.engine.block_size").set_value(32).run()
    assert at.session_state["scenario"].replicas[0].engine.block_size == 32
    assert "block_size: 32" in at.code[0].value
    router = _knob(at, "router.kind", "selectbox")
    assert router.label == "How an arriving request picks a replica"
    router.set_value("least_loaded").run()
    assert at.session_state["scenario"].router.kind == "least_loaded"


def test_settings_survive_navigation_and_a_link_reproduces_the_view() -> None:
    at = _app()
    at.radio[0].set_value("catalogue").run()
    at.selectbox(key="w:file").set_value("chunked_prefill.yaml").run()
    _knob(at, "workload.num_requests").set_value(80).run()
    at = _page(at, "2_Throughput_vs_capacity")
    at.text_input(key="w:sweep.values.workload.arrival.rate_per_s").set_value("2, 3").run()
    at = _page(at, "4_KV_cache")
    at = _page(at, "app")
    assert at.radio[0].value == "catalogue" and at.selectbox(key="w:file").value == "chunked_prefill.yaml"
    assert _knob(at, "workload.num_requests").value == 80
    scenario = at.session_state["scenario"]
    assert scenario.name == "chunked-prefill" or scenario.workload.num_requests == 80
    at = _page(at, "2_Throughput_vs_capacity")
    assert at.text_input(key="w:sweep.values.workload.arrival.rate_per_s").value == "2, 3"
    # The URL carries it all: a new session opened on that link shows the same scenario and inputs.
    params = {k: at.query_params[k] for k in at.query_params}
    assert params["source"] in ("catalogue", ["catalogue"])
    fresh = AppTest.from_file(str(DASHBOARD / "app.py"), default_timeout=TIMEOUT_S)
    for key, value in params.items():
        fresh.query_params[key] = value
    fresh.run()
    assert not fresh.exception
    assert fresh.session_state["scenario"] == scenario
    fresh = _page(fresh, "2_Throughput_vs_capacity")
    assert fresh.text_input(key="w:sweep.values.workload.arrival.rate_per_s").value == "2, 3"


def test_edit_yaml_starts_from_the_chosen_scenario() -> None:
    at = _app()
    at.radio[0].set_value("catalogue").run()
    at.selectbox(key="w:file").set_value("chunked_prefill.yaml").run()
    at.radio[0].set_value("yaml").run()
    text = at.text_area(key="w:yaml").value
    assert "name: chunked-prefill" in text and "num_requests: 120" not in text
    assert at.session_state["scenario"] == kvsim.load_scenario(common.SCENARIO_DIR / "chunked_prefill.yaml")


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
    at.radio[0].set_value("yaml").run()
    at.text_area(key="w:yaml").set_value(text).run()
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


ALIAS_BOMB = (
    "a: &a [x,x,x,x,x,x,x,x,x]\n"
    + "".join(f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcde", "bcdef", strict=True))
    + "workload: [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
)  # 9^7 = 4.8 M nodes once expanded


def test_the_editor_refuses_an_alias_bomb_in_under_a_second() -> None:
    at = _app()
    at.radio[0].set_value("yaml").run()
    start = time.process_time()
    at.text_area(key="w:yaml").set_value(ALIAS_BOMB).run()
    assert time.process_time() - start < 1.0
    assert not at.exception
    assert any("once aliases are expanded" in e.value for e in at.error)
    assert not [b for b in at.button if b.label == "Run"]


def test_a_run_over_the_work_limit_is_refused_with_the_estimate_before_it_starts() -> None:
    at = _app()
    at.radio[0].set_value("yaml").run()
    at.text_area(key="w:yaml").set_value("workload: {num_requests: 1000000000}\n").run()
    assert not at.exception
    start = time.process_time()
    next(b for b in at.button if b.label == "Run").click()
    at.run()
    assert time.process_time() - start < 1.0  # the estimate, not the run
    assert not at.exception
    assert any("sim.max_requests" in e.value and "1,000,000,000" in e.value for e in at.error), [
        e.value for e in at.error
    ]
    assert not at.session_state["runs"]


def test_runs_are_kept_up_to_a_memory_budget_with_a_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "RUN_BUDGET_BYTES", 1)  # room for one run only
    at = _ran()
    _knob(at, "seed").set_value(1).run()
    next(b for b in at.button if b.label == "Run").click()
    at.run()
    assert len(at.session_state["runs"]) == 1
    assert any("was dropped to keep the session's runs within" in w.value for w in at.warning)
    at = _page(at, "4_KV_cache")
    assert not any("was dropped" in w.value for w in at.warning)  # said once


def test_streamlit_settings_bind_localhost_and_match_the_upload_limit() -> None:
    config = tomllib.loads((DASHBOARD.parent / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "localhost"
    assert config["server"]["maxUploadSize"] == common.MAX_UPLOAD_MIB
    assert config["client"]["showErrorDetails"] == "none"
    assert config["browser"]["gatherUsageStats"] is False
    makefile = (DASHBOARD.parent / "Makefile").read_text()
    assert (
        "DASHBOARD_ADDRESS ?= localhost" in makefile and "--server.address $(DASHBOARD_ADDRESS)" in makefile
    )


@pytest.mark.parametrize(
    ("setting", "field", "rule"),
    [
        ("replicas.0.tp=0", "replicas.0.tp", "greater than or equal to 1"),  # below the widget's min
        ("workload.num_requests=-5", "num_requests", "greater than or equal to 1"),
        ("seed=9007199254740992", "seed", "less than or equal to"),  # above the widget's max
        ("replicas.0.engine.block_size=1e300", "block_size", "valid integer"),
        ("replicas.0.engine.gpu_memory_utilization=.nan", "gpu_memory_utilization", "finite number"),
        ("seed=abc", "seed", "valid integer"),  # not of the widget's type
        ("router.kind=no_such_router", "router.kind", "unknown router"),  # not one of its options
        ("replicas.0.engine.preemption_mode=both", "preemption_mode", "recompute"),
        ("replicas.0.engine.enable_prefix_caching=maybe", "enable_prefix_caching", "boolean: true or false"),
        ("model={name: x}", "model", ""),  # a mapping for a preset's name: an inline spec, checked
        ("workload.arrival.rate_per_s=2", "workload", "unknown field"),  # a knob this scenario lacks
    ],
)
def test_a_link_value_no_knob_widget_takes_is_the_scenarios_error(
    setting: str, field: str, rule: str
) -> None:
    source = {"source": "catalogue", "file": "azure_conversation.yaml"} if "arrival" in setting else {}
    at = _app(None, set=[setting], **source)
    assert not at.exception
    (error,) = at.error
    assert "**<knobs>**: invalid scenario" in error.value and field in error.value and rule in error.value
    assert any(f"`{setting}`" in c.value for c in at.caption)  # listed, with its Drop button
    assert not [b for b in at.button if b.label == "Run"]
    next(b for b in at.button if b.label == "Drop these settings").click().run()
    assert not at.exception and not at.error
    assert [b for b in at.button if b.label == "Run"]


def test_a_link_value_a_knob_widget_takes_starts_the_widget() -> None:
    at = _app(
        None,
        set=[
            "replicas.0.tp=2",
            "seed=7",
            "router.kind=least_loaded",
            "replicas.0.engine.gpu_memory_utilization=0.8",
        ],
    )
    assert not at.exception and not at.error
    assert (_knob(at, "replicas.0.tp").value, _knob(at, "seed").value) == (2, 7)
    assert _knob(at, "router.kind", "selectbox").value == "least_loaded"
    assert _knob(at, "replicas.0.engine.gpu_memory_utilization").value == 0.8
    assert not [c for c in at.caption if "Set by the link" in c.value]


@pytest.mark.parametrize(
    ("page", "params", "widget", "key"),
    [
        ("1_Latency_spikes", {"spikes.window": "nan"}, "number_input", "w:spikes.window"),
        ("1_Latency_spikes", {"spikes.window": "0"}, "number_input", "w:spikes.window"),
        ("1_Latency_spikes", {"spikes.ttft": "-1"}, "number_input", "w:spikes.ttft"),
        ("3_Capacity", {"cap.jobs": "1e400"}, "number_input", "w:cap.jobs"),
        ("3_Capacity", {"cap.jobs": "0"}, "number_input", "w:cap.jobs"),
        ("3_Capacity", {"cap.knob": "no_such_knob"}, "selectbox", "w:cap.knob"),
        ("3_Capacity", {"cap.goal.replicas": "most"}, "radio", "w:cap.goal.replicas"),
        ("2_Throughput_vs_capacity", {"sweep.count": "-3"}, "number_input", "w:sweep.count"),
        ("2_Throughput_vs_capacity", {"sweep.axis": "Moon phase"}, "selectbox", "w:sweep.axis"),
        ("5_Requests", {"req.id": "99999"}, "number_input", "w:req.id"),
    ],
)
def test_a_link_value_a_page_input_cannot_hold_is_said_and_not_used(
    page: str, params: dict[str, str], widget: str, key: str
) -> None:
    at = _ran()
    ((name, given),) = params.items()
    for k, v in params.items():
        at.session_state["view"][k] = v  # as a link opened on this page would set it
    if page == "1_Latency_spikes":
        at.session_state["view"]["spikes.for"] = common.scenario_key(at.session_state["scenario"])
    at = _page(at, page)
    assert not at.exception
    assert any(f"The link's `{name}={given}` is not used" in w.value for w in at.warning), [
        w.value for w in at.warning
    ]
    assert str(getattr(at, widget)(key=key).value) != given
    assert at.session_state["view"][name] != given  # and the link the page writes no longer has it


def test_a_links_scenario_source_or_file_that_is_not_offered_is_said() -> None:
    at = _app(None, source="catalogue", file="../../../etc/passwd")
    assert not at.exception
    assert any("`file=../../../etc/passwd` is not used" in w.value for w in at.warning)
    assert at.selectbox(key="w:file").value == common.scenario_files()[0].name
    _assert_no_passwd(at)
    at = _app(None, source="ftp")
    assert any("`source=ftp` is not used" in w.value for w in at.warning)
    assert at.radio[0].value == "default"


# --- the one gate: every file a scenario names, every error a page shows ----------------------


def test_path_fields_are_every_file_a_scenario_names_whatever_its_shape() -> None:
    traces = "../shared/traces/azure/AzureLLMInferenceTrace_conv.csv"
    data = {
        "replicas": [{"cost_model": {"profile": "calibration/p.json"}}, {"name": "b", "cost_model": "roofline"}],
        "workload": {"kind": "mixture", "components": [
            {"kind": "synthetic", "num_requests": 10, "prompt_tokens": {"kind": "empirical", "path": "/x/l.csv",
                                                                         "field": "prompt"}},
            {"kind": "trace", "format": "azure", "path": traces},
        ]},
    }  # fmt: skip
    from kvsim.scenario.schema import Scenario

    assert _paths.path_fields(Scenario.model_validate(data)) == [
        ("replicas.0.cost_model.profile", "calibration/p.json"),
        ("workload.components.0.prompt_tokens.path", "/x/l.csv"),
        ("workload.components.1.path", traces),
    ]
    fixes, problems = _paths.confine_path_fields(Scenario.model_validate(data))
    assert problems == [
        ("replicas.0.cost_model.profile", f"calibration/p.json: {_paths.REFUSED}"),
        ("workload.components.0.prompt_tokens.path", f"/x/l.csv: {_paths.REFUSED}"),
    ]
    assert fixes == {"workload.components.1.path": str((common.REPO_ROOT / traces).resolve())}


def test_a_profile_is_a_path_exactly_when_kvsim_reads_it_as_one() -> None:
    from kvsim.cost.profile import resolve_profile_path
    from kvsim.errors import ProfileError

    for text in ("h100", "a/b", "a\\b", "x.json", "~x", "..", "~\\x"):
        try:
            resolve_profile_path(text)
            read_as_path = False  # a shipped name that exists
        except ProfileError as err:  # a missing file, or a "~user" that cannot expand
            read_as_path = "no shipped profile named" not in str(err)
        assert _paths.profile_is_path(text) == read_as_path, text


@pytest.mark.parametrize(
    ("error", "shown"),
    [
        ("kvsim.errors.TraceError: /etc/passwd, line 1: missing column(s) TIMESTAMP; header has root:x:0:0:root",
         "trace file passwd, line 1 has content kvsim cannot use"),
        ("kvsim.errors.TraceError: /x/t.csv: cannot read trace: No such file or directory",
         "trace file t.csv cannot be read"),
        ("kvsim.errors.ProfileError: /x/p.json: format: must be 'kvsim-profile', got 'root:x:0:0'",
         "cost profile file p.json has content kvsim cannot use"),
        ("kvsim.errors.ScenarioError: <sweep point a>: invalid scenario\n  replicas.0.cost_model.profile: "
         "/x/p.json: cannot read profile: got 'root:x'", "replicas.0.cost_model.profile: cost profile file p.json"),
        ("UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff: root:x", "the run failed (UnicodeDecodeError)"),
        ("ValueError: could not convert string to float: 'root:x:0:0'", "the run failed (ValueError)"),
        ("kvsim.errors.ScenarioError: <p>: invalid scenario\n  replicas.0.tp: must be >= 1", "replicas.0.tp: must be >= 1"),
        ("worker failed: BrokenProcessPool()", "worker failed: BrokenProcessPool()"),
        ("", ""),
    ],
)  # fmt: skip
def test_a_failed_points_error_names_the_file_never_its_content(error: str, shown: str) -> None:
    text = common.safe_error_text(error)
    assert shown in text and "root:x" not in text


def test_every_summary_key_a_page_shows_says_what_it_means() -> None:
    sys.path.insert(0, str(DASHBOARD / "views"))
    at = _ran()
    (run,) = at.session_state["runs"].values()
    from kvsim.planning.capacity import TABLE_KEYS

    keys = [*run.result.summary, *TABLE_KEYS]
    assert {k: common.summary_meaning(k) for k in keys if not common.summary_meaning(k)} == {}
    assert common.summary_meaning("throughput_tokens_per_s") != common.summary_meaning(
        "throughput_requests_per_s"
    )
    assert common.summary_meaning("ttft_p99_s") == "latency statistics, seconds"


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
    at.number_input(key="w:spikes.ttft").set_value(0.0).run()
    assert not at.exception
    assert len(at.dataframe) == 1
    table = at.dataframe[0].value
    assert table["explanation"].str.startswith("p99 ").all()
    assert {"queued_share_of_ttft", "completion_rate_per_s", "evicted_miss_tokens"} <= set(table.columns)
    assert _downloads(at) == 2  # figure HTML, table CSV
    at = _page(_page(at, "app"), "1_Latency_spikes")
    assert at.number_input(key="w:spikes.ttft").value == 0.0  # kept across pages


def test_throughput_vs_capacity_page_runs_a_sweep_and_flags_overload() -> None:
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
    assert points["overloaded"].tolist() == [False, True]
    knee = next(m.value for m in at.markdown if "Knee" in m.value)
    assert "= **2**" in knee  # 64 req/s is overloaded: never the knee
    assert any("overloaded" in w.value for w in at.warning)


def test_throughput_page_rejects_malformed_values() -> None:
    at = _page(_app(), "2_Throughput_vs_capacity")
    at.text_input[0].set_value("2, lots").run()
    assert not at.exception
    assert "must be float values" in at.error[0].value


def test_trace_workload_runs_whole_by_default_and_warns_when_shortened(traces_dir: Path) -> None:
    at = _app(num_requests=None)
    at.radio[0].set_value("yaml").run()
    trace = traces_dir / "mooncake" / "conversation_trace.jsonl"
    yaml_text = (
        f"name: mooncake\nworkload: {{kind: trace, path: {trace}, format: mooncake, rate_per_s: 2.0}}\n"
    )
    at.text_area(key="w:yaml").set_value(yaml_text).run()
    assert not at.error
    assert _knob(at, "workload.rate_per_s").value == 2.0
    at = _page(at, "2_Throughput_vs_capacity")
    assert at.text_input[0].label == "Values of request rate (req/s) (comma-separated)"
    assert at.text_input[0].value == "1, 2, 4, 6, 8"
    assert at.number_input[0].value == 0  # the whole trace
    assert not at.warning
    at.number_input[0].set_value(40).run()
    assert "replays only the first 40 requests" in at.warning[0].value
    at.text_input[0].set_value("2").run()
    next(b for b in at.button if b.label == "Run sweep").click().run()
    assert any("The points replayed 0.3% of the trace" in w.value for w in at.warning)


def test_capacity_page_gives_the_answer_of_kvsim_capacity() -> None:
    at = _page(_app(), "3_Capacity")
    at.selectbox(key="w:cap.knob").set_value("rate").run()
    at.text_input(key="w:cap.values.rate").set_value("4:64:4").run()
    at.text_input(key="w:cap.slo").set_value("ttft_p99_s=0.5").run()
    at.number_input(key="w:cap.jobs").set_value(1).run()
    assert at.radio(key="w:cap.goal.rate").value == "largest"
    next(b for b in at.button if b.label == "Find capacity").click().run()
    assert not at.exception, at.exception
    answer = at.success[0].value
    report = find_capacity(None, "workload.arrival.rate_per_s", parse_values("4:64:4"), parse_slo("ttft_p99_s=0.5"),
                           overrides=[f"workload.num_requests={NUM_REQUESTS}"])  # fmt: skip
    assert answer == f"**{report.answer_line()}**"
    assert _charts(at) == 1
    table = at.dataframe[0].value
    assert {"offered_requests_per_s", "achieved_requests_per_s", "slo_met", "overloaded"} <= set(
        table.columns
    )
    at = _page(_page(at, "app"), "3_Capacity")
    assert at.text_input(key="w:cap.values.rate").value == "4:64:4"
    assert at.success[0].value == answer  # kept: no new search


def test_capacity_page_plans_the_cheapest_deployment_as_kvsim_plan_does() -> None:
    at = _page(_app(), "3_Capacity")
    at.text_input(key="w:cap.slo").set_value("ttft_p99_s=0.5").run()
    at.number_input(key="w:cap.jobs").set_value(1).run()
    at.text_input(key="w:plan.gpus").set_value("h100-sxm, h200").run()
    at.text_input(key="w:plan.tp").set_value("1, 2").run()
    next(b for b in at.button if b.label == "Plan deployment").click().run()
    assert not at.exception, at.exception
    report = plan_deployment(None, parse_slo("ttft_p99_s=0.5"), PlanSpace(gpus=("h100-sxm", "h200"), tps=(1, 2), max_gpus=16),
                             overrides=[f"workload.num_requests={NUM_REQUESTS}"])  # fmt: skip
    assert report.cheapest is not None
    assert at.success[-1].value == report.answer_line()
    assert at.code[0].value.splitlines()[1].startswith("vllm serve meta-llama/Meta-Llama-3-8B")
    assert _charts(at) == 1
    assert len(at.dataframe[-1].value) == 4  # one row per configuration
    at.text_input(key="w:plan.tp").set_value("1, x").run()
    assert at.error[0].value == "TP degrees: 'x' is not a whole number (or 'default')"


def test_kv_cache_page() -> None:
    at = _page(_ran(), "4_KV_cache")
    assert _charts(at) == 3
    assert [m.label for m in at.metric] == ["KV blocks (all replicas)", "Peak KV usage", "Prefix hit rate",
                                            "Evicted blocks"]  # fmt: skip
    curve = at.dataframe[0].value
    assert curve["capacity_blocks"].iloc[-1] is None or curve["capacity_blocks"].isna().iloc[-1]  # unbounded
    assert curve["token_hit_ratio"].is_monotonic_increasing


def test_requests_page_draws_a_request_timeline_and_replica_panels() -> None:
    at = _page(_ran(), "5_Requests")
    assert _charts(at) == 3  # TTFT picker, the request's Gantt, per-replica panels
    rid = at.number_input(key="w:req.id")
    assert rid.value == int(at.session_state["runs"][next(iter(at.session_state["runs"]))]
                            .result.requests.nlargest(1, "ttft_s")["request_id"].iloc[0])  # fmt: skip
    rid.set_value(3).run()
    timeline = at.dataframe[0].value
    assert timeline["lane"].tolist()[:2] == ["queued", "prefill"] and "decode" in set(timeline["lane"])
    assert "cache hits" in timeline["detail"].iloc[1]


def test_compare_asks_for_the_baseline_and_shows_the_scenario_diff() -> None:
    at = _page(_ran(), "6_Compare")
    assert "needs two runs" in at.info[0].value
    at.text_area[0].set_value("replicas.0.engine.enable_prefix_caching=false")
    next(b for b in at.button if b.label == "Run variant").click().run()
    assert not at.exception
    assert "Choose the baseline" in at.info[0].value  # no default baseline
    at.selectbox(key="w:cmp.base").set_value(next(iter(at.session_state["runs"]))).run()  # caching on
    assert _charts(at) == 1
    table = at.dataframe[0].value.set_index("metric")
    run_label = table.columns[1]
    assert table.columns[2] == f"{run_label} vs {table.columns[0]} (%)"  # the % column beside its run
    assert table.loc["prefix_cache_hit_rate"].iloc[1] == 0.0  # the variant has caching off
    diff = at.dataframe[1].value
    assert diff["field"].tolist() == ["replicas.0.engine.enable_prefix_caching"]
    assert diff[["baseline", "run"]].values.tolist() == [["true", "false"]]


def test_compare_loads_result_folders_from_allowed_folders_and_archives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_paths.ALLOW_ENV, str(tmp_path / "allowed"))
    monkeypatch.setenv(_paths.UPLOADS_ENV, str(tmp_path / "uploads"))
    at = _ran()
    (run,) = at.session_state["runs"].values()
    saved = kvsim.results.io.save_result(run.result, tmp_path / "allowed" / "saved")
    outside = kvsim.results.io.save_result(run.result, tmp_path / "outside")
    at = _page(at, "6_Compare")
    assert str(saved) in [str(o) for o in at.selectbox[0].options]  # listed from the allowed folder
    at.text_input[0].set_value(str(saved)).run()
    next(b for b in at.button if b.label == "Load folder").click().run()
    assert not at.exception
    labels = [r.label for r in at.session_state["runs"].values()]
    assert labels[-1] == "saved (folder)"
    for path in (outside, tmp_path / "missing"):
        at.text_input[0].set_value(str(path)).run()
        next(b for b in at.button if b.label == "Load folder").click().run()
        assert at.error[0].value == f"Cannot load: {path}: {_paths.REFUSED}"  # the same, existing or not
    blob = io.BytesIO()
    with zipfile.ZipFile(blob, "w") as z:
        for f in sorted(saved.iterdir()):
            z.write(f, f"saved/{f.name}")
    folder = common.unpack_result_archive(blob.getvalue(), "saved.zip", "session")
    assert sorted(p.name for p in folder.iterdir()) == sorted(kvsim.results.io.RESULT_FILES)
    assert folder.is_relative_to(tmp_path / "uploads")
    bad = io.BytesIO()
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("../../evil.txt", "x")
    with pytest.raises(ValueError, match="must hold exactly the files of a result folder"):
        common.unpack_result_archive(bad.getvalue(), "bad.zip", "session")


def test_compare_puts_an_observation_beside_kvsims_prediction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An observation (kvsim observe of the fake server in tests/fake_openai.py) as the baseline:
    the prediction table, each request's TTFT and the server's series against kvsim's."""
    from fake_openai import FakeServer, Reply

    from kvsim.cli import main

    monkeypatch.setenv(_paths.ALLOW_ENV, str(tmp_path / "allowed"))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: observed\nmodel: llama-3-8b\nreplicas: [{gpu: h100-sxm}]\n"
        "workload: {kind: synthetic, num_requests: 6, arrival: {kind: poisson, rate_per_s: 20},\n"
        "  prompt_tokens: {kind: fixed, tokens: 40}, output_tokens: {kind: fixed, tokens: 5}}\n"
    )
    folder = tmp_path / "allowed" / "obs"
    with FakeServer(lambda body, i: Reply(ttft_s=0.05, itl_s=0.01)) as server:
        assert main(["observe", str(scenario), "--url", server.url, "--out", str(folder), "--quiet",
                     "--scrape-interval-s", "0.05"]) == 0  # fmt: skip
    at = _page(_app(), "6_Compare")
    at.text_input[0].set_value(str(folder)).run()
    next(b for b in at.button if b.label == "Load folder").click().run()
    assert not at.exception
    next(b for b in at.button if b.label == "Simulate obs (folder)'s scenario").click().run()
    assert not at.exception
    labels = {k: r.label for k, r in at.session_state["runs"].items()}
    assert list(labels.values())[-2:] == ["obs (folder)", "kvsim: observed"]
    base = next(k for k, v in labels.items() if v == "obs (folder)")
    at.selectbox(key="w:cmp.base").set_value(base).run()
    chosen = next(k for k, v in labels.items() if v == "kvsim: observed")
    at.multiselect(key="w:cmp.others").set_value([chosen]).run()
    assert not at.exception
    assert "the server against kvsim" in _page_text(at)
    table = next(d.value for d in at.dataframe if "within target" in d.value.columns)
    observed = kvsim.results.io.load_result(folder).summary
    assert table.set_index("metric").loc["TTFT p50", "observed"] == pytest.approx(observed["ttft_p50_s"])
    assert _charts(at) == 3  # the CDFs, the TTFT scatter, the series


def test_compare_page_shows_invalid_overrides() -> None:
    at = _page(_ran(), "6_Compare")
    at.text_area[0].set_value("replicas.0.tp=0")
    next(b for b in at.button if b.label == "Run variant").click().run()
    assert not at.exception
    assert "replicas.0.tp" in at.error[0].value


def test_calibration_page() -> None:
    at = _page(_app(), "7_Calibration")
    profiles = shipped_profiles()
    if profiles:
        assert _charts(at) == 1
        table = at.dataframe[0].value
        assert "measured_us" in table.columns and "measured_s" not in table.columns
        measured = table["measured_us"].dropna()
        assert len(measured) and all(float(f"{v:.3g}") == v for v in measured)  # 3 significant digits
    else:
        assert "No cost profiles found" in at.info[0].value


def test_a_scenario_that_fails_while_running_shows_an_error_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Valid as a scenario, in an allowed folder, but the trace file is missing: kvsim.run fails.
    monkeypatch.setenv(_paths.ALLOW_ENV, str(tmp_path))
    missing = tmp_path / "no-such-trace.jsonl"
    at = _app()
    at.radio[0].set_value("yaml").run()
    text = f"workload: {{kind: trace, format: mooncake, path: '{missing}'}}\n"
    at.text_area(key="w:yaml").set_value(text).run()
    assert not at.exception and not at.error
    next(b for b in at.button if b.label == "Run").click()
    at.run()
    assert not at.exception
    assert any("no-such-trace.jsonl cannot be read" in e.value for e in at.error)


# --- no file outside the allowed folders reaches the page -----------------------------------


def _assert_no_passwd(at: AppTest) -> None:
    text = _page_text(at)
    for line in PASSWD.read_text().splitlines():
        if len(line) > 8:
            assert line not in text, line
    assert "root:x:0" not in text


@pytest.mark.skipif(not PASSWD.is_file(), reason="needs /etc/passwd")
def test_paths_outside_the_allowed_folders_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_paths.ALLOW_ENV, str(tmp_path / "allowed"))
    (tmp_path / "allowed").mkdir()
    (tmp_path / "allowed" / "link.csv").symlink_to(PASSWD)
    for path in ("/etc/passwd", "~/.bashrc", "../../../../etc/passwd", str(tmp_path / "allowed" / "link.csv"),
                 "/etc/../etc/passwd", "/nonexistent/x"):  # fmt: skip
        with pytest.raises(_paths.PathNotAllowed) as err:
            _paths.confine(path)
        assert str(err.value) == f"{path}: {_paths.REFUSED}"  # never says whether it exists
    assert _paths.confine("scenarios/default.yaml") == common.SCENARIO_DIR / "default.yaml"
    assert _paths.confine(tmp_path / "allowed") == (tmp_path / "allowed").resolve()
    assert _paths.startup_folders(["--allow", "runs", "-q"], {}) == [common.REPO_ROOT / "runs"]


@pytest.mark.skipif(not PASSWD.is_file(), reason="needs /etc/passwd")
def test_no_byte_of_etc_passwd_reaches_the_page_through_any_path_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_paths.ALLOW_ENV, str(tmp_path))
    (tmp_path / "link.jsonl").symlink_to(PASSWD)
    link = str(tmp_path / "link.jsonl")
    workloads = [
        f"{{kind: trace, format: {fmt}, path: {p}}}"
        for p in ("/etc/passwd", "~/../../etc/passwd", link)
        for fmt in ("azure", "mooncake")
    ] + [
        "{kind: trace, format: csv, path: /etc/passwd, columns: {timestamp: root, prompt_tokens: x, output_tokens: 0}}",
        "{prompt_tokens: {kind: empirical, path: /etc/passwd, field: prompt}}",
    ]
    # 1. The YAML editor (and so an upload, which goes through the same parse_and_resolve).
    at = _app()
    at.radio[0].set_value("yaml").run()
    for workload in workloads:
        at.text_area(key="w:yaml").set_value(f"workload: {workload}\n").run()
        assert not at.exception
        assert any(_paths.REFUSED in e.value for e in at.error), workload
        _assert_no_passwd(at)
    at.text_area(key="w:yaml").set_value("replicas: [{cost_model: {profile: /etc/passwd}}]\n").run()
    assert any(_paths.REFUSED in e.value for e in at.error)
    _assert_no_passwd(at)
    with pytest.raises(kvsim.ScenarioError, match="not in an allowed folder"):
        common.parse_and_resolve(b"workload: {kind: trace, format: azure, path: /etc/passwd}\n", "up.yaml")
    # 2. A link: knob changes and an edited scenario in the URL.
    at = _app(None, source="catalogue", file="azure_conversation.yaml", set=["workload.path=/etc/passwd"])
    assert any(_paths.REFUSED in e.value for e in at.error)
    _assert_no_passwd(at)
    packed = common._yaml_param("workload: {kind: trace, format: azure, path: /etc/passwd}\n")
    at = _app(None, source="yaml", yaml=packed)
    assert any(_paths.REFUSED in e.value for e in at.error)
    _assert_no_passwd(at)
    # 3. Compare: a variant's overrides and the result folder input.
    at = _page(_ran(), "6_Compare")
    at.text_area[0].set_value("workload={kind: trace, format: azure, path: /etc/passwd}")
    next(b for b in at.button if b.label == "Run variant").click().run()
    assert any(_paths.REFUSED in e.value for e in at.error)
    _assert_no_passwd(at)
    for path in ("/etc/passwd", "/etc", link, "~"):
        at.text_input[0].set_value(path).run()
        next(b for b in at.button if b.label == "Load folder").click().run()
        assert at.error and _paths.REFUSED in at.error[0].value
        _assert_no_passwd(at)
    # 4. The sweep folder of the Throughput page and the Capacity page's overrides.
    at = _page(at, "2_Throughput_vs_capacity")
    for path in ("/etc/passwd", "/etc", link):
        at.text_input(key="w:sweep.folder").set_value(path).run()
        assert any(_paths.REFUSED in e.value for e in at.error)
        _assert_no_passwd(at)
    at = _page(at, "3_Capacity")
    at.text_area(key="w:cap.set").set_value("workload={kind: trace, format: azure, path: /etc/passwd}").run()
    at.number_input(key="w:cap.jobs").set_value(1).run()
    next(b for b in at.button if b.label == "Find capacity").click().run()
    assert any(_paths.REFUSED in e.value for e in at.error)
    _assert_no_passwd(at)
    # 5. A result folder in an allowed folder whose scenario names /etc/passwd: the KV page never replays it.
    (run,) = [r for r in at.session_state["runs"].values()][:1]
    data = run.result.scenario.model_dump(mode="json")
    data["workload"] = {"kind": "trace", "format": "azure", "path": "/etc/passwd"}
    forged = kvsim.Result(kvsim.load_scenario(data), run.result.requests, run.result.iterations,
                          run.result.events, run.result.summary)  # fmt: skip
    kvsim.results.io.save_result(forged, tmp_path / "forged")
    at = _page(at, "6_Compare")
    at.text_input[0].set_value(str(tmp_path / "forged")).run()
    next(b for b in at.button if b.label == "Load folder").click().run()
    assert not at.error
    at.session_state["scenario"] = forged.scenario
    key = common.scenario_key(forged.scenario)
    at.session_state["runs"][key] = common.Run("forged", forged, 1)
    at = _page(at, "4_KV_cache")
    assert any("not in an allowed folder" in i.value for i in at.info)
    _assert_no_passwd(at)
    assert os.environ[_paths.ALLOW_ENV] == str(tmp_path)
    # 6. The Capacity page's "another knob": its candidate values are paths (or name one), each point
    #    checked before anything runs; an existing and a missing file get the same message.
    at = _app(None, source="catalogue", file="azure_conversation.yaml", set=["workload.max_requests=40"])
    at = _page(at, "3_Capacity")
    at.selectbox(key="w:cap.knob").set_value("other").run()
    at.number_input(key="w:cap.jobs").set_value(1).run()
    said = {}
    for knob, value in [
        *[("workload.path", v) for v in ("/etc/passwd", "/no/such/file", "../../../../../etc/passwd",
                                          "~/../../etc/passwd", link, "!!binary L2V0Yy9wYXNzd2Q=")],
        ("replicas.0.cost_model", "roofline, {profile: /etc/passwd}"),  # a list: a mapping has a colon
        ("replicas.0.cost_model", "roofline, {profile: /no/such/file}"),
    ]:  # fmt: skip
        at.text_input(key="w:cap.path").set_value(knob).run()
        at.text_input(key="w:cap.values.other").set_value(value).run()
        if value.startswith("!!binary"):  # kvsim reads plain YAML: refused before anything runs
            assert any("'!!binary' is not allowed" in e.value for e in at.error), value
            _assert_no_passwd(at)
            continue
        assert [b for b in at.button if b.label == "Find capacity"], (value, [e.value for e in at.error])
        next(b for b in at.button if b.label == "Find capacity").click().run()
        assert not at.exception
        _assert_no_passwd(at)
        assert any(_paths.REFUSED in e.value for e in at.error), (knob, value, [e.value for e in at.error])
        assert not at.dataframe, (knob, value)  # nothing ran
        said[value] = next(e.value for e in at.error if _paths.REFUSED in e.value)
    for there, missing in (
        ("/etc/passwd", "/no/such/file"),
        ("roofline, {profile: /etc/passwd}", "roofline, {profile: /no/such/file}"),
    ):
        assert said[there].replace("/etc/passwd", "X") == said[missing].replace("/no/such/file", "X")
    # 7. A link whose knob change names /etc/passwd in a shape the first look misses (!!binary):
    #    refused on the Scenario page, and no other page runs it.
    at = _app(
        None,
        source="catalogue",
        file="azure_conversation.yaml",
        set=["workload.path=!!binary L2V0Yy9wYXNzd2Q="],
    )
    assert any(_paths.REFUSED in e.value for e in at.error)
    _assert_no_passwd(at)
    at = _page(at, "3_Capacity")
    at.text_input(key="w:cap.values.replicas").set_value("1").run()
    at.number_input(key="w:cap.jobs").set_value(1).run()
    next(b for b in at.button if b.label == "Find capacity").click().run()
    assert not at.exception
    _assert_no_passwd(at)
    assert "/etc/passwd" not in _page_text(at).replace(f"/etc/passwd: {_paths.REFUSED}", "")
    # 8. Result and sweep folders in an allowed folder whose files are links out of it.
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    saved = kvsim.results.io.save_result(forged, outside / "run")
    (tmp_path / "linked").mkdir()
    for name in kvsim.results.io.RESULT_FILES:
        (tmp_path / "linked" / name).symlink_to(saved / name)
    (outside / "sweep").mkdir()
    pd.DataFrame({"index": [0], "seed": [1], "status": ["ok"], "error": [""]}).to_parquet(
        outside / "sweep" / "results.parquet"
    )
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "results.parquet").symlink_to(outside / "sweep" / "results.parquet")
    at = _page(_app(), "6_Compare")
    at.text_input[0].set_value(str(tmp_path / "linked")).run()
    next(b for b in at.button if b.label == "Load folder").click().run()
    assert at.error and at.error[0].value == f"Cannot load: {tmp_path / 'linked'}: {_paths.REFUSED}"
    at = _page(at, "2_Throughput_vs_capacity")
    at.text_input(key="w:sweep.folder").set_value(str(tmp_path / "sweep")).run()
    assert [e.value for e in at.error] == [f"{tmp_path / 'sweep'}: {_paths.REFUSED}"]
    assert not at.dataframe
