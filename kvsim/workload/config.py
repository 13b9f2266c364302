"""Scenario configuration of the workload: arrivals, lengths, prefix structure and trace replay.

Every choice is a tagged union on ``kind``:

    workload        synthetic | trace | mixture | bench_serve | a kind registered in
                    kvsim.registry.WORKLOAD_KINDS
    arrival         poisson | gamma | constant | onoff | ramp | diurnal
    *_tokens        fixed | uniform | lognormal | zipf | empirical

A synthetic prompt is built from layers of segments, each optional:

    [shared_prefix][system prompt k][few-shot template j][user text]
     one for all    K, Zipf-popular   J, Zipf-popular      unique

Multi-turn sessions re-send the whole conversation each turn:

    turn 1: [sys][user-1]
    turn 2: [sys][user-1][output-1][user-2]       released think time after turn 1 ends
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import (
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from kvsim.frozen import FrozenModel, Name
from kvsim.limits import (
    MAX_BENCH_LEN,
    MAX_BURSTINESS,
    MAX_CV,
    MAX_EXPONENT,
    MAX_NUM_REQUESTS,
    MAX_PRIORITY,
    MAX_RAMP_RATE_RATIO,
    MAX_RATE_PER_S,
    MAX_SAMPLES,
    MAX_SHARED_PROMPTS,
    MAX_TENANTS,
    MAX_TIME_S,
    MAX_TIME_SCALE,
    MAX_TOKENS,
    MAX_WEIGHT,
    MAX_YAML_SCALAR_CHARS,
    MIN_BURSTINESS,
    MIN_CV,
    MIN_ONOFF_ARRIVALS_PER_CYCLE,
    MIN_PERIOD_S,
    MIN_RATE_PER_S,
    MIN_TIME_SCALE,
)
from kvsim.registry import REGISTERED_TAG, WORKLOAD_KINDS, RegisteredKinds, kind_tag
from kvsim.request import DEFAULT_RETENTION, Retention


def _kind_or(default: str) -> Callable[[Any], str]:
    """Discriminator that reads ``kind`` and falls back to ``default`` when it is omitted."""

    def kind(value: Any) -> str:
        if isinstance(value, dict):
            return str(value.get("kind", default))
        return str(getattr(value, "kind", default))

    return kind


# --------------------------------------------------------------------------- arrivals


class PoissonArrivals(FrozenModel):
    """Exponential inter-arrival times at a constant rate."""

    kind: Literal["poisson"] = Field(default="poisson", description="Selects this variant (poisson).")
    rate_per_s: float = Field(
        ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S, description="Mean arrival rate, requests per second."
    )


class GammaArrivals(FrozenModel):
    """Gamma inter-arrival times: a given mean rate and coefficient of variation (CV > 1: bursty)."""

    kind: Literal["gamma"] = Field(default="gamma", description="Selects this variant (gamma).")
    rate_per_s: float = Field(
        ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S, description="Mean arrival rate, requests per second."
    )
    cv: float = Field(
        ge=MIN_CV, le=MAX_CV, description="Coefficient of variation of inter-arrival times (1: Poisson)."
    )


class ConstantArrivals(FrozenModel):
    """Evenly spaced arrivals (a deterministic process, for queueing checks)."""

    kind: Literal["constant"] = Field(default="constant", description="Selects this variant (constant).")
    rate_per_s: float = Field(
        ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S, description="Arrivals per second; the gap is 1 / rate."
    )


class OnOffArrivals(FrozenModel):
    """Bursts: Poisson at ``rate_on_per_s`` during ON periods, ``rate_off_per_s`` during OFF periods.

    Period lengths are exponential with the given means; the process starts ON.
    """

    kind: Literal["onoff"] = Field(default="onoff", description="Selects this variant (onoff).")
    rate_on_per_s: float = Field(
        ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S, description="Arrival rate during bursts, requests per second."
    )
    rate_off_per_s: float = Field(
        default=0.0, ge=0, le=MAX_RATE_PER_S, description="Arrival rate between bursts."
    )
    mean_on_s: float = Field(gt=0, le=MAX_TIME_S, description="Mean length of a burst, seconds.")
    mean_off_s: float = Field(gt=0, le=MAX_TIME_S, description="Mean length of a quiet period, seconds.")

    @model_validator(mode="after")
    def _check(self) -> OnOffArrivals:
        per_cycle = self.rate_on_per_s * self.mean_on_s + self.rate_off_per_s * self.mean_off_s
        if per_cycle < MIN_ONOFF_ARRIVALS_PER_CYCLE:
            raise ValueError(
                f"rate_on_per_s x mean_on_s + rate_off_per_s x mean_off_s (arrivals per ON+OFF cycle) "
                f"must be >= {MIN_ONOFF_ARRIVALS_PER_CYCLE}, got {per_cycle:.3g}"
            )
        return self

    @property
    def mean_rate_per_s(self) -> float:
        on, off = self.mean_on_s, self.mean_off_s
        return (self.rate_on_per_s * on + self.rate_off_per_s * off) / (on + off)


class RampArrivals(FrozenModel):
    """Poisson arrivals whose rate changes linearly, then stays at the end rate."""

    kind: Literal["ramp"] = Field(default="ramp", description="Selects this variant (ramp).")
    start_rate_per_s: float = Field(
        ge=0, le=MAX_RATE_PER_S, description="Rate at time 0, requests per second."
    )
    end_rate_per_s: float = Field(
        ge=0, le=MAX_RATE_PER_S, description="Rate from ``duration_s`` on, requests per second."
    )
    duration_s: float = Field(gt=0, le=MAX_TIME_S, description="Length of the ramp, seconds.")

    @model_validator(mode="after")
    def _check(self) -> RampArrivals:
        if self.end_rate_per_s <= 0:
            raise ValueError("end_rate_per_s must be > 0 (otherwise arrivals stop forever)")
        if self.end_rate_per_s < MIN_RATE_PER_S:
            raise ValueError(f"end_rate_per_s must be >= {MIN_RATE_PER_S}")
        if self.start_rate_per_s > MAX_RAMP_RATE_RATIO * self.end_rate_per_s:
            raise ValueError(
                f"start_rate_per_s may be at most {MAX_RAMP_RATE_RATIO:g} x end_rate_per_s "
                "(arrivals after a steeper down-ramp take too long to draw)"
            )
        return self

    def rate(self, t: float) -> float:
        f = min(t / self.duration_s, 1.0)
        return self.start_rate_per_s + f * (self.end_rate_per_s - self.start_rate_per_s)


class DiurnalArrivals(FrozenModel):
    """Poisson arrivals with a sinusoidal rate: mean x (1 + amplitude x sin(2 pi (t + phase) / period))."""

    kind: Literal["diurnal"] = Field(default="diurnal", description="Selects this variant (diurnal).")
    mean_rate_per_s: float = Field(
        ge=MIN_RATE_PER_S,
        le=MAX_RATE_PER_S,
        description="Mean arrival rate over a period, requests per second.",
    )
    amplitude: float = Field(
        default=0.5, ge=0, lt=1, description="Relative swing of the rate around its mean (0: constant)."
    )
    period_s: float = Field(
        default=86400.0, ge=MIN_PERIOD_S, le=MAX_TIME_S, description="Length of one cycle, seconds (a day)."
    )
    phase_s: float = Field(
        default=0.0, ge=-MAX_TIME_S, le=MAX_TIME_S, description="Shift of the cycle, seconds."
    )

    def rate(self, t: float) -> float:
        return self.mean_rate_per_s * (
            1 + self.amplitude * math.sin(2 * math.pi * (t + self.phase_s) / self.period_s)
        )


ArrivalConfig = Annotated[
    Annotated[PoissonArrivals, Tag("poisson")]
    | Annotated[GammaArrivals, Tag("gamma")]
    | Annotated[ConstantArrivals, Tag("constant")]
    | Annotated[OnOffArrivals, Tag("onoff")]
    | Annotated[RampArrivals, Tag("ramp")]
    | Annotated[DiurnalArrivals, Tag("diurnal")],
    Discriminator(_kind_or("poisson")),
]

# --------------------------------------------------------------------------- lengths


class FixedLength(FrozenModel):
    """Every request has the same number of tokens."""

    kind: Literal["fixed"] = Field(default="fixed", description="Selects this variant (fixed).")
    tokens: int = Field(ge=1, le=MAX_TOKENS, description="Number of tokens.")


class UniformLength(FrozenModel):
    """Token counts uniform on the integers ``min_tokens..max_tokens`` (both included)."""

    kind: Literal["uniform"] = Field(default="uniform", description="Selects this variant (uniform).")
    min_tokens: int = Field(ge=1, le=MAX_TOKENS, description="Smallest count.")
    max_tokens: int = Field(ge=1, le=MAX_TOKENS, description="Largest count.")

    @model_validator(mode="after")
    def _check(self) -> UniformLength:
        if self.max_tokens < self.min_tokens:
            raise ValueError("max_tokens must be >= min_tokens")
        return self


class LognormalLength(FrozenModel):
    """Lognormal token counts with a given mean and coefficient of variation, rounded and clipped."""

    kind: Literal["lognormal"] = Field(default="lognormal", description="Selects this variant (lognormal).")
    mean_tokens: float = Field(gt=0, le=MAX_TOKENS, description="Mean number of tokens before clipping.")
    cv: float = Field(default=1.0, ge=MIN_CV, le=MAX_CV, description="Coefficient of variation (std / mean).")
    min_tokens: int = Field(default=1, ge=1, le=MAX_TOKENS, description="Lower clip.")
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TOKENS,
        description=f"Upper clip (None: clipped only at the token limit, {MAX_TOKENS:,}).",
    )

    @model_validator(mode="after")
    def _check(self) -> LognormalLength:
        if self.max_tokens is not None and self.max_tokens < self.min_tokens:
            raise ValueError("max_tokens must be >= min_tokens")
        return self

    @property
    def sigma(self) -> float:
        return math.sqrt(math.log1p(self.cv**2))

    @property
    def mu(self) -> float:
        return math.log(self.mean_tokens) - self.sigma**2 / 2


class ZipfLength(FrozenModel):
    """Bounded Zipf (power-law) token counts: P(k) proportional to k^-exponent on min..max."""

    kind: Literal["zipf"] = Field(default="zipf", description="Selects this variant (zipf).")
    exponent: float = Field(
        default=1.2, gt=0, le=MAX_EXPONENT, description="Power-law exponent (larger: shorter)."
    )
    min_tokens: int = Field(default=1, ge=1, le=10_000_000, description="Smallest count.")
    max_tokens: int = Field(ge=1, le=10_000_000, description="Largest count.")

    @model_validator(mode="after")
    def _check(self) -> ZipfLength:
        if self.max_tokens < self.min_tokens:
            raise ValueError("max_tokens must be >= min_tokens")
        return self


TraceFormat = Literal["mooncake", "azure", "burstgpt", "csv", "jsonl"]


class EmpiricalLength(FrozenModel):
    """Token counts resampled (with replacement) from a trace file's prompt or output lengths."""

    kind: Literal["empirical"] = Field(default="empirical", description="Selects this variant (empirical).")
    path: str = Field(
        max_length=MAX_YAML_SCALAR_CHARS,
        description="Trace file; a relative path is relative to the scenario file's folder.",
    )
    format: TraceFormat = Field(default="azure", description="Format of the trace file.")
    field: Literal["prompt", "output"] = Field(description="Which lengths to resample.")
    columns: dict[str, str] = Field(
        default_factory=dict, description="Column mapping for the generic csv/jsonl formats (see trace)."
    )


LengthConfig = Annotated[
    FixedLength | UniformLength | LognormalLength | ZipfLength | EmpiricalLength,
    Field(discriminator="kind"),
]

# --------------------------------------------------------------------------- prefix structure


class SharedPrefixPool(FrozenModel):
    """``num_prompts`` distinct shared texts (system prompts or few-shot templates); each request
    picks one with Zipf popularity: P(k) proportional to (k + 1)^-zipf_exponent (0: uniform)."""

    num_prompts: int = Field(ge=1, le=MAX_SHARED_PROMPTS, description="Number of distinct shared texts.")
    tokens: LengthConfig = Field(description="Length of each shared text (drawn once per text).")
    zipf_exponent: float = Field(
        default=1.0, ge=0, le=MAX_EXPONENT, description="Popularity skew (0: all equally popular)."
    )


class SessionConfig(FrozenModel):
    """Multi-turn conversations: each turn re-sends the conversation so far plus new user text.

    A follow-up turn is released ``think time`` after the previous turn finishes (closed loop).
    """

    turns: LengthConfig = Field(description="Turns per session (a length distribution over counts).")
    think_time_s: float = Field(
        default=10.0, ge=0, le=MAX_TIME_S, description="Mean user think time between turns, s."
    )
    think_time_dist: Literal["exponential", "fixed"] = Field(
        default="exponential", description="Distribution of the think time."
    )
    followup_tokens: LengthConfig | None = Field(
        default=None, description="New user text per follow-up turn (None: same as prompt_tokens)."
    )


class RetentionConfig(FrozenModel):
    """What happens to a request's cached KV when it finishes (TensorRT-LLM's KvCacheRetentionConfig).

    ``retention: none`` / ``default`` is short for ``{kind: none}`` / ``{kind: default}``.
    """

    kind: Literal["default", "none", "priority"] = Field(
        default="default",
        description="default: its blocks stay cached in the free queue (vLLM); none: the blocks it "
        "computed are freed uncached and reused first (a one-off history such as a classifier's); "
        "priority: they stay cached at `priority` until `duration_s` after they were freed.",
    )
    priority: int = Field(
        default=35,
        ge=0,
        le=100,
        description="kind priority: 0 (evicted first) .. 100 (last); TensorRT-LLM's default is 35.",
    )
    duration_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIME_S,
        allow_inf_nan=False,
        description="kind priority: seconds after being freed at which the blocks fall back to the "
        "default priority 35 (None: never).",
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"kind": data} if isinstance(data, str) else data

    def to_retention(self) -> Retention:
        out = Retention(self.kind, self.priority, self.duration_s)
        return DEFAULT_RETENTION if out == DEFAULT_RETENTION else out


class TenantShare(FrozenModel):
    """A tenant: its share of the traffic, its cache salt (the name) and its priority."""

    name: Name = Field(
        max_length=MAX_YAML_SCALAR_CHARS,
        min_length=1,
        description="Tenant name; the engine salts its block hashes with it.",
    )
    weight: float = Field(
        default=1.0, gt=0, le=MAX_WEIGHT, description="Relative share of sessions/requests."
    )
    priority: int = Field(
        default=0,
        ge=-MAX_PRIORITY,
        le=MAX_PRIORITY,
        description="Scheduling priority of its requests (lower runs first).",
    )
    retention: RetentionConfig | None = Field(
        default=None, description="Retention of its requests' KV (None: the workload's `retention`)."
    )


# --------------------------------------------------------------------------- workloads


class SyntheticWorkload(FrozenModel):
    """Requests drawn from distributions, with optional shared prefixes, sessions and tenants."""

    kind: Literal["synthetic"] = Field(default="synthetic", description="Selects this variant (synthetic).")
    num_requests: int = Field(
        default=1000,
        ge=1,
        le=MAX_NUM_REQUESTS,
        description="Number of prompts sent (turns of all sessions; before sampling n).",
    )
    arrival: ArrivalConfig = Field(
        default_factory=lambda: PoissonArrivals(rate_per_s=4.0),
        description="Arrival process (of sessions when sessions are on).",
    )
    prompt_tokens: LengthConfig = Field(
        default_factory=lambda: LognormalLength(mean_tokens=1024, cv=1.0, max_tokens=8192),
        description="User text length of a request (excluding shared prefixes).",
    )
    output_tokens: LengthConfig = Field(
        default_factory=lambda: LognormalLength(mean_tokens=256, cv=1.0, max_tokens=2048),
        description="Output length distribution (known to the simulator, not to the scheduler).",
    )
    shared_prefix_tokens: int = Field(
        default=0,
        ge=0,
        le=MAX_TOKENS,
        description="Length of a system prompt shared by every request (0: none).",
    )
    system_prompts: SharedPrefixPool | None = Field(
        default=None, description="K system prompts with Zipf popularity (after shared_prefix_tokens)."
    )
    few_shot: SharedPrefixPool | None = Field(
        default=None, description="Few-shot templates with Zipf popularity (after the system prompt)."
    )
    sessions: SessionConfig | None = Field(
        default=None, description="Multi-turn sessions (None: single turn)."
    )
    tenant: Name = Field(
        max_length=MAX_YAML_SCALAR_CHARS,
        default="default",
        description="Tenant of every request when `tenants` is empty.",
    )
    tenants: list[TenantShare] = Field(
        default_factory=list,
        max_length=MAX_TENANTS,
        description="Tenants with traffic weights (empty: all requests are `tenant`).",
    )
    parallel_samples: int = Field(
        default=1,
        ge=1,
        le=MAX_SAMPLES,
        description="n > 1: each prompt becomes n requests sharing the prompt (vLLM v1 way).",
    )
    beam_width: int = Field(
        default=1,
        ge=1,
        le=MAX_SAMPLES,
        description="Beam search: beam_width requests with the prompt's and output's lengths that share "
        "every block they have in common (copy-on-write of a partial last block; see beam_prune_probability).",
    )
    beam_prune_probability: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="Beam search: chance that a beam (other than the best) is pruned after a step and "
        "replaced by a fork of a surviving beam (kvsim.workload.beams).",
    )
    beam_sharing: bool = Field(
        default=True,
        description="Beam search: beams share blocks (vLLM paper section 4.4); false: each beam holds its own "
        "copy of every block (the paper's no-sharing baseline).",
    )
    retention: RetentionConfig = Field(
        default_factory=RetentionConfig,
        description="Retention of the requests' KV once they finish (per tenant: tenants[].retention).",
    )

    @model_validator(mode="after")
    def _check(self) -> SyntheticWorkload:
        names = [t.name for t in self.tenants]
        if len(set(names)) != len(names):
            raise ValueError("tenant names must be unique")
        return self


class TraceWorkload(FrozenModel):
    """Requests replayed from a trace file.

    Formats: ``mooncake`` (JSONL: timestamp ms, input_length, output_length, hash_ids of
    512-token prefix blocks), ``azure`` (2023 CSV: TIMESTAMP, ContextTokens, GeneratedTokens),
    ``burstgpt`` (CSV: Timestamp, Model, Request tokens, Response tokens, ...), and generic
    ``csv`` / ``jsonl`` with a ``columns`` mapping.
    """

    kind: Literal["trace"] = Field(default="trace", description="Selects this variant (trace).")
    path: str = Field(
        max_length=MAX_YAML_SCALAR_CHARS,
        description="Trace file; a relative path is relative to the scenario file's folder.",
    )
    format: TraceFormat = Field(description="File format.")
    columns: dict[str, str] = Field(
        default_factory=dict,
        description="Generic formats: our field -> file column, for timestamp, prompt_tokens, "
        "output_tokens and optionally hash_ids, tenant, priority, retention (none, default, "
        "priority:P or priority:P:DURATION_S).",
    )
    timestamp_unit: Literal["s", "ms", "us", "datetime"] = Field(
        default="s", description="Generic formats: unit of the timestamp column."
    )
    hash_block_tokens: int = Field(
        default=512,
        ge=1,
        le=MAX_TOKENS,
        description="Tokens per hash id (Mooncake: 512); the last block may be partial.",
    )
    time_scale: float = Field(
        default=1.0,
        ge=MIN_TIME_SCALE,
        le=MAX_TIME_SCALE,
        description="Replay this many times faster (arrival gaps divided by it).",
    )
    start_s: float = Field(
        default=0.0, ge=0, le=MAX_TIME_S, description="Keep arrivals from this trace time on, seconds."
    )
    end_s: float | None = Field(
        default=None, gt=0, le=MAX_TIME_S, description="Keep arrivals before this trace time (None: all)."
    )
    max_requests: int | None = Field(
        default=None, ge=1, le=MAX_NUM_REQUESTS, description="Keep only the first N requests in the window."
    )
    rate_per_s: float | None = Field(
        default=None,
        ge=MIN_RATE_PER_S,
        le=MAX_RATE_PER_S,
        description="Override the mean arrival rate by rescaling time (keeps the trace's burstiness).",
    )
    zero_output: Literal["drop", "one"] = Field(
        default="drop", description="Rows with 0 output tokens: drop them (counted) or treat as 1 token."
    )
    tenant: Name = Field(
        max_length=MAX_YAML_SCALAR_CHARS, default="default", description="Tenant of rows that name none."
    )
    model_filter: str | None = Field(
        default=None, max_length=MAX_YAML_SCALAR_CHARS, description="burstgpt: keep only rows of this Model."
    )

    @model_validator(mode="after")
    def _check(self) -> TraceWorkload:
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError("end_s must be > start_s")
        if self.format in ("csv", "jsonl"):
            missing = {"timestamp", "prompt_tokens", "output_tokens"} - set(self.columns)
            if missing:
                raise ValueError(f"format {self.format!r} needs columns for: {', '.join(sorted(missing))}")
        return self


# --------------------------------------------------------------------------- benchmark clients


def _inf_or_number(value: Any) -> Any:
    """``inf`` (vLLM's spelling, a YAML string) or YAML's ``.inf`` as the literal "inf"."""
    if isinstance(value, str) and value.strip().lower() in ("inf", "+inf", "infinity", ".inf"):
        return "inf"
    if isinstance(value, float) and value == math.inf:
        return "inf"
    return value


class RangeRatios(FrozenModel):
    """Separate range ratios for prompt and output lengths (vLLM 0.32's JSON form
    ``{"input": 0.3, "output": 0.5}`` of ``--random-range-ratio``)."""

    input: float = Field(ge=0, le=1, description="Range ratio of the prompt (input) lengths.")
    output: float = Field(ge=0, le=1, description="Range ratio of the output lengths.")


class BenchServeWorkload(FrozenModel):
    """A benchmark client as ``vllm bench serve --dataset-name random`` runs it (vLLM 0.32.0).

    A closed loop: at most ``max_concurrency`` requests in flight; when one finishes, the
    next request in order is sent. Optionally a request rate (gamma gaps of shape
    ``burstiness``) paces when requests become ready; warm-up requests (copies of the first
    prompt) run before, and are left out of every figure. Output lengths are exact
    (``--ignore-eos``). Names and defaults are vLLM's; see docs/workloads.md.
    """

    kind: Literal["bench_serve"] = Field(
        default="bench_serve", description="Selects this variant (bench_serve)."
    )
    num_prompts: int = Field(
        default=1000, ge=1, le=MAX_NUM_REQUESTS, description="Measured requests (--num-prompts)."
    )
    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        le=MAX_NUM_REQUESTS,
        description="Most requests in flight at once (--max-concurrency); the next one is sent when "
        "one finishes. None: no limit.",
    )
    num_warmups: int = Field(
        default=0,
        ge=0,
        le=MAX_NUM_REQUESTS,
        description="Warm-up requests (--num-warmups): copies of the first prompt, sent before the "
        "measured run at the same concurrency, all waited for; excluded from every figure.",
    )
    ready_check: bool = Field(
        default=False,
        description="One request of the first prompt before the warm-ups, waited for (vLLM's "
        "--ready-check-timeout-sec > 0; older benchmark_serving.py clients always send this 'initial "
        "single prompt test run'). Excluded from every figure.",
    )
    request_rate: Annotated[float, Field(ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S)] | Literal["inf"] = Field(
        default="inf",
        description="Requests per second the client makes ready (--request-rate); inf: all at once.",
    )
    burstiness: Annotated[float, Field(ge=MIN_BURSTINESS, le=MAX_BURSTINESS)] | Literal["inf"] = Field(
        default=1.0,
        description="Gamma shape of the gaps between ready times (--burstiness): 1 is Poisson, "
        "below 1 burstier, inf evenly spaced. Only with a finite request_rate.",
    )
    random_input_len: int = Field(
        default=1024, ge=0, le=MAX_BENCH_LEN, description="Base prompt length (--random-input-len)."
    )
    random_output_len: int = Field(
        default=128, ge=1, le=MAX_BENCH_LEN, description="Base output length (--random-output-len)."
    )
    random_range_ratio: Annotated[float, Field(ge=0, le=1)] | RangeRatios = Field(
        default=0.0,
        description="Spread of the lengths around their base (--random-range-ratio); a number for "
        "both, or {input, output}. How it is used: random_range_ratio_rule.",
    )
    random_range_ratio_rule: Literal["symmetric", "legacy"] = Field(
        default="symmetric",
        description="symmetric (vLLM >= 0.8.4): uniform integers in [floor(L(1-r)), ceil(L(1+r))], r < 1; "
        "legacy (vLLM <= 0.8.3, SGLang's bench_serving, InferenceMAX's client): uniform integers "
        "in [int(L r), L] (r = 1: fixed lengths).",
    )
    random_prefix_len: int = Field(
        default=0,
        ge=0,
        le=MAX_BENCH_LEN,
        description="Tokens of one random prefix every prompt starts with, added to the drawn "
        "length (--random-prefix-len).",
    )
    num_special_tokens: int = Field(
        default=0,
        ge=0,
        le=64,
        description="Tokens the server's tokenizer adds to every prompt (1 for Llama 3's BOS). "
        "The symmetric rule draws around random_input_len minus them, as vLLM 0.32's client does; "
        "the server adds them back.",
    )
    ignore_eos: bool = Field(
        default=True,
        description="Outputs run to their drawn length (--ignore-eos; vLLM's client sets it for the "
        "random dataset). kvsim has no end-of-sequence token: only true is possible.",
    )
    seed: int | None = Field(
        default=None,
        ge=0,
        le=2**53 - 1,
        description="Seed of the lengths and gaps (--seed); None: the scenario's seed. Below 2^32, "
        "the same draws as vLLM 0.32's client with that --seed.",
    )
    tenant: str = Field(
        max_length=MAX_YAML_SCALAR_CHARS, default="default", description="Tenant of every request."
    )

    @field_validator("request_rate", "burstiness", mode="before")
    @classmethod
    def _inf_or_bounded(cls, value: Any, info: ValidationInfo) -> Any:
        """One clear message for both fields: ``inf`` (vLLM's spelling), or a number in range."""
        value = _inf_or_number(value)
        low, high = (
            (MIN_RATE_PER_S, MAX_RATE_PER_S)
            if info.field_name == "request_rate"
            else (MIN_BURSTINESS, MAX_BURSTINESS)
        )
        if value == "inf":
            return value
        if isinstance(value, int | float) and not isinstance(value, bool) and low <= value <= high:
            return value
        raise ValueError(f"must be inf or a number in [{low:g}, {high:g}], got {value!r}")

    @field_validator("random_range_ratio", mode="before")
    @classmethod
    def _ratio(cls, value: Any) -> Any:
        """One clear message: a number in [0, 1] or {input, output} (vLLM's JSON form)."""
        if isinstance(value, dict):
            try:
                return RangeRatios.model_validate(value)
            except ValidationError as err:
                rules = "; ".join(
                    f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in err.errors()
                )
                raise ValueError(f"{{input: R, output: R}} expected ({rules})") from None
        if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1:
            return value
        if isinstance(value, RangeRatios):
            return value
        raise ValueError(f"must be a number in [0, 1] or {{input: R, output: R}}, got {value!r}")

    @field_validator("ignore_eos")
    @classmethod
    def _exact_outputs(cls, value: bool) -> bool:
        if not value:
            raise ValueError("must be true: kvsim produces exactly the drawn output lengths (it has no EOS)")
        return value

    @model_validator(mode="after")
    def _check(self) -> BenchServeWorkload:
        r_in, r_out = self.range_ratios
        if self.random_range_ratio_rule == "symmetric" and max(r_in, r_out) >= 1:
            raise ValueError(
                "random_range_ratio must be in [0, 1) under the symmetric rule (vLLM's "
                f"get_sampling_params), got {self.random_range_ratio!r}"
            )
        low, _ = self.input_range
        if self.random_prefix_len + low < 1:
            raise ValueError(
                "random_input_len is too small: random_prefix_len + the shortest drawn prompt "
                f"({self.random_prefix_len} + {low}) must be >= 1"
            )
        if self.total_requests > MAX_NUM_REQUESTS:
            raise ValueError(f"num_prompts + num_warmups (+ the ready check) must be <= {MAX_NUM_REQUESTS:,}")
        return self

    @property
    def request_rate_per_s(self) -> float:
        return math.inf if self.request_rate == "inf" else float(self.request_rate)

    @property
    def burstiness_shape(self) -> float:
        return math.inf if self.burstiness == "inf" else float(self.burstiness)

    @property
    def total_requests(self) -> int:
        """Every request the client sends: warm-ups and the ready check included."""
        return self.num_prompts + self.num_warmups + int(self.ready_check)

    @property
    def range_ratios(self) -> tuple[float, float]:
        """(input, output) range ratios (vLLM's ``_resolve_range_ratios``)."""
        r = self.random_range_ratio
        return (r.input, r.output) if isinstance(r, RangeRatios) else (float(r), float(r))

    @property
    def input_range(self) -> tuple[int, int]:
        """Smallest and largest drawn prompt length, before the prefix and special tokens."""
        return _length_range(
            self.random_input_len, self.range_ratios[0], self.random_range_ratio_rule, self.num_special_tokens
        )

    @property
    def output_range(self) -> tuple[int, int]:
        """Smallest and largest output length."""
        low, high = _length_range(
            self.random_output_len, self.range_ratios[1], self.random_range_ratio_rule, 0
        )
        return max(low, 1), max(high, 1)


def _length_range(length: int, ratio: float, rule: str, special: int) -> tuple[int, int]:
    """The integers lengths are drawn from, both ends included.

    symmetric (vLLM 0.32.0, benchmarks/datasets/utils.py, get_sampling_params):
        [floor(L' (1 - r)), ceil(L' (1 + r))] with L' = max(0, L - special tokens)
    legacy (vLLM <= 0.8.3, benchmarks/benchmark_serving.py, sample_random_requests):
        [int(L r), L]
    """
    if rule == "legacy":
        return int(length * ratio), length
    real = max(0, length - special)
    return math.floor(real * (1 - ratio)), math.ceil(real * (1 + ratio))


ComponentConfig = Annotated[
    Annotated[SyntheticWorkload, Tag("synthetic")] | Annotated[TraceWorkload, Tag("trace")],
    Discriminator(_kind_or("synthetic")),
]


class MixtureWorkload(FrozenModel):
    """Several workloads served together, e.g. a chat tier beside a classifier tier.

    Each component is drawn on its own (from its own child of the seed) with its own
    arrivals, lengths, tenants and retention; their requests are merged by arrival and
    renumbered, and their content ids kept apart, so components share no prefixes.
    """

    kind: Literal["mixture"] = Field(default="mixture", description="Selects this variant (mixture).")
    components: list[ComponentConfig] = Field(
        min_length=2, max_length=64, description="The workloads mixed (synthetic or trace)."
    )


#: The built-in kinds (their generators are registered in `kvsim.workload`).
BUILTIN_WORKLOAD_KINDS = ("synthetic", "trace", "mixture", "bench_serve")

# ``kind`` may be omitted: a workload without one is synthetic (as in the first schema). Any
# other kind registered in kvsim.registry.WORKLOAD_KINDS is read by its config class.
WorkloadConfig = Annotated[
    Annotated[SyntheticWorkload, Tag("synthetic")]
    | Annotated[TraceWorkload, Tag("trace")]
    | Annotated[MixtureWorkload, Tag("mixture")]
    | Annotated[BenchServeWorkload, Tag("bench_serve")]
    | Annotated[Any, RegisteredKinds(WORKLOAD_KINDS, BUILTIN_WORKLOAD_KINDS), Tag(REGISTERED_TAG)],
    Discriminator(kind_tag(BUILTIN_WORKLOAD_KINDS, "synthetic")),
]
