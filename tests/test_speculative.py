"""Speculative decoding: configuration, expected tokens per step, the verify and draft costs."""

from __future__ import annotations

import pytest

from kvsim.cost.base import Batch, ConstantCostModel
from kvsim.cost.config import ConstantCostConfig, RooflineCostConfig
from kvsim.cost.factory import build_cost_model
from kvsim.cost.roofline import RooflineCostModel
from kvsim.cost.speculative import SpeculativeCostModel, eagle_head
from kvsim.kv_sizing import kv_capacity
from kvsim.presets import resolve_gpu, resolve_model
from kvsim.scenario.loading import load_scenario
from kvsim.scenario.schema import SpeculativeConfig

TARGET = resolve_model("llama-3-8b")
DRAFT = resolve_model("llama-3.2-1b")
H100 = resolve_gpu("h100-sxm")


def test_expected_tokens_per_step() -> None:
    # alpha = 0.8, k = 4: 1 + 0.8 + 0.64 + 0.512 + 0.4096 (Leviathan et al. 2023, eq. 1).
    cfg = SpeculativeConfig(method="ngram", num_speculative_tokens=4, acceptance_rate=0.8)
    assert cfg.expected_tokens_per_step() == pytest.approx(3.3616)
    assert cfg.expected_tokens_per_step() == pytest.approx((1 - 0.8**5) / (1 - 0.8))
    per_pos = SpeculativeConfig(method="ngram", num_speculative_tokens=2, acceptance_per_position=[0.9, 0.5])
    assert per_pos.expected_tokens_per_step() == pytest.approx(1 + 0.9 + 0.45)


def test_configuration_is_checked() -> None:
    with pytest.raises(ValueError, match="exactly one of"):
        SpeculativeConfig(method="ngram", num_speculative_tokens=2)
    with pytest.raises(ValueError, match="2 entries for num_speculative_tokens 3"):
        SpeculativeConfig(method="ngram", num_speculative_tokens=3, acceptance_per_position=[0.5, 0.5])
    with pytest.raises(ValueError, match="needs `model`"):
        SpeculativeConfig(method="draft_model", num_speculative_tokens=2, acceptance_rate=0.5)
    with pytest.raises(ValueError, match="finite number"):
        SpeculativeConfig(method="ngram", num_speculative_tokens=1, acceptance_per_position=[float("nan")])
    spec = {
        "method": "draft_model",
        "model": "llama-3.2-1b",
        "num_speculative_tokens": 4,
        "acceptance_rate": 0.7,
    }
    load_scenario({"replicas": [{"engine": {"speculative_config": spec}}]})
    with pytest.raises(Exception, match="unknown model preset 'nope'"):
        load_scenario({"replicas": [{"engine": {"speculative_config": {**spec, "model": "nope"}}}]})
    with pytest.raises(Exception, match="sliding-window model is not modelled"):
        load_scenario({"model": "mistral-7b", "replicas": [{"engine": {"speculative_config": spec}}]})


def test_the_draft_shares_memory_and_blocks() -> None:
    alone = kv_capacity(TARGET, H100, activation_reserve_bytes=2 * 2**30)
    both = kv_capacity(TARGET, H100, activation_reserve_bytes=2 * 2**30, draft_model=DRAFT)
    assert both.weight_bytes_per_shard == alone.weight_bytes_per_shard + 1_235_814_400 * 2
    # One block holds both models' KV: 131,072 + 32,768 bytes per token.
    assert both.bytes_per_block_per_shard == 16 * (131_072 + 32_768)
    assert both.num_blocks < alone.num_blocks


def test_verify_is_a_k_plus_1_token_chunk_and_the_draft_runs_k_steps() -> None:
    cfg = RooflineCostConfig()
    target = RooflineCostModel(TARGET, H100, cfg)
    draft = RooflineCostModel(DRAFT, H100, cfg.model_copy(update={"per_iteration_overhead_s": 0.0}))
    spec = SpeculativeCostModel(target, draft, 4)
    # Two requests verify 1 + 4 tokens after 1,000 and 2,000 computed tokens; one prompt chunk.
    batch = Batch(prefill_chunks=[(512, 0), (5, 1000), (5, 2000)], num_verify_chunks=2)
    want = target.step_time_s(batch) + draft.step_time_s(Batch(prefill_chunks=[(512, 0)]))
    for i in range(1, 5):  # draft step i: 2 sequences at contexts 1,000 + i and 2,000 + i
        want += draft.step_time_s(Batch(num_decode_seqs=2, decode_context_tokens=3000 + 2 * i))
    assert spec.step_time_s(batch) == pytest.approx(want, rel=1e-15)
    assert SpeculativeCostModel(target, None, 4).step_time_s(batch) == target.step_time_s(batch)


def test_factory_wraps_the_target_per_method() -> None:
    def build(method: str, **kw) -> SpeculativeCostModel:
        cfg = SpeculativeConfig(method=method, num_speculative_tokens=3, acceptance_rate=0.6, **kw)
        model = build_cost_model(
            RooflineCostConfig(),
            model=TARGET,
            gpu=H100,
            tp=1,
            kv_cache_dtype="auto",
            speculative=cfg,
            draft_model=DRAFT if method == "draft_model" else None,
        )
        assert isinstance(model, SpeculativeCostModel)
        return model

    assert build("ngram").draft is None
    eagle = build("eagle").draft
    assert isinstance(eagle, RooflineCostModel) and eagle.model.num_layers == 1
    assert isinstance(build("draft_model", model="llama-3.2-1b").draft, RooflineCostModel)
    constant = build_cost_model(
        ConstantCostConfig(step_time_s=0.01),
        model=TARGET,
        gpu=H100,
        tp=1,
        kv_cache_dtype="auto",
        speculative=SpeculativeConfig(method="eagle", num_speculative_tokens=2, acceptance_rate=0.5),
    )
    assert isinstance(constant, SpeculativeCostModel) and isinstance(constant.target, ConstantCostModel)
    assert constant.draft is None  # a constant iteration already stands for everything


def test_eagle_head_is_one_layer_of_the_target() -> None:
    head = eagle_head(TARGET)
    embed = 128256 * 4096
    assert head.num_layers == 1
    assert head.num_params == pytest.approx((TARGET.num_params - 2 * embed) / 32 + 2 * embed)
