"""ModelSpecs from Hugging Face config.json files (kvsim.model.hf_config): every config
aiconfigurator-core ships is read or refused with a clear error, the parameter count agrees
with the presets' checkpoint counts, and scenarios and the CLI take a config.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import kvsim
from kvsim.cli import main
from kvsim.errors import ScenarioError
from kvsim.limits import MAX_HF_CONFIG_BYTES
from kvsim.model.hf_config import HfConfigError, load_hf_config, model_spec_from_hf_config
from kvsim.model.presets import MODEL_PRESETS, resolve_model
from kvsim.scenario.loading import dump_scenario, load_scenario

try:
    import aiconfigurator_core

    MODEL_CONFIGS: Path | None = Path(aiconfigurator_core.__file__).parent / "model_configs"
except ImportError:
    MODEL_CONFIGS = None

needs_aic = pytest.mark.skipif(
    MODEL_CONFIGS is None, reason="aiconfigurator-core is not installed (pip install kvsim[kernels])"
)
SHIPPED = sorted(
    p.name
    for p in (MODEL_CONFIGS.glob("*_config.json") if MODEL_CONFIGS else [])
    if "hf_quant_config" not in p.name
)

#: Shipped configs (aiconfigurator-core 0.12.0) of the presets' checkpoints.
SHIPPED_PRESETS = {
    "meta-llama--Meta-Llama-3.1-8B_config.json": "llama-3.1-8b",
    "meta-llama--Meta-Llama-3.1-70B_config.json": "llama-3.1-70b",
    "meta-llama--Meta-Llama-3.1-405B_config.json": "llama-3.1-405b",
    "Qwen--Qwen3-0.6B_config.json": "qwen3-0.6b",
    "Qwen--Qwen3-1.7B_config.json": "qwen3-1.7b",
    "Qwen--Qwen3-8B_config.json": "qwen3-8b",
    "Qwen--Qwen3-32B_config.json": "qwen3-32b",
    "mistralai--Mixtral-8x7B-v0.1_config.json": "mixtral-8x7b",
    "openai--gpt-oss-20b_config.json": "gpt-oss-20b",
    "openai--gpt-oss-120b_config.json": "gpt-oss-120b",
    # frontier mixture-of-experts (issue 22)
    "deepseek-ai--DeepSeek-V3_config.json": "deepseek-v3",
    "deepseek-ai--DeepSeek-R1_config.json": "deepseek-r1",
    "moonshotai--Kimi-K2.5_config.json": "kimi-k2.5",
    "Qwen--Qwen3-30B-A3B_config.json": "qwen3-30b-a3b",
    "Qwen--Qwen3-235B-A22B_config.json": "qwen3-235b-a22b",
    "Qwen--Qwen3-Coder-480B-A35B-Instruct_config.json": "qwen3-coder-480b-a35b",
    "MiniMaxAI--MiniMax-M2.5_config.json": "minimax-m2.5",
    "zai-org--GLM-5_config.json": "glm-5",
    "Qwen--Qwen3.5-397B-A17B_config.json": "qwen3.5-397b-a17b",
    "Qwen--Qwen3.5-122B-A10B_config.json": "qwen3.5-122b-a10b",
    "Qwen--Qwen3.5-35B-A3B_config.json": "qwen3.5-35b-a3b",
    "Qwen--Qwen3.5-27B_config.json": "qwen3.5-27b",
}
#: Shipped configs of quantized checkpoints and the Hugging Face id that names them: the alias
#: gives the precisions the config (and its hf_quant_config.json) gives.
SHIPPED_ALIASES = {
    "Qwen--Qwen3-235B-A22B-FP8_config.json": "Qwen/Qwen3-235B-A22B-FP8",
    "Qwen--Qwen3-30B-A3B-FP8_config.json": "Qwen/Qwen3-30B-A3B-FP8",
    "nvidia--Qwen3-235B-A22B-NVFP4_config.json": "nvidia/Qwen3-235B-A22B-NVFP4",
    "nvidia--DeepSeek-V3.1-NVFP4_config.json": "nvidia/DeepSeek-V3.1-NVFP4",
    "nvidia--Kimi-K2.5-NVFP4_config.json": "nvidia/Kimi-K2.5-NVFP4",
    "nvidia--MiniMax-M2.5-NVFP4_config.json": "nvidia/MiniMax-M2.5-NVFP4",
    "nvidia--GLM-5-NVFP4_config.json": "nvidia/GLM-5-NVFP4",
    "zai-org--GLM-5-FP8_config.json": "zai-org/GLM-5-FP8",
    "nvidia--Qwen3.5-397B-A17B-NVFP4_config.json": "nvidia/Qwen3.5-397B-A17B-NVFP4",
    "nvidia--Qwen3.5-122B-A10B-NVFP4_config.json": "nvidia/Qwen3.5-122B-A10B-NVFP4",
}

#: The config.json of preset checkpoints aiconfigurator does not ship (the fields kvsim reads,
#: as the Hugging Face repositories give them).
CONFIGS: dict[str, dict[str, Any]] = {
    "llama-2-7b": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "max_position_embeddings": 4096,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 32,
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "vocab_size": 32000,
    },
    "mistral-7b": {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "max_position_embeddings": 32768,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "sliding_window": 4096,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 32000,
    },
    "qwen2.5-7b": {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "max_position_embeddings": 32768,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "sliding_window": 131072,
        "use_sliding_window": False,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 152064,
    },
    "qwen3-4b": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "head_dim": 128,
        "hidden_size": 2560,
        "intermediate_size": 9728,
        "max_position_embeddings": 40960,
        "num_attention_heads": 32,
        "num_hidden_layers": 36,
        "num_key_value_heads": 8,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "vocab_size": 151936,
    },
    "qwen3-14b": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "head_dim": 128,
        "hidden_size": 5120,
        "intermediate_size": 17408,
        "max_position_embeddings": 40960,
        "num_attention_heads": 40,
        "num_hidden_layers": 40,
        "num_key_value_heads": 8,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 151936,
    },
    "deepseek-v2-lite": {
        "architectures": ["DeepseekV2ForCausalLM"],
        "model_type": "deepseek_v2",
        "first_k_dense_replace": 1,
        "hidden_size": 2048,
        "intermediate_size": 10944,
        "kv_lora_rank": 512,
        "max_position_embeddings": 163840,
        "moe_intermediate_size": 1408,
        "moe_layer_freq": 1,
        "n_routed_experts": 64,
        "n_shared_experts": 2,
        "num_attention_heads": 16,
        "num_experts_per_tok": 6,
        "num_hidden_layers": 27,
        "num_key_value_heads": 16,
        "q_lora_rank": None,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "scoring_func": "softmax",
        "topk_method": "greedy",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 102400,
    },
    "gemma-3-1b": {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "head_dim": 256,
        "hidden_size": 1152,
        "intermediate_size": 6912,
        "max_position_embeddings": 32768,
        "num_attention_heads": 4,
        "num_hidden_layers": 26,
        "num_key_value_heads": 1,
        "sliding_window": 512,
        "sliding_window_pattern": 6,
        "torch_dtype": "bfloat16",
        "vocab_size": 262144,
    },
    "gemma-3-4b": {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "torch_dtype": "bfloat16",
        "text_config": {
            "model_type": "gemma3_text",
            "head_dim": 256,
            "hidden_size": 2560,
            "intermediate_size": 10240,
            "max_position_embeddings": 131072,
            "num_attention_heads": 8,
            "num_hidden_layers": 34,
            "num_key_value_heads": 4,
            "sliding_window": 1024,
            "vocab_size": 262208,
        },
        "vision_config": {
            "model_type": "siglip_vision_model",
            "hidden_size": 1152,
            "image_size": 896,
            "intermediate_size": 4304,
            "num_attention_heads": 16,
            "num_hidden_layers": 27,
            "patch_size": 14,
        },
    },
}

#: ModelSpec fields a config.json must reproduce (max_model_len apart where a preset takes the
#: model card's context instead of the config's positions).
SHAPE = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "tie_word_embeddings",
    "sliding_window",
    "num_sliding_window_layers",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "num_experts",
    "num_experts_per_token",
    "num_shared_experts",
    "num_dense_layers",
    "num_mtp_layers",
    "num_linear_attention_layers",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "linear_state_dtype",
    "attn_output_gate",
)


def _check_against_preset(spec: Any, preset_name: str) -> None:
    preset = MODEL_PRESETS[preset_name]
    for field in SHAPE:
        assert getattr(spec, field) == getattr(preset, field), (preset_name, field)
    assert spec.num_params == pytest.approx(preset.num_params, rel=0.005), preset_name


@pytest.mark.parametrize("preset", sorted(CONFIGS))
def test_configs_of_presets_give_their_shapes_and_counts(preset: str, tmp_path: Path) -> None:
    path = tmp_path / preset / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(CONFIGS[preset]))
    spec = load_hf_config(path)
    assert spec.name == preset  # the folder's name
    _check_against_preset(spec, preset)
    if preset != "deepseek-v2-lite":  # the preset takes the model card's 32k context
        assert spec.max_model_len == MODEL_PRESETS[preset].max_model_len


def test_exact_counts_where_the_presets_hold_the_checkpoints() -> None:
    exact = {"llama-2-7b": 6_738_415_616, "qwen2.5-7b": 7_615_616_512, "gemma-3-1b": 999_885_952}
    for name, count in exact.items():
        spec = model_spec_from_hf_config(CONFIGS[name], source=name, name=name)
        assert spec.num_params == count == MODEL_PRESETS[name].num_params


@needs_aic
@pytest.mark.parametrize("file", sorted(SHIPPED_PRESETS))
def test_shipped_configs_of_presets(file: str) -> None:
    assert MODEL_CONFIGS is not None
    spec = load_hf_config(MODEL_CONFIGS / file)
    _check_against_preset(spec, SHIPPED_PRESETS[file])
    preset = MODEL_PRESETS[SHIPPED_PRESETS[file]]
    assert spec.max_model_len == preset.max_model_len
    if "(kvsim.model.hf_config)" in preset.source:  # a count computed by this formula: exactly it
        assert spec.num_params == preset.num_params
        assert spec.num_active_params == preset.num_active_params
    assert (spec.weight_dtype, spec.expert_weight_dtype) == (
        preset.weight_dtype,
        preset.expert_weight_dtype,
    ), file


@needs_aic
@pytest.mark.parametrize("file", sorted(SHIPPED_ALIASES))
def test_shipped_quantized_configs_match_their_aliases(file: str) -> None:
    assert MODEL_CONFIGS is not None
    spec = load_hf_config(MODEL_CONFIGS / file)
    alias = resolve_model(SHIPPED_ALIASES[file])
    _check_against_preset(spec, alias.name)
    assert (spec.weight_dtype, spec.expert_weight_dtype) == (alias.weight_dtype, alias.expert_weight_dtype)


@needs_aic
@pytest.mark.parametrize("file", SHIPPED)
def test_every_shipped_config_is_read_or_refused_clearly(file: str) -> None:
    assert MODEL_CONFIGS is not None
    path = MODEL_CONFIGS / file
    try:
        spec = load_hf_config(path)
    except HfConfigError as exc:
        message = str(exc)
        assert message.startswith(f"{path}: ")
        assert "model_type" in message or "layer_types" in message or "quant_algo" in message
        return
    assert spec.num_params > 0 and spec.max_model_len > 0
    assert str(path) in spec.source
    if spec.num_active_params is not None:
        assert spec.num_active_params < spec.num_params


@needs_aic
def test_the_required_families_are_all_read() -> None:
    assert MODEL_CONFIGS is not None
    required = {
        "meta-llama--Meta-Llama-3.1-8B_config.json": "llama",
        "Qwen--Qwen3-32B_config.json": "qwen3",
        "mistralai--Mixtral-8x7B-v0.1_config.json": "mixtral",
        "Qwen--Qwen3-235B-A22B_config.json": "qwen3_moe",
        "deepseek-ai--DeepSeek-V3_config.json": "deepseek_v3",
        "openai--gpt-oss-20b_config.json": "gpt_oss",
        "moonshotai--Kimi-K2.5_config.json": "kimi_k25",
        "MiniMaxAI--MiniMax-M2.5_config.json": "minimax_m2",
    }
    for file, family in required.items():
        spec = load_hf_config(MODEL_CONFIGS / file)
        assert family in spec.source or family == "kimi_k25", file
    v3 = load_hf_config(MODEL_CONFIGS / "deepseek-ai--DeepSeek-V3_config.json")
    assert (v3.kv_lora_rank, v3.qk_rope_head_dim, v3.num_dense_layers, v3.num_shared_experts) == (
        512,
        64,
        3,
        1,
    )
    assert round(v3.num_params / 1e9) == 671 and round(v3.active_params / 1e9) == 38  # card: 671B, 37B
    moe = load_hf_config(MODEL_CONFIGS / "Qwen--Qwen3-235B-A22B_config.json")
    assert round(moe.num_params / 1e9) == 235 and round(moe.active_params / 1e9) == 22  # card: 235B, 22B


@needs_aic
def test_precisions_from_quantization_configs() -> None:
    assert MODEL_CONFIGS is not None
    expect = {
        "Qwen--Qwen3-32B-FP8_config.json": ("fp8_block", None),  # weight_block_size [128, 128]
        "Qwen--Qwen3-32B-FP8-Static-PerTensor_config.json": ("fp8", None),
        "nvidia--Llama-3.1-70B-Instruct-FP8_config.json": ("fp8", None),  # hf_quant_config.json beside it
        "openai--gpt-oss-120b_config.json": ("bf16", "mxfp4"),  # attention and router unconverted
        "moonshotai--Kimi-K2.5_config.json": ("bf16", "int4"),  # compressed-tensors, experts only
        "nvidia--DeepSeek-V3.1-NVFP4_config.json": ("bf16", "nvfp4"),  # attention excluded
        "nvidia--Qwen3-235B-A22B-NVFP4_config.json": ("nvfp4", None),
        "deepseek-ai--DeepSeek-V3_config.json": ("fp8_block", None),
        "Qwen--Qwen3-32B_config.json": ("bf16", None),
    }
    for file, (weights, experts) in expect.items():
        spec = load_hf_config(MODEL_CONFIGS / file)
        assert (spec.weight_dtype, spec.expert_weight_dtype) == (weights, experts), file
    forced = load_hf_config(MODEL_CONFIGS / "Qwen--Qwen3-32B_config.json", weight_dtype="nvfp4")
    assert forced.weight_dtype == "nvfp4"


@needs_aic
def test_parts_an_exclusion_list_keeps_in_16_bits_and_the_presets_agree() -> None:
    """NVIDIA's NVFP4 exports (their hf_quant_config.json / quantization_config exclusion
    lists, aiconfigurator-core 0.12.0): DeepSeek-V3.1-NVFP4 excludes q_a, q_b, kv_a and kv_b
    alone, so o_proj, the dense layers and the shared experts are nvfp4 beside its 16-bit
    q/kv; Kimi-K2.5-NVFP4 and GLM-5-NVFP4 exclude self_attn (GLM-5 projection by projection,
    o_proj too); MiniMax-M2.5 has nothing else to quantize, Qwen3.5 excludes its shared experts.
    kvsim's aliases of the same exports say the same."""
    assert MODEL_CONFIGS is not None
    attention_only = {"dense_mlp": "nvfp4", "shared_experts": "nvfp4"}
    expect = {
        "nvidia--DeepSeek-V3.1-NVFP4_config.json": ("nvidia/DeepSeek-V3.1-NVFP4", {"attention_o": "nvfp4", **attention_only}),
        "nvidia--Kimi-K2.5-NVFP4_config.json": ("nvidia/Kimi-K2.5-NVFP4", attention_only),
        "nvidia--GLM-5-NVFP4_config.json": ("nvidia/GLM-5-NVFP4", attention_only),
        "nvidia--MiniMax-M2.5-NVFP4_config.json": ("nvidia/MiniMax-M2.5-NVFP4", {}),
        "nvidia--Qwen3.5-397B-A17B-NVFP4_config.json": ("nvidia/Qwen3.5-397B-A17B-NVFP4", {}),
        "nvidia--Kimi-K2.6-NVFP4_config.json": (None, {}),  # its dense layer and shared experts too
        "nvidia--Qwen3-235B-A22B-NVFP4_config.json": ("nvidia/Qwen3-235B-A22B-NVFP4", {}),
    }  # fmt: skip
    for file, (alias, modules) in expect.items():
        spec = load_hf_config(MODEL_CONFIGS / file)
        assert spec.module_weight_dtypes == modules, file
        if alias is not None:
            preset = resolve_model(alias)
            assert (preset.weight_dtype, preset.expert_weight_dtype) == (
                spec.weight_dtype,
                spec.expert_weight_dtype,
            )
            assert (preset.module_weight_dtypes, preset.q_lora_rank) == (modules, spec.q_lora_rank), alias


def test_an_exclusion_list_on_a_dense_model_keeps_those_parts_in_16_bits(tmp_path: Path) -> None:
    """A dense model whose scheme excludes attention: the weights at the scheme's precision,
    attention's projections in the config's 16 bits (sized and priced so)."""
    config = {
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "torch_dtype": "bfloat16",
        "max_position_embeddings": 4096,
        "quantization_config": {"quant_method": "fp8", "modules_to_not_convert": ["model.layers.0.self_attn.o_proj", "lm_head"]},
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    spec = load_hf_config(path)
    assert (spec.weight_dtype, spec.module_weight_dtypes) == ("fp8", {"attention_o": "bf16"})


def test_errors_name_the_file_and_the_field(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    broken = {k: v for k, v in CONFIGS["mistral-7b"].items() if k != "num_key_value_heads"}
    broken["num_hidden_layers"] = "32"
    path.write_text(json.dumps(broken))
    with pytest.raises(HfConfigError, match=rf"^{path}: num_hidden_layers: must be an integer, got '32'$"):
        load_hf_config(path)
    path.write_text(json.dumps({k: v for k, v in CONFIGS["mistral-7b"].items() if k != "hidden_size"}))
    with pytest.raises(HfConfigError, match=rf"^{path}: hidden_size: missing \(needed to size the model\)$"):
        load_hf_config(path)
    path.write_text(json.dumps({**CONFIGS["mistral-7b"], "model_type": "mamba"}))
    with pytest.raises(
        HfConfigError, match=r"model_type 'mamba': not a supported architecture \(supported: llama,"
    ):
        load_hf_config(path)
    path.write_text(json.dumps({**CONFIGS["qwen3-4b"], "quantization_config": {"quant_method": "hqq"}}))
    with pytest.raises(
        HfConfigError, match=r"quantization_config.quant_method: 'hqq' is not a modelled scheme"
    ):
        load_hf_config(path)
    path.write_text("[1, 2]")
    with pytest.raises(HfConfigError, match=r"config\.json must be a JSON object, got list"):
        load_hf_config(path)
    path.write_text("{not json")
    with pytest.raises(HfConfigError, match=r"cannot read config\.json"):
        load_hf_config(path)
    path.write_bytes(b" " * (MAX_HF_CONFIG_BYTES + 1))
    with pytest.raises(HfConfigError, match="larger than"):
        load_hf_config(path)
    with pytest.raises(HfConfigError, match=r"cannot read config\.json"):
        load_hf_config(tmp_path / "missing.json")


def test_a_scenario_reads_a_config_relative_to_its_file(tmp_path: Path) -> None:
    (tmp_path / "models" / "qwen3-4b").mkdir(parents=True)
    (tmp_path / "models" / "qwen3-4b" / "config.json").write_text(json.dumps(CONFIGS["qwen3-4b"]))
    scenario_file = tmp_path / "s.yaml"
    scenario_file.write_text(
        yaml.safe_dump(
            {
                "model": {"hf_config": "models/qwen3-4b/config.json", "weight_dtype": "fp8"},
                "replicas": [{"gpu": "l40s", "engine": {"max_model_len": 8192}}],
                "workload": {"num_requests": 5},
            }
        )
    )
    scenario = load_scenario(scenario_file)
    assert scenario.model.name == "qwen3-4b" and scenario.model.weight_dtype == "fp8"  # type: ignore[union-attr]
    dumped = yaml.safe_load(dump_scenario(scenario))
    assert dumped["model"]["num_layers"] == 36 and "models/qwen3-4b/config.json" in dumped["model"]["source"]
    assert load_scenario(dumped).model == scenario.model  # the saved scenario needs no file
    assert kvsim.run(scenario).summary["num_finished"] == 5
    with pytest.raises(ScenarioError) as err:
        load_scenario({"model": {"hf_config": "models/qwen3-4b/config.json", "layers": 3}}, base_dir=tmp_path)
    assert (
        err.value.problems[0][0] == "model"
        and "unknown key(s) layers beside hf_config" in err.value.problems[0][1]
    )
    with pytest.raises(ScenarioError, match=r"nowhere\.json: cannot read config\.json"):
        load_scenario({"model": {"hf_config": str(tmp_path / "nowhere.json")}})


def test_the_cli_takes_a_config_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "Qwen3-14B" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(CONFIGS["qwen3-14b"]))
    assert main(["kv-size", "--model", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["model"], out["bytes_per_token"]) == ("Qwen3-14B", 2 * 40 * 8 * 128 * 2)
    assert main(["fit", "--model", str(path), "--gpu", "h100_sxm", "--context-tokens", "8192"]) == 0
    assert capsys.readouterr().out.startswith("Qwen3-14B (bf16 weights")
    path.write_text(json.dumps({**CONFIGS["qwen3-14b"], "model_type": "qwen3_next"}))
    assert main(["fit", "--model", str(path), "--gpu", "h100-sxm"]) == 2
    assert "model_type 'qwen3_next'" in capsys.readouterr().err


def test_mtp_layers_are_recorded_not_counted() -> None:
    """DeepSeek's num_nextn_predict_layers and MiniMax's MTP modules (when use_mtp) are kept in
    num_mtp_layers; the parameter count and the KV cache leave them out (issue 22)."""
    lite = CONFIGS["deepseek-v2-lite"]
    base = model_spec_from_hf_config(lite, source="lite", name="lite")
    mtp = model_spec_from_hf_config({**lite, "num_nextn_predict_layers": 1}, source="lite", name="lite")
    assert (base.num_mtp_layers, mtp.num_mtp_layers) == (0, 1)
    assert mtp.num_params == base.num_params and mtp.num_layers == base.num_layers
    minimax = {
        "model_type": "minimax_m2",
        "num_hidden_layers": 4,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "intermediate_size": 128,
        "vocab_size": 1000,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "max_position_embeddings": 4096,
        "num_mtp_modules": 3,
        "mtp_transformer_layers": 1,
    }
    assert model_spec_from_hf_config(minimax, source="m", name="m").num_mtp_layers == 0  # no use_mtp
    assert model_spec_from_hf_config({**minimax, "use_mtp": True}, source="m", name="m").num_mtp_layers == 3
    # Its q/k norms span all heads (use_qk_norm): two all-reduces more per layer under TP.
    assert not model_spec_from_hf_config(minimax, source="m", name="m").qk_norm_across_heads
    assert model_spec_from_hf_config(
        {**minimax, "use_qk_norm": True}, source="m", name="m"
    ).qk_norm_across_heads


@needs_aic
def test_qwen35_counts_by_hand() -> None:
    """Qwen3.5-397B-A17B's parameters from its config (aiconfigurator-core 0.12.0
    model_configs/Qwen--Qwen3.5-397B-A17B_config.json), term by term."""
    assert MODEL_CONFIGS is not None
    spec = load_hf_config(MODEL_CONFIGS / "Qwen--Qwen3.5-397B-A17B_config.json")
    h, k, v, nv = 4096, 16 * 128, 64 * 128, 64
    gdn = (
        h * (2 * k + 2 * v) + h * 2 * nv + (2 * k + v) * 4 + 2 * nv + 128 + v * h
    )  # in_proj qkvz/ba, conv, A, dt, norm, out
    assert gdn == 118_014_208
    full = h * 32 * 256 * 2 + 2 * h * 2 * 256 + 32 * 256 * h + 2 * 256  # gated q, k, v, o, q/k norms
    expert = 3 * h * 1024
    moe = 512 * expert + expert + h + h * 512  # routed, shared, shared gate, router
    embed = 2 * 248320 * h + h
    text = 45 * gdn + 15 * full + 60 * 2 * h + 60 * moe + embed
    assert text == 396_346_350_336
    vision = 456_010_480  # the Qwen3-VL-layout tower (hf_config._qwen_vision_params)
    assert spec.num_params == text + vision
    assert spec.num_active_params == text + vision - 60 * (512 - 10) * expert
    assert (spec.num_linear_attention_layers, spec.num_kv_layers, spec.num_mtp_layers) == (45, 15, 1)
    assert (spec.linear_state_dtype, spec.attn_output_gate, spec.num_shared_experts) == ("fp32", True, 1)


def test_qwen35_layer_mix_from_the_interval_and_refusals(tmp_path: Path) -> None:
    text = {
        "model_type": "qwen3_5_text", "num_hidden_layers": 8, "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 100,
        "max_position_embeddings": 1024, "full_attention_interval": 4, "linear_num_key_heads": 2,
        "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
        "linear_conv_kernel_dim": 4, "attn_output_gate": True, "mamba_ssm_dtype": "bfloat16",
    }  # fmt: skip
    spec = model_spec_from_hf_config({"model_type": "qwen3_5", "text_config": text}, source="x", name="tiny")
    assert (spec.num_linear_attention_layers, spec.num_kv_layers, spec.linear_state_dtype) == (6, 2, "bf16")
    with pytest.raises(HfConfigError, match=r"text_config\.mamba_ssm_dtype: unknown dtype 'int8'"):
        model_spec_from_hf_config(
            {"model_type": "qwen3_5", "text_config": {**text, "mamba_ssm_dtype": "int8"}},
            source="x",
            name="t",
        )
    with pytest.raises(HfConfigError, match=r"text_config\.layer_types: has 2 entries for 8 layers"):
        model_spec_from_hf_config(
            {"model_type": "qwen3_5", "text_config": {**text, "layer_types": ["linear_attention"] * 2}},
            source="x",
            name="t",
        )
    with pytest.raises(HfConfigError, match=r"layer_types: linear_attention layers are not modelled"):
        model_spec_from_hf_config(
            {**CONFIGS["qwen3-4b"], "layer_types": ["linear_attention"] * 36}, source="x", name="t"
        )
