"""Analytic roofline cost model (interim version; tensor parallelism being completed).

One iteration takes max(compute time, memory time) plus fixed overheads:

    FLOPs  = 2 * active_params / tp * tokens                  (linear layers)
           + 4 * layers * heads/tp * head_dim * attended pairs  (QK^T and PV)
    bytes  = weight_bytes / tp + kv_bytes_per_token_shard * (tokens read + written)
    time   = max(FLOPs / (peak * compute_efficiency), bytes / (bw * memory_efficiency))
           + layers * per_layer_overhead_s + per_iteration_overhead_s + all-reduces

Attended pairs of a prefill chunk of q new tokens after c cached ones: q*c + q(q+1)/2
(causal); of a decode: its context length.
"""

from __future__ import annotations

import numpy as np

from kvsim.cost.base import Batch
from kvsim.cost.config import RooflineCostConfig
from kvsim.kv_sizing import kv_bytes_per_token
from kvsim.specs import KV_DTYPE_BYTES, GpuSpec, ModelSpec


class RooflineCostModel:
    """Iteration time from datasheet peaks scaled by efficiency factors."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        config: RooflineCostConfig | None = None,
        *,
        tp: int = 1,
        kv_cache_dtype: str = "auto",
    ) -> None:
        cfg = config or RooflineCostConfig()
        self.model, self.gpu, self.config, self.tp = model, gpu, cfg, tp
        wbytes = KV_DTYPE_BYTES[model.weight_dtype]
        self._lin_flops_per_token = 2.0 * model.active_params / tp
        heads = model.num_attention_heads / tp
        self._attn_flops_per_pair = 4.0 * model.num_layers * heads * model.head_dim
        self._weight_bytes = model.num_params * wbytes / tp
        self._kv_bytes_per_token = kv_bytes_per_token(model, kv_cache_dtype, tp)
        self._flops_rate = gpu.peak_flops(model.weight_dtype) * cfg.compute_efficiency
        self._bytes_rate = gpu.hbm_bandwidth_bytes_per_s * cfg.memory_efficiency
        self._fixed_s = model.num_layers * cfg.per_layer_overhead_s + cfg.per_iteration_overhead_s
        if tp > 1:
            lat = (
                cfg.allreduce_latency_s if cfg.allreduce_latency_s is not None else gpu.interconnect_latency_s
            )
            bw = cfg.allreduce_bandwidth_bytes_per_s or gpu.interconnect_bandwidth_bytes_per_s
            self._ar_fixed_s = 2 * model.num_layers * lat
            self._ar_s_per_token = 2 * model.num_layers * 2 * (tp - 1) / tp * model.hidden_size * wbytes / bw
        else:
            self._ar_fixed_s = 0.0
            self._ar_s_per_token = 0.0
        self._host_bw = gpu.pcie_bandwidth_bytes_per_s

    def step_time_s(self, batch: Batch) -> float:
        pairs = batch.decode_context_tokens
        kv_tokens = batch.decode_context_tokens
        n_tokens = batch.num_decode_seqs
        for q, c in batch.prefill_chunks:
            pairs += q * c + q * (q + 1) // 2
            kv_tokens += q + c
            n_tokens += q
        if n_tokens == 0:
            return 0.0
        flops = self._lin_flops_per_token * n_tokens + self._attn_flops_per_pair * pairs
        nbytes = self._weight_bytes + self._kv_bytes_per_token * kv_tokens
        t = max(flops / self._flops_rate, nbytes / self._bytes_rate)
        if self._ar_fixed_s:
            t += self._ar_fixed_s + self._ar_s_per_token * n_tokens
        return t + self._fixed_s

    def decode_steps_s(self, num_seqs: int, context_tokens: np.ndarray) -> np.ndarray:
        ctx = np.asarray(context_tokens, dtype=np.float64)
        flops = self._lin_flops_per_token * num_seqs + self._attn_flops_per_pair * ctx
        nbytes = self._weight_bytes + self._kv_bytes_per_token * ctx
        t = np.maximum(flops / self._flops_rate, nbytes / self._bytes_rate)
        if self._ar_fixed_s:
            t = t + (self._ar_fixed_s + self._ar_s_per_token * num_seqs)
        return t + self._fixed_s

    def host_transfer_s(self, num_bytes: float) -> float:
        return num_bytes / self._host_bw
