"""Building the cost model a scenario asks for: the one entry point the engine calls.

    build_cost_model(config, model=..., gpu=..., tp=..., kv_cache_dtype=...)
        constant           -> ConstantCostModel
        roofline           -> RooflineCostModel
        profile (kernels)  -> CalibratedCostModel
        profile (roofline-fit) -> RooflineCostModel with the fitted parameters

A profile that is missing, malformed, or made for another model, dtype, KV dtype, TP
degree or GPU raises `ProfileError`; it is never silently used. `check_cost_references`
reports the same problems as ``(field_path, rule)`` pairs for the scenario validator.
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
from kvsim.errors import KvsimError, ProfileError
from kvsim.presets import resolve_gpu, resolve_model
from kvsim.specs import GpuSpec, ModelSpec

if TYPE_CHECKING:
    from kvsim.config import Scenario


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
) -> CostModel:
    """The cost model of one replica; ``base_dir`` resolves relative profile paths (the scenario's folder)."""
    if isinstance(config, ConstantCostConfig):
        return ConstantCostModel(config.step_time_s, gpu.pcie_bandwidth_bytes_per_s)
    if isinstance(config, RooflineCostConfig):
        return RooflineCostModel(model, gpu, config, tp=tp, kv_cache_dtype=kv_cache_dtype)
    if isinstance(config, ProfileCostConfig):
        profile = load_profile(config.profile, base_dir)
        check_profile_matches(profile, model=model, gpu=gpu, tp=tp, kv_cache_dtype=kv_cache_dtype)
        if profile.kind == "roofline-fit":
            cfg = roofline_config_from_profile(profile, config.per_iteration_overhead_s)
            return RooflineCostModel(model, gpu, cfg, tp=tp, kv_cache_dtype=kv_cache_dtype)
        return CalibratedCostModel(
            profile,
            model=model,
            gpu=gpu,
            tp=tp,
            kv_cache_dtype=kv_cache_dtype,
            per_iteration_overhead_s=config.per_iteration_overhead_s,
        )
    raise ProfileError(f"unknown cost model config {type(config).__name__}")


def check_cost_references(scenario: Scenario, base_dir: Path | None = None) -> list[tuple[str, str]]:
    """Problems with the profiles a scenario names, as ``(field_path, rule)`` pairs."""
    problems: list[tuple[str, str]] = []
    try:
        model = resolve_model(scenario.model)
    except LookupError:
        return problems  # reported by the presets check
    for i, group in enumerate(scenario.replicas):
        cfg = group.cost_model
        if not isinstance(cfg, ProfileCostConfig):
            continue
        try:
            gpu = resolve_gpu(group.gpu)
        except LookupError:
            continue
        try:
            profile = load_profile(cfg.profile, base_dir)
            check_profile_matches(
                profile, model=model, gpu=gpu, tp=group.tp, kv_cache_dtype=group.engine.kv_cache_dtype
            )
        except KvsimError as exc:
            problems.append((f"replicas.{i}.cost_model.profile", str(exc)))
    return problems
