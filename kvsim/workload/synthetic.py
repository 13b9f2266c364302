"""Synthetic workloads: requests drawn from arrival, length and prefix-structure distributions.

Draw order (fixed, so a seed always gives the same requests): arrivals, prompt lengths,
output lengths; then session structure, shared-prefix lengths and choices, tenants, extra
samples. A workload without sessions, shared pools, tenants or sampling draws exactly
arrivals, prompt lengths and output lengths.

Content ids: 0 is ``shared_prefix_tokens``; 1..K the system prompts; K+1..K+J the few-shot
templates; then one id per user text in request order. With no pools, request i's user text
is i + 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from kvsim.limits import MAX_TOKENS
from kvsim.request import RequestSpec, Segment
from kvsim.workload.beams import BeamFork, beam_forks
from kvsim.workload.config import (
    ArrivalConfig,
    ConstantArrivals,
    DiurnalArrivals,
    EmpiricalLength,
    FixedLength,
    GammaArrivals,
    LengthConfig,
    LognormalLength,
    OnOffArrivals,
    PoissonArrivals,
    RampArrivals,
    SharedPrefixPool,
    SyntheticWorkload,
    UniformLength,
    ZipfLength,
)
from kvsim.workload.traces import trace_lengths

# --------------------------------------------------------------------------- arrivals


def _thinning(
    rate: Callable[[np.ndarray], np.ndarray], rate_max: float, n: int, rng: np.random.Generator
) -> np.ndarray:
    """First ``n`` arrivals of a Poisson process with time-varying rate (Lewis-Shedler thinning)."""
    out: list[np.ndarray] = []
    have, t = 0, 0.0
    batch = max(64, 2 * n)
    while have < n:
        cand = t + np.cumsum(rng.exponential(1.0 / rate_max, size=batch))
        accept = rng.random(batch) * rate_max < rate(cand)
        out.append(cand[accept])
        have += int(accept.sum())
        t = float(cand[-1])
    return np.concatenate(out)[:n]


def _onoff(cfg: OnOffArrivals, n: int, rng: np.random.Generator) -> np.ndarray:
    out: list[np.ndarray] = []
    have, t, on = 0, 0.0, True
    while have < n:
        length = rng.exponential(cfg.mean_on_s if on else cfg.mean_off_s)
        rate = cfg.rate_on_per_s if on else cfg.rate_off_per_s
        k = int(rng.poisson(rate * length)) if rate > 0 else 0
        if k:
            out.append(np.sort(rng.uniform(t, t + length, size=k)))
            have += k
        t += length
        on = not on
    return np.concatenate(out)[:n]


def sample_arrivals(cfg: ArrivalConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """The first ``n`` arrival times (seconds, non-decreasing) of an arrival process.

    Renewal processes (poisson, gamma, constant) start one gap after time 0.
    """
    if isinstance(cfg, PoissonArrivals):
        return np.cumsum(rng.exponential(1.0 / cfg.rate_per_s, size=n))
    if isinstance(cfg, GammaArrivals):
        shape = 1.0 / cfg.cv**2
        return np.cumsum(rng.gamma(shape, 1.0 / (cfg.rate_per_s * shape), size=n))
    if isinstance(cfg, ConstantArrivals):
        return np.arange(1, n + 1, dtype=float) / cfg.rate_per_s
    if isinstance(cfg, OnOffArrivals):
        return _onoff(cfg, n, rng)
    if isinstance(cfg, RampArrivals):
        r0, r1, d = cfg.start_rate_per_s, cfg.end_rate_per_s, cfg.duration_s
        return _thinning(lambda t: r0 + np.clip(t / d, 0.0, 1.0) * (r1 - r0), max(r0, r1), n, rng)
    if isinstance(cfg, DiurnalArrivals):
        m, a, w = cfg.mean_rate_per_s, cfg.amplitude, 2 * np.pi / cfg.period_s
        return _thinning(lambda t: m * (1 + a * np.sin(w * (t + cfg.phase_s))), m * (1 + a), n, rng)
    raise TypeError(f"unsupported arrival process {type(cfg).__name__}")


# --------------------------------------------------------------------------- lengths


def _zipf(cfg: ZipfLength, n: int, rng: np.random.Generator) -> np.ndarray:
    k = np.arange(cfg.min_tokens, cfg.max_tokens + 1, dtype=np.int64)
    cdf = np.cumsum(k.astype(float) ** -cfg.exponent)
    idx = np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right")
    out: np.ndarray = k[np.minimum(idx, len(k) - 1)]
    return out


def sample_lengths(
    cfg: LengthConfig, n: int, rng: np.random.Generator, *, base_dir: Path | None = None
) -> np.ndarray:
    """Draw ``n`` token counts (integers >= 1) from a length distribution."""
    if isinstance(cfg, FixedLength):
        return np.full(n, cfg.tokens, dtype=np.int64)
    if isinstance(cfg, UniformLength):
        return rng.integers(cfg.min_tokens, cfg.max_tokens + 1, size=n, dtype=np.int64)
    if isinstance(cfg, LognormalLength):
        x = np.rint(rng.lognormal(cfg.mu, cfg.sigma, size=n))
        hi = cfg.max_tokens if cfg.max_tokens is not None else MAX_TOKENS  # int64-safe
        return np.clip(x, cfg.min_tokens, hi).astype(np.int64)
    if isinstance(cfg, ZipfLength):
        return _zipf(cfg, n, rng)
    if isinstance(cfg, EmpiricalLength):
        path = Path(cfg.path)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        values = trace_lengths(path, cfg.format, cfg.field, columns=cfg.columns)
        return rng.choice(values, size=n, replace=True).astype(np.int64)
    raise TypeError(f"unsupported length distribution {type(cfg).__name__}")


def zipf_choice(num: int, exponent: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws of 0..num-1 with P(k) proportional to (k + 1)^-exponent."""
    p = np.arange(1, num + 1, dtype=float) ** -exponent
    return rng.choice(num, size=n, p=p / p.sum())


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class _Turn:
    """One prompt sent (before expansion into parallel samples)."""

    session: int
    turn: int
    arrival_s: float
    user_tokens: int
    output_tokens: int
    think_time_s: float


def _pool_segments(
    pool: SharedPrefixPool | None,
    first_id: int,
    n_sessions: int,
    rng: np.random.Generator,
    base_dir: Path | None,
) -> tuple[list[Segment], np.ndarray]:
    """The pool's segments and each session's pick (empty when there is no pool)."""
    if pool is None:
        return [], np.zeros(0, dtype=np.int64)
    lengths = sample_lengths(pool.tokens, pool.num_prompts, rng, base_dir=base_dir)
    segments = [Segment(first_id + k, int(lengths[k])) for k in range(pool.num_prompts)]
    return segments, zipf_choice(pool.num_prompts, pool.zipf_exponent, n_sessions, rng)


def generate_synthetic(
    cfg: SyntheticWorkload, rng: np.random.Generator, *, base_dir: Path | None = None
) -> list[RequestSpec]:
    """Requests of a synthetic workload, sorted by arrival (ties: session, turn, sample).

    With sessions, every turn of a session carries the session's arrival time; follow-up
    turns name their parent and think time, and the engine releases them think time after
    the parent finishes (their ``arrival_s`` is then only a lower bound).
    """
    n = cfg.num_requests
    sess = cfg.sessions
    if sess is None:
        arrivals = sample_arrivals(cfg.arrival, n, rng)
        prompts = sample_lengths(cfg.prompt_tokens, n, rng, base_dir=base_dir)
        outputs = sample_lengths(cfg.output_tokens, n, rng, base_dir=base_dir)
        turns = [_Turn(i, 0, float(arrivals[i]), int(prompts[i]), int(outputs[i]), 0.0) for i in range(n)]
        n_sessions = n
    else:
        per_session = np.maximum(sample_lengths(sess.turns, n, rng, base_dir=base_dir), 1)
        ends = np.cumsum(per_session)
        n_sessions = int(np.searchsorted(ends, n) + 1)
        per_session = per_session[:n_sessions].copy()
        per_session[-1] -= int(ends[n_sessions - 1]) - n  # the last session stops at n turns
        arrivals = sample_arrivals(cfg.arrival, n_sessions, rng)
        first = sample_lengths(cfg.prompt_tokens, n_sessions, rng, base_dir=base_dir)
        follow = sample_lengths(
            sess.followup_tokens or cfg.prompt_tokens, n - n_sessions, rng, base_dir=base_dir
        )
        outputs = sample_lengths(cfg.output_tokens, n, rng, base_dir=base_dir)
        if sess.think_time_dist == "exponential" and sess.think_time_s > 0:
            thinks = rng.exponential(sess.think_time_s, size=n - n_sessions)
        else:
            thinks = np.full(n - n_sessions, sess.think_time_s)
        turns, k, f = [], 0, 0  # k: turns so far, f: follow-up turns so far
        for s in range(n_sessions):
            turns.append(_Turn(s, 0, float(arrivals[s]), int(first[s]), int(outputs[k]), 0.0))
            k += 1
            for t in range(1, int(per_session[s])):
                turns.append(
                    _Turn(s, t, float(arrivals[s]), int(follow[f]), int(outputs[k]), float(thinks[f]))
                )
                k, f = k + 1, f + 1
    next_id = 1
    system, system_pick = _pool_segments(cfg.system_prompts, next_id, n_sessions, rng, base_dir)
    next_id += len(system)
    fewshot, fewshot_pick = _pool_segments(cfg.few_shot, next_id, n_sessions, rng, base_dir)
    next_id += len(fewshot)
    if cfg.tenants:
        w = np.array([t.weight for t in cfg.tenants], dtype=float)
        tenant_pick = rng.choice(len(cfg.tenants), size=n_sessions, p=w / w.sum())
    copies = cfg.parallel_samples * cfg.beam_width
    extra_outputs = (
        sample_lengths(cfg.output_tokens, n * (cfg.parallel_samples - 1), rng, base_dir=base_dir)
        if cfg.parallel_samples > 1
        else np.zeros(0, dtype=np.int64)
    )

    workload_retention = cfg.retention.to_retention()
    tenant_retention = [(t.retention or cfg.retention).to_retention() for t in cfg.tenants]
    # Beam search with shared blocks: each group's genealogy drawn after everything else.
    beams = cfg.beam_width > 1 and cfg.beam_sharing
    beam_kw: dict[str, Any] = {}
    beam_group, forks = 0, cast(tuple[BeamFork, ...], ())
    turns.sort(key=lambda u: (u.arrival_s, u.session, u.turn))
    shared = [Segment(0, cfg.shared_prefix_tokens)] if cfg.shared_prefix_tokens else []
    last_of_session: dict[int, RequestSpec] = {}
    requests: list[RequestSpec] = []
    for i, u in enumerate(turns):
        s = u.session
        tenant, priority, retention = cfg.tenant, 0, workload_retention
        if cfg.tenants:
            share = cfg.tenants[int(tenant_pick[s])]
            tenant, priority = share.name, share.priority
            retention = tenant_retention[int(tenant_pick[s])]
        user = Segment(next_id + i, u.user_tokens)
        parent = last_of_session.get(s)
        if parent is None:
            head = [*shared]
            if system:
                head.append(system[int(system_pick[s])])
            if fewshot:
                head.append(fewshot[int(fewshot_pick[s])])
            prompt = (*head, user)
        else:
            prompt = (*parent.prompt, parent.output_segment, user)
        for c in range(copies):
            sample = c // cfg.beam_width
            out = (
                u.output_tokens
                if sample == 0
                else int(extra_outputs[i * (cfg.parallel_samples - 1) + sample - 1])
            )
            beam_index = c % cfg.beam_width
            if beams:
                if beam_index == 0:
                    beam_group = len(requests)
                    forks = beam_forks(cfg.beam_width, out, cfg.beam_prune_probability, rng)
                beam_kw = {
                    "beam_group": beam_group,
                    "beam_index": beam_index,
                    "beam_forks": forks if beam_index == 0 else (),
                }
            req = RequestSpec(
                request_id=len(requests),
                arrival_s=u.arrival_s,
                prompt=prompt,
                output_tokens=out,
                tenant=tenant,
                priority=priority,
                parent_id=parent.request_id if parent is not None else None,
                think_time_s=u.think_time_s,
                retention=retention,
                **beam_kw,
            )
            requests.append(req)
            if c == 0:
                last_of_session[s] = req
    return requests
