"""Building the cost model a scenario asks for: the one entry point the engine calls.

    build_cost_model(config, model=..., gpu=..., tp=..., kv_cache_dtype=...)

dispatches on ``config.kind`` through `kvsim.registry.COST_MODELS`, where each kind's
builder takes the config and a `Replica` context (what the replica is: model, GPU, TP,
KV dtype, engine backend ...):

        constant           -> ConstantCostModel
        roofline           -> RooflineCostModel
        profile (kernels)  -> CalibratedCostModel
        profile (roofline-fit) -> RooflineCostModel with the fitted parameters
        profile (kernels-fit)  -> KernelCostModel with the fitted overheads
        kernels            -> KernelCostModel (measured kernel tables)

A new cost model is a config class and a builder, registered together in its own file:
``@COST_MODELS.register(kind, config=ConfigClass)`` on the builder (docs/engine.md,
"Extending kvsim"); the scenario's ``cost_model`` then accepts that kind.

A profile that is missing, malformed, or made for another model, dtype, KV dtype, TP
degree or GPU raises `ProfileError`; it is never silently used (the scenario checks,
`kvsim.scenario.checks`, report the same problems with their field paths).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvsim.cost.base import ConstantCostModel, CostModel
from kvsim.cost.calibrated import CalibratedCostModel
from kvsim.cost.config import (
    ConstantCostConfig,
    CostModelConfig,
    KernelCostConfig,
    ProfileCostConfig,
    RooflineCostConfig,
)
from kvsim.cost.kernels import KernelCostModel
from kvsim.cost.profile import Profile, check_profile_matches, load_profile
from kvsim.cost.roofline import RooflineCostModel
from kvsim.cost.speculative import SpeculativeCostModel, eagle_head, mtp_head
from kvsim.errors import ProfileError
from kvsim.model.specs import GpuSpec, ModelSpec
from kvsim.registry import COST_MODELS

if TYPE_CHECKING:
    from kvsim.scenario.resolved import GroupPlan, Plan
    from kvsim.scenario.schema import SpeculativeConfig


def roofline_config_from_profile(
    profile: Profile, per_iteration_overhead_s: float | None = None
) -> RooflineCostConfig:
    """The fitted RooflineCostConfig stored in a roofline-fit profile."""
    params = dict(profile.data["roofline"])
    if per_iteration_overhead_s is not None:
        params["per_iteration_overhead_s"] = per_iteration_overhead_s
    return RooflineCostConfig(**params)


def kernels_config_from_profile(
    profile: Profile, per_iteration_overhead_s: float | None = None
) -> KernelCostConfig:
    """The fitted KernelCostConfig stored in a kernels-fit profile."""
    params = dict(profile.data["kernels"])
    if per_iteration_overhead_s is not None:
        params["per_iteration_overhead_s"] = per_iteration_overhead_s
    return KernelCostConfig(**params)


@dataclass(frozen=True)
class Replica:
    """What a cost model may know of the replica it prices."""

    model: ModelSpec
    gpu: GpuSpec
    tp: int = 1
    kv_cache_dtype: str = "auto"
    #: A mixture of experts placed whole on the GPUs (priced by the roofline).
    expert_parallel: bool = False
    #: The serving engine (engine.backend) and its batch limit (graph capture sizes).
    backend: str = "vllm"
    max_num_seqs: int = 256
    #: Folder that relative paths in the config are relative to (the scenario's).
    base_dir: Path | None = None
    #: The parallel layout (`kvsim.scenario.schema.ReplicaGroup`): this replica is one rank of
    #: an instance of attention_dp ranks whose experts span tp x attention_dp GPUs as moe_tp x moe_ep.
    attention_dp: int = 1
    moe_tp: int | None = None
    moe_ep: int = 1
    #: The engine's release (engine.backend_version; its default CUDA-graph sizes).
    backend_version: str | None = None
    #: The engine's step token budget (engine.max_num_batched_tokens: SGLang's chunk size, the
    #: ceiling of its piecewise prompt graphs), whether it decodes speculatively, and whether the
    #: replica is a disaggregated prefill or decode worker: SGLang runs no prompt graphs then.
    max_num_batched_tokens: int | None = None
    speculative: bool = False
    disaggregated: bool = False


Builder = Callable[[Any, Replica], CostModel]


@COST_MODELS.register("constant")
def _constant(config: ConstantCostConfig, r: Replica) -> CostModel:
    return ConstantCostModel(config.step_time_s, r.gpu.pcie_bandwidth_bytes_per_s)


@COST_MODELS.register("roofline")
def _roofline(config: RooflineCostConfig, r: Replica) -> CostModel:
    return RooflineCostModel(
        r.model, r.gpu, config, tp=r.tp, kv_cache_dtype=r.kv_cache_dtype,
        attention_dp=r.attention_dp, moe_ep=r.moe_ep,
    )  # fmt: skip


@COST_MODELS.register("profile")
def _profile(config: ProfileCostConfig, r: Replica) -> CostModel:
    profile = load_profile(config.profile, r.base_dir)
    check_profile_matches(profile, model=r.model, gpu=r.gpu, tp=r.tp, kv_cache_dtype=r.kv_cache_dtype)
    if profile.kind == "kernels-fit":
        return _kernel_model(kernels_config_from_profile(profile, config.per_iteration_overhead_s), r)
    if profile.kind == "roofline-fit":
        fitted = roofline_config_from_profile(profile, config.per_iteration_overhead_s)
        return RooflineCostModel(
            r.model,
            r.gpu,
            fitted,
            tp=r.tp,
            kv_cache_dtype=r.kv_cache_dtype,
            attention_dp=r.attention_dp,
            moe_ep=r.moe_ep,
        )
    return CalibratedCostModel(
        profile,
        model=r.model,
        gpu=r.gpu,
        tp=r.tp,
        kv_cache_dtype=r.kv_cache_dtype,
        per_iteration_overhead_s=config.per_iteration_overhead_s,
    )


@COST_MODELS.register("kernels")
def _kernels(config: KernelCostConfig, r: Replica) -> CostModel:
    return _kernel_model(config, r)


def _kernel_model(config: KernelCostConfig, r: Replica) -> CostModel:
    return KernelCostModel(
        r.model,
        r.gpu,
        config,
        tp=r.tp,
        kv_cache_dtype=r.kv_cache_dtype,
        backend=r.backend,
        max_num_seqs=r.max_num_seqs,
        base_dir=r.base_dir,
        attention_dp=r.attention_dp,
        moe_tp=r.moe_tp,
        moe_ep=r.moe_ep,
        backend_version=r.backend_version,
        max_num_batched_tokens=r.max_num_batched_tokens,
        speculative=r.speculative,
        disaggregated=r.disaggregated,
    )


def build_cost_model(
    config: CostModelConfig,
    *,
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int,
    kv_cache_dtype: str,
    base_dir: Path | None = None,
    expert_parallel: bool = False,
    speculative: SpeculativeConfig | None = None,
    draft_model: ModelSpec | None = None,
    backend: str = "vllm",
    max_num_seqs: int = 256,
    attention_dp: int = 1,
    moe_tp: int | None = None,
    moe_ep: int | None = None,
    backend_version: str | None = None,
    max_num_batched_tokens: int | None = None,
    disaggregated: bool = False,
) -> CostModel:
    """The cost model of one replica; ``base_dir`` resolves relative profile paths (the scenario's folder).

    ``expert_parallel`` (a mixture of experts placed whole on the GPUs) is the shorthand of
    moe_ep = tp x attention_dp; ``attention_dp``, ``moe_tp`` and ``moe_ep`` are the group's
    parallel layout (the replica is one attention-DP rank). With ``speculative`` decoding the
    target's model is wrapped in a `SpeculativeCostModel` whose draft (``draft_model``, or an
    EAGLE head) is priced by the roofline. ``max_num_batched_tokens`` (the engine's step budget)
    and ``disaggregated`` (a prefill or decode worker) decide, with the release, layout and
    speculative decoding, which of SGLang's prompt steps replay piecewise CUDA graphs.
    """
    gpus = tp * attention_dp
    if moe_ep is None:
        moe_ep = gpus if expert_parallel else (gpus // moe_tp if moe_tp else 1)
    replica = Replica(
        model, gpu, tp, kv_cache_dtype, expert_parallel or moe_ep > 1, backend, max_num_seqs, base_dir,
        attention_dp=attention_dp, moe_tp=moe_tp, moe_ep=moe_ep, backend_version=backend_version,
        max_num_batched_tokens=max_num_batched_tokens, speculative=speculative is not None,
        disaggregated=disaggregated,
    )  # fmt: skip
    if config.kind not in COST_MODELS:
        raise ProfileError(COST_MODELS.unknown(config.kind))
    builder: Builder = COST_MODELS[config.kind]
    target = builder(config, replica)
    if speculative is None:
        return target
    if speculative.method == "mtp":
        head = mtp_head(model)
        if isinstance(config, ConstantCostConfig):
            return SpeculativeCostModel(target, None, speculative.num_speculative_tokens)
        if isinstance(config, KernelCostConfig):
            # The module's layer on the target's measured kernels; inside the engine's
            # iteration: no step overhead or eager floor of its own.
            inside = config.model_copy(
                update={"per_iteration_overhead_s": 0.0, "eager_moe_layer_host_s": 0.0}
            )
            drafted = dataclasses.replace(replica, model=head)
            return SpeculativeCostModel(
                target, _kernel_model(inside, drafted), speculative.num_speculative_tokens
            )
        draft_spec: ModelSpec | None = head
    else:
        draft_spec = eagle_head(model) if speculative.method == "eagle" else draft_model
    if speculative.method == "draft_model" and draft_spec is None:
        raise ValueError("speculative method draft_model needs its draft model's spec")
    draft: CostModel | None = None
    if draft_spec is not None and not isinstance(config, ConstantCostConfig):
        base = config if isinstance(config, RooflineCostConfig) else RooflineCostConfig()
        # Draft steps run inside the engine's iteration: no scheduling overhead of their own.
        cfg = base.model_copy(update={"per_iteration_overhead_s": 0.0})
        draft = RooflineCostModel(draft_spec, gpu, cfg, tp=tp, kv_cache_dtype=kv_cache_dtype)
    return SpeculativeCostModel(target, draft, speculative.num_speculative_tokens)


def group_cost_model(
    config: CostModelConfig, plan: Plan, group: GroupPlan, base_dir: Path | None
) -> CostModel:
    """The cost model ``config`` makes for one replica of ``group`` (as the engine builds it:
    the group's model, GPU, TP, KV dtype, engine and speculative decoding)."""
    return build_cost_model(
        config,
        model=plan.model_of(group),
        gpu=group.gpu,
        tp=group.tp,
        kv_cache_dtype=group.engine.kv_cache_dtype,
        base_dir=base_dir,
        expert_parallel=group.config.expert_parallel,
        speculative=group.engine.speculative_config,
        draft_model=group.draft_model,
        backend=group.engine.backend,
        max_num_seqs=group.engine.max_num_seqs,
        attention_dp=group.config.attention_dp,
        moe_tp=group.config.moe_layout[0],
        moe_ep=group.config.moe_layout[1],
        backend_version=group.engine.backend_version,
        max_num_batched_tokens=group.engine.max_num_batched_tokens,
        disaggregated=group.config.role != "both",
    )
