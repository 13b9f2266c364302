"""The cost of speculative decoding: the target's verify pass plus the draft's proposals.

A verify step of a request with c computed tokens and k draft tokens is a (k + 1)-token
chunk after c tokens for the target (`Batch.prefill_chunks`, the last
``Batch.num_verify_chunks`` entries), so every cost model prices it as it prices a prefill
chunk: FLOPs for k + 1 tokens, the weights once, the KV read once. The draft then runs k
autoregressive steps over the n verifying requests:

    iteration = target(batch) + sum_{i=1..k} draft(decode n seqs, contexts c_j + i)
                + draft(prompt chunks)          (draft_model and eagle prefill the prompts too)

    method        draft cost                                  draft KV
    draft_model   the draft model's own cost model            its own, in the same blocks
    eagle         one decoder layer of the target + LM head   none (kvsim's simplification)
    mtp           the target's own multi-token-prediction     none (as eagle)
                  layer (`mtp_head`) + LM head, on the
                  target's cost model kind
    ngram         none (prompt lookup on the CPU)             none

A constant cost model stands for the whole iteration: no draft cost is added to it.
"""

from __future__ import annotations

import numpy as np

from kvsim.cost.base import Batch, CostModel
from kvsim.model.moe import embedding_params, expert_params_per_layer, non_expert_layer_params
from kvsim.model.specs import ModelSpec


def eagle_head(model: ModelSpec) -> ModelSpec:
    """An EAGLE-style draft head: one dense decoder layer shaped like the target's, and its LM head."""
    h = model.hidden_size
    if model.is_moe:  # a dense layer of the target's width: attention plus one expert-wide MLP
        layer: float = 2 * h * (model.num_attention_heads + model.num_kv_heads) * model.head_dim
        layer += 3 * h * model.intermediate_size
    else:
        layer = (model.num_params - embedding_params(model)) / model.num_layers
    return model.model_copy(
        update={
            "name": f"{model.name}-eagle",
            "num_layers": 1,
            "num_params": layer + 2 * model.vocab_size * model.hidden_size,
            "num_active_params": None,
            "num_experts": None,
            "num_experts_per_token": None,
            "num_shared_experts": 0,
            "num_dense_layers": 0,
            "expert_weight_dtype": None,
            "module_weight_dtypes": {},
            "sliding_window": None,
            "num_sliding_window_layers": None,
            "num_sink_tokens": 0,
            "tie_word_embeddings": False,
        }
    )


def mtp_head(model: ModelSpec) -> ModelSpec:
    """The draft of ``method: mtp``: the model's own multi-token-prediction module, one decoder
    layer shaped like its last (attention as the target's full-attention layers, the MoE with
    every routed and shared expert) that reads the previous token's hidden state through a
    2h x h projection, and the target's LM head (DeepSeek-V3 technical report, arXiv
    2412.19437, section 2.2; Qwen3.5's ``mtp_num_hidden_layers``). With several MTP layers
    (``num_mtp_layers``) the engines measured here chain the first (TensorRT-LLM's MTP with
    ``num_nextn_predict_layers`` > 1 reuses it; SGLang's EAGLE over MTP the same), so each draft
    step is one layer. Its parameter count (for the roofline) takes the target's non-expert
    layer parameters spread evenly over its layers."""
    if model.num_mtp_layers < 1:
        raise ValueError(f"{model.name} has no multi-token-prediction layers (num_mtp_layers 0)")
    h = model.hidden_size
    layer = non_expert_layer_params(model) / model.num_layers + 2.0 * h * h
    if model.is_moe:
        assert model.num_experts is not None
        layer += (model.num_experts + model.num_shared_experts) * expert_params_per_layer(model)
    return model.model_copy(
        update={
            "name": f"{model.name}-mtp",
            "num_layers": 1,
            "num_params": layer + embedding_params(model),
            "num_active_params": None,
            "num_dense_layers": 0,
            "module_weight_dtypes": {k: v for k, v in model.module_weight_dtypes.items() if k != "dense_mlp"},
            "num_mtp_layers": 0,
            "num_linear_attention_layers": 0,
            "sliding_window": None,
            "num_sliding_window_layers": None,
            "num_sink_tokens": 0,
        }
    )


class SpeculativeCostModel:
    """A target cost model plus the draft's proposals for the requests being verified."""

    def __init__(self, target: CostModel, draft: CostModel | None, num_speculative_tokens: int) -> None:
        if num_speculative_tokens < 1:
            raise ValueError('"num_speculative_tokens" must be >= 1')
        self.target = target
        self.draft = draft
        self.k = num_speculative_tokens

    def draft_time_s(self, batch: Batch) -> float:
        """The draft's share of an iteration: its prompt chunks and k proposal steps."""
        draft, n = self.draft, batch.num_verify_chunks
        if draft is None:
            return 0.0
        chunks = batch.prefill_chunks
        prompts = chunks[: len(chunks) - n]
        t = draft.step_time_s(Batch(prefill_chunks=list(prompts))) if prompts else 0.0
        if n:
            ctx = sum(c for _, c in chunks[len(chunks) - n :])
            for i in range(1, self.k + 1):
                t += draft.step_time_s(Batch(num_decode_seqs=n, decode_context_tokens=ctx + i * n))
        return t

    def step_time_s(self, batch: Batch) -> float:
        return self.target.step_time_s(batch) + self.draft_time_s(batch)

    def decode_steps_s(self, num_seqs: int, context_tokens: np.ndarray) -> np.ndarray:
        # Runs of plain decodes happen only without speculation (nobody verifies): the target's.
        return self.target.decode_steps_s(num_seqs, context_tokens)

    def pcie_transfer_s(self, num_bytes: float) -> float:
        return self.target.pcie_transfer_s(num_bytes)
