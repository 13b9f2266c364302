"""Analytic roofline cost model with tensor parallelism.

One iteration on one TP shard (all figures per GPU: weights, heads and KV split over TP)
is the sum of two roofline terms, the all-reduces and fixed overheads:

    linear   = max((2 * P_lin/tp * tokens + 2 * h * V/tp * seqs) / (peak * compute_eff),
                   (P_lin + h * V)/tp * bytes_per_weight / (hbm_bw * memory_eff))
    attention= max(4 * layers * heads/tp * head_dim * pairs / (peak * compute_eff),
                   kv_bytes_per_token_shard * kv_tokens / (hbm_bw * kv_memory_eff))
    comm     = 2 * layers * (allreduce_latency + 2 (tp-1)/tp * tokens * h * act_bytes / allreduce_bw)
               (tp > 1: one all-reduce after attention, one after the MLP, ring algorithm;
               a model whose q/k norms span all heads, ``qk_norm_across_heads``, one more of
               two float32 a token)
    time     = linear + attention + comm + layers * per_layer_overhead + per_iteration_overhead

With ``combine: sum`` each max(...) above becomes a sum: compute and memory traffic do
not overlap (a CPU core streaming weights, then computing; benchmarks/vllm_latency.py).

P_lin is the parameters of the transformer layers (all params less the embedding and the
LM head, counted once when tied); the LM head runs on one row per sequence (``seqs``:
decoding requests plus prefill chunks), as engines compute logits only for sampled positions.

Mixture of experts (`kvsim.model.moe`): a step reads the non-expert weights, the shared experts
and only the routed experts its tokens activate, E[distinct experts](tokens) per MoE
layer, instead of every parameter at every batch size; a token's FLOPs are its top-k
experts'. With ``expert_parallel`` each GPU holds E/tp whole experts and the MoE layers
exchange tokens by all-to-all instead of all-reducing the MLP output: per MoE layer two
phases (dispatch, combine), each GPU sending the k copies of its 1/tp share of the tokens,
(tp-1)/tp of them to other GPUs (tokens spread over the GPUs, as with vLLM's data-parallel
attention); expected per-GPU weight traffic is the same as under TP, load imbalance is
not modelled. All-to-all phases count in ``num_allreduces`` / ``allreduce_bus_bytes``.

Attention data parallelism (``attention_dp`` = D ranks of tp GPUs, one model per rank): the
experts span all N = tp x D GPUs, so a rank's step reads the experts its instance's tokens
(its own x D, ranks in lockstep) activate, 1/N of each per GPU; its FLOPs per token are
unchanged (D x the tokens over D x the GPUs). Each layer keeps the rank's attention
all-reduce (tp > 1; dense layers their MLP's too) and its MoE layers exchange tokens:
with ``moe_ep`` = N (expert parallelism) dispatch and combine all-to-alls, each GPU
sending k copies of its 1/tp share of the rank's tokens, (N-1)/N of them away (the formula
above with N for tp); with the experts split (moe_ep < N) an all-gather and a
reduce-scatter of the instance's tokens over the D ranks, (D-1) x h x act_bytes bus bytes
per token each (ring). moe_ep between 1 and N without attention DP is priced as TP.
Attended pairs of a prefill chunk of q new tokens after c cached ones: q*c + q(q+1)/2
(causal); of a decode, its context. KV tokens touched: q + c per chunk (read the cache,
write the chunk), the context per decode.

Linear-attention layers (Qwen3.5's Gated DeltaNet, `kvsim.cost.linear_attention`): "layers"
in the attention term counts the full-attention ones only (their KV alone is per token);
each scheduled request (decoding, or a prefill chunk) also reads and writes its constant
state in every linear layer, counted with the KV bytes, and each token costs the delta
rule's FLOPs, counted with the attention FLOPs.

`RooflineCostModel.terms` returns these quantities unscaled (FLOPs, bytes, counts) so
that `kvsim.cost.fit` can fit the parameters without re-deriving the formulas.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kvsim.cost.base import Batch
from kvsim.cost.config import RooflineCostConfig
from kvsim.cost.linear_attention import linear_roofline_terms
from kvsim.model.kv_sizing import kv_bytes_per_token
from kvsim.model.moe import (
    active_layer_params,
    expected_distinct_experts,
    expert_params_per_layer,
    module_weight_bytes_delta,
    non_expert_layer_params,
    num_moe_layers,
    shared_expert_params,
)
from kvsim.model.specs import WEIGHT_DTYPE_BYTES, GpuSpec, ModelSpec, compute_dtype


class RooflineTerms(NamedTuple):
    """What one iteration does, before any efficiency or rate is applied."""

    linear_flops: float
    weight_bytes: float
    attention_flops: float
    kv_bytes: float
    num_allreduces: int
    allreduce_bus_bytes: float
    num_layers: int


def _tally(batch: Batch) -> tuple[int, int, int, int]:
    """(attended pairs, KV tokens touched, tokens, sequences) of an iteration.

    Attended pairs of a prefill chunk of q new tokens after c cached ones: q*c + q(q+1)/2
    (causal); of a decode, its context. KV tokens: q + c per chunk, the context per decode.
    """
    pairs = kv_tokens = batch.decode_context_tokens
    n_tokens = n_seqs = batch.num_decode_seqs
    for q, c in batch.prefill_chunks:
        pairs += q * c + q * (q + 1) // 2
        kv_tokens += q + c
        n_tokens += q
        n_seqs += 1
    return pairs, kv_tokens, n_tokens, n_seqs


def layer_linear_params(model: ModelSpec) -> float:
    """Parameters used per token by the transformer layers (excludes embedding and LM head).

    A mixture of experts counts its structure (`kvsim.model.moe.active_layer_params`).
    """
    if model.is_moe:
        return active_layer_params(model)
    embed = model.vocab_size * model.hidden_size * (1 if model.tie_word_embeddings else 2)
    return max(model.active_params - embed, 0.5 * model.active_params)


class RooflineCostModel:
    """Iteration time from datasheet peaks scaled by efficiency factors, per TP shard."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        config: RooflineCostConfig | None = None,
        *,
        tp: int = 1,
        kv_cache_dtype: str = "auto",
        expert_parallel: bool = False,
        attention_dp: int = 1,
        moe_ep: int | None = None,
    ) -> None:
        if tp < 1 or attention_dp < 1:
            raise ValueError('"tp" and "attention_dp" must be >= 1')
        gpus = tp * attention_dp  # the instance the experts span
        moe_ep = (gpus if expert_parallel else 1) if moe_ep is None else moe_ep
        if (expert_parallel or moe_ep > 1) and not model.is_moe:
            raise ValueError('"expert_parallel" needs a mixture-of-experts model')
        if moe_ep < 1 or gpus % moe_ep:
            raise ValueError(f'"moe_ep" {moe_ep} must divide tp x attention_dp = {gpus}')
        cfg = config or RooflineCostConfig()
        self.model, self.gpu, self.config, self.tp = model, gpu, cfg, tp
        self.attention_dp, self.moe_ep = attention_dp, moe_ep
        self.expert_parallel = moe_ep == gpus > 1
        wbytes = WEIGHT_DTYPE_BYTES[model.weight_dtype]
        # Activations travel in 16-bit even when weights are quantised.
        act_bytes = 2.0 if wbytes < 2 else wbytes
        lin_params = layer_linear_params(model)
        lm_params = model.hidden_size * model.vocab_size
        self._linear_flops_per_token = 2.0 * lin_params / tp
        self._lm_flops_per_seq = 2.0 * lm_params / tp
        self._attn_flops_per_pair = (
            4.0 * model.num_kv_layers * (model.num_attention_heads / tp) * model.head_dim
        )
        self._gdn_flops_per_token, self._gdn_state_bytes_per_seq = linear_roofline_terms(model, tp)
        delta = module_weight_bytes_delta(model)  # parts stored at their own precision
        self._weight_bytes = ((lin_params + lm_params) * wbytes + delta) / tp
        # Mixture of experts: the constant part (non-expert layers, LM head, shared experts)
        # plus the bytes of one distinct routed expert over all MoE layers (per GPU).
        self._expert_bytes = 0.0
        self._distinct: dict[int, float] = {}  # expected distinct experts by the tokens routed
        if model.is_moe:
            ebytes = WEIGHT_DTYPE_BYTES[model.expert_weight_dtype or model.weight_dtype]
            dense = non_expert_layer_params(model) + shared_expert_params(model) + lm_params
            self._weight_bytes = (dense * wbytes + delta) / tp
            self._expert_bytes = num_moe_layers(model) * expert_params_per_layer(model) * ebytes / gpus
        self._kv_bytes_per_token = kv_bytes_per_token(model, kv_cache_dtype, tp)
        self._flops_rate = gpu.peak_flops(compute_dtype(model.weight_dtype, gpu)) * cfg.compute_efficiency
        self._bytes_rate = gpu.hbm_bandwidth_bytes_per_s * cfg.memory_efficiency
        self._kv_bytes_rate = gpu.hbm_bandwidth_bytes_per_s * (
            cfg.kv_memory_efficiency or cfg.memory_efficiency
        )
        self._sum = cfg.combine == "sum"
        self._fixed_s = model.num_layers * cfg.per_layer_overhead_s + cfg.per_iteration_overhead_s
        self._num_allreduces = 2 * model.num_layers if tp > 1 else 0
        self._ar_bus_bytes_per_token = (
            self._num_allreduces * 2.0 * (tp - 1) / tp * model.hidden_size * act_bytes
        )
        if self.expert_parallel or (attention_dp > 1 and model.is_moe):
            # MoE layers: the rank's attention all-reduce (tp > 1) + the exchange (see above).
            n_moe = num_moe_layers(model)
            k = model.num_experts_per_token or 1
            n_allreduce = (2 * model.num_layers - n_moe) if tp > 1 else 0
            if self.expert_parallel:  # dispatch + combine all-to-alls over the instance
                moe_bytes = 2 * n_moe * k * model.hidden_size * act_bytes * (gpus - 1) / gpus / tp
            else:  # all-gather + reduce-scatter of the instance's tokens over the D ranks
                moe_bytes = 2 * n_moe * (attention_dp - 1) * model.hidden_size * act_bytes
            self._num_allreduces = n_allreduce + 2 * n_moe
            self._ar_bus_bytes_per_token = (
                n_allreduce * 2.0 * (tp - 1) / tp * model.hidden_size * act_bytes + moe_bytes
            )
        if model.qk_norm_across_heads and tp > 1:  # q's and k's sums of squares: two float32 a token
            self._num_allreduces += model.num_layers
            self._ar_bus_bytes_per_token += model.num_layers * 2.0 * (tp - 1) / tp * 2 * 4
        self.allreduce_latency_s = (
            cfg.allreduce_latency_s if cfg.allreduce_latency_s is not None else gpu.interconnect_latency_s
        )
        self.allreduce_bandwidth_bytes_per_s = (
            cfg.allreduce_bandwidth_bytes_per_s or gpu.interconnect_bandwidth_bytes_per_s
        )
        self._ar_fixed_s = self._num_allreduces * self.allreduce_latency_s
        self._ar_s_per_token = self._ar_bus_bytes_per_token / self.allreduce_bandwidth_bytes_per_s
        self._pcie_bw = gpu.pcie_bandwidth_bytes_per_s

    def terms(self, batch: Batch) -> RooflineTerms:
        """The iteration's FLOPs, bytes and all-reduce volume on one shard."""
        pairs, kv_tokens, n_tokens, n_seqs = _tally(batch)
        return RooflineTerms(
            linear_flops=self._linear_flops_per_token * n_tokens + self._lm_flops_per_seq * n_seqs,
            weight_bytes=self._weights_read(n_tokens, batch.moe_tokens) if n_tokens else 0.0,
            attention_flops=self._attn_flops_per_pair * pairs + self._gdn_flops_per_token * n_tokens,
            kv_bytes=self._kv_bytes_per_token * kv_tokens + self._gdn_state_bytes_per_seq * n_seqs,
            num_allreduces=self._num_allreduces if n_tokens else 0,
            allreduce_bus_bytes=self._ar_bus_bytes_per_token * n_tokens,
            num_layers=self.model.num_layers if n_tokens else 0,
        )

    # Hot path: called once per engine iteration; plain float arithmetic, no numpy.
    def step_time_s(self, batch: Batch) -> float:
        pairs, kv_tokens, n_tokens, n_seqs = _tally(batch)
        if n_tokens == 0:
            return 0.0
        t = self._linear_s(n_tokens, n_seqs, batch.moe_tokens)
        attn_compute = (
            self._attn_flops_per_pair * pairs + self._gdn_flops_per_token * n_tokens
        ) / self._flops_rate
        attn_memory = (
            self._kv_bytes_per_token * kv_tokens + self._gdn_state_bytes_per_seq * n_seqs
        ) / self._kv_bytes_rate
        t += attn_compute + attn_memory if self._sum else max(attn_compute, attn_memory)
        t += self._ar_fixed_s + self._ar_s_per_token * n_tokens
        t += self._fixed_s
        return t

    def _linear_s(self, n_tokens: int, n_seqs: int, moe_tokens: int | None = None) -> float:
        flops = self._linear_flops_per_token * n_tokens + self._lm_flops_per_seq * n_seqs
        weights = self._weights_read(n_tokens, moe_tokens)
        if self._sum:
            return flops / self._flops_rate + weights / self._bytes_rate
        return max(flops / self._flops_rate, weights / self._bytes_rate)

    def _weights_read(self, n_tokens: int, moe_tokens: int | None = None) -> float:
        """Weight bytes one step over ``n_tokens`` tokens reads on one GPU (``moe_tokens``:
        the instance's tokens in the experts, `Batch.moe_tokens`)."""
        if not self._expert_bytes:
            return self._weight_bytes
        routed = n_tokens * self.attention_dp if moe_tokens is None else max(moe_tokens, n_tokens)
        distinct = self._distinct.get(routed)
        if distinct is None:
            m = self.model
            assert m.num_experts is not None and m.num_experts_per_token is not None
            distinct = expected_distinct_experts(  # over the tokens of every attention-DP rank
                m.num_experts,
                m.num_experts_per_token,
                routed,
                self.config.expert_routing_zipf_exponent,
            )
            self._distinct[routed] = distinct
        return self._weight_bytes + distinct * self._expert_bytes

    def expected_distinct_experts(self, n_tokens: int) -> float:
        """Routed experts a step over ``n_tokens`` tokens activates per MoE layer (0 if dense)."""
        if not self._expert_bytes:
            return 0.0
        self._weights_read(n_tokens)
        return self._distinct[n_tokens * self.attention_dp]

    def decode_steps_s(self, num_seqs: int, context_tokens: np.ndarray) -> np.ndarray:
        # Same operations, in the same order, as step_time_s for a pure-decode batch.
        ctx = np.asarray(context_tokens, dtype=np.float64)
        if num_seqs == 0:
            return np.zeros(len(ctx))
        t_linear = self._linear_s(num_seqs, num_seqs)
        attn_compute = (
            self._attn_flops_per_pair * ctx + self._gdn_flops_per_token * num_seqs
        ) / self._flops_rate
        attn_memory = (
            self._kv_bytes_per_token * ctx + self._gdn_state_bytes_per_seq * num_seqs
        ) / self._kv_bytes_rate
        attn = attn_compute + attn_memory if self._sum else np.maximum(attn_compute, attn_memory)
        t = t_linear + attn
        t = t + (self._ar_fixed_s + self._ar_s_per_token * num_seqs)
        return t + self._fixed_s

    def pcie_transfer_s(self, num_bytes: float) -> float:
        return num_bytes / self._pcie_bw
