"""Linear-attention (Gated DeltaNet) layers: the spec's rules, KV bytes and request states by
hand, the memory they take at sizing time, and their price in the roofline and kernels models."""

from __future__ import annotations

import itertools
from pathlib import Path

import pandas as pd
import pytest

from kvsim.backends.defaults import resolve_engine
from kvsim.cost.base import Batch
from kvsim.cost.config import KernelCostConfig
from kvsim.cost.kernels import KernelCostModel, graph_padded
from kvsim.cost.roofline import RooflineCostModel
from kvsim.cost.tables import package_tables_root
from kvsim.errors import ProfileError
from kvsim.model.kv_sizing import (
    kv_bytes_per_token,
    kv_capacity,
    linear_state_bytes_per_seq,
)
from kvsim.model.presets import MODEL_PRESETS, resolve_gpu
from kvsim.model.specs import ModelSpec
from kvsim.scenario.schema import EngineConfig
from tests.test_kernels import (
    TINY,
    TINY_MOE,
    allreduce_ms,
    decode_ms,
    gemm_ms,
    write_moe_mla_tables,
    write_tables,
)

LINEAR = {
    "num_linear_attention_layers": 3,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 8,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_conv_kernel_dim": 4,
    "attn_output_gate": True,
}
#: 4 layers: 3 Gated DeltaNet, 1 gated full attention (4 heads, 2 KV heads of 16).
TINY_LIN = ModelSpec(**{**TINY.model_dump(), "num_layers": 4, **LINEAR})


def test_the_spec_refuses_incomplete_or_impossible_mixes() -> None:
    base = TINY.model_dump()
    with pytest.raises(ValueError, match="num_linear_attention_layers needs linear_conv_kernel_dim"):
        ModelSpec(**{**base, **LINEAR, "linear_conv_kernel_dim": None})
    with pytest.raises(ValueError, match="linear_num_key_heads describe linear attention"):
        ModelSpec(**{**base, "linear_num_key_heads": 2})
    with pytest.raises(ValueError, match=r"num_linear_attention_layers \(3\) must be < num_layers \(2\)"):
        ModelSpec(**{**base, **LINEAR})
    with pytest.raises(ValueError, match="unsupported: linear-attention layers beside sliding-window"):
        ModelSpec(**{**base, "num_layers": 4, **LINEAR, "sliding_window": 64})
    with pytest.raises(
        ValueError, match=r"linear_num_value_heads \(6\) must be a multiple of linear_num_key_heads \(4\)"
    ):
        ModelSpec(
            **{**base, "num_layers": 4, **LINEAR, "linear_num_key_heads": 4, "linear_num_value_heads": 6}
        )


def test_kv_bytes_and_request_state_by_hand() -> None:
    assert (TINY_LIN.num_kv_layers, TINY_LIN.num_full_layers) == (1, 1)
    assert kv_bytes_per_token(TINY_LIN) == 2 * 1 * 2 * 16 * 2  # K and V, 1 full layer, 2 heads, bf16
    # Per linear layer: conv window 3 x (2 x 2 x 16 + 8 x 16) bf16 + state 8 x 16 x 16 fp32.
    assert linear_state_bytes_per_seq(TINY_LIN) == 3 * (3 * 192 * 2 + 8 * 16 * 16 * 4) == 28_032
    assert linear_state_bytes_per_seq(TINY_LIN, tp=2) == 3 * (3 * 96 * 2 + 4 * 16 * 16 * 4)
    assert linear_state_bytes_per_seq(TINY) == 0.0
    q = MODEL_PRESETS["qwen3.5-397b-a17b"]  # 15 full layers of 2 KV heads of 256, 45 GDN layers
    assert kv_bytes_per_token(q) == 15 * 2 * 2 * 256 * 2 == 30_720
    assert kv_bytes_per_token(q, "fp8", tp=4) == 15 * 2 * 1 * 256 * 1  # 2 KV heads over 4 GPUs: 1 each
    assert linear_state_bytes_per_seq(q) == 45 * (3 * (2 * 16 * 128 + 64 * 128) * 2 + 64 * 128 * 128 * 4)
    assert linear_state_bytes_per_seq(q, tp=4) == 45 * (3 * 3072 * 2 + 16 * 128 * 128 * 4) == 48_015_360


def test_the_states_are_reserved_before_the_kv_pool() -> None:
    gpu = resolve_gpu("h100-sxm")
    free = gpu.memory_bytes * 0.9 - 2e6  # 1e6 bf16 parameters, no activation reserve
    vllm = kv_capacity(TINY_LIN, gpu, max_num_seqs=10, activation_reserve_bytes=0.0)
    assert vllm.linear_state_pool_bytes_per_shard == 10 * 28_032
    assert vllm.kv_bytes_per_shard == pytest.approx(free - 10 * 28_032, rel=1e-15)
    assert vllm.num_blocks == int(vllm.kv_bytes_per_shard // (128 * 16))
    sglang = kv_capacity(TINY_LIN, gpu, max_num_seqs=10, activation_reserve_bytes=0.0, backend="sglang")
    assert sglang.linear_state_pool_bytes_per_shard == pytest.approx(free * 0.9 / 1.9, rel=1e-15)
    assert sglang.kv_bytes_per_shard == pytest.approx(free / 1.9, rel=1e-15)
    plain = kv_capacity(TINY, gpu, max_num_seqs=10, activation_reserve_bytes=0.0, backend="sglang")
    assert plain.linear_state_pool_bytes_per_shard == 0.0 and plain.kv_bytes_per_shard == pytest.approx(free)


def test_sglang_caps_running_requests_by_the_state_slots() -> None:
    model, gpu = (
        MODEL_PRESETS["qwen3.5-397b-a17b"].model_copy(update={"weight_dtype": "fp8_block"}),
        resolve_gpu("h200"),
    )
    engine = resolve_engine(
        EngineConfig(backend="sglang", backend_version="0.5.9"), gpu=gpu, tp=4, model=model
    )
    cap = kv_capacity(
        model, gpu, tp=4, backend="sglang", gpu_memory_utilization=engine.gpu_memory_utilization,
        activation_reserve_bytes=0.0, max_num_batched_tokens=engine.max_num_batched_tokens,
    )  # fmt: skip
    slots = int(cap.linear_state_pool_bytes_per_shard // 48_015_360)
    assert engine.max_num_seqs == slots // 3 < 2048
    explicit = resolve_engine(
        EngineConfig(backend="sglang", backend_version="0.5.9", max_num_seqs=4000), gpu=gpu, tp=4, model=model
    )
    assert explicit.max_num_seqs == slots // 3  # SGLang caps a set max_running_requests too
    no_radix = resolve_engine(
        EngineConfig(backend="sglang", backend_version="0.5.9", enable_prefix_caching=False), gpu=gpu, tp=4,
        model=model,
    )  # fmt: skip
    assert no_radix.max_num_seqs == slots  # radix cache off: one state slot per request


def test_roofline_terms_by_hand() -> None:
    rm = RooflineCostModel(TINY_LIN, resolve_gpu("h100-sxm"))
    terms = rm.terms(Batch(prefill_chunks=[(8, 0)], num_decode_seqs=2, decode_context_tokens=30))
    # pairs 30 + 8 x 9 / 2 = 66 over 1 full layer; 10 tokens through 3 delta rules of 8 heads of 16 x 16.
    assert terms.attention_flops == 4 * 1 * 4 * 16 * 66 + 6 * 3 * 8 * 16 * 16 * 10 == 385_536
    # KV of 38 tokens in the full layer; 3 requests read and write their states.
    assert terms.kv_bytes == 128 * 38 + 2 * 28_032 * 3 == 173_056
    gpu = resolve_gpu("h100-sxm")
    cfg = rm.config
    # Layer weights: 1e6 parameters less the embedding and the LM head (2 x 256 x 64), bf16.
    lin, lm = 1e6 - 2 * 256 * 64, 64 * 256
    linear = max(
        (2 * lin * 10 + 2 * lm * 3) / (gpu.peak_flops("bf16") * cfg.compute_efficiency),
        (lin + lm) * 2 / (gpu.hbm_bandwidth_bytes_per_s * cfg.memory_efficiency),
    )
    expected = linear + max(
        385_536 / (gpu.peak_flops("bf16") * cfg.compute_efficiency),
        173_056 / (gpu.hbm_bandwidth_bytes_per_s * (cfg.kv_memory_efficiency or cfg.memory_efficiency)),
    )
    expected += TINY_LIN.num_layers * cfg.per_layer_overhead_s + cfg.per_iteration_overhead_s
    assert rm.step_time_s(Batch(prefill_chunks=[(8, 0)], num_decode_seqs=2, decode_context_tokens=30)) == (
        pytest.approx(expected, rel=1e-12)
    )
    ctx = [30.0, 90.0]
    assert list(rm.decode_steps_s(2, ctx)) == [
        rm.step_time_s(Batch(num_decode_seqs=2, decode_context_tokens=int(c))) for c in ctx
    ]


# -- the kernels model on hand-made tables ------------------------------------------------


def conv_update_ms(batch: float) -> float:
    return 0.001 + 1e-5 * batch


def recurrent_ms(batch: float) -> float:
    return 0.003 + 2e-4 * batch


def conv_fn_ms(tokens: float) -> float:
    return 0.002 + 1e-6 * tokens


def chunk_rule_ms(tokens: float) -> float:
    return 0.02 + 1e-4 * tokens


def write_gdn(
    root: Path, version: str = "1.0.0", heads: tuple[int, int] = (1, 4), backend: str = "vllm"
) -> None:
    """gdn_perf for d_model 64, ``heads`` (key, value) per GPU of 16, conv 4."""
    shape = {"d_model": 64, "num_k_heads": heads[0], "num_v_heads": heads[1], "head_k_dim": 16,
             "head_v_dim": 16, "d_conv": 4}  # fmt: skip
    rows = [
        {**shape, "phase": "generation", "kernel_source": k, "batch_size": b, "seq_len": 1, "num_tokens": b,
         "latency": f(b)}
        for b in (1, 2, 4, 8)
        for k, f in (("causal_conv1d_update", conv_update_ms),
                     ("fused_recurrent_gated_delta_rule_packed_decode", recurrent_ms))
    ] + [
        {**shape, "phase": "context", "kernel_source": k, "batch_size": b, "seq_len": s, "num_tokens": b * s,
         "latency": f(s) * b}
        for b, s in itertools.product((1, 2), (1, 16, 64, 256))
        for k, f in (("causal_conv1d_fn", conv_fn_ms), ("chunk_gated_delta_rule", chunk_rule_ms))
    ]  # fmt: skip
    folder = root / "toy_sxm" / "linear_attention" / backend / version
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(folder / "gdn_perf.parquet")


@pytest.fixture
def tables(tmp_path: Path) -> Path:
    root = write_tables(tmp_path / "tables")
    write_gdn(root)
    return root


def _model(tables: Path, spec: ModelSpec = TINY_LIN, tp: int = 2, **config: object) -> KernelCostModel:
    cfg = KernelCostConfig(tables=str(tables), system="toy_sxm", **config)  # type: ignore[arg-type]
    return KernelCostModel(
        spec.model_copy(update={"num_kv_heads": tp}), resolve_gpu("h100-sxm"), cfg, tp=tp, max_num_seqs=8
    )


def test_a_gated_deltanet_decode_step_by_hand(tables: Path) -> None:
    km = _model(tables, per_iteration_overhead_s=1e-4, per_layer_overhead_s=2e-6, elementwise_kernel_s=3e-6)
    b, ctx = 3, 3 * 40
    m = graph_padded(b, km.max_graph_tokens)
    assert m == 4
    # tp 2: gated q (2 heads x 2) + 2 x 1 KV head of 16 -> QKV n 96; O n 64, k 32; MLP as TINY.
    qkv_o = (gemm_ms(m, 96, 64) + gemm_ms(m, 64, 32)) * 1e-3
    mlp = (gemm_ms(m, 128, 64) + gemm_ms(m, 64, 64)) * 1e-3
    rest = (
        m * km._elementwise_bytes_per_token / km._hbm_rate + 5 * 3e-6 + 2 * allreduce_ms(m * 64) * 1e-3 + 2e-6
    )
    # GDN projections: qkvz n = 2 (1 x 16 + 4 x 16) = 160, k 64; ba n = 2 x 4 = 8, held at the
    # grid's n 16; out_proj n 64, k 4 x 16 = 64.
    gdn_gemms = (gemm_ms(m, 160, 64) + gemm_ms(m, 16, 64) + gemm_ms(m, 64, 64)) * 1e-3
    layers = 1 * (qkv_o + mlp + rest) + 3 * (gdn_gemms + mlp + rest)
    gdn_kernels = 3 * (conv_update_ms(b) + recurrent_ms(b)) * 1e-3
    lm_head = gemm_ms(b, 128, 64) * 1e-3
    attention = 1 * decode_ms(b, 39, 2) * 1e-3  # the one full layer
    expected = layers + gdn_kernels + lm_head + attention + 1e-4
    got = km.step_time_s(Batch(num_decode_seqs=b, decode_context_tokens=ctx))
    assert got == pytest.approx(expected, rel=1e-12)
    assert any("linear attention in_proj_ba GEMM: n=8 outside" in w for w in km.warnings)


def test_a_prefill_chunk_pays_the_chunked_scan_over_its_tokens(tables: Path) -> None:
    km = _model(tables)
    step = km.step_time_s(Batch(prefill_chunks=[(16, 48)], num_decode_seqs=2, decode_context_tokens=60))
    plain = _model(tables, TINY.model_copy(update={"num_layers": 4, "attn_output_gate": True}))
    gdn_gemms = sum(c(18) for c in km._gdn.gemms) if km._gdn else 0.0
    attn_gemms = sum(c(18) for c in km._attention_gemms)
    expected = (
        plain._token_terms_s(18) + 3 * (gdn_gemms - attn_gemms) + km._lm_head_s(3)
        + 3 * (conv_update_ms(2) + recurrent_ms(2) + conv_fn_ms(16) + chunk_rule_ms(16)) * 1e-3
        + 1 * (km._decode(2, 29) + km._chunk_extra_s(16, 48)) + km.overheads.per_iteration_overhead_s
    )  # fmt: skip
    assert step == pytest.approx(expected, rel=1e-12)


def test_sglangs_hybrid_prompt_steps_pay_the_host_floor_and_the_kernels(tmp_path: Path) -> None:
    # A hybrid mixture of experts (3 Gated DeltaNet layers, 1 full; 3 MoE layers after the
    # dense first) on SGLang: a step with a prompt runs eagerly and takes the host's floor
    # (3 MoE layers x 50 ms) plus its kernels; without the linear layers it takes the larger
    # of the two, as on vLLM beyond its CUDA graphs. Decode steps replay graphs: untouched.
    hybrid = ModelSpec(**{**TINY_MOE.model_dump(), "num_layers": 4, **LINEAR})

    roots: dict[str, Path] = {}

    def km(backend: str, spec: ModelSpec, host_s: float) -> KernelCostModel:
        if backend not in roots:
            roots[backend] = write_moe_mla_tables(tmp_path / backend, backend=backend)
            write_gdn(roots[backend], backend=backend)
        root = roots[backend]
        cfg = KernelCostConfig(
            tables=str(root), system="toy_sxm", backend=backend, eager_moe_layer_host_s=host_s
        )
        # SGLang 0.5.9, the release the H200 rows ran (from 0.5.10 TINY_MOE's prompt steps would
        # replay piecewise CUDA graphs; a hybrid's would not: test_kernels.py).
        version = "0.5.9" if backend == "sglang" else None
        return KernelCostModel(
            spec, resolve_gpu("h100-sxm"), cfg, tp=2, max_num_seqs=8, backend_version=version
        )

    prompt = Batch(prefill_chunks=[(16, 0)], num_decode_seqs=2, decode_context_tokens=60)
    decode = Batch(num_decode_seqs=2, decode_context_tokens=60)
    base, eager = km("sglang", hybrid, 0.0), km("sglang", hybrid, 0.05)
    assert eager._num_moe_layers == 3 and eager._eager_floor_s == pytest.approx(0.15)
    assert 0 < base.step_time_s(prompt) < 0.15
    assert eager.step_time_s(prompt) == pytest.approx(base.step_time_s(prompt) + 0.15, rel=1e-12)
    assert eager.step_time_s(decode) == base.step_time_s(decode)
    moe = km("sglang", TINY_MOE, 0.05)  # no linear layers: the larger
    assert moe.step_time_s(prompt) == 0.05 == max(km("sglang", TINY_MOE, 0.0).step_time_s(prompt), 0.05)
    # From SGLang 0.5.10 the hybrid still runs its prompts eagerly (no piecewise graphs for it).
    newer = KernelCostModel(hybrid, resolve_gpu("h100-sxm"), eager.config, tp=2, max_num_seqs=8)
    assert newer._prompt_graph_tokens == 0 and newer.step_time_s(prompt) == eager.step_time_s(prompt)
    vllm = km("vllm", hybrid, 0.05)  # vLLM: 16 + 2 tokens beyond its 16-token graphs, the larger
    assert vllm.max_graph_tokens == 16 and vllm.step_time_s(prompt) == pytest.approx(0.15, rel=1e-12)


def test_what_the_gdn_tables_lack_is_refused_by_name(tables: Path, tmp_path: Path) -> None:
    with pytest.raises(
        ProfileError, match=r"no gdn_perf measurement for d_model 64, 2 key / 8 value heads per GPU"
    ):
        _model(tables, tp=1)
    with pytest.raises(ProfileError, match=r"8 value heads cannot be split over tp 4"):
        _model(tables, TINY_LIN.model_copy(update={"num_attention_heads": 4}), tp=4)
    bare = write_tables(tmp_path / "bare")
    with pytest.raises(ProfileError, match="no gdn_perf table for toy_sxm / vllm"):
        _model(bare)
    older = write_tables(tmp_path / "older")
    write_gdn(older, version="0.9.0")
    km = _model(older, version="1.0.0")
    assert "linear attention: no vllm 1.0.0 gdn_perf table; read 0.9.0's" in km.warnings


def test_full_attention_models_are_priced_as_before(tables: Path) -> None:
    km = _model(tables, TINY)
    assert km._gdn is None and km._attn_layers == 2


def test_a_linear_attention_model_runs_end_to_end_and_fast_forward_equals_stepping(tables: Path) -> None:
    from pandas.testing import assert_frame_equal

    import kvsim
    from tests.test_kernels import tiny_scenario

    scenario = tiny_scenario(tables)
    scenario["model"] = TINY_LIN.model_dump()  # tp 2: the fixture's 1 key / 4 value heads per GPU
    fast = kvsim.run(scenario)
    slow = kvsim.run({**scenario, "sim": {"fast_forward": False}})
    assert fast.summary["num_finished"] == 60
    assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    assert_frame_equal(fast.iterations, slow.iterations, check_exact=True)


def test_kv_size_reports_the_request_states(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from kvsim.cli import main

    argv = [
        "kv-size",
        "--model",
        "Qwen/Qwen3.5-397B-A17B-FP8",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--backend",
        "sglang",
    ]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_linear_attention_layers"] == 45
    assert out["bytes_per_token"] == 30_720
    assert out["linear_state_bytes_per_seq_per_shard"] == 45 * (3 * 1536 * 2 + 8 * 128 * 128 * 4)
    assert out["linear_state_pool_bytes_per_shard"] == pytest.approx(
        (out["kv_bytes_per_shard"] + out["linear_state_pool_bytes_per_shard"]) * 0.9 / 1.9, rel=1e-12
    )
    assert main(argv) == 0
    assert "45 linear-attention layers: 183.2 MiB of state per running request" in capsys.readouterr().out


def test_a_scenario_without_room_for_the_states_says_so() -> None:
    from kvsim.errors import ScenarioError
    from kvsim.scenario.loading import load_scenario

    replica = {"gpu": "h200", "tp": 4, "engine": {"max_num_seqs": 1024, "max_model_len": 8192}}
    with pytest.raises(
        ScenarioError, match=r"- 45\.79 GiB linear-attention request states \(max_num_seqs 1024 x 45\.8 MiB\)"
    ):
        load_scenario(
            {"model": "Qwen/Qwen3.5-397B-A17B-FP8", "replicas": [replica], "workload": {"num_requests": 5}}
        )
    replica["engine"]["max_num_seqs"] = 256  # 11.4 GiB of states: the pool has room
    assert load_scenario(
        {"model": "Qwen/Qwen3.5-397B-A17B-FP8", "replicas": [replica], "workload": {"num_requests": 5}}
    )


def test_fit_counts_the_request_states() -> None:
    from kvsim.model.memory_fit import check_fit

    fit = check_fit(
        MODEL_PRESETS["qwen3.5-35b-a3b"], resolve_gpu("h200"), context_tokens=32768, max_num_seqs=256
    )
    states = 256 * 30 * (3 * (2 * 16 * 128 + 32 * 128) * 2 + 32 * 128 * 128 * 4)
    assert fit.capacity.linear_state_pool_bytes_per_shard == states
    assert f", {states / 2**30:,.2f} GiB of linear-attention request states and" in fit.reason()


def test_calibrated_profiles_refuse_linear_attention_by_name() -> None:
    from types import SimpleNamespace

    from kvsim.cost.calibrated import CalibratedCostModel

    profile = SimpleNamespace(kind="kernels", source="p.json", data={})
    with pytest.raises(
        ValueError, match="unsupported: a calibrated profile measures full-attention layers; tiny's 3"
    ):
        CalibratedCostModel(profile, model=TINY_LIN, gpu=resolve_gpu("h100-sxm"), tp=1)  # type: ignore[arg-type]


@pytest.mark.skipif(package_tables_root() is None, reason="aiconfigurator-core is not installed")
def test_nvidia_gdn_tables_price_qwen35_per_gpu_shard() -> None:
    """SGLang 0.5.14's h200_sxm gdn_perf (aiconfigurator-core 0.12.0) at the 397B's heads per
    GPU at tp 4 (16 / 4 key, 64 / 4 value heads): batch 64 decode is causal_conv1d_update
    0.002806 ms + the recurrent step 0.038658 ms per layer, for 45 layers."""
    model = MODEL_PRESETS["qwen3.5-397b-a17b"].model_copy(update={"weight_dtype": "fp8_block"})
    km = KernelCostModel(
        model, resolve_gpu("h200"), KernelCostConfig(), tp=4, kv_cache_dtype="fp8", backend="sglang"
    )
    assert km._gdn is not None
    assert km._gdn.decode_s(64) == pytest.approx(45 * (0.002806 + 0.038658) * 1e-3, rel=2e-3)
    step = km.step_time_s(Batch(num_decode_seqs=64, decode_context_tokens=64 * 2000))
    assert 0.005 < step < 0.2
