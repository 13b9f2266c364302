"""The deployment a planner would buy: the cheapest GPU type, TP degree, replica count and
engine knobs that meet every SLO on a scenario's workload (``kvsim plan``).

    report = plan_deployment("scenarios/azure_conversation.yaml",
                             parse_slo("ttft_p99_s=2,tpot_p99_s=0.1"),
                             PlanSpace(gpus=("h100-sxm", "h200", "b200"), tps=(1, 2, 4, 8)))
    report.cheapest        # the configuration, its replica count, cost, margin, launch command

**The space.** A *configuration* is one choice of GPU, TP degree, ``max_num_seqs``,
``max_num_batched_tokens``, KV dtype, prefix caching, router and mode (aggregated, or
prefill/decode disaggregated at a worker ratio P:D). Its replica group is the scenario's
first one with those knobs set; a *unit* is one replica (aggregated) or P prefill + D
decode replicas, and a deployment is ``k`` units. Every point is a full run of the
scenario's whole workload (trace or synthetic), with its seed.

**Pruned before any run**: configurations the scenario's checks refuse (TP not dividing
the heads, weights or one request of ``max_model_len`` not fitting: the backend's memory
rule, `kvsim.model.kv_sizing`), those where the workload's longest request does not fit one
replica's KV pool (`kvsim.model.memory_fit.check_fit`), those whose one unit exceeds
``--max-gpus`` or ``--budget``, and GPUs without a price.

**The search.** A point is *feasible* as in `kvsim.planning.capacity`: every SLO bound holds, the
run is not overloaded and it served ``min_served`` of its requests; feasibility is assumed
monotone in ``k``. Each configuration keeps the interval ``[lo, hi)`` where its least
feasible ``k`` may lie. The next point is chosen, whenever a worker is free, from the
configuration that could still be cheapest (least ``cost(lo)``), at

- once a feasible ``k`` is known, ``hi - 1`` while the estimate below says the boundary is
  there, else the middle of ``[lo, hi)`` (bisection, `kvsim.planning.capacity`);
- else ``k = ceil(units x offered rate / achieved rate)`` of the last overloaded run (what
  the units it ran served of the load scaled up to all of it);
- else ``lo`` the first time, then twice the last infeasible ``k``.

``search="cheapest"`` (branch and bound) never runs a point costing more than the
cheapest feasible deployment found so far, and drops configurations that cannot beat it
even at ``lo``: the first feasible point found is not necessarily the answer, the last
survivor is. Ties in cost are all searched, and the larger SLO margin wins. Outcomes are
taken in the order their points were handed in (one point more than ``jobs`` queued for
a worker that finishes early), so the same inputs give the same plan; the answer does not
depend on ``jobs``, only which extra points are run does.
``search="front"`` finds every configuration's least feasible ``k``, for the Pareto front
of cost against the SLO metrics.

**Early stop.** Each run carries a `kvsim.results.overload.DivergenceWatch` for the SLO's TTFT and
E2E percentile bounds: a run certain to miss one while its backlog diverges is stopped
and reported as overloaded, never with latency figures. It never stops a run that could
still meet every bound, so it changes no answer, only how long the search takes.

**Cost** is `kvsim.planning.pricing`'s: the deployment's price per hour ranks configurations;
$ per million input / cached-input / output tokens and energy per token are reported.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

import kvsim
from kvsim.backends.launch import GroupLaunch, launch_commands
from kvsim.engine.cluster import RunStopped
from kvsim.engine.simulator import scenario_workload
from kvsim.errors import KvsimError, ScenarioError
from kvsim.limits import (
    DEFAULT_PLAN_RUNS,
    MAX_PLAN_CONFIGS,
    MAX_PLAN_GPUS,
    MAX_PLAN_RUNS,
    MAX_PLAN_VALUES,
)
from kvsim.model.memory_fit import check_fit, served_model
from kvsim.model.presets import UnknownPresetError, resolve_gpu, resolve_model
from kvsim.model.specs import KV_DTYPE_BYTES
from kvsim.planning.capacity import (
    DEFAULT_MIN_SERVED,
    CapacityPoint,
    SloBound,
    _probes,
    base_scenario,
    trace_share_kept,
)
from kvsim.planning.pricing import Cost, PriceTable, Usage, default_prices, price_usage, usage_of
from kvsim.planning.sweep import (
    DEFAULT_RAY_CONNECT_TIMEOUT_S,
    Executor,
    Point,
    PointOutcome,
    PointPool,
    Runner,
    SweepError,
    check_connect_timeout,
    check_jobs,
    point_id,
)
from kvsim.registry import ROUTERS
from kvsim.results.overload import DivergenceWatch, LatencyBound
from kvsim.scenario.loading import apply_overrides, load_scenario
from kvsim.scenario.schema import Scenario

Search = Literal["cheapest", "front"]
#: A mode: "agg" (aggregated), or (P, D) prefill and decode replicas per unit.
Mode = Literal["agg"] | tuple[int, int]
#: The summary key under which a planner run returns its price-free usage (`kvsim.planning.pricing.Usage`).
USAGE_KEY = "plan_usage"


class PlanError(KvsimError):
    """A plan that cannot be searched: a bad option (named, with the rule) or an empty space."""


# --------------------------------------------------------------------------- the space


@dataclass(frozen=True)
class PlanSpace:
    """What the planner may choose. None in a knob list: the backend's default (unset)."""

    gpus: tuple[str, ...] = ("h100-sxm", "h200", "b200")
    tps: tuple[int, ...] = (1, 2, 4, 8)
    max_num_seqs: tuple[int | None, ...] = (None,)
    max_num_batched_tokens: tuple[int | None, ...] = (None,)
    kv_cache_dtypes: tuple[str | None, ...] = (None,)
    prefix_caching: tuple[bool | None, ...] = (None,)
    routers: tuple[str | None, ...] = (None,)
    modes: tuple[Mode, ...] = ("agg",)
    backend: str | None = None  # None: the scenario's
    cost_model: str | None = "roofline"  # None: the scenario's own
    max_gpus: int = 64
    budget_usd_per_hour: float | None = None

    def check(self) -> None:
        """`PlanError` naming the option and the rule for anything out of bounds."""
        lists: dict[str, Sequence[Any]] = {
            "--gpus": self.gpus, "--tp": self.tps, "--max-num-seqs": self.max_num_seqs,
            "--max-num-batched-tokens": self.max_num_batched_tokens, "--kv-cache-dtype": self.kv_cache_dtypes,
            "--prefix-caching": self.prefix_caching, "--router": self.routers, "--pd-ratios / modes": self.modes,
        }  # fmt: skip
        for flag, values in lists.items():
            if not values:
                raise PlanError(f"{flag}: give at least one value")
            if len(values) > MAX_PLAN_VALUES:
                raise PlanError(f"{flag}: {len(values):,} values; at most {MAX_PLAN_VALUES}")
            if len({repr(v) for v in values}) != len(values):
                raise PlanError(f"{flag}: a value is repeated ({', '.join(map(str, values))})")
        for gpu in self.gpus:
            try:
                resolve_gpu(gpu)
            except UnknownPresetError as exc:
                raise PlanError(f"--gpus: {exc}") from None
        for tp in self.tps:
            if not 1 <= tp <= 1024:
                raise PlanError(f"--tp: {tp} must be between 1 and 1,024")
        for flag, knob_values in (("--max-num-seqs", self.max_num_seqs), ("--max-num-batched-tokens", self.max_num_batched_tokens)):  # fmt: skip
            for v in knob_values:
                if v is not None and not 1 <= v <= 2**31 - 1:
                    raise PlanError(f"{flag}: {v} must be between 1 and 2,147,483,647")
        for dtype in self.kv_cache_dtypes:
            if dtype is not None and dtype != "auto" and dtype not in KV_DTYPE_BYTES:
                raise PlanError(
                    f"--kv-cache-dtype: {dtype!r} is not one of auto, {', '.join(KV_DTYPE_BYTES)}"
                )
        _load_routers()
        for router in self.routers:
            if router is not None and router not in ROUTERS.names():
                raise PlanError(f"--router: {ROUTERS.unknown(router)}")
        for mode in self.modes:
            if mode != "agg" and not (
                isinstance(mode, tuple) and len(mode) == 2 and all(1 <= n <= 64 for n in mode)
            ):
                raise PlanError(f"--pd-ratios: {mode!r} must be P:D with 1 <= P, D <= 64")
        if self.cost_model is not None and self.cost_model not in ("roofline", "kernels"):
            raise PlanError(f"--cost-model: {self.cost_model!r} is not roofline or kernels")
        if self.backend is not None and self.backend not in ("vllm", "sglang", "trtllm"):
            raise PlanError(f"--backend: {self.backend!r} is not one of vllm, sglang, trtllm")
        if not 1 <= self.max_gpus <= MAX_PLAN_GPUS:
            raise PlanError(f"--max-gpus: {self.max_gpus} must be between 1 and {MAX_PLAN_GPUS:,}")
        if self.budget_usd_per_hour is not None and not self.budget_usd_per_hour > 0:
            raise PlanError(f"--budget: {self.budget_usd_per_hour} must be > 0 ($ per hour)")

    @property
    def num_configurations(self) -> int:
        return math.prod(
            len(v)
            for v in (self.gpus, self.tps, self.max_num_seqs, self.max_num_batched_tokens,
                      self.kv_cache_dtypes, self.prefix_caching, self.routers, self.modes)
        )  # fmt: skip


def _load_routers() -> None:
    import kvsim.engine.routers  # noqa: F401  (registers the built-in routers)


@dataclass(frozen=True)
class Configuration:
    """One point of the space but the replica count."""

    index: int
    gpu: str
    tp: int
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    kv_cache_dtype: str | None
    prefix_caching: bool | None
    router: str | None
    mode: Mode

    @property
    def replicas_per_unit(self) -> tuple[int, int]:
        """(prefill or aggregated replicas, decode replicas) of one unit."""
        return (1, 0) if self.mode == "agg" else (self.mode[0], self.mode[1])

    @property
    def gpus_per_unit(self) -> int:
        return self.tp * sum(self.replicas_per_unit)

    @property
    def mode_text(self) -> str:
        return "aggregated" if self.mode == "agg" else f"{self.mode[0]}P:{self.mode[1]}D"

    def label(self) -> str:
        knobs = [
            f"{name}={value}"
            for name, value in (
                ("max_num_seqs", self.max_num_seqs),
                ("max_num_batched_tokens", self.max_num_batched_tokens),
                ("kv_cache_dtype", self.kv_cache_dtype),
                (
                    "prefix_caching",
                    None if self.prefix_caching is None else "on" if self.prefix_caching else "off",
                ),
                ("router", self.router),
            )
            if value is not None
        ]
        return " ".join([self.gpu, f"tp{self.tp}", self.mode_text, *knobs])

    def columns(self) -> dict[str, Any]:
        """The configuration as table cells ("default": the backend's or the scenario's)."""

        def cell(v: Any) -> Any:
            return "default" if v is None else v

        return {
            "gpu": self.gpu,
            "tp": self.tp,
            "mode": self.mode_text,
            "max_num_seqs": cell(self.max_num_seqs),
            "max_num_batched_tokens": cell(self.max_num_batched_tokens),
            "kv_cache_dtype": cell(self.kv_cache_dtype),
            "prefix_caching": cell(
                None if self.prefix_caching is None else "on" if self.prefix_caching else "off"
            ),
            "router": cell(self.router),
        }


def configurations(space: PlanSpace) -> list[Configuration]:
    """Every configuration of ``space``, in the order of its lists (`PlanError` beyond
    `MAX_PLAN_CONFIGS`)."""
    space.check()
    if space.num_configurations > MAX_PLAN_CONFIGS:
        raise PlanError(
            f"the space holds {space.num_configurations:,} configurations; at most {MAX_PLAN_CONFIGS:,} "
            "(each needs at least one full run): list fewer values"
        )
    out: list[Configuration] = []
    for gpu, tp, seqs, tokens, kv, cache, router, mode in itertools.product(
        [resolve_gpu(g).name for g in space.gpus], space.tps, space.max_num_seqs, space.max_num_batched_tokens,
        space.kv_cache_dtypes, space.prefix_caching, space.routers, space.modes,
    ):  # fmt: skip
        out.append(Configuration(len(out), gpu, tp, seqs, tokens, kv, cache, router, mode))
    return out


def deployment_data(
    base: Mapping[str, Any], config: Configuration, units: int, space: PlanSpace
) -> dict[str, Any]:
    """The scenario data of ``units`` units of ``config`` (its first replica group as the
    template; the others replaced)."""
    template = dict(base["replicas"][0])
    template.pop("autoscale", None)
    engine = dict(template.get("engine") or {})
    for key, value in (
        ("max_num_seqs", config.max_num_seqs),
        ("max_num_batched_tokens", config.max_num_batched_tokens),
        ("kv_cache_dtype", config.kv_cache_dtype),
        ("enable_prefix_caching", config.prefix_caching),
        ("backend", space.backend),
    ):
        if value is not None:
            engine[key] = value
    template |= {"gpu": config.gpu, "tp": config.tp, "engine": engine}
    if space.cost_model is not None:
        own = template.get("cost_model")
        own_kind = (
            own
            if isinstance(own, str)
            else (own or {}).get("kind", "roofline")
            if isinstance(own, Mapping)
            else None
        )
        if own_kind != space.cost_model:
            template["cost_model"] = {"kind": space.cost_model}
    if config.mode == "agg":
        groups = [template | {"count": units, "role": "both"}]
    else:
        p, d = config.mode
        groups = [
            template | {"name": "prefill", "count": p * units, "role": "prefill"},
            template | {"name": "decode", "count": d * units, "role": "decode"},
        ]
    overrides: dict[str, Any] = {"replicas": groups}
    entry = units * config.replicas_per_unit[0]
    if config.router is not None and entry > 1:  # one entry replica: any router routes alike
        overrides["router.kind"] = config.router
    return apply_overrides(dict(base), overrides)


# --------------------------------------------------------------------------- runs


def plan_runner(
    scenario: Scenario, *, bounds: tuple[tuple[str, float], ...] = ()
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The planner's runner (a `kvsim.planning.sweep.Runner`): one full run with the early stop for
    ``bounds`` (summary key, limit), its summary and price-free usage; a stopped run's
    summary says so (``stopped``, ``overloaded``, the watch's figures) and holds no latency."""
    latency = [b for b in (LatencyBound.from_key(k, v) for k, v in bounds) if b is not None]
    watch = None
    if latency and scenario.sim.max_time_s is None and scenario.workload.kind != "bench_serve":
        watch = DivergenceWatch(latency)
    try:
        result = kvsim.run(scenario, watch=watch)
    except RunStopped as stop:
        assert watch is not None
        return {"stopped": True, "overloaded": True, "overload_reason": stop.reason, **watch.figures}, {}
    summary = dict(result.summary)
    summary["stopped"] = False
    summary[USAGE_KEY] = usage_of(result).to_dict()
    return summary, {}


@dataclass(frozen=True)
class PlanPoint:
    """One run of the search (or one reused: the same deployment asked for again)."""

    config: Configuration
    units: int
    point: CapacityPoint  # status, summary, slo_met, overloaded, feasible
    cost: Cost | None  # None: stopped early or failed (no usage measured)
    usd_per_hour: float  # the deployment's price per hour (known without running)
    num_gpus: int
    point_id: str

    @property
    def stopped(self) -> bool:
        return bool(self.point.summary.get("stopped", False))

    @property
    def feasible(self) -> bool:
        return self.point.feasible

    def margins(self, slo: Sequence[SloBound]) -> dict[str, float]:
        """Each bound's headroom as a share of its limit (negative: missed)."""
        out = {}
        for b in slo:
            v = self.point.summary.get(b.key)
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and b.limit:
                out[b.key] = (b.limit - v) / abs(b.limit) if b.upper else (v - b.limit) / abs(b.limit)
            else:
                out[b.key] = float("nan")
        return out


@dataclass
class _Search:
    """One configuration's state: its least feasible unit count lies in [lo, hi)."""

    config: Configuration
    unit_usd_per_hour: float
    max_units: int
    lo: int = 1
    hi: int = 0  # max_units + 1 until a feasible count is known
    status: str = ""  # "": searching; else why the configuration is done
    last_infeasible: int = 0
    units_needed: float | None = None  # units x offered / achieved rate of the last overloaded run
    busy: bool = False
    runs: dict[int, PlanPoint] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.hi = self.max_units + 1

    def cost(self, units: int) -> float:
        return units * self.unit_usd_per_hour

    @property
    def answer(self) -> PlanPoint | None:
        return self.runs.get(self.hi) if self.hi <= self.max_units else None

    def probe(self, ceiling: float | None) -> int | None:
        """The next unit count to run, under a cost ``ceiling`` ($/h, None: none), or None."""
        top = self.hi - 1
        if ceiling is not None:
            top = min(top, math.floor(ceiling / self.unit_usd_per_hour + 1e-9))
        if self.lo > top:
            return None
        if self.hi <= self.max_units:
            below = self.hi - 1  # just under a feasible count the estimate says is enough
            near = self.units_needed is not None and below >= math.floor(self.units_needed)
            k = below if near else _probes(self.lo, self.hi, 1)[0]
        elif self.units_needed:
            k = math.ceil(self.units_needed - 1e-9)
        elif self.last_infeasible:
            k = 2 * self.last_infeasible
        else:
            k = self.lo
        return min(max(k, self.lo), top)


@dataclass(frozen=True)
class ConfigOutcome:
    """What the search concluded about one configuration."""

    config: Configuration
    status: (
        str  # "answer", "pruned", "none within limits", "cannot beat the cheapest", "failed", "not searched"
    )
    detail: str
    answer: PlanPoint | None
    runs: int


@dataclass(frozen=True)
class WorkloadFacts:
    """What the planner reads off the workload once: size, rate and the longest request."""

    num_requests: int
    offered_requests_per_s: float
    longest_request_tokens: int
    trace_share_kept: float | None = None


def workload_facts(scenario: Scenario, base_dir: Path | None = None) -> WorkloadFacts:
    workload = scenario_workload(scenario, base_dir=base_dir)
    specs = workload.requests
    arrivals = np.sort(np.asarray([s.arrival_s for s in specs if s.parent_id is None], dtype=float))
    window = float(arrivals[-1] - arrivals[0]) if len(arrivals) > 1 else 0.0
    longest = max((s.prompt_tokens + s.output_tokens for s in specs), default=1)
    return WorkloadFacts(
        num_requests=len(specs),
        offered_requests_per_s=(len(arrivals) - 1) / window if window > 0 else float("nan"),
        longest_request_tokens=longest,
        trace_share_kept=trace_share_kept(workload.info.summary()),
    )


# --------------------------------------------------------------------------- the report


@dataclass(frozen=True)
class PlanReport:
    """Everything the search ran and concluded."""

    source: str
    slo: list[SloBound]
    space: PlanSpace
    search: Search
    prices: PriceTable
    workload: WorkloadFacts
    outcomes: list[ConfigOutcome]  # one per configuration, in the space's order
    points: list[PlanPoint]  # in the order they finished
    cheapest: PlanPoint | None
    base: dict[str, Any]  # the base scenario's data (every point overrides it)
    wall_s: float
    min_served: float = DEFAULT_MIN_SERVED
    notes: list[str] = field(default_factory=list)

    @property
    def num_runs(self) -> int:
        return sum(1 for p in self.points if p.point.run_index >= 0)

    @property
    def num_stopped(self) -> int:
        return sum(1 for p in self.points if p.stopped and p.point.run_index >= 0)

    def scenario_data(self, point: PlanPoint) -> dict[str, Any]:
        """The scenario of a point, to run again with ``kvsim run`` (same seed)."""
        return deployment_data(self.base, point.config, point.units, self.space)

    def scenario(self, point: PlanPoint) -> Scenario:
        return load_scenario(self.scenario_data(point))

    def launch(self, point: PlanPoint | None = None) -> list[GroupLaunch]:
        """The engine's launch commands of ``point`` (default: the cheapest)."""
        point = point or self.cheapest
        if point is None:
            return []
        return launch_commands(self.scenario(point))

    def answer_line(self) -> str:
        conditions = " and ".join(str(b) for b in self.slo) + ", not overloaded"
        if self.cheapest is None:
            return f"No configuration searched meets {conditions} within the limits; see the table."
        p = self.cheapest
        margins = ", ".join(
            f"{b.key} {_fmt(p.point.summary.get(b.key))} vs {b.limit:g} ({p.margins(self.slo)[b.key]:+.0%})"
            for b in self.slo
        )
        return (
            f"Cheapest meeting {conditions}: {p.units} x [{p.config.label()}] = {gpus_text(p.num_gpus)}, "
            f"{self.prices.currency} {p.usd_per_hour:,.2f}/hour; margins: {margins}"
        )

    def configurations_table(self) -> pd.DataFrame:
        """One row per configuration: what was concluded, and its cheapest feasible deployment."""
        rows = []
        for o in self.outcomes:
            row: dict[str, Any] = o.config.columns()
            row |= {"status": o.status, "replicas": math.nan, "gpus": math.nan, "usd_per_hour": math.nan}
            if o.answer is not None:
                row |= _point_cells(o.answer, self.slo)
            row |= {"runs": o.runs, "detail": o.detail}
            rows.append(row)
        return pd.DataFrame(rows)

    def runs_table(self) -> pd.DataFrame:
        """One row per point run (or reused), in the order they finished; ``pareto``: on the
        front of cost against the SLO metrics; ``cheapest``: the answer."""
        front = {id(p) for p in self._front()}
        rows = []
        for p in self.points:
            row: dict[str, Any] = {"run": p.point.run_index + 1 if p.point.run_index >= 0 else math.nan}
            row["label"] = f"{p.units} x [{p.config.label()}]"
            row |= p.config.columns() | _point_cells(p, self.slo)
            row |= {
                "status": p.point.status,
                "stopped_early": p.stopped,
                "overloaded": p.point.overloaded,
                "slo_met": p.point.slo_met if not p.stopped else False,
                "feasible": p.feasible,
                "pareto": id(p) in front,
                "cheapest": p is self.cheapest,
                "wall_s": p.point.wall_s,
                "reason": p.point.summary.get("overload_reason", "") if p.stopped else p.point.error.splitlines()[-1] if p.point.error else "",
            }  # fmt: skip
            rows.append(row)
        return pd.DataFrame(rows)

    def _front(self) -> list[PlanPoint]:
        runs = [p for p in self.points if p.point.status == "ok" and not p.stopped and p.point.run_index >= 0]
        keep = [p for p in runs if not any(_dominates(q, p, self.slo) for q in runs if q is not p)]
        return sorted(keep, key=lambda p: (p.usd_per_hour, p.num_gpus))

    def pareto_front(self) -> pd.DataFrame:
        """The runs (not stopped) that no other run beats on cost and every SLO metric at once."""
        rows = [
            {"label": f"{p.units} x [{p.config.label()}]"}
            | p.config.columns()
            | _point_cells(p, self.slo)
            | {"feasible": p.feasible}
            for p in self._front()
        ]
        return pd.DataFrame(rows)

    def to_dict(self) -> dict[str, Any]:
        cheapest = self.cheapest
        return {
            "format": "kvsim-plan/1",
            "source": self.source,
            "slo": [
                {"key": b.key, "limit": b.limit, "bound": "upper" if b.upper else "lower"} for b in self.slo
            ],
            "search": self.search,
            "space": _space_dict(self.space),
            "prices": {
                "label": self.prices.label,
                "currency": self.prices.currency,
                "date": self.prices.date,
                "source": self.prices.source,
            },
            "workload": {
                "num_requests": self.workload.num_requests,
                "offered_requests_per_s": self.workload.offered_requests_per_s,
                "longest_request_tokens": self.workload.longest_request_tokens,
                "trace_share_kept": self.workload.trace_share_kept,
            },
            "message": self.answer_line(),
            "cheapest": None
            if cheapest is None
            else {
                **cheapest.config.columns(),
                "replicas_per_unit": list(cheapest.config.replicas_per_unit),
                "units": cheapest.units,
                "num_gpus": cheapest.num_gpus,
                "usd_per_hour": cheapest.usd_per_hour,
                "margins": cheapest.margins(self.slo),
                "summary": {b.key: cheapest.point.summary.get(b.key) for b in self.slo},
                "cost": cheapest.cost.to_dict() if cheapest.cost else None,
                "launch": [launch.text() for launch in self.launch(cheapest)],
            },
            "num_configurations": len(self.outcomes),
            "num_runs": self.num_runs,
            "num_stopped_early": self.num_stopped,
            "wall_s": self.wall_s,
            "notes": list(self.notes),
            "configurations": self.configurations_table().to_dict(orient="records"),
            "runs": self.runs_table().to_dict(orient="records"),
        }


def gpus_text(n: int) -> str:
    """``1 GPU``, ``4 GPUs``."""
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _fmt(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _space_dict(space: PlanSpace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in space.__dataclass_fields__:
        value = getattr(space, name)
        out[name] = (
            [list(v) if isinstance(v, tuple) else v for v in value] if isinstance(value, tuple) else value
        )
    return out


def _point_cells(p: PlanPoint, slo: Sequence[SloBound]) -> dict[str, Any]:
    """A point's replicas, cost and (unless stopped) its SLO metrics and $ per million tokens."""
    prefill, decode = p.config.replicas_per_unit
    replicas = f"{prefill * p.units}P+{decode * p.units}D" if decode else p.units
    row: dict[str, Any] = {"replicas": replicas, "gpus": p.num_gpus, "usd_per_hour": p.usd_per_hour}
    for b in slo:
        row[b.key] = math.nan if p.stopped else p.point.summary.get(b.key, math.nan)
    c = p.cost
    row |= {
        "usd_per_m_input": c.usd_per_m_input if c else math.nan,
        "usd_per_m_cached_input": c.usd_per_m_cached_input if c else math.nan,
        "usd_per_m_output": c.usd_per_m_output if c else math.nan,
        "energy_j_per_token": c.energy_j_per_token if c else math.nan,
        "energy_j_per_output_token": c.energy_j_per_output_token if c else math.nan,
        "gpu_hours": c.gpu_hours if c else math.nan,
    }
    return row


def _dominates(a: PlanPoint, b: PlanPoint, slo: Sequence[SloBound]) -> bool:
    """``a`` is no worse than ``b`` on cost and every SLO metric, and better on one."""
    pairs = [(a.usd_per_hour, b.usd_per_hour)]
    for bound in slo:
        va, vb = a.point.summary.get(bound.key), b.point.summary.get(bound.key)
        if not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in (va, vb)
        ):
            return False
        pairs.append((float(va), float(vb)) if bound.upper else (-float(va), -float(vb)))  # type: ignore[arg-type]
    return all(x <= y for x, y in pairs) and any(x < y for x, y in pairs)


# --------------------------------------------------------------------------- the search


def _prune(
    data: dict[str, Any], source: str, config: Configuration, space: PlanSpace, prices: PriceTable,
    facts: WorkloadFacts, base_dir: Path | None,
) -> tuple[str, float, int]:  # fmt: skip
    """Why ``config`` cannot be deployed ("" if it can), its price per unit-hour and most units."""
    try:
        unit_price = config.gpus_per_unit * prices.price(config.gpu)
    except KvsimError as exc:
        return str(exc), math.nan, 0
    most = space.max_gpus // config.gpus_per_unit
    if space.budget_usd_per_hour is not None:
        most = min(most, math.floor(space.budget_usd_per_hour / unit_price + 1e-9))
    if most < 1:
        limit = (
            f"--max-gpus {space.max_gpus}"
            if config.gpus_per_unit > space.max_gpus
            else f"--budget {space.budget_usd_per_hour:g}"
        )
        return (
            f"one unit ({gpus_text(config.gpus_per_unit)}, {unit_price:,.2f}/hour) exceeds {limit}",
            unit_price,
            0,
        )
    try:
        scenario = load_scenario(deployment_data(data, config, 1, space), base_dir=base_dir)
    except ScenarioError as err:
        problems = "; ".join(f"{path}: {rule}" for path, rule in err.problems[:2])
        return f"refused by the scenario's checks: {problems}", unit_price, most
    group = scenario.replicas[0]
    model = served_model(resolve_model(scenario.model), group.engine.quantization)
    engine = group.engine
    fit = check_fit(
        model, resolve_gpu(group.gpu), context_tokens=min(facts.longest_request_tokens, model.max_model_len),
        tp=group.tp, kv_cache_dtype=engine.kv_cache_dtype, block_size=engine.block_size,
        gpu_memory_utilization=engine.gpu_memory_utilization, max_num_batched_tokens=engine.max_num_batched_tokens,
        max_num_seqs=engine.max_num_seqs, backend=engine.backend,
        activation_reserve_bytes=None if engine.activation_reserve_gib is None else engine.activation_reserve_gib * 2**30,
    )  # fmt: skip
    if not fit.fits:
        return (
            f"the workload's longest request ({facts.longest_request_tokens:,} tokens) {fit.reason()}",
            unit_price,
            most,
        )
    return "", unit_price, most


def plan_deployment(
    base: Scenario | Mapping[str, Any] | str | Path | None,
    slo: Sequence[SloBound] | None = None,
    space: PlanSpace | None = None,
    *,
    prices: PriceTable | None = None,
    search: Search = "cheapest",
    overrides: Iterable[str] | Mapping[str, Any] = (),
    jobs: int = 1,
    executor: Executor = "local",
    address: str | None = None,
    connect_timeout_s: float = DEFAULT_RAY_CONNECT_TIMEOUT_S,
    runner: Runner | None = None,
    early_stop: bool = True,
    max_runs: int = DEFAULT_PLAN_RUNS,
    min_served: float = DEFAULT_MIN_SERVED,
    progress: Callable[[PlanPoint], None] | None = None,
) -> PlanReport:
    """Search ``space`` for the cheapest deployment of ``base``'s workload meeting ``slo``
    (default: the scenario's p99 targets); see the module doc. ``runner`` replaces the
    simulator (the tests pass a fake one); ``progress(point)`` is called after each run."""
    started = time.perf_counter()
    space = space or PlanSpace()
    if search not in ("cheapest", "front"):
        raise PlanError(f"--search: {search!r} is not cheapest or front")
    try:  # as kvsim sweep and kvsim capacity bound them
        check_jobs(jobs, executor, address)
        check_connect_timeout(connect_timeout_s)
    except SweepError as exc:
        raise PlanError(str(exc)) from None
    if not 1 <= max_runs <= MAX_PLAN_RUNS:
        raise PlanError(f"--max-runs: {max_runs} must be between 1 and {MAX_PLAN_RUNS:,}")
    if not 0 <= min_served <= 1:
        raise PlanError(f"--min-served: {min_served} must be between 0 and 1")
    configs = configurations(space)
    prices = prices or default_prices()
    for gpu in {c.gpu for c in configs}:
        prices.price(gpu)  # a GPU without a price: PriceError (bad input) before anything runs
    data, source, scenario, bounds = base_scenario(base, overrides, slo)
    facts = workload_facts(scenario)
    if runner is None:
        watched = tuple((b.key, b.limit) for b in bounds if b.upper) if early_stop else ()
        runner = functools.partial(plan_runner, bounds=watched)

    searches: list[_Search] = []
    for config in configs:
        why, unit_price, most = _prune(data, source, config, space, prices, facts, None)
        s = _Search(config, unit_price if math.isfinite(unit_price) else 0.0, max(most, 0))
        if why:
            s.status = f"pruned: {why}"
        searches.append(s)
    if all(s.status for s in searches):
        first = [s.status for s in searches[:3]]
        raise PlanError("every configuration is pruned before running; the first: " + "; ".join(first))

    points: list[PlanPoint] = []
    done: dict[str, CapacityPoint] = {}  # point id -> outcome (a deployment asked for again is reused)
    waiting: dict[str, list[tuple[_Search, int]]] = {}
    best: list[PlanPoint] = []
    notes: list[str] = []
    run_count = 0

    def ceiling() -> float | None:
        if search == "front" or not best:
            return None
        return min(p.usd_per_hour for p in best)

    def record(s: _Search, units: int, cp: CapacityPoint, pid: str) -> None:
        usage = cp.summary.get(USAGE_KEY)
        cost = None
        if cp.status == "ok" and isinstance(usage, dict):
            cost = price_usage(Usage.from_dict(usage), prices)
        p = PlanPoint(s.config, units, cp, cost, s.cost(units), units * s.config.gpus_per_unit, pid)
        s.runs[units] = p
        points.append(p)
        if progress is not None:
            progress(p)
        if cp.status != "ok":
            s.status = f"failed: {cp.error.splitlines()[-1] if cp.error else 'error'}"
            return
        if cp.feasible:
            s.hi = min(s.hi, units)
            best.append(p)
        else:
            s.lo = max(s.lo, units + 1)
            s.last_infeasible = max(s.last_infeasible, units)
            offered = cp.summary.get("offered_requests_per_s")
            achieved = cp.summary.get("achieved_requests_per_s")
            numbers = all(
                isinstance(v, int | float) and math.isfinite(v) and v > 0 for v in (offered, achieved)
            )
            if cp.overloaded and numbers:
                s.units_needed = units * float(offered) / float(achieved)  # type: ignore[arg-type]

    def next_probe() -> tuple[_Search, int] | None:
        cap = ceiling()
        chosen: tuple[float, int, int, _Search, int] | None = None
        for s in searches:
            if s.status or s.busy:
                continue
            k = s.probe(cap)
            if k is None:
                continue
            key = (s.cost(s.lo), s.config.gpus_per_unit, s.config.index, s, k)
            if chosen is None or key[:3] < chosen[:3]:
                chosen = key
        return None if chosen is None else (chosen[3], chosen[4])

    # Outcomes are taken in the order points were handed in, so that every choice depends on
    # the outcomes only, never on which run was faster: the same plan for the same inputs.
    # One point more than workers waits in the queue, for a worker that finishes early.
    in_flight = jobs + 1 if jobs > 1 else 1
    with PointPool(
        runner, jobs=jobs, executor=executor, address=address, connect_timeout_s=connect_timeout_s
    ) as pool:
        while True:
            while pool.num_pending < in_flight and run_count < max_runs:
                picked = next_probe()
                if picked is None:
                    break
                s, units = picked
                point_data = deployment_data(data, s.config, units, space)
                pid = point_id({"scenario": point_data})
                if pid in done:  # the same deployment, run for another configuration
                    cp = done[pid]
                    record(s, units, replace(cp, run_index=-1), pid)
                    continue
                s.busy = True
                if pid in waiting:
                    waiting[pid].append((s, units))
                    continue
                waiting[pid] = [(s, units)]
                pool.submit(Point(run_count, pid, s.config.columns() | {"units": units}, point_data))
                run_count += 1
            if not pool.num_pending:
                break
            point, outcome = pool.next_done(oldest=True)
            cp = _capacity_point(point, outcome, bounds, min_served)
            done[point.point_id] = cp
            for i, (s, units) in enumerate(waiting.pop(point.point_id)):
                s.busy = False
                record(s, units, cp if i == 0 else replace(cp, run_index=-1), point.point_id)
    if run_count >= max_runs and any(not s.status and s.probe(ceiling()) for s in searches):
        notes.append(
            f"the search stopped at --max-runs {max_runs}: the cheapest found is not proven the cheapest"
        )
    if facts.trace_share_kept is not None and facts.trace_share_kept < 1.0:
        notes.append(
            f"the workload replays {facts.trace_share_kept:.1%} of the trace (max_requests, start_s or end_s): "
            "a shortened trace can hide overload"
        )
    outcomes = [_outcome(s, ceiling(), facts, search) for s in searches]
    cheapest = None
    if best:
        cheapest = min(
            best, key=lambda p: (p.usd_per_hour, p.num_gpus, -min(p.margins(bounds).values(), default=0.0))
        )
    return PlanReport(
        source=source, slo=bounds, space=space, search=search, prices=prices, workload=facts, outcomes=outcomes,
        points=points, cheapest=cheapest, base=data, wall_s=time.perf_counter() - started, min_served=min_served,
        notes=notes,
    )  # fmt: skip


def _capacity_point(
    point: Point, outcome: PointOutcome, bounds: Sequence[SloBound], min_served: float
) -> CapacityPoint:
    summary = dict(outcome.summary)
    n_req, n_fin = summary.get("num_requests"), summary.get("num_finished")
    served = (
        n_fin / n_req if isinstance(n_req, int | float) and n_req and isinstance(n_fin, int | float) else 1.0
    )
    stopped = bool(summary.get("stopped", False))
    return CapacityPoint(
        value=point.overrides.get("units"),
        run_index=point.index,
        round_index=0,
        status=outcome.status,
        error=outcome.error,
        summary=summary,
        slo_met=outcome.status == "ok" and not stopped and all(b.met(summary) for b in bounds),
        overloaded=bool(summary.get("overloaded", False)),
        wall_s=outcome.wall_s,
        served_share=float(served),
        min_served=min_served,
    )


def _outcome(s: _Search, cap: float | None, facts: WorkloadFacts, search: Search) -> ConfigOutcome:
    runs = len(s.runs)
    answer = s.answer
    if s.status.startswith("pruned"):
        return ConfigOutcome(s.config, "pruned", s.status.removeprefix("pruned: "), None, runs)
    if s.status.startswith("failed"):
        return ConfigOutcome(s.config, "failed", s.status.removeprefix("failed: "), None, runs)
    if answer is not None and s.lo >= s.hi:
        return ConfigOutcome(s.config, "answer", f"{answer.units} unit(s) meet the SLO, {answer.units - 1} do not"
                             if answer.units > 1 else "one unit meets the SLO", answer, runs)  # fmt: skip
    if s.lo > s.max_units:
        return ConfigOutcome(
            s.config, "none within limits", f"not feasible with up to {s.max_units} unit(s)", None, runs
        )
    if cap is not None and s.cost(s.lo) > cap + 1e-9:
        what = f"costs more than the cheapest found even at {s.lo} unit(s)"
        if answer is not None:
            span = f"{s.lo}" if s.lo == answer.units - 1 else f"{s.lo}-{answer.units - 1}"
            what = f"feasible with {answer.units} unit(s); {span} not run: {what}"
        return ConfigOutcome(s.config, "cannot beat the cheapest", what, None, runs)
    return ConfigOutcome(s.config, "not searched", "the search ended first (--max-runs)", answer, runs)
