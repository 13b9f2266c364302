"""Capacity search: the least of a knob (or the most load) that meets an SLO.

    find_capacity(scenario, "replicas.0.count", [1, 2, ..., 16],
                  parse_slo("ttft_p99_s=2,tpot_p99_s=0.1"))

A point is *feasible* when its run finished, every SLO bound holds on its summary, it is
not overloaded (`kvsim.results.overload`: a short run of an overloaded system can meet a latency
target only because it ends before the queue has grown), and it served at least
``min_served`` of its requests (default 99%: a KV pool too small for most prompts rejects
them, and the few it serves can be fast). The search assumes
feasibility is monotone along the candidate list:

    goal smallest (replicas, GPU type, TP, memory):  values ascending
        infeasible ... infeasible | feasible ... feasible      answer: the first feasible
    goal largest (arrival rate, time scale):         values descending
        infeasible ... infeasible | feasible ... feasible      answer: the first feasible

and finds the boundary by bisection: with one worker, the middle candidate of the
interval still open; with ``jobs`` workers, ``jobs`` candidates splitting it evenly, run
at once by the sweep's parallel runner (`kvsim.planning.sweep.run_points`). A list of n
candidates takes at most ceil(log2(n + 1)) runs with one worker. Each point is a full run of the
whole workload: nothing is shortened. A result that contradicts monotonicity (a
feasible point below an infeasible one) is kept and reported.
"""

from __future__ import annotations

import difflib
import functools
import itertools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from kvsim.core.outcome import CacheStats
from kvsim.errors import KvsimError, ScenarioError
from kvsim.limits import MAX_CANDIDATES
from kvsim.planning.sweep import Executor, Point, Runner, check_jobs, point_id, run_points, summary_only
from kvsim.results.result import EVENT_COLUMNS, ITERATION_COLUMNS, REQUEST_COLUMNS, summarize
from kvsim.scenario.loading import (
    apply_overrides,
    load_scenario,
    parse_value,
    read_yaml,
    resolve_file_paths,
    scenario_data,
    validate,
)
from kvsim.scenario.schema import Scenario
from kvsim.workload import WorkloadInfo
from kvsim.workload.traces import TraceReport

Goal = Literal["smallest", "largest"]

#: Knobs (last path part) where more means more load: the search looks for the largest value.
LOAD_KNOBS = ("rate_per_s", "mean_rate_per_s", "rate_on_per_s", "time_scale")
#: Least share of the requests a point must serve (finish) to count.
DEFAULT_MIN_SERVED = 0.99
#: Columns of `CapacityReport.table` besides the knob and the SLO keys.
TABLE_KEYS = (
    "offered_requests_per_s",
    "achieved_requests_per_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
)


class CapacityError(KvsimError):
    """A capacity question that cannot be asked: a bad knob, range or SLO."""


@dataclass(frozen=True)
class SloBound:
    """``key <= limit`` (an upper bound, the usual latency target) or ``key >= limit``."""

    key: str
    limit: float
    upper: bool = True

    def met(self, summary: Mapping[str, Any]) -> bool:
        value = summary.get(self.key)
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            return False  # a missing or undefined metric (nothing finished) meets nothing
        return value <= self.limit if self.upper else value >= self.limit

    def __str__(self) -> str:
        return f"{self.key} {'≤' if self.upper else '≥'} {self.limit:g}"


def parse_slo(text: str) -> list[SloBound]:
    """``"ttft_p99_s=2,tpot_p99_s<=0.1,slo_attainment>=0.99"``: ``=`` and ``<=`` are upper bounds."""
    bounds = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|=)\s*(\S+)", part)
        if m is None:
            raise CapacityError(f"--slo: {part!r} must look like KEY=LIMIT, KEY<=LIMIT or KEY>=LIMIT")
        key, op, raw = m.groups()
        try:
            limit = float(raw)
        except ValueError:
            raise CapacityError(f"--slo: {key}: limit {raw!r} is not a number") from None
        if not math.isfinite(limit):
            raise CapacityError(f"--slo: {key}: limit must be finite, got {raw}")
        bounds.append(SloBound(key, limit, upper=op != ">="))
    if not bounds:
        raise CapacityError("--slo: give at least one bound, e.g. ttft_p99_s=2")
    return bounds


#: Summary keys that depend on the run's tenants or trace (one per tenant, per drop reason).
_DYNAMIC_KEYS = re.compile(r"tenant_.+_(prefix_cache_hit_rate|ttft_p50_s)|trace_dropped_[a-z_]+")


@functools.cache
def summary_number_keys() -> frozenset[str]:
    """The numeric keys of a run's summary (those an SLO can bound): the summary of an empty
    run of the default scenario, with a trace replay's counts."""
    scenario = load_scenario(None)
    requests = pd.DataFrame({c: [] for c in REQUEST_COLUMNS}).astype({"finished": bool})
    iterations = pd.DataFrame({c: [] for c in ITERATION_COLUMNS})
    events = pd.DataFrame({c: [] for c in EVENT_COLUMNS})
    summary = summarize(
        scenario, requests, iterations, events, cache=CacheStats(), total_kv_blocks=1, sim_time_s=0.0
    )
    summary |= WorkloadInfo("trace", 0, 0, TraceReport("", "csv", 0, 0, 0, {}, 0, 0.0)).summary()
    return frozenset(k for k, v in summary.items() if isinstance(v, int | float))


def check_slo_keys(bounds: Sequence[SloBound]) -> None:
    """Raise `CapacityError` for a bound on a key no summary has (a typo would never be met,
    and the search would answer "no value meets the SLO" instead of naming the mistake)."""
    known = summary_number_keys()
    for b in bounds:
        if b.key in known or _DYNAMIC_KEYS.fullmatch(b.key):
            continue
        close = difflib.get_close_matches(b.key, sorted(known), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        shown = b.key if len(b.key) <= 60 else b.key[:57] + "..."
        raise CapacityError(
            f"--slo: {shown!r} is not a numeric summary key{hint}; the keys are listed in docs/results.md"
        )


def default_slo(scenario: Scenario) -> list[SloBound]:
    """The scenario's own targets as p99 bounds: ``ttft_p99_s <= slo.ttft_s``, ``tpot_p99_s <= slo.tpot_s``."""
    return [SloBound("ttft_p99_s", scenario.slo.ttft_s), SloBound("tpot_p99_s", scenario.slo.tpot_s)]


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def parse_values(text: str) -> list[Any]:
    """Candidates: ``START:STOP[:STEP]`` (both ends included; STEP 1 for integers) or ``a,b,c``.

    A list keeps its order (GPU types from the least to the most capable); its items are
    YAML scalars (numbers stay numbers).
    """
    text = text.strip()
    if ":" in text and "," not in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise CapacityError(f"--range: {text!r} must look like START:STOP or START:STOP:STEP")
        try:
            nums = [_number(p.strip()) for p in parts]
        except ValueError:
            raise CapacityError(f"--range: {text!r}: START, STOP and STEP must be numbers") from None
        start, stop = nums[0], nums[1]
        if len(nums) == 2:
            if not (isinstance(start, int) and isinstance(stop, int)):
                raise CapacityError(
                    f"--range: {text!r}: give a STEP for a range of decimals, e.g. 0.5:0.95:0.05"
                )
            step: int | float = 1
        else:
            step = nums[2]
        if any(abs(n) > 2**53 for n in nums):  # before any float arithmetic: 10**400 cannot be one
            raise CapacityError(f"--range: {text!r}: START, STOP and STEP must lie within ±2**53")
        if not all(math.isfinite(n) for n in nums) or step <= 0 or stop < start:
            raise CapacityError(f"--range: {text!r}: needs START <= STOP and STEP > 0")
        integers = all(isinstance(n, int) for n in (start, stop, step))
        # Counted before anything is listed; (stop - start) / step can overflow to inf (0:1e300:1e-300).
        span = (stop - start) // step if integers else (stop - start) / step
        count = math.floor(span + 1e-9) + 1 if span <= MAX_CANDIDATES else None
        if count is None or count > MAX_CANDIDATES:
            raise CapacityError(f"--range: {text!r} has {span + 1:,.0f} values; at most {MAX_CANDIDATES:,}")
        if integers:
            return [start + i * step for i in range(count)]
        digits = max(0, -math.floor(math.log10(step)) + 3)  # 0.05 -> 5 decimals: no 0.15000000000000002
        return [round(start + i * step, digits) for i in range(count)]
    parts = [p for p in text.split(",") if p.strip()]
    if len(parts) > MAX_CANDIDATES:  # counted before each is parsed
        raise CapacityError(f"--values: {len(parts):,} values; at most {MAX_CANDIDATES:,}")
    try:
        values = [parse_value(p, "--values", what="value") for p in parts]
    except ScenarioError as exc:  # a value YAML cannot read (a tag, a bad escape): the option's error
        raise CapacityError(str(exc)) from None
    if not values:
        raise CapacityError("--values: give at least one value")
    if len({repr(v) for v in values}) != len(values):
        raise CapacityError(f"--values: {text!r} repeats a value")
    return values


def default_goal(knob: str) -> Goal:
    """``largest`` for load knobs (`LOAD_KNOBS`), ``smallest`` for capacity knobs."""
    return "largest" if knob.rsplit(".", 1)[-1] in LOAD_KNOBS else "smallest"


@dataclass(frozen=True)
class CapacityPoint:
    """One run of the search."""

    value: Any
    run_index: int  # order in which the point was run (0 first); points of one round run at once
    round_index: int
    status: Literal["ok", "failed"]
    error: str
    summary: dict[str, Any]
    slo_met: bool
    overloaded: bool
    wall_s: float
    served_share: float = 1.0  # finished / requests
    min_served: float = DEFAULT_MIN_SERVED

    @property
    def feasible(self) -> bool:
        return (
            self.status == "ok"
            and self.slo_met
            and not self.overloaded
            and self.served_share >= self.min_served
        )


@dataclass(frozen=True)
class CapacityReport:
    """Everything the search ran, and its answer."""

    knob: str
    values: list[Any]  # candidates in the order given
    goal: Goal
    slo: list[SloBound]
    points: list[CapacityPoint]  # in the order they were run
    answer: Any | None
    monotone: bool
    trace_share_kept: float | None = None  # share of the trace's rows the workload replays (None: no trace)
    notes: list[str] = field(default_factory=list)
    min_served: float = DEFAULT_MIN_SERVED

    @property
    def num_runs(self) -> int:
        return len(self.points)

    def _conditions(self) -> str:
        served = f", {self.min_served:.0%} served" if self.min_served < 1 else ", all served"
        return (
            " and ".join(str(b) for b in self.slo) + ", not overloaded" + (served if self.min_served else "")
        )

    def answer_line(self) -> str:
        """The answer in one line, or why there is none."""
        runs = f"{self.num_runs} run{'s' if self.num_runs != 1 else ''}"
        if self.answer is not None:
            return (
                f"{self.goal.capitalize()} {self.knob} meeting {self._conditions()}: {self.answer} ({runs})"
            )
        ordered = sorted(self.points, key=lambda p: self._position(p.value))
        best = ordered[-1] if ordered else None
        end = "largest" if self.goal == "smallest" else "smallest"
        detail = ""
        if best is not None:
            bits = [f"{b.key} = {_fmt(best.summary.get(b.key))}" for b in self.slo if not b.met(best.summary)]
            if best.overloaded:
                bits.append("overloaded")
            if best.status == "ok" and best.served_share < self.min_served:
                bits.append(f"{best.served_share:.0%} served")
            if best.status != "ok":
                bits.append(f"failed: {best.error.splitlines()[-1] if best.error else 'error'}")
            detail = f"; the {end} value, {best.value}, gives {', '.join(bits) or 'no result'}"
        hint = "raise the range" if self.goal == "smallest" else "lower the range"
        return (
            f"No value of {self.knob} in {_span(self.values)} meets {self._conditions()}{detail} "
            f"({runs}); {hint}."
        )

    def _position(self, value: Any) -> int:
        return _order(self.values, self.goal).index(value)

    def table(self) -> pd.DataFrame:
        """One row per run, in the candidates' order: knob value, offered/achieved load, percentiles, verdicts."""
        extra = [b.key for b in self.slo if b.key not in TABLE_KEYS]
        rows = []
        ascending = _order(self.values, "smallest")
        for p in sorted(self.points, key=lambda p: ascending.index(p.value)):
            row: dict[str, Any] = {self.knob: p.value}
            for key in (*TABLE_KEYS, *extra):
                row[key] = p.summary.get(key, float("nan"))
            row |= {
                "served": p.served_share,
                "slo_met": p.slo_met,
                "overloaded": p.overloaded,
                "feasible": p.feasible,
                "run": p.run_index + 1,
                "error": p.error.splitlines()[-1] if p.error else "",
            }
            rows.append(row)
        return pd.DataFrame(rows)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return {
            "knob": self.knob,
            "goal": self.goal,
            "values": self.values,
            "slo": [
                {"key": b.key, "limit": b.limit, "bound": "upper" if b.upper else "lower"} for b in self.slo
            ],
            "answer": self.answer,
            "num_runs": self.num_runs,
            "monotone": self.monotone,
            "min_served": self.min_served,
            "trace_share_kept": self.trace_share_kept,
            "message": self.answer_line(),
            "notes": list(self.notes),
            "points": [
                {
                    "value": p.value,
                    "run": p.run_index + 1,
                    "round": p.round_index + 1,
                    "status": p.status,
                    "error": p.error,
                    "slo_met": p.slo_met,
                    "overloaded": p.overloaded,
                    "served_share": p.served_share,
                    "feasible": p.feasible,
                    "wall_s": p.wall_s,
                    "summary": p.summary,
                }
                for p in self.points
            ],
        }


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _span(values: Sequence[Any]) -> str:
    return f"{values[0]}..{values[-1]}" if len(values) > 2 else ", ".join(map(str, values))


def _order(values: Sequence[Any], goal: Goal) -> list[Any]:
    """Candidates in search order: feasibility should go from False to True along it."""
    vals = list(values)
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in vals):
        vals = sorted(vals)
    return vals[::-1] if goal == "largest" else vals


def _probes(lo: int, hi: int, jobs: int) -> list[int]:
    """Up to ``jobs`` indices splitting [lo, hi) evenly (the middle one for one job)."""
    n = hi - lo
    if n <= jobs:
        return list(range(lo, hi))
    return sorted({lo + (k * n) // (jobs + 1) for k in range(1, jobs + 1)})


def trace_share_kept(summary: Mapping[str, Any]) -> float | None:
    """Share of a trace's usable rows a run replayed (None if the workload is not a trace)."""
    rows, kept = summary.get("trace_num_rows"), summary.get("trace_num_requests")
    if not isinstance(rows, int | float) or not isinstance(kept, int | float):
        return None
    usable = rows - (summary.get("trace_num_dropped") or 0)
    return float(kept) / usable if usable > 0 else None


def base_data(base: Scenario | Mapping[str, Any] | str | Path | None) -> tuple[dict[str, Any], str]:
    """A base scenario's data (every default left out, trace paths absolute) and how errors
    name it: what points of a search (`find_capacity`, `kvsim.planning.planner`) override."""
    if isinstance(base, Scenario):
        return scenario_data(base), f"<scenario {base.name}>"
    if isinstance(base, Mapping):
        return scenario_data(validate(dict(base), "<dict>")), "<dict>"
    if base is None:
        return scenario_data(load_scenario(None)), "<embedded default>"
    path = Path(base)
    # Trace paths in a file are relative to its folder: made absolute before the overrides.
    data = resolve_file_paths(read_yaml(path), path.resolve().parent)
    return scenario_data(validate(data, str(path), path.resolve().parent)), str(path)


def base_scenario(
    base: Scenario | Mapping[str, Any] | str | Path | None,
    overrides: Iterable[str] | Mapping[str, Any],
    slo: Sequence[SloBound] | None,
) -> tuple[dict[str, Any], str, Scenario, list[SloBound]]:
    """A search's base: the scenario's data with ``overrides`` applied, where it came from,
    the validated scenario, and the SLO bounds (the scenario's own when ``slo`` is empty),
    their keys checked."""
    data, source = base_data(base)
    if overrides:
        data = scenario_data(validate(apply_overrides(data, overrides), source))
    scenario = validate(data, source)
    bounds = list(slo) if slo else default_slo(scenario)
    check_slo_keys(bounds)
    return data, source, scenario, bounds


def find_capacity(
    base: Scenario | Mapping[str, Any] | str | Path | None,
    knob: str,
    values: Sequence[Any],
    slo: Sequence[SloBound] | None = None,
    *,
    goal: Goal | None = None,
    overrides: Iterable[str] | Mapping[str, Any] = (),
    jobs: int = 1,
    executor: Executor = "local",
    address: str | None = None,
    runner: Runner = summary_only,
    progress: Callable[[CapacityPoint, int], None] | None = None,
    min_served: float = DEFAULT_MIN_SERVED,
) -> CapacityReport:
    """Search ``values`` of the dotted path ``knob`` for the boundary of the SLO (see the module doc).

    ``base`` is a scenario (file, mapping, `Scenario`, or None for the embedded default),
    ``overrides`` apply to every point before the knob, ``slo`` defaults to the scenario's
    p99 targets, ``goal`` to `default_goal`; ``min_served`` is the least share of requests
    a point must finish (rejected or cut-off requests count against it). Every candidate is validated before anything
    runs (`ScenarioError` names the bad value). ``progress(point, num_candidates)`` is
    called after each run. ``runner`` turns a scenario into ``(summary, files)`` as in
    `kvsim.planning.sweep` (the tests pass a fake one).
    """
    if not values:
        raise CapacityError("no candidate values to search")
    if len(values) > MAX_CANDIDATES:
        raise CapacityError(f"{len(values):,} candidate values; at most {MAX_CANDIDATES:,}")
    check_jobs(jobs, executor, address)  # before every candidate is validated
    if not 0 <= min_served <= 1:
        raise CapacityError(f"--min-served must be between 0 and 1, got {min_served}")
    if len({repr(v) for v in values}) != len(values):
        raise CapacityError(f"candidate values repeat: {list(values)}")
    data, source, _, bounds = base_scenario(base, overrides, slo)
    goal = goal or default_goal(knob)
    order = _order(values, goal)
    points: list[Point] = []
    for v in order:
        overrides_v = {knob: v}
        try:
            point_data = apply_overrides(data, overrides_v)
            load_scenario(point_data)  # every reference check, as the run will do
        except ScenarioError as err:
            raise ScenarioError(f"{source} with {knob}={v}", err.problems) from None
        points.append(Point(len(points), point_id(overrides_v), overrides_v, point_data))

    done: dict[int, CapacityPoint] = {}
    lo, hi = 0, len(order)  # the answer's index lies in [lo, hi]; hi = len(order): none feasible
    round_index = 0
    while lo < hi:
        todo = [i for i in _probes(lo, hi, jobs) if i not in done]
        by_id = {points[i].point_id: i for i in todo}
        first_run = len(done)  # a round's points are numbered in probe order, however they finish
        for point, outcome in run_points([points[i] for i in todo], runner, jobs=jobs, executor=executor,
                                         address=address):  # fmt: skip
            i = by_id[point.point_id]
            summary = dict(outcome.summary)
            n_req, n_fin = summary.get("num_requests"), summary.get("num_finished")
            served = (
                n_fin / n_req
                if isinstance(n_req, int | float) and n_req and isinstance(n_fin, int | float)
                else 1.0
            )
            cp = CapacityPoint(
                value=order[i],
                run_index=first_run + todo.index(i),
                round_index=round_index,
                status=outcome.status,
                error=outcome.error,
                summary=summary,
                slo_met=outcome.status == "ok" and all(b.met(summary) for b in bounds),
                overloaded=bool(summary.get("overloaded", False)),
                wall_s=outcome.wall_s,
                served_share=float(served),
                min_served=min_served,
            )
            done[i] = cp
            if progress is not None:
                progress(cp, len(order))
        probed = sorted(i for i in done if lo <= i < hi)
        first_ok = next((i for i in probed if done[i].feasible), None)
        if first_ok is not None:
            hi = first_ok
        below = [i for i in probed if i < hi and not done[i].feasible]
        if below:
            lo = max(below) + 1
        round_index += 1
    answer_index = lo if lo < len(order) else None
    feasible = [done[i].feasible for i in sorted(done)]
    monotone = all(not a or b for a, b in itertools.pairwise(feasible))
    notes = []
    if not monotone:
        notes.append(
            f"feasibility is not monotone in {knob} over the points run: the answer is the boundary "
            "bisection found, check the table"
        )
    share = None
    summaries = [p.summary for p in done.values() if p.status == "ok"]
    if summaries:
        share = trace_share_kept(summaries[0])
        if share is not None and share < 1.0:
            notes.append(
                f"the workload replays {share:.1%} of the trace (max_requests, start_s or end_s): "
                "a shortened trace can hide overload; remove the limit to search on the whole trace"
            )
    return CapacityReport(
        knob=knob,
        values=list(values),
        goal=goal,
        slo=bounds,
        points=sorted(done.values(), key=lambda p: p.run_index),
        answer=order[answer_index] if answer_index is not None else None,
        monotone=monotone,
        trace_share_kept=share,
        notes=notes,
        min_served=min_served,
    )
