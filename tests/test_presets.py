"""Presets: every spec is consistent and cited; names resolve; scenarios are checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kvsim.errors import KvsimError, ScenarioError
from kvsim.model.kv_sizing import GIB, kv_bytes_for_context, kv_bytes_per_token
from kvsim.model.presets import (
    GPU_PRESETS,
    MODEL_PRESETS,
    UnknownPresetError,
    resolve_gpu,
    resolve_model,
    tp_problem,
)
from kvsim.model.specs import GpuSpec, ModelSpec
from kvsim.scenario.loading import load_scenario

REQUIRED_MODELS = {
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3-70b",
    "mistral-7b",
    "mixtral-8x7b",
    "qwen2.5-7b",
    "deepseek-v2-lite",
    # the small models people run at home, and interleaved sliding-window / full layers (issue 11)
    "llama-3.2-1b",
    "llama-3.2-3b",
    "qwen2.5-0.5b",
    "qwen2.5-1.5b",
    "qwen2.5-3b",
    "gemma-3-1b",
    "gemma-3-4b",
    "gpt-oss-20b",
    # today's deployments: aiconfigurator-core's silicon rows (issue 20)
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "qwen3-0.6b",
    "qwen3-1.7b",
    "qwen3-4b",
    "qwen3-8b",
    "qwen3-14b",
    "qwen3-32b",
    # frontier mixture-of-experts as deployed: silicon_sample.csv's MoE / MLA rows (issue 22)
    "deepseek-v3",
    "deepseek-r1",
    "kimi-k2.5",
    "qwen3.5-397b-a17b",  # Gated DeltaNet linear attention + gated full attention
    "qwen3.5-122b-a10b",
    "qwen3.5-35b-a3b",
    "qwen3.5-27b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "qwen3-coder-480b-a35b",
    "gpt-oss-120b",
    "minimax-m2.5",
    "glm-5",
}
REQUIRED_GPUS = {
    "a100-40gb",
    "a100-80gb",
    "h100-sxm",
    "h200",
    "l4",
    "t4",
    "rtx-4090",
    "rtx-3090",
    "rtx-3070",
    # every GPU system of aiconfigurator-core 0.12.0 (issue 20)
    "a100-pcie",
    "h100-pcie",
    "l40s",
    "a30",
    "b200",
    "b300",
    "gb200",
    "gb300",
    "rtx-pro-6000",
    "arc-pro-b60",
}
#: Presets whose query heads do not tile the hidden size (their config.json says so).
WIDE_ATTENTION = {
    "gemma-3-1b",
    "gemma-3-4b",
    "gemma-3-12b",
    "gemma-3-27b",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "qwen3-0.6b",  # 16 heads x 128 = 2,048 against a hidden size of 1,024
    "qwen3-4b",
    "qwen3-32b",
    "deepseek-v3",  # MLA: 128 heads x 128 against 7,168
    "deepseek-r1",
    "kimi-k2.5",
    "qwen3.5-397b-a17b",  # 32 heads x 256 against 4,096 (Qwen3.5: head_dim 256 throughout)
    "qwen3.5-122b-a10b",
    "qwen3.5-35b-a3b",
    "qwen3.5-27b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "qwen3-coder-480b-a35b",
    "minimax-m2.5",
    "glm-5",
}


def test_required_presets_exist() -> None:
    assert MODEL_PRESETS.keys() >= REQUIRED_MODELS
    assert GPU_PRESETS.keys() == REQUIRED_GPUS
    assert any(m.attention_kind == "mqa" for m in MODEL_PRESETS.values())
    assert {m.attention_kind for m in MODEL_PRESETS.values()} == {"mha", "gqa", "mqa", "mla"}


@pytest.mark.parametrize("name", sorted(MODEL_PRESETS))
def test_model_preset_validates_and_is_cited(name: str) -> None:
    spec = MODEL_PRESETS[name]
    assert spec.name == name == name.lower()
    assert ModelSpec.model_validate(spec.model_dump()) == spec
    assert "huggingface.co" in spec.source and "config.json" in spec.source
    # Query heads tile the hidden size, except where the config sets head_dim apart.
    assert (spec.num_attention_heads * spec.head_dim == spec.hidden_size) == (name not in WIDE_ATTENTION)
    assert (spec.num_experts is None) == (spec.num_experts_per_token is None)
    if spec.num_experts is not None:
        assert spec.num_active_params is not None and spec.num_active_params < spec.num_params


@pytest.mark.parametrize("name", sorted(GPU_PRESETS))
def test_gpu_preset_validates_and_is_cited(name: str) -> None:
    spec = GPU_PRESETS[name]
    assert spec.name == name
    assert GpuSpec.model_validate(spec.model_dump()) == spec
    assert "datasheet" in spec.source or "whitepaper" in spec.source
    assert spec.bf16_flops == spec.fp16_flops
    assert spec.interconnect_bandwidth_bytes_per_s >= spec.pcie_bandwidth_bytes_per_s


def test_notable_model_figures() -> None:
    mixtral = MODEL_PRESETS["mixtral-8x7b"]
    assert (mixtral.num_experts, mixtral.num_experts_per_token) == (8, 2)
    assert round(mixtral.num_params / 1e9, 1) == 46.7
    assert round(mixtral.active_params / 1e9, 1) == 12.9
    lite = MODEL_PRESETS["deepseek-v2-lite"]
    assert (lite.kv_lora_rank, lite.qk_rope_head_dim, lite.attention_kind) == (512, 64, "mla")
    assert MODEL_PRESETS["mistral-7b"].sliding_window == 4096
    assert MODEL_PRESETS["falcon-7b"].num_kv_heads == 1


def test_notable_gpu_figures() -> None:
    assert GPU_PRESETS["a100-40gb"].fp8_flops is None
    assert GPU_PRESETS["a100-80gb"].fp8_flops is None
    assert GPU_PRESETS["t4"].fp8_flops is None
    h100 = GPU_PRESETS["h100-sxm"]
    assert (h100.memory_bytes, h100.hbm_bandwidth_bytes_per_s) == (80 * GIB, 3.35e12)
    assert h100.fp8_flops == 2 * h100.bf16_flops  # dense, no sparsity
    assert GPU_PRESETS["h200"].memory_bytes == 141 * GIB
    assert GPU_PRESETS["l4"].interconnect_bandwidth_bytes_per_s == 32e9  # PCIe Gen4, no NVLink


def test_resolution_is_case_insensitive_and_passes_specs_through() -> None:
    assert resolve_model("Llama-2-70B") is MODEL_PRESETS["llama-2-70b"]
    assert resolve_gpu(" H100-SXM ") is GPU_PRESETS["h100-sxm"]
    spec = MODEL_PRESETS["llama-3-8b"]
    assert resolve_model(spec) is spec


def test_unknown_names_suggest_close_matches_and_list_all() -> None:
    with pytest.raises(UnknownPresetError) as err:
        resolve_gpu("h100")
    msg = str(err.value)
    assert msg.startswith("unknown GPU preset 'h100' (did you mean 'h100-sxm'")
    assert (
        "available: a100-40gb, a100-80gb, a100-pcie, a30, arc-pro-b60, b200, b300, gb200, gb300, h100-pcie, "
        "h100-sxm, h200, l4, l40s, rtx-3070, rtx-3090, rtx-4090, rtx-pro-6000, t4" in msg
    )
    assert isinstance(err.value, KvsimError) and isinstance(err.value, LookupError)
    with pytest.raises(UnknownPresetError, match="did you mean 'llama-2-7b'"):
        resolve_model("llama2-7b")
    with pytest.raises(UnknownPresetError, match=r"unknown model preset 'bloom-176b'; available: deepseek"):
        resolve_model("bloom-176b")


def test_tp_rules() -> None:
    assert tp_problem(MODEL_PRESETS["llama-2-70b"], 8) is None
    assert tp_problem(MODEL_PRESETS["llama-2-70b"], 16) is None  # KV heads replicated twice
    assert "num_attention_heads (64)" in (tp_problem(MODEL_PRESETS["llama-2-70b"], 3) or "")
    assert "num_kv_heads (4)" in (tp_problem(MODEL_PRESETS["qwen2.5-7b"], 7) or "")
    assert "num_attention_heads (71)" in (tp_problem(MODEL_PRESETS["falcon-7b"], 2) or "")
    assert tp_problem(MODEL_PRESETS["deepseek-v2-lite"], 16) is None


def _problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ScenarioError) as err:
        load_scenario(data)
    return err.value.problems


def test_default_scenario_passes_the_checks() -> None:
    scenario = load_scenario(None)
    assert resolve_model(scenario.model).name == "llama-3-8b"


def test_unknown_names_in_a_scenario_name_the_field() -> None:
    problems = _problems(
        {"model": "llama-4", "replicas": [{"gpu": "h100-sxm"}, {"name": "b", "gpu": "mi300x"}]}
    )
    paths = [p for p, _ in problems]
    assert paths == ["model", "replicas.1.gpu"]
    assert "unknown model preset 'llama-4'" in problems[0][1]


def test_tp_that_cannot_shard_names_the_field() -> None:
    problems = _problems({"model": "llama-2-70b", "replicas": [{"gpu": "h100-sxm", "tp": 3}]})
    assert problems == [("replicas.0.tp", "tp=3 must divide the model's num_attention_heads (64)")]


def test_weights_that_do_not_fit_give_gib_figures() -> None:
    problems = _problems({"model": "llama-2-70b", "replicas": [{"gpu": "h100-sxm", "tp": 1}]})
    assert len(problems) == 1
    path, rule = problems[0]
    assert path == "replicas.0.tp"
    assert "weights need 128.48 GiB per GPU" in rule
    assert "allows 72.00 GiB (80.00 GiB x gpu_memory_utilization 0.9)" in rule


def test_no_room_for_one_block_names_gpu_memory_utilization() -> None:
    # Llama-2-7B on a T4: 14.40 GiB budget - 12.55 GiB weights - 2 GiB reserve < 0.
    data = {
        "model": "llama-2-7b",
        "replicas": [{"gpu": "t4", "engine": {"activation_reserve_gib": 2.0}}],
    }
    problems = _problems(data)
    assert [p for p, _ in problems] == ["replicas.0.engine.gpu_memory_utilization"]
    assert "no room for one KV block besides vLLM's null block (8,388,608 bytes each)" in problems[0][1]
    assert "14.40 GiB budget - 12.55 GiB weights - 2.00 GiB activation reserve" in problems[0][1]
    # A fixed block count skips the memory check, as vLLM's num_gpu_blocks_override does.
    data["replicas"][0]["engine"]["num_gpu_blocks_override"] = 64
    assert load_scenario(data).replicas[0].engine.num_gpu_blocks_override == 64


def test_max_model_len_beyond_the_model_is_rejected() -> None:
    problems = _problems(
        {"model": "llama-2-7b", "replicas": [{"gpu": "a100-80gb", "engine": {"max_model_len": 8192}}]}
    )
    assert problems == [("replicas.0.engine.max_model_len", "8192 exceeds llama-2-7b's max_model_len (4096)")]


def test_fp8_kv_on_a_gpu_without_fp8_is_allowed() -> None:
    scenario = load_scenario(
        {"model": "llama-2-7b", "replicas": [{"gpu": "a100-80gb", "engine": {"kv_cache_dtype": "fp8"}}]}
    )
    assert scenario.replicas[0].engine.kv_cache_dtype == "fp8"


def test_inline_model_and_gpu_in_a_scenario() -> None:
    model = MODEL_PRESETS["llama-3-8b"].model_dump() | {"name": "my-llama", "num_layers": 16}
    gpu = GPU_PRESETS["l4"].model_dump() | {"name": "my-gpu", "memory_bytes": 48 * GIB}
    scenario = load_scenario({"model": model, "replicas": [{"gpu": gpu}]})
    assert resolve_model(scenario.model).num_layers == 16
    assert resolve_gpu(scenario.replicas[0].gpu).memory_bytes == 48 * GIB


DOCS = Path(__file__).resolve().parents[1] / "docs" / "presets.md"


def test_docs_list_every_preset_and_their_yaml_example_loads() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for name in [*MODEL_PRESETS, *GPU_PRESETS]:
        assert f"| `{name}` |" in text, name
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    scenario = load_scenario(yaml.safe_load(example))
    assert resolve_model(scenario.model).weight_dtype == "fp8"
    assert resolve_gpu(scenario.replicas[0].gpu).memory_bytes == 48 * GIB


# -- today's deployments (issue 20) ---------------------------------------------------------


def test_new_model_presets_kv_bytes_per_token_by_hand() -> None:
    """2 (K and V) x layers x KV heads x head_dim x 2 bytes (bf16)."""
    expected = {
        "llama-3.1-8b": 2 * 32 * 8 * 128 * 2,  # 131,072
        "llama-3.1-70b": 2 * 80 * 8 * 128 * 2,  # 327,680
        "llama-3.1-405b": 2 * 126 * 8 * 128 * 2,  # 516,096
        "qwen3-0.6b": 2 * 28 * 8 * 128 * 2,  # 114,688
        "qwen3-1.7b": 2 * 28 * 8 * 128 * 2,
        "qwen3-4b": 2 * 36 * 8 * 128 * 2,  # 147,456
        "qwen3-8b": 2 * 36 * 8 * 128 * 2,
        "qwen3-14b": 2 * 40 * 8 * 128 * 2,  # 163,840
        "qwen3-32b": 2 * 64 * 8 * 128 * 2,  # 262,144 = 256 KiB
    }
    for name, per_token in expected.items():
        assert kv_bytes_per_token(MODEL_PRESETS[name]) == per_token, name
    assert (
        MODEL_PRESETS["llama-3.1-8b"].max_model_len == MODEL_PRESETS["llama-3.1-405b"].max_model_len == 131072
    )
    assert all(MODEL_PRESETS[f"qwen3-{s}"].max_model_len == 40960 for s in ("0.6b", "4b", "32b"))


def _qwen3_params(layers: int, h: int, heads: int, kv: int, inter: int, tied: bool) -> int:
    d, vocab = 128, 151936
    attention = h * heads * d + 2 * h * kv * d + heads * d * h + 2 * d  # q, k, v, o, q_norm, k_norm
    layer = attention + 3 * h * inter + 2 * h  # gated MLP, two RMSNorms
    return layers * layer + h + vocab * h * (1 if tied else 2)


def test_new_model_presets_parameter_counts_by_hand() -> None:
    qwen3 = {
        "qwen3-0.6b": (28, 1024, 16, 8, 3072, True),
        "qwen3-1.7b": (28, 2048, 16, 8, 6144, True),
        "qwen3-4b": (36, 2560, 32, 8, 9728, True),
        "qwen3-8b": (36, 4096, 32, 8, 12288, False),
        "qwen3-14b": (40, 5120, 40, 8, 17408, False),
        "qwen3-32b": (64, 5120, 64, 8, 25600, False),
    }
    card = {
        "qwen3-0.6b": 0.6,
        "qwen3-1.7b": 1.7,
        "qwen3-4b": 4.0,
        "qwen3-8b": 8.2,
        "qwen3-14b": 14.8,
        "qwen3-32b": 32.8,
    }
    for name, shape in qwen3.items():
        spec = MODEL_PRESETS[name]
        assert spec.num_params == _qwen3_params(*shape), name
        assert spec.tie_word_embeddings is shape[-1]
        assert round(spec.num_params / 1e9, 1) == card[name]  # the model card's rounded figure
    # Llama 3.1 405B: 126 layers of (2 x 16384^2 + 2 x 16384 x 1024 + 3 x 16384 x 53248 + 2 x 16384)
    layer = 2 * 16384**2 + 2 * 16384 * 1024 + 3 * 16384 * 53248 + 2 * 16384
    assert MODEL_PRESETS["llama-3.1-405b"].num_params == 126 * layer + 16384 + 2 * 128256 * 16384
    assert MODEL_PRESETS["llama-3.1-8b"].num_params == MODEL_PRESETS["llama-3-8b"].num_params
    assert MODEL_PRESETS["llama-3.1-70b"].num_params == MODEL_PRESETS["llama-3-70b"].num_params


def test_hugging_face_ids_resolve_with_their_precision() -> None:
    assert resolve_model("meta-llama/Llama-3.1-8B-Instruct") is MODEL_PRESETS["llama-3.1-8b"]
    assert resolve_model("meta-llama/Llama-3.1-70B") is MODEL_PRESETS["llama-3.1-70b"]
    assert resolve_model("meta-llama/Meta-Llama-3.1-405B-Instruct") is MODEL_PRESETS["llama-3.1-405b"]
    assert resolve_model("Qwen/Qwen3-32B") is MODEL_PRESETS["qwen3-32b"]
    assert resolve_model("openai/gpt-oss-120b") is MODEL_PRESETS["gpt-oss-120b"]
    fp8 = resolve_model("nvidia/Llama-3.1-8B-Instruct-FP8")
    assert (fp8.name, fp8.weight_dtype, fp8.num_params) == ("llama-3.1-8b", "fp8", 8_030_261_248)
    assert resolve_model("Qwen/Qwen3-32B-FP8").weight_dtype == "fp8_block"
    assert resolve_model("nvidia/Qwen3-32B-NVFP4").weight_dtype == "nvfp4"
    assert resolve_model("Qwen/Qwen3-8B-AWQ").weight_dtype == "int4"
    assert resolve_model("qwen/qwen3-32b-fp8") is resolve_model(" Qwen/Qwen3-32B-FP8 ")  # cached, case-free
    with pytest.raises(UnknownPresetError, match="unknown model preset 'Qwen/Qwen3-33B'"):
        resolve_model("Qwen/Qwen3-33B")


def test_aiconfigurator_system_names_and_common_spellings_resolve() -> None:
    names = {
        "h100_sxm": "h100-sxm",
        "h200_sxm": "h200",
        "b200_sxm": "b200",
        "b300_sxm": "b300",
        "gb200": "gb200",
        "gb300": "gb300",
        "a100_sxm": "a100-80gb",
        "a100_pcie": "a100-pcie",
        "h100_pcie": "h100-pcie",
        "l40s": "l40s",
        "l4": "l4",
        "a30": "a30",
        "rtx_pro_6000_server": "rtx-pro-6000",
        "b60": "arc-pro-b60",
        "NVIDIA H100 80GB HBM3": "h100-sxm",
        "NVIDIA A100-SXM4-80GB": "a100-80gb",
        "NVIDIA B200": "b200",
        "H200 SXM": "h200",
        "Tesla T4": "t4",
    }
    for alias, preset in names.items():
        assert resolve_gpu(alias) is GPU_PRESETS[preset], alias
    for ambiguous in ("h100", "a100"):  # SXM or PCIe? Not guessed.
        with pytest.raises(UnknownPresetError, match="did you mean"):
            resolve_gpu(ambiguous)


def test_new_gpu_presets_figures() -> None:
    b200, gb300, pro = GPU_PRESETS["b200"], GPU_PRESETS["gb300"], GPU_PRESETS["rtx-pro-6000"]
    assert (b200.memory_bytes, b200.hbm_bandwidth_bytes_per_s, b200.bf16_flops) == (
        180 * GIB,
        7.7e12,
        2.25e15,
    )
    assert b200.fp4_flops == 2 * b200.fp8_flops == 4 * b200.bf16_flops
    assert gb300.fp4_flops == 15e15 and gb300.int8_ops == 0.165e15  # Blackwell Ultra drops dense INT8
    assert pro.fp4_flops == 2000e12 and pro.interconnect_bandwidth_bytes_per_s == 64e9  # no NVLink
    assert GPU_PRESETS["h100-pcie"].bf16_flops == 756.5e12
    assert GPU_PRESETS["arc-pro-b60"].fp8_flops is None and "Intel" in GPU_PRESETS["arc-pro-b60"].source
    for name, spec in GPU_PRESETS.items():
        assert (spec.fp4_flops is not None) == (name in {"b200", "b300", "gb200", "gb300", "rtx-pro-6000"}), (
            name
        )
        if spec.fp4_flops is not None:
            assert spec.sm_version in (100, 103, 120)


# -- frontier mixture-of-experts (issue 22) ---------------------------------------------------
# Every figure below is read off the checkpoint's config.json as aiconfigurator-core 0.12.0
# ships it (aiconfigurator_core/model_configs/<file>) and its Hugging Face model card.


def test_frontier_presets_kv_bytes_per_token_by_hand() -> None:
    """MLA: layers x (kv_lora_rank + qk_rope_head_dim) x bytes; GQA: 2 x layers x KV heads x
    head_dim x bytes; one latent per token whatever the TP degree (MLA), heads split by TP (GQA)."""
    mla = {
        # deepseek-ai--DeepSeek-V3_config.json / --DeepSeek-R1_config.json: 61 layers, kv_lora_rank
        # 512, qk_rope_head_dim 64 (DeepSeek-V3 card; arXiv:2412.19437 section 2.1.1)
        "deepseek-v3": 61 * (512 + 64),  # 35,136 elements
        "deepseek-r1": 61 * (512 + 64),
        # moonshotai--Kimi-K2.5_config.json, text_config: 61 layers, 512 + 64
        "kimi-k2.5": 61 * (512 + 64),
    }
    for name, elements in mla.items():
        spec = MODEL_PRESETS[name]
        assert spec.attention_kind == "mla", name
        assert kv_bytes_per_token(spec) == elements * 2, name  # bf16 latent ("auto" for fp8 weights)
        assert kv_bytes_per_token(spec, "fp8", tp=8) == elements, name
    assert kv_bytes_per_token(MODEL_PRESETS["deepseek-v3"]) == 70_272
    # zai-org--GLM-5_config.json: 78 layers, latent 512 + 64, and DeepSeek sparse attention's
    # indexer keys beside it, whatever the cache's dtype: index_head_dim 128 fp8 values and one
    # fp32 scale, 132 bytes (vLLM's DeepseekV32IndexerCache, SGLang's NSA token pool).
    glm = MODEL_PRESETS["glm-5"]
    assert kv_bytes_per_token(glm) == 78 * ((512 + 64) * 2 + 132) == 100_152
    assert kv_bytes_per_token(glm, "fp8", tp=8) == 78 * (512 + 64 + 132) == 55_224
    gqa = {
        # Qwen--Qwen3-30B-A3B_config.json: 48 layers, 4 KV heads, head_dim 128
        "qwen3-30b-a3b": (48, 4, 128),
        # Qwen--Qwen3-235B-A22B_config.json: 94 layers, 4 KV heads, head_dim 128
        "qwen3-235b-a22b": (94, 4, 128),
        # Qwen--Qwen3-Coder-480B-A35B-Instruct_config.json: 62 layers, 8 KV heads, head_dim 128
        "qwen3-coder-480b-a35b": (62, 8, 128),
        # MiniMaxAI--MiniMax-M2.5_config.json: 62 layers, 8 KV heads, head_dim 128, all full attention
        "minimax-m2.5": (62, 8, 128),
    }
    for name, (layers, kv_heads, head_dim) in gqa.items():
        spec = MODEL_PRESETS[name]
        assert spec.attention_kind == "gqa" and spec.sliding_window is None, name
        assert kv_bytes_per_token(spec) == 2 * layers * kv_heads * head_dim * 2, name
        assert kv_bytes_per_token(spec, tp=2) == 2 * layers * (kv_heads // 2) * head_dim * 2, name
    assert kv_bytes_per_token(MODEL_PRESETS["qwen3-235b-a22b"]) == 192_512
    # openai--gpt-oss-120b_config.json: 36 layers, layer_types 18 sliding_attention (window 128)
    # + 18 full_attention, 8 KV heads x 64: per attention kind, 18 x 2 x 8 x 64 x 2 = 36,864 bytes
    # per token held; a 10,000-token context holds all of it in the full layers, 128 in the others.
    oss = MODEL_PRESETS["gpt-oss-120b"]
    assert (oss.num_full_layers, oss.num_window_layers, oss.sliding_window) == (18, 18, 128)
    per_kind = 18 * 2 * 8 * 64 * 2
    assert kv_bytes_per_token(oss) == 2 * per_kind == 73_728
    assert kv_bytes_for_context(oss, 10_000) == per_kind * 10_000 + per_kind * 128


def test_frontier_presets_architecture() -> None:
    """Routed and shared experts, top-k, dense first layers, MTP layers, from the configs."""
    expect = {
        # name: (routed experts, top-k, shared, dense first layers, MTP layers, expert width)
        "deepseek-v3": (256, 8, 1, 3, 1, 2048),  # n_routed_experts, ..., first_k_dense_replace 3
        "deepseek-r1": (256, 8, 1, 3, 1, 2048),
        "kimi-k2.5": (384, 8, 1, 1, 0, 2048),  # num_nextn_predict_layers 0
        "glm-5": (256, 8, 1, 3, 1, 2048),
        "qwen3-30b-a3b": (128, 8, 0, 0, 0, 768),
        "qwen3-235b-a22b": (128, 8, 0, 0, 0, 1536),
        "qwen3-coder-480b-a35b": (160, 8, 0, 0, 0, 2560),
        "minimax-m2.5": (256, 8, 0, 0, 3, 1536),  # use_mtp, num_mtp_modules 3
        "gpt-oss-120b": (128, 4, 0, 0, 0, 2880),
    }
    for name, (experts, top_k, shared, dense, mtp, width) in expect.items():
        spec = MODEL_PRESETS[name]
        got = (
            spec.num_experts,
            spec.num_experts_per_token,
            spec.num_shared_experts,
            spec.num_dense_layers,
            spec.num_mtp_layers,
            spec.intermediate_size,
        )
        assert got == (experts, top_k, shared, dense, mtp, width), name
    # The model cards' rounded totals (billions) and active counts (embeddings counted as active
    # here, so a little above the cards' figures where they leave them out).
    card = {
        "deepseek-v3": (671, 37),
        "deepseek-r1": (671, 37),
        "kimi-k2.5": (1000, 32),  # card: "1T" total, 32B activated
        "glm-5": (744, 40),
        "qwen3-30b-a3b": (30.5, 3.3),
        "qwen3-235b-a22b": (235, 22),
        "qwen3-coder-480b-a35b": (480, 35),
        "minimax-m2.5": (230, 10),
    }
    for name, (total_b, active_b) in card.items():
        spec = MODEL_PRESETS[name]
        rel = 0.03 if name == "kimi-k2.5" else 0.006  # "1T" is rounded harder
        assert spec.num_params / 1e9 == pytest.approx(total_b, rel=rel), name
        assert active_b <= spec.active_params / 1e9 <= active_b * 1.11, name
    assert MODEL_PRESETS["deepseek-v3"].weight_dtype == "fp8_block"  # the checkpoint's block-scaled fp8
    kimi = MODEL_PRESETS["kimi-k2.5"]
    assert (kimi.weight_dtype, kimi.expert_weight_dtype) == ("bf16", "int4")  # native int4 experts
    assert MODEL_PRESETS["minimax-m2.5"].weight_dtype == "fp8_block"
    assert MODEL_PRESETS["deepseek-r1"].model_copy(update={"name": "deepseek-v3", "source": ""}) == (
        MODEL_PRESETS["deepseek-v3"].model_copy(update={"source": ""})
    )


def test_frontier_hugging_face_ids_resolve_with_their_precision() -> None:
    cases = {
        # id as silicon_sample.csv or Hugging Face spells it: (preset, weights, routed experts)
        "deepseek-ai/DeepSeek-V3": ("deepseek-v3", "fp8_block", None),
        "deepseek-ai/DeepSeek-R1": ("deepseek-r1", "fp8_block", None),
        "nvidia/DeepSeek-R1-NVFP4": ("deepseek-r1", "bf16", "nvfp4"),
        "nvidia/DeepSeek-R1-0528-FP4-V2": ("deepseek-r1", "bf16", "nvfp4"),  # InferenceX's fp4 runs
        "nvidia/DeepSeek-V3.1-NVFP4": ("deepseek-v3", "bf16", "nvfp4"),
        "moonshotai/Kimi-K2.5": ("kimi-k2.5", "bf16", "int4"),
        "nvidia/Kimi-K2.5-NVFP4": ("kimi-k2.5", "bf16", "nvfp4"),
        "Qwen/Qwen3-235B-A22B": ("qwen3-235b-a22b", "bf16", None),
        "Qwen/Qwen3-235B-A22B-FP8": ("qwen3-235b-a22b", "fp8_block", None),
        "nvidia/Qwen3-235B-A22B-NVFP4": ("qwen3-235b-a22b", "nvfp4", None),
        "Qwen/Qwen3-30B-A3B-Instruct-2507": ("qwen3-30b-a3b", "bf16", None),
        "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8": ("qwen3-coder-480b-a35b", "fp8_block", None),
        "openai/gpt-oss-120b": ("gpt-oss-120b", "bf16", "mxfp4"),
        "MiniMaxAI/MiniMax-M2.5": ("minimax-m2.5", "fp8_block", None),
        "nvidia/MiniMax-M2.5-NVFP4": ("minimax-m2.5", "bf16", "nvfp4"),
        "zhipuai/GLM-5": ("glm-5", "bf16", None),
        "zai-org/GLM-5-FP8": ("glm-5", "fp8_block", None),
        "nvidia/GLM-5-NVFP4": ("glm-5", "bf16", "nvfp4"),
    }
    for alias, (name, weights, experts) in cases.items():
        spec = resolve_model(alias)
        assert (spec.name, spec.weight_dtype, spec.expert_weight_dtype) == (name, weights, experts), alias
        assert spec.num_params == MODEL_PRESETS[name].num_params
