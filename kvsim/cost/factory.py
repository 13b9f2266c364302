"""Builds the cost model a replica group's ``cost_model`` section asks for (interim)."""

from __future__ import annotations

from pathlib import Path

from kvsim.cost.base import ConstantCostModel, CostModel
from kvsim.cost.config import ConstantCostConfig, CostModelConfig, RooflineCostConfig
from kvsim.cost.roofline import RooflineCostModel
from kvsim.errors import ProfileError
from kvsim.specs import GpuSpec, ModelSpec


def build_cost_model(
    config: CostModelConfig,
    *,
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int,
    kv_cache_dtype: str,
    base_dir: Path | None = None,
) -> CostModel:
    if isinstance(config, ConstantCostConfig):
        return ConstantCostModel(config.step_time_s, gpu.pcie_bandwidth_bytes_per_s)
    if isinstance(config, RooflineCostConfig):
        return RooflineCostModel(model, gpu, config, tp=tp, kv_cache_dtype=kv_cache_dtype)
    raise ProfileError(f"cost model {config.kind!r} is not available yet")
