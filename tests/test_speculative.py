"""Speculative decoding: configuration, expected tokens per step, the verify and draft costs."""

from __future__ import annotations

import pytest
from conftest import spec as request_spec
from pandas.testing import assert_frame_equal

import kvsim
from kvsim.core.block_pool import BlockPool
from kvsim.core.request_state import Request, Status
from kvsim.core.scheduler import Scheduler
from kvsim.cost.base import Batch, ConstantCostModel
from kvsim.cost.config import ConstantCostConfig, KernelCostConfig, RooflineCostConfig
from kvsim.cost.factory import build_cost_model
from kvsim.cost.kernels import KernelCostModel
from kvsim.cost.roofline import RooflineCostModel
from kvsim.cost.speculative import SpeculativeCostModel, eagle_head, mtp_head
from kvsim.model.kv_sizing import kv_capacity
from kvsim.model.presets import resolve_gpu, resolve_model
from kvsim.scenario.loading import load_scenario
from kvsim.scenario.schema import EngineConfig, SpeculativeConfig

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


def test_mtp_head_is_the_models_own_prediction_layer() -> None:
    # DeepSeek-V3 (config.json: 61 layers, 3 dense, 256 routed + 1 shared experts of width
    # 2,048, hidden 7,168, vocab 129,280, num_nextn_predict_layers 1): the module is one MoE
    # layer with every expert, MLA as the target's, a 2h x h projection and the LM head.
    v3 = resolve_model("deepseek-v3")
    head = mtp_head(v3)
    assert (head.num_layers, head.num_dense_layers, head.num_mtp_layers) == (1, 0, 0)
    assert (head.num_experts, head.num_experts_per_token, head.kv_lora_rank) == (256, 8, 512)
    non_expert = v3.num_params - 58 * 257 * 3 * 7168 * 2048 - 2 * 129280 * 7168
    layer = non_expert / 61 + 2 * 7168**2 + 257 * 3 * 7168 * 2048
    assert head.num_params == pytest.approx(layer + 2 * 129280 * 7168, rel=1e-12)
    with pytest.raises(ValueError, match="llama-3-8b has no multi-token-prediction layers"):
        mtp_head(TARGET)


def test_mtp_drafts_on_the_targets_kernel_tables() -> None:
    v3 = resolve_model("deepseek-v3")
    cfg = SpeculativeConfig(method="mtp", num_speculative_tokens=3, acceptance_rate=0.7)
    model = build_cost_model(
        KernelCostConfig(),
        model=v3,
        gpu=resolve_gpu("h200"),
        tp=8,
        kv_cache_dtype="fp8",
        speculative=cfg,
        backend="vllm",
    )
    assert isinstance(model, SpeculativeCostModel) and isinstance(model.draft, KernelCostModel)
    draft, target = model.draft, model.target
    assert isinstance(target, KernelCostModel)
    assert draft.model.num_layers == 1 and draft._per_step_s == 0.0 and draft._eager_floor_s == 0.0
    # One draft step is one of the target's MoE layers plus its LM head: a decode step of the
    # target costs 61 layers' worth, the draft's well under a tenth of it.
    one = Batch(num_decode_seqs=8, decode_context_tokens=8 * 1000)
    assert 0 < draft.step_time_s(one) < target.step_time_s(one) / 10
    verify = Batch(prefill_chunks=[(4, 1000)] * 8, num_verify_chunks=8)
    assert model.step_time_s(verify) == target.step_time_s(verify) + sum(
        draft.step_time_s(Batch(num_decode_seqs=8, decode_context_tokens=8000 + i * 8)) for i in (1, 2, 3)
    )


def test_mtp_needs_a_model_with_prediction_layers() -> None:
    scenario = {
        "model": "llama-3-8b",
        "replicas": [
            {
                "gpu": "h100-sxm",
                "engine": {
                    "speculative_config": {
                        "method": "mtp",
                        "num_speculative_tokens": 2,
                        "acceptance_rate": 0.5,
                    }
                },
            }
        ],
        "workload": {"kind": "bench_serve", "max_concurrency": 1, "num_prompts": 1},
    }
    with pytest.raises(
        kvsim.ScenarioError,
        match=r"replicas\.0\.engine\.speculative_config\.method: method mtp .*llama-3-8b has none",
    ):
        kvsim.run(scenario)
    with pytest.raises(ValueError, match="eagle, mtp and ngram take none"):
        SpeculativeConfig(method="mtp", num_speculative_tokens=1, acceptance_rate=0.5, model="llama-3.2-1b")


# --------------------------------------------------------------------------- in the engine


def _engine(per_position: list[float], num_blocks: int = 10) -> Scheduler:
    cfg = EngineConfig(
        block_size=4,
        speculative_config={
            "method": "ngram",
            "num_speculative_tokens": len(per_position),
            "acceptance_per_position": per_position,
        },
    )
    return Scheduler(cfg, BlockPool(num_blocks), seed=0)


def _step(s: Scheduler, t: float):
    out = s.schedule(t)
    s.update(out, t + 1.0)
    return out


def test_verify_appends_accepted_tokens_and_rolls_back_the_rejected_tail() -> None:
    # Three drafts, the first two always accepted, the third always rejected: 3 tokens a step.
    s = _engine([1.0, 1.0, 0.0])
    r = Request(request_spec(0, 6, output=8))
    s.add_request(r)
    _step(s, 0)  # prefill: 6 tokens in blocks 0, 1; first token; 3 drafts proposed
    assert [b.block_id for b in r.blocks] == [0, 1] and r.num_spec_tokens == 3
    out = _step(s, 1)  # verify 1 + 3 at positions 6..9: block 2; 2 accepted -> 9 computed
    assert (
        out.scheduled == [(r, 4)]
        and out.batch.prefill_chunks == [(4, 6)]
        and out.batch.num_verify_chunks == 1
    )
    assert out.decode_tokens == 4 and out.prefill_tokens == 0
    assert (r.num_computed_tokens, r.num_output_tokens, r.num_tokens) == (9, 4, 10)
    assert [b.block_id for b in r.blocks] == [0, 1, 2]
    out = _step(s, 2)  # positions 9..12 need block 3; the rejected slot 12 is rolled back: 3 freed
    assert (r.num_computed_tokens, r.num_output_tokens) == (12, 7)
    assert [b.block_id for b in r.blocks] == [0, 1, 2] and next(b.block_id for b in s.pool.free_queue) == 3
    assert r.num_spec_tokens == 0  # one token left: nothing to draft
    out = _step(s, 3)  # a plain decode at position 12 takes block 3 again
    assert out.scheduled == [(r, 1)] and r.status is Status.FINISHED and r.num_output_tokens == 8
    stats = s.spec_stats
    assert (stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens) == (2, 6, 4)


def test_nothing_accepted_frees_a_block_as_soon_as_it_holds_only_drafts() -> None:
    s = _engine([0.0, 0.0, 0.0])
    r = Request(request_spec(0, 7, output=8))
    s.add_request(r)
    _step(s, 0)  # 7 tokens: blocks 0, 1 (one slot left in 1)
    out = _step(s, 1)  # verify at 7..10 needs block 2 for slots 8..10; none accepted
    assert out.batch.prefill_chunks == [(4, 7)]
    # 8 computed (the verify computed position 7; the target's own token at 8 is next): block 2 held
    # only rejected drafts and is freed, to the head of the free queue.
    assert (r.num_computed_tokens, r.num_output_tokens) == (8, 2)
    assert [b.block_id for b in r.blocks] == [0, 1] and next(b.block_id for b in s.pool.free_queue) == 2


def test_speculation_is_deterministic_from_the_seed_and_fast_forward_changes_nothing() -> None:
    scenario = {
        "seed": 3,
        "replicas": [
            {
                "engine": {
                    "num_gpu_blocks_override": 500,
                    "speculative_config": {
                        "method": "draft_model",
                        "model": "llama-3.2-1b",
                        "num_speculative_tokens": 4,
                        "acceptance_rate": 0.7,
                    },
                }
            }
        ],
        "workload": {"num_requests": 150, "arrival": {"kind": "poisson", "rate_per_s": 6.0}},
    }
    fast = kvsim.run(scenario)
    slow = kvsim.run(scenario | {"sim": {"fast_forward": False}})
    again = kvsim.run(scenario)
    assert fast.summary["num_preemptions"] > 0 and fast.summary["spec_decode_num_drafts"] > 1000
    for attr in ("requests", "iterations", "events"):
        assert_frame_equal(getattr(fast, attr), getattr(slow, attr))
        assert_frame_equal(getattr(fast, attr), getattr(again, attr))
    # alpha = 0.7, k = 4: 1 + 0.7 + 0.49 + 0.343 + 0.2401 = 2.77 tokens per verify pass.
    assert fast.summary["spec_decode_mean_acceptance_length"] == pytest.approx(2.77, abs=0.1)


def test_speculation_cuts_tpot_at_low_load() -> None:
    base = {"workload": {"num_requests": 60, "arrival": {"kind": "poisson", "rate_per_s": 1.0}}}
    plain = kvsim.run(base).summary
    eng = {
        "speculative_config": {
            "method": "draft_model",
            "model": "llama-3.2-1b",
            "num_speculative_tokens": 4,
            "acceptance_rate": 0.8,
        }
    }
    fast = kvsim.run(base | {"replicas": [{"engine": eng}]}).summary
    assert fast["output_tokens"] == plain["output_tokens"]
    assert fast["tpot_p50_s"] < 0.6 * plain["tpot_p50_s"]
