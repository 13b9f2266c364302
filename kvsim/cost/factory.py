"""Building the cost model a scenario asks for: the one entry point the engine calls.

    build_cost_model(config, model=..., gpu=..., tp=..., kv_cache_dtype=...)
        constant           -> ConstantCostModel
        roofline           -> RooflineCostModel
        profile (kernels)  -> CalibratedCostModel
        profile (roofline-fit) -> RooflineCostModel with the fitted parameters

A profile that is missing, malformed, or made for another model, dtype, KV dtype, TP
degree or GPU raises `ProfileError`; it is never silently used (the scenario checks,
`kvsim.scenario.checks`, report the same problems with their field paths).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kvsim.cost.base import ConstantCostModel, CostModel
from kvsim.cost.calibrated import CalibratedCostModel
from kvsim.cost.config import (
    ConstantCostConfig,
    CostModelConfig,
    ProfileCostConfig,
    RooflineCostConfig,
)
from kvsim.cost.profile import Profile, check_profile_matches, load_profile
from kvsim.cost.roofline import RooflineCostModel
from kvsim.cost.speculative import SpeculativeCostModel, eagle_head
from kvsim.errors import ProfileError
from kvsim.specs import GpuSpec, ModelSpec

if TYPE_CHECKING:
    from kvsim.scenario.schema import SpeculativeConfig


def roofline_config_from_profile(
    profile: Profile, per_iteration_overhead_s: float | None = None
) -> RooflineCostConfig:
    """The fitted RooflineCostConfig stored in a roofline-fit profile."""
    params = dict(profile.data["roofline"])
    if per_iteration_overhead_s is not None:
        params["per_iteration_overhead_s"] = per_iteration_overhead_s
    return RooflineCostConfig(**params)


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
) -> CostModel:
    """The cost model of one replica; ``base_dir`` resolves relative profile paths (the scenario's folder).

    ``expert_parallel`` (a mixture of experts placed whole on the GPUs) is priced by the roofline.
    With ``speculative`` decoding the target's model is wrapped in a `SpeculativeCostModel`
    whose draft (``draft_model``, or an EAGLE head) is priced by the roofline.
    """
    target = _target_cost_model(
        config,
        model=model,
        gpu=gpu,
        tp=tp,
        kv_cache_dtype=kv_cache_dtype,
        base_dir=base_dir,
        expert_parallel=expert_parallel,
    )
    if speculative is None:
        return target
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


def _target_cost_model(
    config: CostModelConfig,
    *,
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int,
    kv_cache_dtype: str,
    base_dir: Path | None,
    expert_parallel: bool,
) -> CostModel:
    if isinstance(config, ConstantCostConfig):
        return ConstantCostModel(config.step_time_s, gpu.pcie_bandwidth_bytes_per_s)
    if isinstance(config, RooflineCostConfig):
        return RooflineCostModel(
            model, gpu, config, tp=tp, kv_cache_dtype=kv_cache_dtype, expert_parallel=expert_parallel
        )
    if isinstance(config, ProfileCostConfig):
        profile = load_profile(config.profile, base_dir)
        check_profile_matches(profile, model=model, gpu=gpu, tp=tp, kv_cache_dtype=kv_cache_dtype)
        if profile.kind == "roofline-fit":
            cfg = roofline_config_from_profile(profile, config.per_iteration_overhead_s)
            return RooflineCostModel(
                model, gpu, cfg, tp=tp, kv_cache_dtype=kv_cache_dtype, expert_parallel=expert_parallel
            )
        return CalibratedCostModel(
            profile,
            model=model,
            gpu=gpu,
            tp=tp,
            kv_cache_dtype=kv_cache_dtype,
            per_iteration_overhead_s=config.per_iteration_overhead_s,
        )
    raise ProfileError(f"unknown cost model config {type(config).__name__}")
