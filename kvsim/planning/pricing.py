"""What a deployment costs and draws: GPU-hours, dollars per hour and per million tokens of
each kind, energy per token.

    prices = load_prices(None)                  # kvsim/data/prices.yaml (example list prices)
    usage = usage_of(result)                    # price-free: GPU-seconds, busy time, tokens
    cost = price_usage(usage, prices)           # $/h, $ per M input / cached / output, J/token

**Cost.** A replica group of ``n`` replicas of ``tp`` GPUs costs ``n x tp x price`` per hour
over the whole run (idle or not: a deployment is paid by the hour). Each group's cost is
split between prompt and output tokens as its GPUs spent their busy time: every iteration's
duration is shared among the tokens it computed, a prefill token and a decode token alike
(a step's weight reads are shared by its whole batch, its FLOPs are per token), and the
group's idle time follows the same shares. The prompt part is split again between computed
prompt tokens (input) and prefix-cache hits (cached input), a hit weighing
``cached_input_weight`` of a computed token (default 0: a hit computes nothing)::

    busy_prefill = sum over iterations of duration x tp x prefill / (prefill + decode)
    busy_decode  = sum over iterations of duration x tp x decode  / (prefill + decode)
    cost_g       = GPU-seconds_g / 3600 x price_g
    prompt $     = sum_g cost_g x busy_prefill_g / (busy_prefill_g + busy_decode_g);  output $ the rest
    input $      = prompt $ x U / (U + w C);   cached input $ = prompt $ x w C / (U + w C)
    $ per M      = $ / tokens x 1e6   (U computed prompt tokens, C cached, O output; finished requests)

**Energy.** Each GPU draws a share of its board power: ``prefill_share`` while computing
prompt tokens, ``decode_share`` while decoding (the step's tokens weigh as above),
``idle_share`` between steps (`PowerModel`, shares measured on a B200, docs/planning.md)::

    joules_g = board_power_g x (prefill_share x busy_prefill_g + decode_share x busy_decode_g
                                + idle_share x (GPU-seconds_g - busy_prefill_g - busy_decode_g))

Rough: one GPU's measured kernel power stands for every GPU and engine, and host, network
and cooling power are left out; read it to compare deployments, not to size a power feed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, ValidationError, field_validator

from kvsim.errors import KvsimError, YamlError
from kvsim.frozen import FrozenModel, Name
from kvsim.limits import MAX_YAML_SCALAR_CHARS
from kvsim.model.presets import UnknownPresetError, resolve_gpu
from kvsim.results.result import Result
from kvsim.yaml_safe import load_yaml_file, load_yaml_text

#: Largest price per GPU-hour accepted (far above any list price).
MAX_USD_PER_GPU_HOUR = 1e4
#: Largest board power accepted, watts (a GB300 is 1,400 W).
MAX_BOARD_POWER_W = 1e5


class PriceError(KvsimError):
    """A price table cannot be read or lacks what a deployment needs; names the file and field."""


class GpuPrice(FrozenModel):
    """One GPU's price and board power."""

    usd_per_gpu_hour: float = Field(
        gt=0, le=MAX_USD_PER_GPU_HOUR, description="What one GPU costs per hour, in the table's currency."
    )
    board_power_w: float | None = Field(
        default=None,
        gt=0,
        le=MAX_BOARD_POWER_W,
        description="Board power (power limit / TDP), watts; None: the shipped table's figure for this GPU.",
    )
    source: str = Field(
        default="", max_length=MAX_YAML_SCALAR_CHARS, description="Where the price comes from."
    )


class PowerModel(FrozenModel):
    """Power draw as shares of board power (docs/planning.md, "Energy")."""

    prefill_share: float = Field(
        default=0.82, ge=0, le=1.5, description="Share of board power drawn while computing prompt tokens."
    )
    decode_share: float = Field(
        default=0.39, ge=0, le=1.5, description="Share of board power drawn while decoding."
    )
    idle_share: float = Field(
        default=0.24, ge=0, le=1.5, description="Share of board power drawn between iterations."
    )
    source: str = Field(
        default="", max_length=MAX_YAML_SCALAR_CHARS, description="Where the shares come from."
    )


class PriceTable(FrozenModel):
    """Prices per GPU-hour and board power per GPU, the cached-token weight and the power model."""

    label: str = Field(
        max_length=1000, description="What the prices are, shown with every cost (e.g. provider and date)."
    )
    currency: Name = Field(default="USD", max_length=16, description="Currency of the prices.")
    date: str = Field(default="", max_length=64, description="When the prices were read.")
    source: str = Field(default="", max_length=MAX_YAML_SCALAR_CHARS, description="Where they were read.")
    gpus: dict[str, GpuPrice] = Field(description="GPU preset name (or alias) -> its price and board power.")
    board_power_w: dict[str, float] = Field(
        default_factory=dict, description="Board power, watts, of GPUs not priced here (energy only)."
    )
    cached_input_weight: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Step time a prefix-cache hit carries, as a share of a computed prompt token's (0: none).",
    )
    power: PowerModel = Field(default_factory=PowerModel, description="Power draw as shares of board power.")

    @field_validator("gpus", "board_power_w")
    @classmethod
    def _preset_names(cls, table: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in table.items():
            try:
                key = resolve_gpu(name).name
            except UnknownPresetError as exc:
                raise ValueError(str(exc)) from None
            if key in out:
                raise ValueError(f"{name!r} names GPU {key!r} a second time")
            out[key] = value
        return out

    def price(self, gpu: str) -> float:
        """Price per GPU-hour of a GPU preset; `PriceError` naming the table when it has none."""
        key = _gpu_key(gpu)
        if key not in self.gpus:
            raise PriceError(
                f"the price table ({self.label}) has no price for GPU {gpu!r}; prices: "
                f"{', '.join(sorted(self.gpus))}. Give one with --prices FILE (docs/planning.md)"
            )
        return self.gpus[key].usd_per_gpu_hour

    def power_w(self, gpu: str) -> float | None:
        """Board power of a GPU: this table's, else the shipped table's, else None (unknown)."""
        key = _gpu_key(gpu)
        entry = self.gpus.get(key)
        if entry is not None and entry.board_power_w is not None:
            return entry.board_power_w
        if key in self.board_power_w:
            return self.board_power_w[key]
        shipped = default_prices()
        if self is not shipped:
            return shipped.power_w(key)
        return None


def _gpu_key(gpu: str) -> str:
    try:
        return resolve_gpu(gpu).name
    except UnknownPresetError:
        return gpu


_DEFAULT: PriceTable | None = None


def default_prices() -> PriceTable:
    """The shipped table, ``kvsim/data/prices.yaml`` (example list prices, read once)."""
    global _DEFAULT
    if _DEFAULT is None:
        text = resources.files("kvsim.data").joinpath("prices.yaml").read_text(encoding="utf-8")
        raw = load_yaml_text(text, "<kvsim/data/prices.yaml>", what="price table")
        _DEFAULT = _validated(raw, "kvsim/data/prices.yaml")
    return _DEFAULT


def _validated(raw: Any, source: str) -> PriceTable:
    if not isinstance(raw, dict):
        raise PriceError(f"{source}: invalid price table\n  <root>: must be a mapping (label, gpus, ...)")
    try:
        return PriceTable.model_validate(raw)
    except ValidationError as err:
        lines = [f"  {'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in err.errors()]
        raise PriceError(f"{source}: invalid price table\n" + "\n".join(lines)) from None


def load_prices(path: str | Path | None) -> PriceTable:
    """A price table file (YAML, bounded like scenario files), or the shipped one for None."""
    if path is None:
        return default_prices()
    try:
        raw = load_yaml_file(path, what="price table")
    except YamlError as exc:
        raise PriceError(str(exc)) from None
    return _validated(raw, str(path))


# --------------------------------------------------------------------------- usage


@dataclass(frozen=True)
class GroupUsage:
    """What one replica group used over a run (price-free)."""

    gpu: str
    tp: int
    replicas: int
    gpu_seconds: float
    busy_prefill_gpu_s: float  # step time x tp, shared by the step's prompt tokens
    busy_decode_gpu_s: float  # the same, decode tokens


@dataclass(frozen=True)
class Usage:
    """What a run used: every group's GPU time and the tokens served (finished requests)."""

    span_s: float
    groups: tuple[GroupUsage, ...]
    input_tokens: int  # prompt tokens computed (not prefix-cache hits)
    cached_input_tokens: int  # prompt tokens found in the prefix cache
    output_tokens: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Usage:
        groups = tuple(GroupUsage(**g) for g in data["groups"])
        return cls(**{**data, "groups": groups})


def usage_of(result: Result) -> Usage:
    """GPU-seconds and busy time per replica group, and the tokens of the finished requests.

    GPU-seconds are the cluster's (``gpu_hours``: every replica from the start to the end of
    the run, autoscaled ones while they were up), shared among several groups by their
    GPUs at the start (exact for fixed fleets).
    """
    scenario, it = result.scenario, result.iterations
    span = float(result.summary.get("sim_time_s", 0.0))
    replica_group: dict[str, int] = {}
    for index, group in enumerate(scenario.replicas):
        most = max(group.count, group.autoscale.max_count if group.autoscale else 0)
        for i in range(most * group.attention_dp):  # an instance's ranks are replicas too
            replica_group[f"{group.name}-{i}"] = index
    prefill = it["prefill_tokens"].to_numpy(dtype=float)
    decode = it["decode_tokens"].to_numpy(dtype=float)
    dur = it["duration_s"].to_numpy(dtype=float)
    tokens = prefill + decode
    with np.errstate(invalid="ignore", divide="ignore"):
        prefill_part = np.where(tokens > 0, prefill / tokens, 0.0)
    decode_part = 1.0 - prefill_part  # a step of neither kind (a swap alone) counts as decode's
    group_of = it["replica_id"].map(replica_group).to_numpy()
    fleet_seconds = float(result.summary.get("gpu_hours", float("nan"))) * 3600.0
    total_gpus = sum(g.count * g.gpus_per_instance for g in scenario.replicas)
    groups = []
    for index, group in enumerate(scenario.replicas):
        mine = group_of == index
        gpus = group.count * group.gpus_per_instance
        share = gpus / total_gpus
        gpu_seconds = fleet_seconds * share if math.isfinite(fleet_seconds) else span * gpus
        groups.append(
            GroupUsage(
                gpu=resolve_gpu(group.gpu).name,
                tp=group.tp,
                replicas=group.count * group.attention_dp,  # an instance's ranks, tp GPUs each
                gpu_seconds=gpu_seconds,
                busy_prefill_gpu_s=float((dur[mine] * prefill_part[mine]).sum()) * group.tp,
                busy_decode_gpu_s=float((dur[mine] * decode_part[mine]).sum()) * group.tp,
            )
        )
    req = result.requests
    fin = req[req["finished"].to_numpy(dtype=bool)]
    if "warmup" in fin:
        fin = fin[~fin["warmup"].to_numpy(dtype=bool)]
    hits = int(fin["prefix_cache_hits_tokens"].sum())
    return Usage(
        span_s=span,
        groups=tuple(groups),
        input_tokens=int(fin["prompt_tokens"].sum()) - hits,
        cached_input_tokens=hits,
        output_tokens=int(fin["output_tokens"].sum()),
    )


# --------------------------------------------------------------------------- prices applied


@dataclass(frozen=True)
class Cost:
    """A run's cost and energy under a price table (see the module doc for the rules)."""

    currency: str
    price_label: str
    num_gpus: int
    usd_per_hour: float  # the deployment's price per hour (every GPU, busy or not)
    gpu_hours: float
    usd_total: float  # over the run
    usd_per_m_input: float
    usd_per_m_cached_input: float
    usd_per_m_output: float
    usd_per_m_tokens: float  # over every token served (prompt + output)
    energy_j: float  # NaN when a GPU's board power is unknown
    energy_j_per_token: float
    energy_j_per_output_token: float
    mean_power_w: float  # per GPU, over the run
    busy_share: float  # busy GPU-seconds / GPU-seconds

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _per_million(usd: float, tokens: int) -> float:
    return usd / tokens * 1e6 if tokens > 0 else float("nan")


def price_usage(usage: Usage, prices: PriceTable) -> Cost:
    """`Cost` of a run's `Usage` under ``prices`` (`PriceError` for a GPU without a price)."""
    per_hour = gpu_seconds = total = prompt_usd = output_usd = busy = 0.0
    energy = 0.0
    gpus = 0
    power = prices.power
    for g in usage.groups:
        price = prices.price(g.gpu)
        gpus += g.replicas * g.tp
        per_hour += g.replicas * g.tp * price
        cost = g.gpu_seconds / 3600.0 * price
        total += cost
        gpu_seconds += g.gpu_seconds
        busy_g = g.busy_prefill_gpu_s + g.busy_decode_gpu_s
        busy += busy_g
        prefill_part = g.busy_prefill_gpu_s / busy_g if busy_g > 0 else 0.0
        prompt_usd += cost * prefill_part
        output_usd += cost * (1.0 - prefill_part) if busy_g > 0 else 0.0
        board = prices.power_w(g.gpu)
        idle = max(g.gpu_seconds - busy_g, 0.0)
        energy += (
            board
            * (
                power.prefill_share * g.busy_prefill_gpu_s
                + power.decode_share * g.busy_decode_gpu_s
                + power.idle_share * idle
            )
            if board is not None
            else float("nan")
        )
    idle_groups = total - prompt_usd - output_usd  # groups that never ran a step: shared alike
    if idle_groups > 0 and prompt_usd + output_usd > 0:
        scale = total / (prompt_usd + output_usd)
        prompt_usd, output_usd = prompt_usd * scale, output_usd * scale
    u, c, o = usage.input_tokens, usage.cached_input_tokens, usage.output_tokens
    weighted = u + prices.cached_input_weight * c
    input_usd = prompt_usd * u / weighted if weighted > 0 else 0.0
    cached_usd = prompt_usd - input_usd
    served = u + c + o
    return Cost(
        currency=prices.currency,
        price_label=prices.label,
        num_gpus=gpus,
        usd_per_hour=per_hour,
        gpu_hours=gpu_seconds / 3600.0,
        usd_total=total,
        usd_per_m_input=_per_million(input_usd, u),
        usd_per_m_cached_input=_per_million(cached_usd, c),
        usd_per_m_output=_per_million(output_usd, o),
        usd_per_m_tokens=_per_million(total, served),
        energy_j=energy,
        energy_j_per_token=energy / served if served else float("nan"),
        energy_j_per_output_token=energy / o if o else float("nan"),
        mean_power_w=energy / gpu_seconds if gpu_seconds > 0 else float("nan"),
        busy_share=busy / gpu_seconds if gpu_seconds > 0 else float("nan"),
    )


def deployment_usd_per_hour(groups: list[tuple[str, int, int]], prices: PriceTable) -> float:
    """Price per hour of ``(gpu, tp, replicas)`` groups: what the planner ranks by."""
    return sum(replicas * tp * prices.price(gpu) for gpu, tp, replicas in groups)


__all__ = [
    "Cost",
    "GpuPrice",
    "GroupUsage",
    "PowerModel",
    "PriceError",
    "PriceTable",
    "Usage",
    "default_prices",
    "deployment_usd_per_hour",
    "load_prices",
    "price_usage",
    "usage_of",
]
