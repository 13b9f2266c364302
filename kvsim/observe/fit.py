"""The cost model's free terms fitted to an observation, checked by simulating the same requests.

    fit = fit_observed(load_result("runs/observed"))       # the scenario's cost model kind
    write_profile(fit_profile(fit, command="..."), "fit.json")
    # then: cost_model: {profile: fit.json}

A client does not see the server's engine steps, but it sees their ends: every running
request receives a token when a step ends, all of them within a few milliseconds. From the
tokens of an observation (`server_steps`):

    every token of every request, by arrival time
      ─> steps: runs of arrivals closer than the tolerance (a quarter of the median gap
         between two tokens of one request), one token per request each; tokens of one
         request closer than the tolerance are left out (a server that fell behind streams
         several steps' tokens at once, late: their arrival dates nothing)
      ─> a step's duration: the median gap, over the requests that got a token from it and
         from the step before, between their two tokens (only while something decoded
         throughout: an idle server has no such request)
      ─> its batch: one decode per such token (context: the prompt plus the tokens so far),
         and the prefill chunks, rebuilt from the scheduler's knobs: each request's prompt
         beyond its cached tokens (usage.prompt_tokens_details.cached_tokens) ends in the step
         that made its first token; it began in the latest step from which the token budgets
         the decodes leave (max_num_batched_tokens; the long-prefill threshold) hold it, not
         before it was sent, and is cut into chunks filled forward from there, the remainder
         last, as the scheduler cuts it (earlier first tokens served first)
      ─> (batch, duration): a ``phase=step`` point (`kvsim.cost.fit`)

and the free terms are fitted to the points as `kvsim calibrate --fit-measurements` fits a
server's step log:

    roofline   compute_efficiency, memory_efficiency, kv_memory_efficiency and the fixed
               time per step (`kvsim.cost.fit.fit_roofline`, which holds
               per_layer_overhead_s and gives per_iteration_overhead_s the rest), the form
               (``combine``: max or sum) as given; a soft-L1 loss (``robust_scale``) so that
               steps stretched by other work on the server's machine do not bend the fit,
               then every time scaled so that their total is the observed one
               (``match_total``: latencies are sums of steps, they need the mean)
    kernels    per_iteration_overhead_s and elementwise_memory_efficiency: a step costs
               K + E / efficiency + overhead, K the measured kernels' time and E the
               elementwise bytes' at full bandwidth (read from the model itself)

Then the observation's scenario is simulated with the fitted terms and with the ones it
started from, and both are compared with the observation (`kvsim.observe.compare`): the
fit's residuals where they matter, in TTFT, TPOT, E2E and throughput.

What breaks the reading of steps: a server streaming several tokens per event
(``--stream-interval``), speculative decoding (several tokens per step), preemption (a
recomputed prompt is invisible). One server: the scenario must describe one replica.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

import kvsim
from kvsim.cost.base import CostModel
from kvsim.cost.config import KernelCostConfig, ProfileCostConfig, RooflineCostConfig
from kvsim.cost.factory import group_cost_model, kernels_config_from_profile, roofline_config_from_profile
from kvsim.cost.fit import Point, fit_roofline, levenberg_marquardt
from kvsim.cost.profile import PROFILE_FORMAT, PROFILE_VERSION, load_profile, model_shape
from kvsim.errors import KvsimError
from kvsim.limits import MAX_STEP_TIME_S
from kvsim.observe.compare import Comparison, compare_results, measured
from kvsim.results.io import json_safe
from kvsim.results.result import Result
from kvsim.scenario.resolved import GroupPlan, Plan, resolve_plan
from kvsim.scenario.schema import EngineConfig, Scenario

#: The free terms of each kind.
FREE_TERMS: dict[str, tuple[str, ...]] = {
    "roofline": (
        "compute_efficiency",
        "memory_efficiency",
        "kv_memory_efficiency",
        "per_iteration_overhead_s",
    ),
    "kernels": ("per_iteration_overhead_s", "elementwise_memory_efficiency"),
}
#: Fewest step points a fit needs.
MIN_POINTS = 8

CostConfig = RooflineCostConfig | KernelCostConfig


class FitError(KvsimError):
    """An observation that cannot be fitted (nothing finished, several replicas, ...)."""


@dataclass(frozen=True)
class ObservedFit:
    """A fit (see the module docstring)."""

    kind: str
    config: CostConfig
    initial: CostConfig
    fitted: tuple[str, ...]
    num_points: int
    #: How well the tokens date the server's steps: the share of tokens that came in bursts
    #: (a frontend that fell behind) and the steps read over the steps the server counted.
    untimed_share: float
    steps_read_share: float
    #: Median |predicted / observed - 1| of the step points, with the fitted terms.
    step_error: float
    before: Comparison
    after: Comparison
    observed: Result


def initial_config(observed: Result, kind: str | None, base_dir: Path | None = None) -> CostConfig:
    """Where the fit starts: the observation's scenario's cost model (group 0) when it is of
    ``kind`` (a roofline-fit or kernels-fit profile counts as its kind), else the defaults."""
    given = observed.scenario.replicas[0].cost_model
    if isinstance(given, ProfileCostConfig):
        profile = load_profile(given.profile, base_dir)
        if profile.kind == "roofline-fit":
            given = roofline_config_from_profile(profile, given.per_iteration_overhead_s)
        elif profile.kind == "kernels-fit":
            given = kernels_config_from_profile(profile, given.per_iteration_overhead_s)
    kind = kind or ("kernels" if isinstance(given, KernelCostConfig) else "roofline")
    if kind == "roofline":
        return given if isinstance(given, RooflineCostConfig) else RooflineCostConfig()
    if kind == "kernels":
        return given if isinstance(given, KernelCostConfig) else KernelCostConfig()
    raise FitError(f"--cost-model: the fit knows roofline and kernels, not {kind!r}")


# --------------------------------------------------------------------------- simulating


def _one_server(scenario: Scenario) -> tuple[Plan, GroupPlan]:
    plan = resolve_plan(scenario)
    replicas = sum(len(g.replica_names) for g in plan.groups)
    if replicas != 1 or any(g.config.autoscale is not None for g in plan.groups):
        raise FitError(
            f"calibrate --from-observed fits one server: the observation's scenario describes {replicas} "
            "replicas (set replicas.0.count=1)"
        )
    return plan, plan.groups[0]


def simulate(observed: Result, config: CostConfig, base_dir: Path | None = None) -> Result:
    """The observation's scenario simulated with the cost model ``config``."""
    return kvsim.run(
        observed.scenario,
        overrides={"replicas.0.cost_model": config.model_dump()},
        base_dir=base_dir,
        force=True,
    )


# --------------------------------------------------------------------------- aligning


def token_times(result: Result) -> dict[int, np.ndarray]:
    """Each request's token arrival times: an observation's ``token_times_s``; for a
    simulation, the ends of the steps from its first token on (one token each)."""
    req = result.requests[result.requests["output_tokens"].to_numpy(dtype=np.int64) > 0]
    if "token_times_s" in req:
        return {
            int(r): np.asarray(t, dtype=float)
            for r, t in zip(req["request_id"], req["token_times_s"], strict=True)
        }
    it = result.iterations
    ends = np.sort((it["start_s"] + it["duration_s"]).to_numpy(dtype=float))
    out = {}
    for rid, first, n in zip(req["request_id"], req["first_token_s"], req["output_tokens"], strict=True):
        lo = int(np.searchsorted(ends, first - 1e-12 * max(1.0, abs(first))))
        out[int(rid)] = ends[lo : lo + int(n)]
    return out


@dataclass
class _Step:
    """One server step read from the tokens: when it ended, who got which token from it."""

    end_s: float
    tokens: dict[int, int]  # request id -> index of the token it got from this step
    duration_s: float = math.nan
    budget_left: int = 0
    chunks: list[tuple[int, int]] = field(default_factory=list)


def _tolerance(times: dict[int, np.ndarray]) -> float:
    """A quarter of the median gap between two tokens of one request (about a decode step)."""
    gaps = np.concatenate([np.diff(ts) for ts in times.values() if len(ts) > 1] or [np.zeros(0)])
    gaps = gaps[gaps > 0]
    return 0.25 * float(np.median(gaps)) if len(gaps) else 0.0


def _timed(ts: np.ndarray, tolerance: float) -> np.ndarray:
    """Which tokens date their step: not part of a burst, tokens of one request closer than the
    tolerance (a server that fell behind streams the tokens of several steps at once, late)."""
    ok = np.ones(len(ts), dtype=bool)
    if len(ts) > 1:
        burst = np.diff(ts) < tolerance
        ok[1:] &= ~burst
        ok[:-1] &= ~burst
    return ok


def untimed_share(times: dict[int, np.ndarray]) -> float:
    """The share of tokens that arrived in bursts, whose times date no step (`_timed`)."""
    tolerance = _tolerance(times)
    total = sum(len(ts) for ts in times.values())
    timed = sum(int(_timed(ts, tolerance).sum()) for ts in times.values())
    return 1.0 - timed / total if total else math.nan


#: Beyond these the fit warns that the tokens do not date the server's steps well.
MAX_UNTIMED_SHARE = 0.1
MIN_STEPS_READ_SHARE = 0.8


def warnings_of(fit: ObservedFit) -> list[str]:
    """What the user should know about how well the observation dated the server's steps."""
    out = []
    if fit.untimed_share > MAX_UNTIMED_SHARE:
        out.append(
            f"{fit.untimed_share:.0%} of the tokens arrived in bursts (the server streamed several steps' tokens "
            "at once, late: its frontend fell behind, e.g. starved of CPU); the steps read from the others are "
            "fewer and noisier"
        )
    if fit.steps_read_share < MIN_STEPS_READ_SHARE:
        out.append(
            f"the tokens dated {fit.steps_read_share:.0%} of the steps the server counted "
            "(vllm:iteration_tokens_total); the fit rests on the others"
        )
    if fit.step_error > 0.25:
        out.append(
            f"the fitted step times miss the steps read by {fit.step_error:.0%} (median): the server's steps "
            "varied more than the cost model explains (other work on its machine?)"
        )
    return out


def _group_tokens(times: dict[int, np.ndarray]) -> list[_Step]:
    """Timed token arrivals cut into steps (see the module docstring)."""
    tolerance = _tolerance(times)
    events = sorted(
        (float(ts[k]), rid, int(k))
        for rid, ts in times.items()
        for k in np.flatnonzero(_timed(ts, tolerance))
    )
    steps: list[_Step] = []
    last = -math.inf
    for t, rid, k in events:
        if not steps or t - last > tolerance or rid in steps[-1].tokens:
            steps.append(_Step(end_s=t, tokens={}))
        steps[-1].tokens[rid] = k
        last = t
    return steps


def server_steps(observed: Result, engine: EngineConfig, tp: int = 1) -> list[Point]:
    """The server's steps read from an observation's tokens (see the module docstring)."""
    times = token_times(observed)
    steps = _group_tokens(times)
    req = observed.requests.set_index("request_id")
    prompt = {rid: int(req.at[rid, "prompt_tokens"]) for rid in times}
    hits = pd.to_numeric(req["prefix_cache_hits_tokens"], errors="coerce").fillna(0)
    cached = {rid: max(min(int(hits.at[rid]), prompt[rid] - 1), 0) for rid in times}
    sent = {rid: float(req.at[rid, "arrival_s"]) for rid in times}
    where: dict[int, dict[int, int]] = {}  # request -> token index -> step index
    for i, step in enumerate(steps):
        for rid, k in step.tokens.items():
            where.setdefault(rid, {})[k] = i
        gaps = [
            float(times[rid][k] - times[rid][k - 1])
            for rid, k in step.tokens.items()
            if k > 0 and where[rid].get(k - 1) == i - 1
        ]
        step.duration_s = float(np.median(gaps)) if gaps else math.nan
        num_decodes = sum(1 for k in step.tokens.values() if k > 0)
        step.budget_left = max(engine.max_num_batched_tokens - num_decodes, 0)
    _place_prefills(steps, where, prompt, cached, sent, engine)
    points = []
    for step in steps:
        if not step.duration_s > 0:
            continue
        decodes = [(rid, k) for rid, k in step.tokens.items() if k > 0]
        context = sum(prompt[rid] + k for rid, k in decodes)
        points.append(Point.step(step.chunks, len(decodes), context, step.duration_s, tp))
    return points


def _place_prefills(
    steps: list[_Step],
    where: dict[int, dict[int, int]],
    prompt: dict[int, int],
    cached: dict[int, int],
    sent: dict[int, float],
    engine: EngineConfig,
) -> None:
    """Cut each prompt into chunks over the steps up to its first token (module docstring).

    The scheduler fills a chunk to the budget the decodes leave and the remainder comes
    last: going back from the step of the first token, the fewest steps whose budgets hold
    the prompt (not before it was sent), then chunks filled forward from the first of them.
    """
    threshold = engine.long_prefill_token_threshold or math.inf
    for first_step, rid in sorted((w[0], rid) for rid, w in where.items() if 0 in w):
        remaining = prompt[rid] - cached[rid]
        if remaining <= 0:
            continue
        if not engine.enable_chunked_prefill:
            steps[first_step].chunks.append((remaining, cached[rid]))
            steps[first_step].budget_left -= remaining
            continue

        def room(i: int) -> int:
            return int(max(min(steps[i].budget_left, threshold), 0))

        start, held = first_step, room(first_step)
        while held < remaining and start > 0 and steps[start - 1].end_s > sent[rid]:
            start -= 1
            held += room(start)
        done = 0
        for i in range(start, first_step + 1):
            take = remaining - done if i == first_step else min(room(i), remaining - done)
            if take <= 0:
                continue
            steps[i].chunks.append((take, cached[rid] + done))
            steps[i].budget_left -= take
            done += take


# --------------------------------------------------------------------------- fitting


def _fit_kernels(
    points: list[Point],
    config: KernelCostConfig,
    build: Callable[[CostConfig], CostModel],
    robust_scale: float | None,
    match_total: bool,
) -> KernelCostConfig:
    """per_iteration_overhead_s and elementwise_memory_efficiency (see the module docstring).

    The constants a config leaves None (the backend's values, `kvsim.cost.kernels.FITTED`)
    are written out as the model used them, so the profile keeps its meaning when they change.
    """
    used = getattr(build(config), "overheads", None)
    if used is not None:
        config = config.model_copy(
            update={
                "per_layer_overhead_s": used.per_layer_overhead_s,
                "elementwise_kernel_s": used.elementwise_kernel_s,
            }
        )
    start_overhead_s = used.per_iteration_overhead_s if used is not None else 0.0
    if config.per_iteration_overhead_s is not None:
        start_overhead_s = config.per_iteration_overhead_s
    bare = {"per_iteration_overhead_s": 0.0}
    probe = build(config.model_copy(update={**bare, "elementwise_memory_efficiency": 1.0}))
    half = build(config.model_copy(update={**bare, "elementwise_memory_efficiency": 0.5}))
    t1 = np.array([probe.step_time_s(p.batch()) for p in points])
    elementwise = np.array([half.step_time_s(p.batch()) for p in points]) - t1  # E / 0.5 - E / 1
    kernels = t1 - elementwise
    measured_s = np.array([p.time_s for p in points], dtype=float)
    log_t = np.log(measured_s)
    theta0 = np.log([max(start_overhead_s, 1e-6), config.elementwise_memory_efficiency])
    lower, upper = np.log([1e-7, 1e-3]), np.log([MAX_STEP_TIME_S, 1.0])
    weights = np.ones(len(points))

    def predict(theta: np.ndarray) -> np.ndarray:
        overhead, eff = np.exp(theta)
        times: np.ndarray = kernels + elementwise / eff + overhead
        return times

    def residual(theta: np.ndarray) -> np.ndarray:
        return np.concatenate([weights * (np.log(predict(theta)) - log_t), 1e-4 * (theta - theta0)])

    free = np.ones(2, dtype=bool)
    theta, _ = levenberg_marquardt(residual, theta0, free, lower=lower, upper=upper)
    for _ in range(20 if robust_scale is not None else 0):
        assert robust_scale is not None
        r = np.log(predict(theta)) - log_t
        weights[:] = (1.0 + (r / robust_scale) ** 2) ** -0.25
        new, _ = levenberg_marquardt(residual, theta, free, lower=lower, upper=upper)
        done = np.max(np.abs(new - theta)) < 1e-6
        theta = new
        if done:
            break
    overhead, eff = (float(v) for v in np.exp(theta))
    if match_total:  # the fixed time takes up what the total lacks (the tables do not scale)
        overhead = max(overhead + (measured_s.sum() - predict(theta).sum()) / len(points), 0.0)
    return config.model_copy(
        update={"per_iteration_overhead_s": overhead, "elementwise_memory_efficiency": eff}
    )


def _median_error(points: list[Point], cost: CostModel) -> float:
    predicted = np.array([cost.step_time_s(p.batch()) for p in points])
    measured_s = np.array([p.time_s for p in points], dtype=float)
    return float(np.median(np.abs(predicted / measured_s - 1.0))) if len(points) else math.nan


def fit_observed(
    observed: Result,
    *,
    kind: Literal["roofline", "kernels"] | None = None,
    combine: Literal["max", "sum"] | None = None,
    per_layer_overhead_s: float | None = None,
    robust_scale: float | None = 0.05,
    match_total: bool = True,
    base_dir: Path | None = None,
) -> ObservedFit:
    """Fit the cost model's free terms to ``observed`` (see the module docstring).

    ``combine`` and ``per_layer_overhead_s`` set the roofline's form and the per-layer term
    held (default: the starting config's); ``robust_scale`` None fits squares.
    """
    base = initial_config(observed, kind, base_dir)
    kind_name = "kernels" if isinstance(base, KernelCostConfig) else "roofline"
    update: dict[str, Any] = {}
    if combine is not None:
        if kind_name != "roofline":
            raise FitError("--combine applies to the roofline")
        update["combine"] = combine
    if per_layer_overhead_s is not None:
        update["per_layer_overhead_s"] = per_layer_overhead_s
    base = base.model_copy(update=update)
    if not measured(observed.requests)["finished"].to_numpy(dtype=bool).any():
        raise FitError("the observation has no finished request to fit")
    plan, group = _one_server(observed.scenario)
    points = server_steps(observed, group.engine, group.tp)
    if len(points) < MIN_POINTS:
        raise FitError(
            f"only {len(points)} of the server's steps could be read from its tokens (at least {MIN_POINTS}): "
            "too few requests decoding at once?"
        )
    config: CostConfig
    if isinstance(base, RooflineCostConfig):
        config = fit_roofline(
            points,
            model=plan.model_of(group),
            gpu=group.gpu,
            per_layer_overhead_s=base.per_layer_overhead_s,
            kv_cache_dtype=group.engine.kv_cache_dtype,
            initial=base,
            combine=base.combine,
            robust_scale=robust_scale,
            match_total=match_total,
        ).config
    else:
        config = _fit_kernels(
            points, base, lambda c: group_cost_model(c, plan, group, base_dir), robust_scale, match_total
        )
    before = simulate(observed, base, base_dir)
    after = simulate(observed, config, base_dir)
    return ObservedFit(
        kind=kind_name,
        config=config,
        initial=base,
        fitted=FREE_TERMS[kind_name],
        num_points=len(points),
        untimed_share=untimed_share(token_times(observed)),
        steps_read_share=len(_group_tokens(token_times(observed)))
        / float(observed.summary.get("num_iterations") or math.nan),
        step_error=_median_error(points, group_cost_model(config, plan, group, base_dir)),
        before=compare_results(observed, before),
        after=compare_results(observed, after),
        observed=observed,
    )


def steps_priced(
    observed: Result, scenario: Scenario, base_dir: Path | None = None
) -> dict[str, float] | None:
    """The server's steps read from ``observed``'s tokens, priced by ``scenario``'s cost model:
    predicted / observed, the median step and the total, decode-only steps and steps with a
    prefill apart. A median near 1 with a total below it says the cost model prices the
    typical step and the server lost time beyond its steps (stretched steps: other work on its
    machine); a median away from 1 says the cost model is off. None when the observation holds
    no token times or the scenario is not one server."""
    if "token_times_s" not in observed.requests:
        return None
    try:
        plan, group = _one_server(scenario)
    except FitError:
        return None
    points = server_steps(observed, group.engine, group.tp)
    if len(points) < MIN_POINTS:
        return None
    cost = group_cost_model(group.config.cost_model, plan, group, base_dir)
    predicted = np.array([cost.step_time_s(p.batch()) for p in points])
    measured_s = np.array([p.time_s for p in points], dtype=float)
    prefill = np.array([p.has_prefill for p in points])
    out: dict[str, float] = {
        "num_steps_read": float(len(points)),
        "num_server_steps": float(observed.summary.get("num_iterations", math.nan)),
        "untimed_share": untimed_share(token_times(observed)),
        "total_ratio": float(predicted.sum() / measured_s.sum()),
    }
    for name, sel in (("decode", ~prefill), ("prefill", prefill)):
        ratio = predicted[sel] / measured_s[sel]
        out[f"{name}_median_ratio"] = float(np.median(ratio)) if sel.any() else math.nan
        out[f"{name}_total_ratio"] = (
            float(predicted[sel].sum() / measured_s[sel].sum()) if sel.any() else math.nan
        )
    return out


def format_steps_priced(steps: dict[str, float]) -> str:
    """One paragraph: what `steps_priced` found."""
    return (
        f"the server's steps read from its tokens: {steps['num_steps_read']:,.0f} (it counted "
        f"{steps['num_server_steps']:,.0f}; {steps['untimed_share']:.0%} of the tokens came in bursts); kvsim prices "
        f"the median decode step at {steps['decode_median_ratio']:.2f} and the median step with a prefill at "
        f"{steps['prefill_median_ratio']:.2f} of what it took, all of them at {steps['total_ratio']:.2f} of their "
        "total (below the medians: the server lost time beyond the steps kvsim models, e.g. to other work on "
        "its machine)"
    )


# --------------------------------------------------------------------------- the profile


def _errors(cmp: Comparison) -> dict[str, Any]:
    data = cmp.as_dict()
    out = {"metrics": {row["metric"]: row["error"] for row in data["metrics"]}, **data["requests"]}
    out.update(data["series_errors"])
    result: dict[str, Any] = json_safe(out)
    return result


def fit_profile(fit: ObservedFit, *, command: str = "", source: str = "") -> dict[str, Any]:
    """The fit as a profile (roofline-fit or kernels-fit, `kvsim.cost.profile`)."""
    scenario = fit.observed.scenario
    plan = resolve_plan(scenario)
    group = plan.groups[0]
    model = plan.model_of(group)
    summary = fit.observed.summary
    params = fit.config.model_dump(exclude={"kind"})
    data: dict[str, Any] = {
        "format": PROFILE_FORMAT,
        "version": PROFILE_VERSION,
        "kind": f"{fit.kind}-fit",
        "created": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "model": model_shape(model),
        "dtype": model.weight_dtype,
        "gpu": group.gpu.name,
        "tps": sorted({g.tp for g in plan.groups}),
        fit.kind: params,
        "fit": {
            "from_observed": source,
            "observed_url": summary.get("observed_url"),
            "observed_model": summary.get("observed_model"),
            "observed_server_version": summary.get("observed_server_version"),
            "scenario": scenario.name,
            "fitted": list(fit.fitted),
            "num_points": fit.num_points,
            "median_abs_rel_error_steps": json_safe(fit.step_error),
            "untimed_token_share": json_safe(fit.untimed_share),
            "steps_read_share": json_safe(fit.steps_read_share),
            "warnings": warnings_of(fit),
            "errors_before": _errors(fit.before),
            "errors_after": _errors(fit.after),
            # What readers of a roofline-fit profile's fit section expect.
            "median_abs_rel_error_prefill": None,
            "median_abs_rel_error_decode": None,
        },
    }
    if fit.kind == "roofline":
        data["points"] = []
        data["fit"]["fixed_s"] = (
            model.num_layers * params["per_layer_overhead_s"] + params["per_iteration_overhead_s"]
        )
    return data


def steps_frame(points: list[Point]) -> pd.DataFrame:
    """The step points as a table (for inspection): composition and observed duration."""
    return pd.DataFrame([p.csv_row() for p in points])


__all__ = [
    "FREE_TERMS",
    "FitError",
    "ObservedFit",
    "fit_observed",
    "fit_profile",
    "format_steps_priced",
    "initial_config",
    "server_steps",
    "simulate",
    "steps_frame",
    "steps_priced",
    "token_times",
    "untimed_share",
    "warnings_of",
]
