"""What the dashboard's pages share: the current scenario, runs cached per scenario, downloads.

State lives in ``st.session_state``:

- ``scenario``  the resolved `kvsim.Scenario` the pages work on (the default one until the
  Scenario page changes it);
- ``runs``      finished runs, keyed by a hash of the resolved scenario YAML, so that
  switching pages or coming back to a scenario never re-runs it.

Figures come from `kvsim.plots`; this module only puts them on the page, each with an
HTML download (and PNG when kaleido is installed), and every table with a CSV download.
"""

from __future__ import annotations

import hashlib
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from pydantic import BaseModel

import kvsim
from kvsim.presets import GPU_PRESETS, MODEL_PRESETS
from kvsim.scenario.loading import apply_overrides, parse_yaml, validate

REPO_ROOT = Path(__file__).resolve().parents[1]
SCENARIO_DIR = REPO_ROOT / "scenarios"
#: Largest scenario file accepted from an upload or the YAML editor (scenarios are a few KiB).
MAX_SCENARIO_BYTES = 256 * 1024
#: Runs kept per session (oldest dropped first).
MAX_RUNS = 12

#: The knobs the Scenario page offers as widgets (dotted paths into the scenario); the
#: widgets, ranges and help texts come from the schema. Paths absent from the current
#: scenario (e.g. a trace workload has no arrival rate) are not shown.
MAIN_KNOBS: tuple[str, ...] = (
    "seed",
    "model",
    "replicas.0.gpu",
    "replicas.0.count",
    "replicas.0.tp",
    "replicas.0.engine.kv_cache_dtype",
    "replicas.0.engine.gpu_memory_utilization",
    "replicas.0.engine.block_size",
    "replicas.0.engine.max_num_seqs",
    "replicas.0.engine.max_num_batched_tokens",
    "replicas.0.engine.enable_chunked_prefill",
    "replicas.0.engine.enable_prefix_caching",
    "replicas.0.engine.preemption_mode",
    "workload.num_requests",
    "workload.arrival.rate_per_s",
    "workload.shared_prefix_tokens",
    "workload.time_scale",
    "workload.rate_per_s",
    "workload.max_requests",
    "slo.ttft_s",
    "slo.tpot_s",
)
_PRESET_CHOICES: dict[str, list[str]] = {"model": sorted(MODEL_PRESETS), "gpu": sorted(GPU_PRESETS)}


@dataclass(frozen=True)
class Run:
    """A finished run and the name it is shown under."""

    label: str
    result: kvsim.Result


# --- scenario state ---------------------------------------------------------------------


def scenario_yaml(scenario: kvsim.Scenario) -> str:
    return kvsim.dump_scenario(scenario)


def scenario_key(scenario: kvsim.Scenario) -> str:
    """Identity of a resolved scenario: equal keys, equal runs (runs are deterministic)."""
    return hashlib.sha256(scenario_yaml(scenario).encode()).hexdigest()[:16]


def query_overrides() -> list[str]:
    """``?set=dotted.key=value`` query parameters (repeatable): knobs preset by a link."""
    return list(st.query_params.get_all("set"))


def current_scenario() -> kvsim.Scenario:
    """The scenario the pages work on; the embedded default (plus link overrides) at first."""
    if "scenario" not in st.session_state:
        try:
            st.session_state["scenario"] = kvsim.load_scenario(None, query_overrides())
        except kvsim.ScenarioError as err:
            show_scenario_error(err)
            st.session_state["scenario"] = kvsim.load_scenario(None)
    return st.session_state["scenario"]


def set_scenario(scenario: kvsim.Scenario) -> None:
    st.session_state["scenario"] = scenario


def scenario_files() -> list[Path]:
    """The catalogue: ``scenarios/*.yaml`` of the repository, by name."""
    return sorted(SCENARIO_DIR.glob("*.yaml")) if SCENARIO_DIR.is_dir() else []


def parse_scenario_bytes(data: bytes, source: str) -> dict[str, Any]:
    """Scenario data from uploaded or pasted bytes: size-limited, UTF-8, safe YAML loader.

    Raises `kvsim.ScenarioError` naming ``source``; nothing is validated yet.
    """
    if len(data) > MAX_SCENARIO_BYTES:
        raise kvsim.ScenarioError(
            source, [("", f"file is {len(data):,} bytes; the limit is {MAX_SCENARIO_BYTES:,} bytes")]
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise kvsim.ScenarioError(source, [("", f"not UTF-8 text (byte {exc.start})")]) from None
    return parse_yaml(text, source)


def resolve(
    data: Mapping[str, Any], overrides: Mapping[str, Any] | Iterable[str], source: str
) -> kvsim.Scenario:
    """Validate scenario data after dotted-path overrides; errors name ``source``."""
    try:
        merged = apply_overrides(dict(data), overrides)
    except kvsim.ScenarioError as err:
        raise kvsim.ScenarioError(source, err.problems) from None
    return validate(merged, source)


def show_scenario_error(err: kvsim.ScenarioError) -> None:
    """The validation error as the page shows it: source, then one row per (field, rule)."""
    lines = "\n".join(f"- `{path or '<root>'}`: {rule}" for path, rule in err.problems)
    st.error(f"**{err.source}**: invalid scenario\n\n{lines}", icon="🚫")


# --- knobs from the schema ------------------------------------------------------------


def _walk(scenario: kvsim.Scenario, path: str) -> tuple[BaseModel, str] | None:
    """The model holding the last field of ``path`` and that field's name, if present."""
    parts = path.split(".")
    node: Any = scenario
    for part in parts[:-1]:
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                return None
            node = node[int(part)]
        else:
            node = getattr(node, part, None)
        if node is None:
            return None
    if not isinstance(node, BaseModel) or parts[-1] not in type(node).model_fields:
        return None
    return node, parts[-1]


def _bounds(info: Any) -> dict[str, float]:
    """number_input bounds from the field's ge/gt/le/lt constraints."""
    out: dict[str, float] = {}
    for meta in info.metadata:
        for attr, key in (("ge", "min_value"), ("gt", "min_value"), ("le", "max_value"), ("lt", "max_value")):
            if getattr(meta, attr, None) is not None:
                out[key] = getattr(meta, attr)
    return out


def knob_widgets(scenario: kvsim.Scenario, *, key: str) -> dict[str, Any]:
    """One widget per `MAIN_KNOBS` path present in ``scenario``; returns the changed values.

    Widget type, range and help text come from the field's type, constraints and
    description; ``key`` scopes widget state to one base scenario.
    """
    changed: dict[str, Any] = {}
    cols = st.columns(3)
    shown = 0
    for path in MAIN_KNOBS:
        found = _walk(scenario, path)
        if found is None:
            continue
        model, name = found
        info = type(model).model_fields[name]
        value = getattr(model, name)
        ann = info.annotation
        args = typing.get_args(ann)
        if type(None) in args and len(args) == 2:  # X | None: editable while it holds a value
            if value is None:
                continue
            ann = next(a for a in args if a is not type(None))
        label, help_text, wkey = path, info.description, f"knob:{key}:{path}"
        with cols[shown % 3]:
            if name in _PRESET_CHOICES:
                if not isinstance(value, str):
                    continue  # inline spec: edit it in the YAML
                options = list(dict.fromkeys([value.lower(), *_PRESET_CHOICES[name]]))
                new: Any = st.selectbox(label, options, index=0, help=help_text, key=wkey)
            elif typing.get_origin(ann) is typing.Literal:
                options = list(typing.get_args(ann))
                new = st.selectbox(label, options, index=options.index(value), help=help_text, key=wkey)
            elif ann is bool:
                new = st.checkbox(label, value=bool(value), help=help_text, key=wkey)
            elif ann is int:
                b = {k: int(v) for k, v in _bounds(info).items()}
                new = st.number_input(label, value=int(value), step=1, help=help_text, key=wkey, **b)
            elif ann is float:
                b = {k: float(v) for k, v in _bounds(info).items()}
                new = st.number_input(label, value=float(value), help=help_text, key=wkey, format="%.4g", **b)
            else:
                continue
        shown += 1
        if new != value:
            changed[path] = new
    return changed


# --- runs -----------------------------------------------------------------------------


def _runs() -> dict[str, Run]:
    return st.session_state.setdefault("runs", {})


def cached_run(scenario: kvsim.Scenario) -> Run | None:
    return _runs().get(scenario_key(scenario))


def all_runs() -> dict[str, Run]:
    """Finished runs of this session, oldest first."""
    return dict(_runs())


def add_run(key: str, run: Run) -> None:
    runs = _runs()
    runs.pop(key, None)
    runs[key] = run
    while len(runs) > MAX_RUNS:
        runs.pop(next(iter(runs)))


def progress_callback(bar: Any, prefix: str = "") -> Callable[[float, int, int], None]:
    """A `kvsim.run` progress callback that moves a Streamlit progress bar (at most 100 updates)."""
    last = [-1]

    def update(sim_time_s: float, num_finished: int, num_requests: int) -> None:
        pct = int(100 * num_finished / num_requests) if num_requests else 100
        if pct != last[0]:
            last[0] = pct
            bar.progress(
                pct,
                text=f"{prefix}{num_finished:,} / {num_requests:,} requests done, t = {sim_time_s:,.0f} s",
            )

    return update


def run_scenario(scenario: kvsim.Scenario, label: str | None = None) -> Run:
    """Run ``scenario`` with a progress bar, or return its cached run."""
    key = scenario_key(scenario)
    run = _runs().get(key)
    if run is None:
        bar = st.progress(0, text=f"Running {scenario.name} ...")
        try:
            result = kvsim.run(scenario, progress=progress_callback(bar))
        except kvsim.KvsimError as exc:  # bad input found while running (a trace file, a profile)
            bar.empty()
            st.error(f"**{scenario.name}** cannot run: {exc}", icon="🚫")
            st.stop()
            raise AssertionError("unreachable: st.stop() ends the script") from exc
        except Exception as exc:  # a bug: say so in words, never a traceback
            bar.empty()
            st.error(f"**{scenario.name}**: the simulation failed ({type(exc).__name__}: {exc}).", icon="🚫")
            st.stop()
            raise AssertionError("unreachable: st.stop() ends the script") from exc
        bar.empty()
        run = Run(label or f"{scenario.name} #{len(_runs()) + 1}", result)
        add_run(key, run)
    return run


def require_run() -> Run:
    """The current scenario's run; if there is none yet, offer to run it and stop the page."""
    scenario = current_scenario()
    run = cached_run(scenario)
    if run is not None:
        return run
    st.info(
        f"Scenario **{scenario.name}** has not been run yet. Change it on the Scenario page, or run it here."
    )
    if st.button(f"Run {scenario.name}", type="primary", key="require_run"):
        return run_scenario(scenario)
    st.stop()
    raise AssertionError("unreachable: st.stop() ends the script")


# --- output ---------------------------------------------------------------------------


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "figure"


def _png_export_available() -> bool:
    """PNG export needs kaleido (which drives a browser); kvsim does not install it."""
    try:
        import kaleido  # noqa: F401  (optional: only probed)
    except ImportError:
        return False
    return True


def show_figure(fig: go.Figure, name: str) -> None:
    """A figure with its downloads: interactive HTML always, PNG when kaleido is installed."""
    st.plotly_chart(fig, width="stretch", key=f"fig:{name}")
    slug = _slug(name)
    cols = st.columns([1, 1, 4])
    cols[0].download_button(
        "Download HTML",
        fig.to_html(include_plotlyjs=True, full_html=True),
        file_name=f"{slug}.html",
        mime="text/html",
        key=f"html:{name}",
    )
    if _png_export_available():
        cols[1].download_button(
            "Download PNG",
            fig.to_image(format="png", scale=2),
            file_name=f"{slug}.png",
            mime="image/png",
            key=f"png:{name}",
        )


def show_table(df: pd.DataFrame, name: str, *, index: bool = False) -> None:
    """A table with a CSV download."""
    st.dataframe(df, width="stretch", hide_index=not index)
    st.download_button(
        "Download CSV",
        df.to_csv(index=index).encode(),
        file_name=f"{_slug(name)}.csv",
        mime="text/csv",
        key=f"csv:{name}",
    )
