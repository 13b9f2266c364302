"""Model and GPU presets (interim: being completed with citations)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.specs import GpuSpec, ModelSpec

if TYPE_CHECKING:
    from kvsim.config import Scenario

MODEL_PRESETS: dict[str, ModelSpec] = {
    "llama-3-8b": ModelSpec(
        name="llama-3-8b", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
        head_dim=128, intermediate_size=14336, vocab_size=128256, num_params=8.03e9, max_model_len=8192,
    ),
    "llama-2-7b": ModelSpec(
        name="llama-2-7b", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=32,
        head_dim=128, intermediate_size=11008, vocab_size=32000, num_params=6.74e9, max_model_len=4096,
    ),
}
GPU_PRESETS: dict[str, GpuSpec] = {
    "h100-sxm": GpuSpec(
        name="h100-sxm", memory_bytes=80 * 10**9, hbm_bandwidth_bytes_per_s=3.35e12, bf16_flops=989e12,
        fp16_flops=989e12, fp8_flops=1979e12, interconnect_bandwidth_bytes_per_s=450e9,
        pcie_bandwidth_bytes_per_s=64e9,
    ),
    "a100-80gb": GpuSpec(
        name="a100-80gb", memory_bytes=80 * 10**9, hbm_bandwidth_bytes_per_s=2.039e12, bf16_flops=312e12,
        fp16_flops=312e12, interconnect_bandwidth_bytes_per_s=300e9, pcie_bandwidth_bytes_per_s=32e9,
    ),
}


def resolve_model(model: str | ModelSpec) -> ModelSpec:
    if isinstance(model, ModelSpec):
        return model
    return MODEL_PRESETS[model.lower()]


def resolve_gpu(gpu: str | GpuSpec) -> GpuSpec:
    if isinstance(gpu, GpuSpec):
        return gpu
    return GPU_PRESETS[gpu.lower()]


def check_scenario_references(scenario: Scenario) -> list[tuple[str, str]]:
    problems = []
    if isinstance(scenario.model, str) and scenario.model.lower() not in MODEL_PRESETS:
        problems.append(("model", f"unknown model preset {scenario.model!r}"))
    for i, g in enumerate(scenario.replicas):
        if isinstance(g.gpu, str) and g.gpu.lower() not in GPU_PRESETS:
            problems.append((f"replicas.{i}.gpu", f"unknown GPU preset {g.gpu!r}"))
    return problems
