"""KV-cache sizing (interim: being completed)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvsim.specs import KV_DTYPE_BYTES, GpuSpec, ModelSpec

GIB = 1024**3


def kv_dtype_bytes(model: ModelSpec, kv_cache_dtype: str) -> float:
    return KV_DTYPE_BYTES[model.weight_dtype if kv_cache_dtype == "auto" else kv_cache_dtype]


def kv_bytes_per_token(model: ModelSpec, kv_cache_dtype: str = "auto", tp: int = 1) -> float:
    """KV bytes one token occupies on one tensor-parallel shard (tp=1: the whole model)."""
    b = kv_dtype_bytes(model, kv_cache_dtype)
    if model.is_mla:
        return model.num_layers * (model.kv_lora_rank + model.qk_rope_head_dim) * b  # type: ignore[operator]
    heads = max(1, model.num_kv_heads // tp)
    return 2 * model.num_layers * heads * model.head_dim * b


@dataclass(frozen=True)
class KvCapacity:
    bytes_per_token: float
    bytes_per_token_per_shard: float
    block_size: int
    bytes_per_block_per_shard: float
    weight_bytes_per_shard: float
    activation_reserve_bytes: float
    kv_bytes_per_shard: float
    num_blocks: int

    @property
    def num_tokens(self) -> int:
        return self.num_blocks * self.block_size


def kv_capacity(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    tp: int = 1,
    kv_cache_dtype: str = "auto",
    block_size: int = 16,
    gpu_memory_utilization: float = 0.9,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    activation_reserve_bytes: float | None = None,
    num_gpu_blocks_override: int | None = None,
) -> KvCapacity:
    per_tok_shard = kv_bytes_per_token(model, kv_cache_dtype, tp)
    weights = model.num_params * KV_DTYPE_BYTES[model.weight_dtype] / tp
    act = activation_reserve_bytes if activation_reserve_bytes is not None else 2 * GIB
    kv_bytes = gpu.memory_bytes * gpu_memory_utilization - weights - act
    per_block = per_tok_shard * block_size
    n = num_gpu_blocks_override if num_gpu_blocks_override else max(0, math.floor(kv_bytes / per_block))
    return KvCapacity(
        bytes_per_token=kv_bytes_per_token(model, kv_cache_dtype, 1),
        bytes_per_token_per_shard=per_tok_shard,
        block_size=block_size,
        bytes_per_block_per_shard=per_block,
        weight_bytes_per_shard=weights,
        activation_reserve_bytes=act,
        kv_bytes_per_shard=kv_bytes,
        num_blocks=n,
    )
