"""What the dashboard's pages share: the view (scenario and inputs), runs, safe files, downloads.

State lives in ``st.session_state`` and survives switching pages:

- ``view``      the scenario's source (built-in default, catalogue file, edited YAML), the knob
  changes and every page's inputs, as plain values; mirrored into the URL's query string
  after each page (`sync_url`), and read back from it when a session starts, so that a link
  reproduces the view;
- ``scenario``  the resolved `kvsim.Scenario` the pages work on;
- ``runs``      finished runs, keyed by a hash of the resolved scenario YAML (switching pages or
  coming back to a scenario never re-runs it), kept up to a memory budget
  (`RUN_BUDGET_BYTES`, ``$KVSIM_DASHBOARD_RUN_BUDGET_MIB``): the oldest are dropped first, and
  the page says so.

Every file path that comes from the page goes through `_paths` (allowed folders only), and
errors about files name the file and the line, never its content. Figures come from
`kvsim.analysis.plots`; this module puts them on the page with an HTML download (and PNG when
kaleido is installed), and every table with a CSV download.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import json
import math
import os
import re
import typing
import zipfile
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import _paths
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
import yaml
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from streamlit.errors import StreamlitAPIException

import kvsim
import kvsim.errors
from kvsim.cost.profile import load_profile
from kvsim.errors import ProfileError, TraceError
from kvsim.model.presets import GPU_PRESETS, MODEL_PRESETS
from kvsim.results.io import DATA_FILES, RESULT_FILES
from kvsim.scenario.loading import apply_overrides, parse_yaml, scenario_data, validate
from kvsim.scenario.schema import Scenario
from kvsim.yaml_safe import load_yaml_text, read_capped

REPO_ROOT = _paths.REPO_ROOT
SCENARIO_DIR = _paths.SCENARIO_DIR
#: Largest scenario file accepted from an upload, the YAML editor or a link (scenarios are a few KiB).
MAX_SCENARIO_BYTES = 256 * 1024
#: Largest upload of any kind (result archives), MiB; `.streamlit/config.toml` sets server.maxUploadSize to it.
MAX_UPLOAD_MIB = 64
#: Largest total size of the files of an uploaded result archive once unpacked (zip bombs stop here).
MAX_UNPACKED_BYTES = 512 * 2**20
#: Memory the kept runs' tables may take together, bytes.
RUN_BUDGET_BYTES = int(float(os.environ.get("KVSIM_DASHBOARD_RUN_BUDGET_MIB", "1024")) * 2**20)
#: Longest edited YAML carried in a link (compressed, base64); longer edits are not linkable.
MAX_LINK_YAML_CHARS = 6000

#: The knobs the Scenario page offers as widgets (dotted paths into the scenario); the
#: widgets, ranges, labels and help texts come from the schema. Paths absent from the
#: current scenario (e.g. a trace workload has no arrival rate) are not shown.
MAIN_KNOBS: tuple[str, ...] = (
    "seed",
    "model",
    "replicas.0.gpu",
    "replicas.0.count",
    "replicas.0.tp",
    "router.kind",
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

#: Scenario sources of the Scenario page; the short names are what the URL carries.
SOURCES = {
    "default": "Built-in default",
    "catalogue": "Catalogue (scenarios/)",
    "upload": "Upload a YAML file",
    "yaml": "Edit YAML",
}


@dataclass(frozen=True)
class Run:
    """A finished run and the name it is shown under."""

    label: str
    result: kvsim.Result
    num_bytes: int = 0


# --- the view: scenario source, knob changes, page inputs; mirrored in the URL ----------


def view() -> dict[str, Any]:
    """The session's view; read from the URL's query string when the session starts."""
    if "view" not in st.session_state:
        st.session_state["view"] = view_from_query(st.query_params.to_dict(), st.query_params.get_all("set"))
    return st.session_state["view"]


def view_from_query(params: Mapping[str, str], sets: Iterable[str]) -> dict[str, Any]:
    """A view from query parameters: ``source``, ``file``, ``yaml`` (compressed), repeated
    ``set=path=value`` (knob changes) and page inputs (``page.key=value``)."""
    out: dict[str, Any] = {k: v for k, v in params.items() if k not in ("set", "yaml")}
    knobs: dict[str, Any] = {}
    for item in sets:
        key, sep, raw = item.partition("=")
        if sep and key:
            try:  # read as `--set` reads its value: safe, and within kvsim's YAML bounds
                knobs[key] = load_yaml_text(raw, f"set {key}", what="override") if raw.strip() else ""
            except kvsim.ScenarioError:
                knobs[key] = raw  # validation names it
    out["set"] = knobs
    if "yaml" in params:
        try:
            text = zlib.decompress(
                base64.urlsafe_b64decode(params["yaml"].encode()), bufsize=MAX_SCENARIO_BYTES
            )
            out["yaml"] = text[:MAX_SCENARIO_BYTES].decode("utf-8", errors="replace")
        except (ValueError, zlib.error):
            out["yaml_error"] = "the link's yaml parameter is not a scenario written by this dashboard"
    return out


def _yaml_param(text: str) -> str | None:
    packed = base64.urlsafe_b64encode(zlib.compress(text.encode("utf-8"), 9)).decode()
    return packed if len(packed) <= MAX_LINK_YAML_CHARS else None


def sync_url() -> None:
    """Write the view into the URL (after a page has drawn), so that a link reproduces it."""
    v = view()
    params: dict[str, Any] = {}
    for key, value in v.items():
        if key in ("set", "yaml", "yaml_error", "base") or value is None or key.startswith("_"):
            continue
        params[key] = str(value)
    if v.get("source") == "yaml" and v.get("yaml"):
        packed = _yaml_param(v["yaml"])
        if packed is not None:
            params["yaml"] = packed
    sets = [f"{k}={link_text(val)}" for k, val in v.get("set", {}).items()]
    if sets:
        params["set"] = sets
    # Written on every run: after a switch of page the browser's address has lost them, even
    # when st.query_params still holds the same values.
    st.query_params.from_dict(params)


def link_text(value: Any) -> str:
    """A knob change's value as a link (and the page) writes it: YAML in flow style (``.nan``, ``{name: x}``)."""
    return str(
        yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()
    )


def kept(
    key: str,
    default: Any,
    *,
    min_value: float | None = None,
    max_value: float | None = None,
    options: Iterable[Any] | None = None,
) -> str:
    """Widget key for a page input stored in the view under ``key`` (seeded from it, or ``default``).

    Streamlit forgets a widget's state when its page is not drawn; the view keeps it, so an
    input survives a trip to another page. Call `keep` with the widget's value afterwards.
    A value the widget cannot hold (from a link: not a number, not finite, below
    ``min_value``, above ``max_value``, not one of ``options``) is not used: the page says
    so and the input starts from ``default``.
    """
    wkey = f"w:{key}"
    if wkey not in st.session_state:
        given = view().get(key, default)
        value, why = _input_value(given, default, min_value, max_value, options)
        if why:
            st.warning(f"The link's `{key}={given}` is not used: {why}. The input starts from {default!r}.")
            value = default
            view()[key] = default
        st.session_state[wkey] = value
    return wkey


def _input_value(
    value: Any, default: Any, min_value: float | None, max_value: float | None, options: Iterable[Any] | None
) -> tuple[Any, str]:
    """``(value as the input holds it, "")``, or ``(None, why not)``."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            value = str(value).lower() in ("1", "true", "yes")
    elif isinstance(default, int | float):
        try:
            number = float(value)
        except (TypeError, ValueError):
            return None, "not a number"
        if not math.isfinite(number):
            return None, "not a finite number"
        if isinstance(default, int) and not number.is_integer():
            return None, "not a whole number"
        value = int(number) if isinstance(default, int) else number
        if min_value is not None and value < min_value:
            return None, f"below this input's least value, {min_value:g}"
        if max_value is not None and value > max_value:
            return None, f"above this input's largest value, {max_value:g}"
    if options is not None and value not in list(options):
        return None, "not one of this input's choices"
    return value, ""


def keep(key: str, value: Any) -> None:
    """Store a page input's current value in the view (and so in the URL)."""
    view()[key] = value


# --- scenario state ---------------------------------------------------------------------


def scenario_yaml(scenario: kvsim.Scenario) -> str:
    return kvsim.dump_scenario(scenario)


def scenario_key(scenario: kvsim.Scenario) -> str:
    """Identity of a resolved scenario: equal keys, equal runs (runs are deterministic)."""
    return hashlib.sha256(scenario_yaml(scenario).encode()).hexdigest()[:16]


def current_scenario() -> kvsim.Scenario:
    """The scenario the pages work on: the view's source and knob changes (default at first)."""
    if "scenario" not in st.session_state:
        try:
            st.session_state["scenario"] = scenario_from_view()
        except kvsim.ScenarioError as err:
            show_scenario_error(err)
            st.session_state["scenario"] = kvsim.load_scenario(None)
    return st.session_state["scenario"]


def base_from_view() -> kvsim.Scenario:
    """The view's base scenario, before knob changes, without drawing anything (other pages)."""
    v = view()
    source = v.get("source", "default")
    if source == "catalogue" and v.get("file"):
        path = catalogue_path(str(v["file"]))
        if path is None:
            raise kvsim.ScenarioError(str(v["file"]), [("", "no such file in scenarios/")])
        return load_file(path)
    if source == "yaml" and v.get("yaml"):
        return parse_and_resolve(v["yaml"].encode("utf-8"), "<edited YAML>")
    return kvsim.load_scenario(None)


def scenario_from_view() -> kvsim.Scenario:
    base = base_from_view()
    changes = view().get("set", {})
    return resolve(scenario_data(base), changes, "<knobs>") if changes else base


def set_scenario(scenario: kvsim.Scenario) -> None:
    st.session_state["scenario"] = scenario


def scenario_files() -> list[Path]:
    """The catalogue: ``scenarios/*.yaml`` of the repository, by name."""
    return sorted(SCENARIO_DIR.glob("*.yaml")) if SCENARIO_DIR.is_dir() else []


def catalogue_path(name: str) -> Path | None:
    """The catalogue file called ``name`` (a bare file name; anything else is not in the catalogue)."""
    return next((p for p in scenario_files() if p.name == name), None)


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


def confined_scenario(data: Mapping[str, Any], source: str, base_dir: Path = REPO_ROOT) -> kvsim.Scenario:
    """The scenario of ``data`` with every file it names in an allowed folder; `kvsim.ScenarioError` otherwise.

    The one gate between the page and the library: every scenario a page runs, searches,
    sweeps or replays passes here. In order, before anything opens a file: the paths
    visible in the plain data (`_paths.confine_scenario_paths`), the schema alone, then
    every file field of the schema-valid scenario (`_paths.confine_path_fields`: a path
    the first look missed, e.g. a ``!!binary`` string, is refused or made the real path);
    then cost profiles are read (an unreadable one is named, never quoted) and the
    scenario is validated in full. Relative paths are relative to ``base_dir``.
    """
    early, problems = _paths.confine_scenario_paths(dict(data), base_dir=base_dir)
    if problems:
        raise kvsim.ScenarioError(source, problems)
    try:
        shape = Scenario.model_validate(early)  # the schema alone: no file is opened
    except ValidationError:
        validate(early, source)  # raises the schema's problems as a ScenarioError, as it fails the same way
        raise  # unreachable: validate raised
    fixes, problems = _paths.confine_path_fields(shape, base_dir=base_dir)
    if problems:
        raise kvsim.ScenarioError(source, problems)
    checked = apply_overrides(scenario_data(shape), fixes) if fixes else early
    for where, path in _paths.path_fields(Scenario.model_validate(checked) if fixes else shape):
        if where.endswith(".cost_model.profile"):
            try:
                load_profile(path)
            except ProfileError as err:  # its message may quote the file
                problems.append((where, safe_error(err)))
    if problems:
        raise kvsim.ScenarioError(source, problems)
    return validate(checked, source)


def resolve(
    data: Mapping[str, Any],
    overrides: Mapping[str, Any] | Iterable[str],
    source: str,
    base_dir: Path = REPO_ROOT,
) -> kvsim.Scenario:
    """Validate scenario data after dotted-path overrides, its file paths confined; errors name ``source``."""
    try:
        merged = apply_overrides(dict(data), overrides)
    except kvsim.ScenarioError as err:
        raise kvsim.ScenarioError(source, err.problems) from None
    return confined_scenario(merged, source, base_dir)


def parse_and_resolve(data: bytes, source: str) -> kvsim.Scenario:
    """Uploaded or pasted YAML to a scenario (relative paths against the repository)."""
    return resolve(parse_scenario_bytes(data, source), {}, source)


def load_file(path: Path) -> kvsim.Scenario:
    """A catalogue file (relative trace paths against its folder)."""
    text = read_capped(path, path.name)  # a regular file of at most 1 MiB (a YamlError otherwise)
    return resolve(parse_scenario_bytes(text, path.name), {}, str(path.relative_to(REPO_ROOT)), path.parent)


def show_scenario_error(err: kvsim.ScenarioError) -> None:
    """The validation error as the page shows it: source, then one row per (field, rule)."""
    lines = "\n".join(f"- `{path or '<root>'}`: {rule}" for path, rule in err.problems)
    st.error(f"**{err.source}**: invalid scenario\n\n{lines}", icon="🚫")


def safe_error(exc: Exception) -> str:
    """A run-time error for the page: trace and profile errors name the file and line only.

    Their messages can quote a row of the file (a value that failed to parse, a CSV
    header); the page says which file and line, and `kvsim trace-stats` on the command
    line says the rest.
    """
    kind = "trace" if isinstance(exc, TraceError) else "profile" if isinstance(exc, ProfileError) else None
    return _file_error(kind, str(exc)) if kind else str(exc)


def _file_error(kind: str, text: str) -> str:
    what = "trace" if kind == "trace" else "cost profile"
    name = Path(text.split(":", 1)[0].split(", line")[0].strip("'\"")).name or what
    if text.startswith("profile file "):  # "profile file '/x/p.json' does not exist"
        name = Path(text.split("'")[1] if text.count("'") >= 2 else what).name
    line = re.search(r", line (\d+):", text)
    where = f", line {line.group(1)}" if line else ""
    missing = any(s in text for s in ("cannot read", "not found", "does not exist"))
    reason = "cannot be read" if missing else "has content kvsim cannot use"
    return f"{what} file {name}{where} {reason} (`kvsim trace-stats` or `kvsim validate` on the command line tell more)"


#: The first line of `traceback.format_exception_only`: "kvsim.errors.TraceError: message".
_EXCEPTION_LINE = re.compile(
    r"^(?P<name>[A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Interrupt)): ?(?P<msg>.*)$", re.S
)


def safe_error_text(text: str) -> str:
    """A failed point's error as the page may show it (the error column of a capacity search or a sweep).

    Sweep and capacity points keep their error as text (``TraceError: /x, line 1: ...``).
    Trace and profile errors become `safe_error`'s sentence; other kvsim errors (a scenario
    rule, a limit) stay as they are; any other exception, whose message may hold anything
    read from a file, is named by its type only.
    """
    text = str(text or "").strip()
    if not text:
        return ""
    last = text.splitlines()[-1]
    match = _EXCEPTION_LINE.match(text) or _EXCEPTION_LINE.match(last)
    if match is None:
        return last if last.startswith("worker failed") else "the run failed"
    name, msg = match.group("name"), match.group("msg")
    short = name.rsplit(".", 1)[-1]
    if short in ("TraceError", "ProfileError"):
        return _file_error("trace" if short == "TraceError" else "profile", msg.strip())
    if name.startswith("kvsim.") or short in _KVSIM_ERRORS:
        # A scenario's rules are the schema's, except a profile's, which may quote the profile.
        lines = [
            ln.split(": ", 1)[0] + ": " + _file_error("profile", ln.split(": ", 1)[-1].strip())
            if ln.strip().startswith("replicas.") and ".cost_model.profile: " in ln
            else ln
            for ln in f"{short}: {msg}".splitlines()
        ]
        return "\n".join(lines)
    return f"the run failed ({short})"


#: kvsim's own exception types (their messages state rules and limits, not file content).
_KVSIM_ERRORS = frozenset(
    name for name, obj in vars(kvsim.errors).items() if isinstance(obj, type) and issubclass(obj, Exception)
)


# --- what a run is, in words ------------------------------------------------------------

#: docs/results.md: what every summary key means (its `summary` section's table).
RESULTS_DOC = REPO_ROOT / "docs" / "results.md"


def setup_line(scenario: kvsim.Scenario) -> str:
    """The model, the GPUs and the workload of a scenario in one line (markdown), e.g.
    ``**llama-3-8b** on **1 × h100-sxm** (TP 1, roofline cost model) · synthetic workload, 2,000 requests``."""
    model = scenario.model if isinstance(scenario.model, str) else scenario.model.name
    groups = []
    for g in scenario.replicas:
        gpu = g.gpu if isinstance(g.gpu, str) else g.gpu.name
        role = "" if g.role == "both" else f"{g.role} "
        name = f"{g.name}: " if len(scenario.replicas) > 1 else ""
        groups.append(f"{name}**{g.count} × {gpu}** {role}(TP {g.tp}, {g.cost_model.kind} cost model)")
    workload = scenario.workload
    count = getattr(workload, "num_requests", None) or getattr(workload, "max_requests", None)
    what = f"{workload.kind} workload" + (f", {count:,} requests" if isinstance(count, int) else "")
    if isinstance(getattr(workload, "path", None), str):
        what += f" from {Path(workload.path).name}"
    return f"**{model}** on " + " + ".join(groups) + f" · {what} · router {scenario.router.kind}"


@functools.cache
def _summary_meanings() -> tuple[tuple[str, str], ...]:
    """``(key pattern, meaning)`` rows of docs/results.md's summary table (empty without the file)."""
    try:
        text = RESULTS_DOC.read_text(encoding="utf-8")
    except OSError:
        return ()
    section = text.split("## `summary`", 1)[-1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        meaning = cells[1].replace("`", "")
        for key in re.findall(r"`([^`]+)`", cells[0]):
            pattern = re.escape(key).replace("STAT", "(?:mean|p50|p90|p99)").replace("<name>", ".+")
            pattern = pattern.replace(re.escape("<name>"), ".+")
            rows.append((pattern, meaning))
    return tuple(rows)


def summary_meaning(key: str) -> str:
    """What the summary key ``key`` means, as docs/results.md says ("" if it does not say)."""
    return next((m for pattern, m in _summary_meanings() if re.fullmatch(pattern, key)), "")


def summary_column_help(columns: Iterable[str]) -> dict[str, Any]:
    """`st.dataframe` column settings that give each summary key's column its meaning on hover."""
    return {c: st.column_config.Column(c, help=summary_meaning(c)) for c in columns if summary_meaning(c)}


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


def knob_label(scenario: kvsim.Scenario, path: str) -> str:
    """A knob's label from its schema description: the first clause, e.g. 'Tokens per KV block'.

    Replica-group knobs of a scenario with several groups name their group.
    """
    found = _walk(scenario, path)
    if found is None:
        return path
    model, name = found
    desc = (type(model).model_fields[name].description or name).strip()
    label = re.split(r"(?<=[a-z)])[.;:](?:\s|$)| \(|; |, default", desc, maxsplit=1)[0].rstrip(".")
    info = type(model).model_fields[name]
    options = typing.get_args(info.annotation) or tuple(_registry_names(info))
    if label in options:  # "round_robin: in turn; ...": the description lists the choices
        label = (type(model).__doc__ or name).strip().splitlines()[0].rstrip(".")
    if path.startswith("replicas.") and len(scenario.replicas) > 1:
        label += f" (group {scenario.replicas[int(path.split('.')[1])].name})"
    return label


def knob_axis_title(scenario: kvsim.Scenario, path: str) -> str:
    """An axis title for a knob: its label and, for numbers, the unit its name carries."""
    label = knob_label(scenario, path)
    name = path.rsplit(".", 1)[-1]
    unit = {"_per_s": "1/s", "_s": "s", "_tokens": "tokens", "_gib": "GiB"}
    for suffix, u in unit.items():
        if name.endswith(suffix) and u not in label and "second" not in label:
            return f"{label} ({u})"
    return label


def _bounds(info: Any) -> dict[str, float]:
    """number_input bounds from the field's ge/gt/le/lt constraints."""
    out: dict[str, float] = {}
    for meta in info.metadata:
        for attr, key in (("ge", "min_value"), ("gt", "min_value"), ("le", "max_value"), ("lt", "max_value")):
            if getattr(meta, attr, None) is not None:
                out[key] = getattr(meta, attr)
    return out


def _registry_names(info: Any) -> list[str]:
    """The names a registry-backed field accepts (routers, policies), else []."""
    extra = info.json_schema_extra
    if not callable(extra):
        return []
    schema: dict[str, Any] = {}
    extra(schema)
    return [str(n) for n in schema.get("enum", [])]


@functools.cache
def _field_check(model: type[BaseModel], name: str, ann: Any) -> TypeAdapter[Any]:
    """The field's own type and bounds (ge, le, ...), to try a value on before a widget holds it."""
    info = model.model_fields[name]
    return TypeAdapter(Annotated[ann, *info.metadata], config=ConfigDict(allow_inf_nan=False))


@dataclass(frozen=True)
class Knobs:
    """What the knob widgets say: ``changed`` (widget values that differ from the base scenario)
    and ``unshown`` (the link's knob changes that no widget holds: out of the widget's range,
    not one of its options, of another type, or for a knob this scenario has no widget for;
    they are validated with the scenario, so that the page names the field and the rule)."""

    changed: dict[str, Any]
    unshown: dict[str, Any]


def knob_widgets(base: kvsim.Scenario, *, key: str, changes: Mapping[str, Any]) -> Knobs:
    """One widget per `MAIN_KNOBS` path present in ``base``; returns the values that differ from it.

    Widget type, range, label and help text come from the field's type, constraints and
    description; a widget starts from ``changes`` (the view's knob changes) when it holds
    the path and the widget can hold the value (the field's type and bounds, the
    widget's options), else from the base scenario's value, and the change is returned
    as ``unshown``. ``key`` scopes widget state to one base scenario.
    """
    changed: dict[str, Any] = {}
    held: set[str] = set()  # knobs whose widget started from the link's value
    cols = st.columns(3)
    drawn = 0
    for path in MAIN_KNOBS:
        found = _walk(base, path)
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
        label = knob_label(base, path)
        help_text = f"{info.description} (`{path}`)"
        wkey = f"knob:{key}:{path}"
        starts: list[tuple[Any, bool]] = [(value, False)]
        if path in changes:
            given = _widget_value(type(model), name, ann, info, changes[path])
            if given is not None:
                starts.insert(0, (given[0], True))
        new: Any = _NO_WIDGET
        from_link = False
        with cols[drawn % 3]:
            for start, link_value in starts:
                try:
                    new = _knob_widget(
                        name, ann, info, value, start, label=label, help_text=help_text, wkey=wkey
                    )
                except (StreamlitAPIException, TypeError, ValueError):  # beyond what the widget can show
                    continue
                from_link = link_value
                break
        if new is _NO_WIDGET:
            continue
        drawn += 1
        if from_link:
            held.add(path)
        if new != value:
            changed[path] = new
    unshown = {k: v for k, v in changes.items() if k in MAIN_KNOBS and k not in held and k not in changed}
    return Knobs(changed, unshown)


_NO_WIDGET = object()


def _widget_value(model: type[BaseModel], name: str, ann: Any, info: Any, raw: Any) -> tuple[Any] | None:
    """``(value,)`` as the knob's widget would hold the link's ``raw`` value, or None if it cannot."""
    if name in _PRESET_CHOICES:
        return (raw,) if isinstance(raw, str) else None
    options = (
        list(typing.get_args(ann)) if typing.get_origin(ann) is typing.Literal else _registry_names(info)
    )
    if options:
        return (raw,) if raw in options else None
    try:
        return (_field_check(model, name, ann).validate_python(raw),)
    except (ValidationError, TypeError, ValueError):
        return None


def _knob_widget(name: str, ann: Any, info: Any, value: Any, start: Any, *, label: str, help_text: str,
                 wkey: str) -> Any:  # fmt: skip
    """The widget of one knob, starting from ``start``; `_NO_WIDGET` for a type without one."""
    if name in _PRESET_CHOICES:
        if not isinstance(value, str):
            return _NO_WIDGET  # inline spec: edit it in the YAML
        options = list(dict.fromkeys([str(start).lower(), value.lower(), *_PRESET_CHOICES[name]]))
        return st.selectbox(label, options, index=0, help=help_text, key=wkey)
    if typing.get_origin(ann) is typing.Literal or _registry_names(info):
        options = list(typing.get_args(ann)) or _registry_names(info)
        return st.selectbox(label, options, index=options.index(start), help=help_text, key=wkey)
    if ann is bool:
        return st.checkbox(label, value=bool(start), help=help_text, key=wkey)
    if ann is int:
        b = {k: int(v) for k, v in _bounds(info).items()}
        return st.number_input(label, value=int(start), step=1, help=help_text, key=wkey, **b)
    if ann is float:
        b = {k: float(v) for k, v in _bounds(info).items()}
        return st.number_input(label, value=float(start), help=help_text, key=wkey, format="%.4g", **b)
    return _NO_WIDGET


# --- runs -----------------------------------------------------------------------------


def _runs() -> dict[str, Run]:
    return st.session_state.setdefault("runs", {})


def cached_run(scenario: kvsim.Scenario) -> Run | None:
    return _runs().get(scenario_key(scenario))


def all_runs() -> dict[str, Run]:
    """Finished runs of this session, oldest first."""
    return dict(_runs())


def result_bytes(result: kvsim.Result) -> int:
    """Memory the run's tables take (what the budget counts)."""
    return int(
        sum(df.memory_usage(deep=True).sum() for df in (result.requests, result.iterations, result.events))
    )


def add_run(key: str, run: Run) -> None:
    """Keep a run; drop the oldest others while the kept runs exceed `RUN_BUDGET_BYTES`, with a notice."""
    runs = _runs()
    runs.pop(key, None)
    if not run.num_bytes:
        run = Run(run.label, run.result, result_bytes(run.result))
    runs[key] = run
    while len(runs) > 1 and sum(r.num_bytes for r in runs.values()) > RUN_BUDGET_BYTES:
        old_key = next(iter(runs))
        dropped = runs.pop(old_key)
        notices().append(
            f"Run **{dropped.label}** ({dropped.num_bytes / 2**20:,.0f} MiB) was dropped to keep the session's runs "
            f"within {RUN_BUDGET_BYTES / 2**20:,.0f} MiB (`KVSIM_DASHBOARD_RUN_BUDGET_MIB`); run it again to see it."
        )


def notices() -> list[str]:
    return st.session_state.setdefault("notices", [])


def show_notices() -> None:
    """Notices (dropped runs) once, at the top of the next page drawn."""
    pending = notices()
    for text in pending:
        st.warning(text, icon="ℹ️")
    pending.clear()


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
        try:
            scenario = confined_scenario(scenario_data(scenario), f"<scenario {scenario.name}>")
        except kvsim.ScenarioError as err:
            show_scenario_error(err)
            st.stop()
            raise AssertionError("unreachable: st.stop() ends the script") from err
        bar = st.progress(0, text=f"Running {scenario.name} ...")
        try:
            result = kvsim.run(scenario, progress=progress_callback(bar))
        except kvsim.KvsimError as exc:  # bad input found while running (a trace file, a profile)
            bar.empty()
            st.error(f"**{scenario.name}** cannot run: {safe_error(exc)}", icon="🚫")
            st.stop()
            raise AssertionError("unreachable: st.stop() ends the script") from exc
        except Exception as exc:  # a bug: say so in words, never a traceback
            bar.empty()
            st.error(f"**{scenario.name}**: the simulation failed ({type(exc).__name__}).", icon="🚫")
            st.stop()
            raise AssertionError("unreachable: st.stop() ends the script") from exc
        bar.empty()
        run = Run(label or f"{scenario.name} #{len(_runs()) + 1}", result)
        add_run(key, run)
        run = _runs()[key]
    return run


def require_run() -> Run:
    """The current scenario's run; if there is none yet, offer to run it and stop the page."""
    scenario = current_scenario()
    run = cached_run(scenario)
    if run is not None:
        return run
    offer = st.empty()  # the notice and the button, gone once the run is there
    with offer.container():
        st.info(
            f"Scenario **{scenario.name}** has not been run yet. Change it on the Scenario page, or run it here."
        )
        clicked = st.button(f"Run {scenario.name}", type="primary", key="require_run")
    if clicked:
        run = run_scenario(scenario)
        offer.empty()
        return run
    sync_url()
    st.stop()
    raise AssertionError("unreachable: st.stop() ends the script")


def overload_note(summary: Mapping[str, Any]) -> str | None:
    """A sentence when a run was overloaded (its percentiles then grow with its length)."""
    if not summary.get("overloaded"):
        return None
    return (
        f"Overloaded ({summary.get('overload_reason') or 'backlog growing'}): "
        f"{summary.get('offered_requests_per_s', float('nan')):.3g} req/s offered, "
        f"{summary.get('achieved_requests_per_s', float('nan')):.3g} req/s achieved; the backlog grew by "
        f"{summary.get('backlog_growth_requests_per_s', float('nan')):.3g} req/s to "
        f"{summary.get('backlog_end_requests', 0):,} requests. Its latency percentiles grow with the "
        "run's length: they are not a steady state."
    )


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


def show_figure(fig: go.Figure, name: str, **chart_kw: Any) -> Any:
    """A figure with its downloads: interactive HTML always, PNG when kaleido is installed."""
    event = st.plotly_chart(fig, width="stretch", key=f"fig:{name}", **chart_kw)
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
    return event


def show_table(df: pd.DataFrame, name: str, *, index: bool = False, **kw: Any) -> None:
    """A table with a CSV download."""
    st.dataframe(df, width="stretch", hide_index=not index, **kw)
    st.download_button(
        "Download CSV",
        df.to_csv(index=index).encode(),
        file_name=f"{_slug(name)}.csv",
        mime="text/csv",
        key=f"csv:{name}",
    )


def session_folder() -> str:
    """This browser session's folder name in the upload area (random, made once per session)."""
    return st.session_state.setdefault("upload_dir", hashlib.sha256(os.urandom(16)).hexdigest()[:16])


def unpack_result_archive(data: bytes, name: str, session: str) -> Path:
    """An uploaded result archive unpacked into ``upload area/session/``; ValueError when unusable.

    The archive must hold the five files of a result folder (at its root or in one folder)
    and nothing else, at most `MAX_UNPACKED_BYTES` once unpacked; members are written under
    their bare names, never their paths.
    """
    if len(data) > MAX_UPLOAD_MIB * 2**20:
        raise ValueError(f"{name}: larger than {MAX_UPLOAD_MIB} MiB")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except zipfile.BadZipFile:
        raise ValueError(f"{name}: not a zip archive") from None
    members = {Path(i.filename).name: i for i in infos if not i.is_dir()}
    folders = {str(Path(i.filename).parent) for i in infos if not i.is_dir()}
    if (
        set(members) not in (set(RESULT_FILES), set(DATA_FILES))  # with kvsim's marker or without
        or len(members) != len(infos) - sum(i.is_dir() for i in infos)
        or (len(folders) > 1 or any(".." in Path(f).parts or Path(f).is_absolute() for f in folders))
    ):
        raise ValueError(f"{name}: must hold exactly the files of a result folder: {', '.join(RESULT_FILES)}")
    if sum(i.file_size for i in members.values()) > MAX_UNPACKED_BYTES:
        raise ValueError(f"{name}: unpacks to more than {MAX_UNPACKED_BYTES // 2**20} MiB")
    target = _paths.upload_root() / session / hashlib.sha256(data).hexdigest()[:16]
    target.mkdir(parents=True, exist_ok=True, mode=0o700)
    for member, info in members.items():
        with archive.open(info) as src:
            blob = src.read(MAX_UNPACKED_BYTES + 1)
        if len(blob) > MAX_UNPACKED_BYTES:
            raise ValueError(f"{name}: unpacks to more than {MAX_UNPACKED_BYTES // 2**20} MiB")
        (target / member).write_bytes(blob)
    return target


def json_text(value: Any) -> str:
    return json.dumps(value, default=str)
