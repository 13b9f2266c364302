"""Model and GPU presets and name resolution.

    resolve_model("Llama-2-70B")    # case-insensitive; unknown names suggest close ones
    resolve_gpu("h100-sxm")
    register_gpu(GpuSpec(name="my-gpu", ...), aliases=["My GPU 96GB"])   # a preset of your own

Every preset cites where its figures come from in ``source``: the model's Hugging Face
``config.json`` (layers, widths, heads, vocabulary, context) and model card or paper
(parameter count), or the GPU's NVIDIA datasheet. Datasheet compute figures are dense
(without 2:4 sparsity, i.e. half the starred "with sparsity" numbers); interconnect
figures are per direction (half the bidirectional totals datasheets print).

GPU memory: datasheets say "80GB", but HBM and GDDR parts are built from binary-sized
dies and CUDA reports a total close to 80 GiB, not 80e9 bytes (an H200, "141GB",
reports 139.8 GiB). Presets therefore store ``GB x 2**30``; docs/presets.md has the
measurements and how to match one machine exactly.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from kvsim.errors import KvsimError
from kvsim.model.kv_sizing import GIB
from kvsim.model.specs import GpuSpec, ModelSpec, WeightDtype, WeightModule

_HF = "https://huggingface.co"


def _models(*specs: ModelSpec) -> dict[str, ModelSpec]:
    return {spec.name: spec for spec in specs}


MODEL_PRESETS: dict[str, ModelSpec] = _models(
    ModelSpec(
        name="llama-2-7b",
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=32,
        head_dim=128,
        intermediate_size=11008,
        vocab_size=32000,
        num_params=6_738_415_616,
        weight_dtype="fp16",
        max_model_len=4096,
        source=f"{_HF}/meta-llama/Llama-2-7b-hf/blob/main/config.json (torch_dtype float16); "
        "parameter count: the checkpoint's tensors (model card: 7B); Touvron et al. 2023, "
        "Llama 2, arXiv:2307.09288, Table 1.",
    ),
    ModelSpec(
        name="llama-2-13b",
        num_layers=40,
        hidden_size=5120,
        num_attention_heads=40,
        num_kv_heads=40,
        head_dim=128,
        intermediate_size=13824,
        vocab_size=32000,
        num_params=13_015_864_320,
        weight_dtype="fp16",
        max_model_len=4096,
        source=f"{_HF}/meta-llama/Llama-2-13b-hf/blob/main/config.json; parameter count: the "
        "checkpoint's tensors (model card: 13B); arXiv:2307.09288.",
    ),
    ModelSpec(
        name="llama-2-70b",
        num_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=28672,
        vocab_size=32000,
        num_params=68_976_648_192,
        weight_dtype="fp16",
        max_model_len=4096,
        source=f"{_HF}/meta-llama/Llama-2-70b-hf/blob/main/config.json (GQA, 8 KV heads); "
        "parameter count: the checkpoint's tensors (model card: 70B); arXiv:2307.09288.",
    ),
    ModelSpec(
        name="llama-3-8b",
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=128256,
        num_params=8_030_261_248,
        weight_dtype="bf16",
        max_model_len=8192,
        source=f"{_HF}/meta-llama/Meta-Llama-3-8B/blob/main/config.json; parameter count: "
        "the checkpoint's tensors (model card: 8B).",
    ),
    ModelSpec(
        name="llama-3-70b",
        num_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=28672,
        vocab_size=128256,
        num_params=70_553_706_496,
        weight_dtype="bf16",
        max_model_len=8192,
        source=f"{_HF}/meta-llama/Meta-Llama-3-70B/blob/main/config.json; parameter count: "
        "the checkpoint's tensors (model card: 70B).",
    ),
    ModelSpec(
        name="mistral-7b",
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=32000,
        num_params=7_241_732_096,
        weight_dtype="bf16",
        max_model_len=32768,
        sliding_window=4096,
        source=f"{_HF}/mistralai/Mistral-7B-v0.1/blob/main/config.json (sliding_window 4096, "
        "max_position_embeddings 32768); Jiang et al. 2023, Mistral 7B, arXiv:2310.06825, Table 1.",
    ),
    ModelSpec(
        name="mixtral-8x7b",
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=32000,
        num_params=46_702_792_704,
        num_active_params=12_879_925_248,
        weight_dtype="bf16",
        max_model_len=32768,
        num_experts=8,
        num_experts_per_token=2,
        source=f"{_HF}/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json (num_local_experts 8, "
        "num_experts_per_tok 2, sliding_window null); Mistral AI, 'Mixtral of experts' (2023): "
        "46.7B total, 12.9B active parameters per token; Jiang et al. 2024, arXiv:2401.04088.",
    ),
    ModelSpec(
        name="qwen2.5-7b",
        num_layers=28,
        hidden_size=3584,
        num_attention_heads=28,
        num_kv_heads=4,
        head_dim=128,
        intermediate_size=18944,
        vocab_size=152064,
        num_params=7_615_616_512,
        weight_dtype="bf16",
        max_model_len=32768,
        source=f"{_HF}/Qwen/Qwen2.5-7B-Instruct/blob/main/config.json (use_sliding_window "
        "false; max_position_embeddings 32768, 128k only with YaRN); model card: 7.61B parameters.",
    ),
    ModelSpec(
        name="deepseek-v2-lite",
        num_layers=27,
        hidden_size=2048,
        num_attention_heads=16,
        num_kv_heads=16,
        head_dim=128,
        intermediate_size=1408,
        vocab_size=102400,
        num_params=15.7e9,
        num_active_params=2.4e9,
        weight_dtype="bf16",
        max_model_len=32768,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        num_experts=64,
        num_experts_per_token=6,
        num_shared_experts=2,
        num_dense_layers=1,
        source=f"{_HF}/deepseek-ai/DeepSeek-V2-Lite/blob/main/config.json (MLA: kv_lora_rank "
        "512, qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128, q_lora_rank null; MoE: "
        "64 routed experts of moe_intermediate_size 1408, 6 per token, 2 shared, first layer "
        "dense); model card: 15.7B total, 2.4B active, 32k context; DeepSeek-AI 2024, "
        "arXiv:2405.04434. head_dim is the no-RoPE query/key and value head width.",
    ),
    ModelSpec(
        name="falcon-7b",
        num_layers=32,
        hidden_size=4544,
        num_attention_heads=71,
        num_kv_heads=1,
        head_dim=64,
        intermediate_size=18176,
        vocab_size=65024,
        num_params=6_921_720_704,
        weight_dtype="bf16",
        max_model_len=2048,
        source=f"{_HF}/tiiuae/falcon-7b/blob/main/config.json (multi_query true: one KV head; "
        "hidden 4544 / 71 heads = 64; MLP 4 x hidden); parameter count: the checkpoint's "
        "tensors (model card: 7B); Almazrouei et al. 2023, arXiv:2311.16867. 71 query heads: "
        "only tp=1 divides them.",
    ),
    # -- small models people run at home --------------------------------------------------
    ModelSpec(
        name="llama-3.2-1b",
        num_layers=16,
        hidden_size=2048,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=64,
        intermediate_size=8192,
        vocab_size=128256,
        num_params=1_235_814_400,
        weight_dtype="bf16",
        max_model_len=131072,
        tie_word_embeddings=True,
        source=f"{_HF}/meta-llama/Llama-3.2-1B/blob/main/config.json (hidden 2048, 16 layers, 32 "
        "heads, 8 KV heads, head_dim 64, intermediate 8192, vocab 128256, "
        "max_position_embeddings 131072, tie_word_embeddings true, bfloat16); parameter count: "
        "the checkpoint's tensors (model card: 1.23B).",
    ),
    ModelSpec(
        name="llama-3.2-3b",
        num_layers=28,
        hidden_size=3072,
        num_attention_heads=24,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=8192,
        vocab_size=128256,
        num_params=3_212_749_824,
        weight_dtype="bf16",
        max_model_len=131072,
        tie_word_embeddings=True,
        source=f"{_HF}/meta-llama/Llama-3.2-3B/blob/main/config.json (hidden 3072, 28 layers, 24 "
        "heads, 8 KV heads, head_dim 128, intermediate 8192, vocab 128256, "
        "max_position_embeddings 131072, tied embeddings, bfloat16); parameter count: the "
        "checkpoint's tensors (model card: 3.21B).",
    ),
    ModelSpec(
        name="qwen2.5-0.5b",
        num_layers=24,
        hidden_size=896,
        num_attention_heads=14,
        num_kv_heads=2,
        head_dim=64,
        intermediate_size=4864,
        vocab_size=151936,
        num_params=494_032_768,
        weight_dtype="bf16",
        max_model_len=32768,
        tie_word_embeddings=True,
        source=f"{_HF}/Qwen/Qwen2.5-0.5B-Instruct/blob/main/config.json (hidden 896, 24 layers, "
        "14 heads, 2 KV heads, intermediate 4864, vocab 151936, max_position_embeddings 32768, "
        "tied embeddings, use_sliding_window false); model card: 0.49B parameters.",
    ),
    ModelSpec(
        name="qwen2.5-1.5b",
        num_layers=28,
        hidden_size=1536,
        num_attention_heads=12,
        num_kv_heads=2,
        head_dim=128,
        intermediate_size=8960,
        vocab_size=151936,
        num_params=1_543_714_304,
        weight_dtype="bf16",
        max_model_len=32768,
        tie_word_embeddings=True,
        source=f"{_HF}/Qwen/Qwen2.5-1.5B-Instruct/blob/main/config.json (hidden 1536, 28 layers, "
        "12 heads, 2 KV heads, intermediate 8960, vocab 151936, max_position_embeddings 32768, "
        "tied embeddings); model card: 1.54B parameters.",
    ),
    ModelSpec(
        name="qwen2.5-3b",
        num_layers=36,
        hidden_size=2048,
        num_attention_heads=16,
        num_kv_heads=2,
        head_dim=128,
        intermediate_size=11008,
        vocab_size=151936,
        num_params=3_085_938_688,
        weight_dtype="bf16",
        max_model_len=32768,
        tie_word_embeddings=True,
        source=f"{_HF}/Qwen/Qwen2.5-3B-Instruct/blob/main/config.json (hidden 2048, 36 layers, "
        "16 heads, 2 KV heads, intermediate 11008, vocab 151936, max_position_embeddings 32768, "
        "tied embeddings); model card: 3.09B parameters.",
    ),
    # -- interleaved sliding-window and full-attention layers -----------------------------
    ModelSpec(
        name="gemma-3-1b",
        num_layers=26,
        hidden_size=1152,
        num_attention_heads=4,
        num_kv_heads=1,
        head_dim=256,
        intermediate_size=6912,
        vocab_size=262144,
        num_params=999_885_952,
        weight_dtype="bf16",
        max_model_len=32768,
        sliding_window=512,
        num_sliding_window_layers=22,
        tie_word_embeddings=True,
        source=f"{_HF}/google/gemma-3-1b-it/blob/main/config.json (hidden 1152, 26 layers, 4 "
        "heads, 1 KV head, head_dim 256, intermediate 6912, vocab 262144, "
        "max_position_embeddings 32768, sliding_window 512, sliding_window_pattern 6: layer i "
        "is full attention when (i + 1) % 6 == 0, i.e. 4 full and 22 sliding-window layers, "
        "as transformers' Gemma3TextConfig derives layer_types); model card: 1B parameters "
        "(1.0B in the checkpoint); Gemma Team 2025, Gemma 3 technical report, arXiv:2503.19786.",
    ),
    ModelSpec(
        name="gemma-3-4b",
        num_layers=34,
        hidden_size=2560,
        num_attention_heads=8,
        num_kv_heads=4,
        head_dim=256,
        intermediate_size=10240,
        vocab_size=262208,
        num_params=4.3e9,
        weight_dtype="bf16",
        max_model_len=131072,
        sliding_window=1024,
        num_sliding_window_layers=29,
        tie_word_embeddings=True,
        source=f"{_HF}/google/gemma-3-4b-it/blob/main/config.json, text_config (hidden 2560, 34 "
        "layers, 8 heads, 4 KV heads, head_dim 256, intermediate 10240, vocab 262208, 128k "
        "context, sliding_window 1024, pattern 6: 5 full, 29 sliding-window layers); 4.3B "
        "parameters with the 0.4B SigLIP vision encoder vLLM loads with it (3.9B text); "
        "arXiv:2503.19786.",
    ),
    ModelSpec(
        name="gemma-3-12b",
        num_layers=48,
        hidden_size=3840,
        num_attention_heads=16,
        num_kv_heads=8,
        head_dim=256,
        intermediate_size=15360,
        vocab_size=262208,
        num_params=12.2e9,
        weight_dtype="bf16",
        max_model_len=131072,
        sliding_window=1024,
        num_sliding_window_layers=40,
        tie_word_embeddings=True,
        source=f"{_HF}/google/gemma-3-12b-it/blob/main/config.json, text_config (hidden 3840, 48 "
        "layers, 16 heads, 8 KV heads, head_dim 256, intermediate 15360, 128k context, "
        "sliding_window 1024, pattern 6: 8 full, 40 sliding-window layers); 12.2B parameters "
        "with the vision encoder; arXiv:2503.19786.",
    ),
    ModelSpec(
        name="gemma-3-27b",
        num_layers=62,
        hidden_size=5376,
        num_attention_heads=32,
        num_kv_heads=16,
        head_dim=128,
        intermediate_size=21504,
        vocab_size=262208,
        num_params=27.4e9,
        weight_dtype="bf16",
        max_model_len=131072,
        sliding_window=1024,
        num_sliding_window_layers=52,
        tie_word_embeddings=True,
        source=f"{_HF}/google/gemma-3-27b-it/blob/main/config.json, text_config (hidden 5376, 62 "
        "layers, 32 heads, 16 KV heads, head_dim 128, intermediate 21504, 128k context, "
        "sliding_window 1024, pattern 6: 10 full, 52 sliding-window layers); 27.4B parameters "
        "with the vision encoder; arXiv:2503.19786.",
    ),
    ModelSpec(
        name="gpt-oss-20b",
        num_layers=24,
        hidden_size=2880,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=64,
        intermediate_size=2880,
        vocab_size=201088,
        num_params=20.9e9,
        num_active_params=3.6e9,
        weight_dtype="bf16",
        expert_weight_dtype="mxfp4",
        max_model_len=131072,
        sliding_window=128,
        num_sliding_window_layers=12,
        num_experts=32,
        num_experts_per_token=4,
        source=f"{_HF}/openai/gpt-oss-20b/blob/main/config.json (24 layers, hidden 2880, 64 heads, "
        "8 KV heads, head_dim 64, num_local_experts 32, experts_per_token 4, intermediate 2880, "
        "vocab 201088, max_position_embeddings 131072, sliding_window 128, layer_types "
        "alternating sliding_attention / full_attention; MoE weights in MXFP4 (4.25 bits per "
        "weight with its e8m0 scales), attention, router and embeddings in bf16); OpenAI 2025, gpt-oss-120b "
        "& gpt-oss-20b model card, arXiv:2508.10925, Table 1: 20.9B total, 3.6B active "
        "parameters. Its attention sinks are learned logits, not cached tokens "
        "(num_sink_tokens 0).",
    ),
    ModelSpec(
        name="gpt-oss-120b",
        num_layers=36,
        hidden_size=2880,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=64,
        intermediate_size=2880,
        vocab_size=201088,
        num_params=116.8e9,
        num_active_params=5.1e9,
        weight_dtype="bf16",
        expert_weight_dtype="mxfp4",
        max_model_len=131072,
        sliding_window=128,
        num_sliding_window_layers=18,
        num_experts=128,
        num_experts_per_token=4,
        source=f"{_HF}/openai/gpt-oss-120b/blob/main/config.json (36 layers, 128 local experts, "
        "top-4, otherwise as gpt-oss-20b: alternating 128-token sliding-window and full "
        "layers, MXFP4 experts); arXiv:2508.10925, Table 1: 116.8B total, 5.1B active.",
    ),
    ModelSpec(
        name="starcoder",
        num_layers=40,
        hidden_size=6144,
        num_attention_heads=48,
        num_kv_heads=1,
        head_dim=128,
        intermediate_size=24576,
        vocab_size=49152,
        num_params=15.5e9,
        weight_dtype="fp16",
        max_model_len=8192,
        source=f"{_HF}/bigcode/starcoder/blob/main/config.json (GPTBigCode, multi_query true, "
        "n_embd 6144, n_head 48, n_layer 40, n_inner 24576, n_positions 8192; stored as fp32, "
        "served in fp16); model card: 15.5B parameters; Li et al. 2023, arXiv:2305.06161.",
    ),
)


_QWEN3_SIZES = ("0.6b", "1.7b", "4b", "8b", "14b", "32b")
_QWEN3_CARD = (
    "Qwen Team 2025, Qwen3 technical report, arXiv:2505.09388, Table 1; q_norm and k_norm "
    "(RMSNorm over head_dim 128) in every layer; max_position_embeddings 40,960 (the model "
    "card's 32,768 native context plus room for the output; 131,072 with YaRN)"
)
_QWEN3_COUNT = (
    "parameter count computed from the config's shapes (embeddings, per layer q/k/v/o, q_norm, "
    "k_norm, gate/up/down and two RMSNorms, the final norm, the LM head unless tied), matching "
    "the model card's"
)
_LLAMA31_CONFIG = (
    "rope_scaling llama3 (factor 8, original_max_position_embeddings 8192), "
    "max_position_embeddings 131072, bfloat16"
)

MODEL_PRESETS.update(
    _models(
        # -- Llama 3.1: the Llama 3 shapes with a 128k context ---------------------------
        ModelSpec(
            name="llama-3.1-8b",
            num_layers=32,
            hidden_size=4096,
            num_attention_heads=32,
            num_kv_heads=8,
            head_dim=128,
            intermediate_size=14336,
            vocab_size=128256,
            num_params=8_030_261_248,
            weight_dtype="bf16",
            max_model_len=131072,
            source=f"{_HF}/meta-llama/Llama-3.1-8B/blob/main/config.json (32 layers, hidden 4096, 32 "
            f"heads, 8 KV heads, intermediate 14336, vocab 128256, {_LLAMA31_CONFIG}); parameter "
            "count: the checkpoint's tensors, model.safetensors.index.json total_size 16,060,522,496 "
            "bytes / 2 (model card: 8B).",
        ),
        ModelSpec(
            name="llama-3.1-70b",
            num_layers=80,
            hidden_size=8192,
            num_attention_heads=64,
            num_kv_heads=8,
            head_dim=128,
            intermediate_size=28672,
            vocab_size=128256,
            num_params=70_553_706_496,
            weight_dtype="bf16",
            max_model_len=131072,
            source=f"{_HF}/meta-llama/Llama-3.1-70B/blob/main/config.json (80 layers, hidden 8192, 64 "
            f"heads, 8 KV heads, intermediate 28672, vocab 128256, {_LLAMA31_CONFIG}); parameter "
            "count: the checkpoint's tensors, total_size 141,107,412,992 bytes / 2 (model card: 70B).",
        ),
        ModelSpec(
            name="llama-3.1-405b",
            num_layers=126,
            hidden_size=16384,
            num_attention_heads=128,
            num_kv_heads=8,
            head_dim=128,
            intermediate_size=53248,
            vocab_size=128256,
            num_params=405_853_388_800,
            weight_dtype="bf16",
            max_model_len=131072,
            source=f"{_HF}/meta-llama/Llama-3.1-405B/blob/main/config.json (126 layers, hidden 16384, "
            f"128 heads, 8 KV heads, intermediate 53248, vocab 128256, {_LLAMA31_CONFIG}); parameter "
            "count: the checkpoint's tensors, total_size 811,706,777,600 bytes / 2 (model card: 405B).",
        ),
        # -- Qwen3 dense ---------------------------------------------------------------------
        ModelSpec(
            name="qwen3-0.6b",
            num_layers=28,
            hidden_size=1024,
            num_attention_heads=16,
            num_kv_heads=8,
            head_dim=128,
            intermediate_size=3072,
            vocab_size=151936,
            num_params=596_049_920,
            weight_dtype="bf16",
            max_model_len=40960,
            tie_word_embeddings=True,
            source=f"{_HF}/Qwen/Qwen3-0.6B/blob/main/config.json (28 layers, hidden 1024, 16 heads, 8 "
            "KV heads, head_dim 128, intermediate 3072, vocab 151936, tie_word_embeddings true); "
            f"{_QWEN3_CARD}; {_QWEN3_COUNT} 0.6B (0.44B non-embedding).",
        ),
        ModelSpec(
            name="qwen3-1.7b",
            num_layers=28,
            hidden_size=2048,
            num_attention_heads=16,
            num_kv_heads=8,
            head_dim=128,
            intermediate_size=6144,
            vocab_size=151936,
            num_params=1_720_574_976,
            weight_dtype="bf16",
            max_model_len=40960,
            tie_word_embeddings=True,
            source=f"{_HF}/Qwen/Qwen3-1.7B/blob/main/config.json (28 layers, hidden 2048, 16 heads, 8 "
            "KV heads, head_dim 128, intermediate 6144, vocab 151936, tie_word_embeddings true); "
            f"{_QWEN3_CARD}; {_QWEN3_COUNT} 1.7B (1.4B non-embedding).",
        ),
        ModelSpec(
            name="qwen3-4b",
            num_layers=36,
            hidden_size=2560,
            num_attention_heads=32,
            num_kv_heads=8,
            head_dim=128,
            intermediate_size=9728,
            vocab_size=151936,
            num_params=4_022_468_096,
            weight_dtype="bf16",
            max_model_len=40960,
            tie_word_embeddings=True,
            source=f"{_HF}/Qwen/Qwen3-4B/blob/main/config.json (36 layers, hidden 2560, 32 heads, 8 KV "
            "heads, head_dim 128, intermediate 9728, vocab 151936, tie_word_embeddings true); "
            f"{_QWEN3_CARD}; {_QWEN3_COUNT} 4.0B (3.6B non-embedding).",
        ),
        ModelSpec(
            name="qwen3-8b",
            num_layers=36,
            hidden_size=4096,
            num_attention_heads=32,
            num_kv_heads=8,
            head_dim=128,
            intermediate_size=12288,
            vocab_size=151936,
            num_params=8_190_735_360,
            weight_dtype="bf16",
            max_model_len=40960,
            source=f"{_HF}/Qwen/Qwen3-8B/blob/main/config.json (36 layers, hidden 4096, 32 heads, 8 KV "
            "heads, head_dim 128, intermediate 12288, vocab 151936, tie_word_embeddings false); "
            f"{_QWEN3_CARD}; {_QWEN3_COUNT} 8.2B (6.95B non-embedding).",
        ),
        ModelSpec(
            name="qwen3-14b",
            num_layers=40,
            hidden_size=5120,
            num_attention_heads=40,
            num_kv_heads=8,
            head_dim=128,
            intermediate_size=17408,
            vocab_size=151936,
            num_params=14_768_307_200,
            weight_dtype="bf16",
            max_model_len=40960,
            source=f"{_HF}/Qwen/Qwen3-14B/blob/main/config.json (40 layers, hidden 5120, 40 heads, 8 KV "
            "heads, head_dim 128, intermediate 17408, vocab 151936, tie_word_embeddings false); "
            f"{_QWEN3_CARD}; {_QWEN3_COUNT} 14.8B (13.2B non-embedding).",
        ),
        ModelSpec(
            name="qwen3-32b",
            num_layers=64,
            hidden_size=5120,
            num_attention_heads=64,
            num_kv_heads=8,
            head_dim=128,
            intermediate_size=25600,
            vocab_size=151936,
            num_params=32_762_123_264,
            weight_dtype="bf16",
            max_model_len=40960,
            source=f"{_HF}/Qwen/Qwen3-32B/blob/main/config.json (64 layers, hidden 5120, 64 heads, 8 KV "
            "heads, head_dim 128, intermediate 25600, vocab 151936, tie_word_embeddings false); "
            f"{_QWEN3_CARD}; {_QWEN3_COUNT} 32.8B (31.2B non-embedding).",
        ),
    )
)


# -- Frontier mixture-of-experts models as deployed (issue 22) --------------------------------
# Shapes from each checkpoint's config.json, which aiconfigurator-core 0.12.0 ships as
# aiconfigurator_core/model_configs/<org>--<name>_config.json (the file named in each source).
# Parameter counts: computed from the shapes by kvsim.model.hf_config's formula (every tensor the
# checkpoint stores for inference, multi-token-prediction layers apart; tests/test_hf_config.py
# checks the presets against those files), beside the model card's rounded figures. Active
# counts include the embedding and the LM head (Mixtral's convention), which cards often leave
# out. max_model_len is the config's max_position_embeddings, what vLLM and SGLang default to.
_AIC_CONFIGS = "aiconfigurator-core 0.12.0 model_configs/"
_PARAMS = "parameter count computed from the config's shapes (kvsim.model.hf_config)"
_MTP_NOTE = (
    "its multi-token-prediction layer(s) (num_mtp_layers) are a speculative-decoding draft, not in num_params"
)
_DEEPSEEK_V3_CONFIG = (
    "(61 layers, hidden 7168, 128 heads; MLA: kv_lora_rank 512, qk_rope_head_dim 64, "
    "qk_nope_head_dim 128, v_head_dim 128, q_lora_rank 1536; MoE: n_routed_experts 256 of "
    "moe_intermediate_size 2048, num_experts_per_tok 8, n_shared_experts 1, "
    "first_k_dense_replace 3 (dense MLP 18432 wide, counted in num_params), topk_method noaux_tc; "
    "num_nextn_predict_layers 1; vocab 129280; max_position_embeddings 163840 (YaRN factor 40); "
    "quantization_config fp8 with weight_block_size [128, 128])"
)

_DEEPSEEK_V3 = ModelSpec(
    name="deepseek-v3",
    num_layers=61,
    hidden_size=7168,
    num_attention_heads=128,
    num_kv_heads=128,
    head_dim=128,
    intermediate_size=2048,
    vocab_size=129280,
    num_params=671_026_419_200,
    num_active_params=37_552_297_472,
    weight_dtype="fp8_block",
    max_model_len=163840,
    kv_lora_rank=512,
    q_lora_rank=1536,
    qk_rope_head_dim=64,
    num_experts=256,
    num_experts_per_token=8,
    num_shared_experts=1,
    num_dense_layers=3,
    num_mtp_layers=1,
    source=f"{_HF}/deepseek-ai/DeepSeek-V3/blob/main/config.json {_DEEPSEEK_V3_CONFIG}; "
    f"{_AIC_CONFIGS}deepseek-ai--DeepSeek-V3_config.json; {_PARAMS}: 671.0B, 37.6B active "
    "(model card: 671B main model + 14B MTP module = 685B, 37B activated per token, 128K "
    f"context; DeepSeek-AI 2024, arXiv:2412.19437, section 2 and 4.2); {_MTP_NOTE}. "
    "head_dim is the no-RoPE query/key and value head width.",
)

MODEL_PRESETS.update(
    _models(
        _DEEPSEEK_V3,
        _DEEPSEEK_V3.model_copy(
            update={
                "name": "deepseek-r1",
                "source": f"{_HF}/deepseek-ai/DeepSeek-R1/blob/main/config.json (DeepSeek-V3's "
                f"architecture and config: {_DEEPSEEK_V3_CONFIG}); {_AIC_CONFIGS}"
                f"deepseek-ai--DeepSeek-R1_config.json; {_PARAMS}: 671.0B, 37.6B active (model card: "
                f"671B total, 37B activated, 128K context; DeepSeek-AI 2025, arXiv:2501.12948); "
                f"{_MTP_NOTE}.",
            }
        ),
        ModelSpec(
            name="kimi-k2.5",
            num_layers=61,
            hidden_size=7168,
            num_attention_heads=64,
            num_kv_heads=64,
            head_dim=128,
            intermediate_size=2048,
            vocab_size=163840,
            num_params=1_026_408_232_448,
            num_active_params=32_861_500_928,
            weight_dtype="bf16",
            expert_weight_dtype="int4",
            max_model_len=262144,
            kv_lora_rank=512,
            q_lora_rank=1536,
            qk_rope_head_dim=64,
            num_experts=384,
            num_experts_per_token=8,
            num_shared_experts=1,
            num_dense_layers=1,
            source=f"{_HF}/moonshotai/Kimi-K2.5/blob/main/config.json, text_config (model_type kimi_k2: "
            "61 layers, hidden 7168, 64 heads; MLA: kv_lora_rank 512, qk_rope_head_dim 64, "
            "qk_nope_head_dim 128, v_head_dim 128, q_lora_rank 1536; MoE: 384 routed experts of "
            "2048, top-8, 1 shared, first_k_dense_replace 1; num_nextn_predict_layers 0; vocab "
            "163840; max_position_embeddings 262144; quantization_config compressed-tensors int4 "
            "weights, group_size 32, symmetric, ignoring self_attn, shared experts and the dense "
            f"MLP: the routed experts are int4, the rest bf16); {_AIC_CONFIGS}"
            f"moonshotai--Kimi-K2.5_config.json; {_PARAMS}: 1,026B, 32.9B active (model card: 1T "
            "total, 32B activated, 256K context, MoonViT vision encoder of 400M). Approximated: "
            "the vision encoder is not counted; its int4 groups of 32 with a bf16 scale are 0.5625 "
            "bytes per weight, kvsim's int4 (groups of 128 with zero points) 0.5195, so the experts' "
            "bytes are 7.6% low.",
        ),
        ModelSpec(
            name="qwen3-30b-a3b",
            num_layers=48,
            hidden_size=2048,
            num_attention_heads=32,
            num_kv_heads=4,
            head_dim=128,
            intermediate_size=768,
            vocab_size=151936,
            num_params=30_532_122_624,
            num_active_params=3_353_032_704,
            weight_dtype="bf16",
            max_model_len=40960,
            num_experts=128,
            num_experts_per_token=8,
            source=f"{_HF}/Qwen/Qwen3-30B-A3B/blob/main/config.json (model_type qwen3_moe: 48 layers, "
            "hidden 2048, 32 heads, 4 KV heads, head_dim 128, num_experts 128 of "
            "moe_intermediate_size 768, num_experts_per_tok 8, no shared experts, mlp_only_layers "
            f"[], vocab 151936, max_position_embeddings 40960); {_AIC_CONFIGS}"
            f"Qwen--Qwen3-30B-A3B_config.json; {_PARAMS}: 30.5B, 3.35B active (model card: 30.5B "
            "total, 3.3B activated; arXiv:2505.09388, Table 2).",
        ),
        ModelSpec(
            name="qwen3-235b-a22b",
            num_layers=94,
            hidden_size=4096,
            num_attention_heads=64,
            num_kv_heads=4,
            head_dim=128,
            intermediate_size=1536,
            vocab_size=151936,
            num_params=235_093_634_560,
            num_active_params=22_190_763_520,
            weight_dtype="bf16",
            max_model_len=40960,
            num_experts=128,
            num_experts_per_token=8,
            source=f"{_HF}/Qwen/Qwen3-235B-A22B/blob/main/config.json (model_type qwen3_moe: 94 layers, "
            "hidden 4096, 64 heads, 4 KV heads, head_dim 128, num_experts 128 of "
            "moe_intermediate_size 1536, num_experts_per_tok 8, no shared experts, mlp_only_layers "
            f"[], vocab 151936, max_position_embeddings 40960); {_AIC_CONFIGS}"
            f"Qwen--Qwen3-235B-A22B_config.json; {_PARAMS}: 235.1B, 22.2B active (model card: "
            "235B total, 22B activated, 32,768 native context; arXiv:2505.09388, Table 2).",
        ),
        ModelSpec(
            name="qwen3-coder-480b-a35b",
            num_layers=62,
            hidden_size=6144,
            num_attention_heads=96,
            num_kv_heads=8,
            head_dim=128,
            intermediate_size=2560,
            vocab_size=151936,
            num_params=480_154_875_392,
            num_active_params=35_474_765_312,
            weight_dtype="bf16",
            max_model_len=262144,
            num_experts=160,
            num_experts_per_token=8,
            source=f"{_HF}/Qwen/Qwen3-Coder-480B-A35B-Instruct/blob/main/config.json (model_type "
            "qwen3_moe: 62 layers, hidden 6144, 96 heads, 8 KV heads, head_dim 128, num_experts 160 "
            "of moe_intermediate_size 2560, num_experts_per_tok 8, vocab 151936, "
            f"max_position_embeddings 262144); {_AIC_CONFIGS}"
            f"Qwen--Qwen3-Coder-480B-A35B-Instruct_config.json; {_PARAMS}: 480.2B, 35.5B active "
            "(model card: 480B total, 35B activated, 256K native context).",
        ),
        ModelSpec(
            name="minimax-m2.5",
            num_layers=62,
            hidden_size=3072,
            num_attention_heads=48,
            num_kv_heads=8,
            head_dim=128,
            intermediate_size=1536,
            vocab_size=200064,
            num_params=228_689_764_864,
            num_active_params=11_030_553_088,
            weight_dtype="fp8_block",
            max_model_len=196608,
            num_experts=256,
            num_experts_per_token=8,
            num_mtp_layers=3,
            qk_norm_across_heads=True,
            source=f"{_HF}/MiniMaxAI/MiniMax-M2.5/blob/main/config.json (model_type minimax_m2: 62 "
            "layers, hidden 3072, 48 heads, 8 KV heads, head_dim 128, full attention in every layer "
            "(no sliding_window, no layer_types), per-layer q/k norms, num_local_experts 256 of "
            "intermediate_size 1536, num_experts_per_tok 8, shared_intermediate_size 0, routing "
            "bias; use_mtp with num_mtp_modules 3 of mtp_transformer_layers 1; vocab 200064; "
            "max_position_embeddings 196608; quantization_config fp8, weight_block_size [128, 128], "
            f"leaving only the router gate and lm_head unconverted); {_AIC_CONFIGS}"
            f"MiniMaxAI--MiniMax-M2.5_config.json; {_PARAMS}: 228.7B, 11.0B active (MiniMax's "
            f"MiniMax-M2 model card, whose architecture M2.5 keeps: 230B total, 10B active); {_MTP_NOTE}.",
        ),
        ModelSpec(
            name="glm-5",
            num_layers=78,
            hidden_size=6144,
            num_attention_heads=64,
            num_kv_heads=64,
            head_dim=256,
            intermediate_size=2048,
            vocab_size=154880,
            num_params=743_911_218_432,
            num_active_params=41_784_728_832,
            weight_dtype="bf16",
            max_model_len=202752,
            kv_lora_rank=512,
            q_lora_rank=2048,
            qk_rope_head_dim=64,
            qk_nope_head_dim=192,
            index_topk=2048,
            index_head_dim=128,
            num_experts=256,
            num_experts_per_token=8,
            num_shared_experts=1,
            num_dense_layers=3,
            num_mtp_layers=1,
            source=f"{_HF}/zai-org/GLM-5/blob/main/config.json (model_type glm_moe_dsa: 78 layers, "
            "hidden 6144, 64 heads; MLA: kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim "
            "192, v_head_dim 256, q_lora_rank 2048; DeepSeek sparse attention: an indexer of 32 "
            "heads x 128, index_topk 2048; MoE: 256 routed experts of 2048, top-8, 1 shared, "
            "first_k_dense_replace 3 (dense MLP 12288 wide); num_nextn_predict_layers 1; vocab "
            f"154880; max_position_embeddings 202752; bfloat16); {_AIC_CONFIGS}zai-org--GLM-5_config.json; "
            f"{_PARAMS} with the indexer's projections: 743.9B, 41.8B active (Z.ai's model card: "
            f"744B total, 40B active); {_MTP_NOTE}. The DSA indexer's cached keys (index_head_dim "
            "128: 128 fp8 values and an fp32 scale, 132 bytes per token per layer in vLLM's "
            "DeepseekV32IndexerCache and SGLang's NSA pool) are in the KV bytes. Approximated: the "
            "roofline prices its attention over the whole context, not the indexer's top 2048 "
            "tokens (the kernels model reads the engines' DSA module tables, which measure GLM-5).",
        ),
    )
)


_QWEN35_NOTE = (
    "Gated DeltaNet linear attention (linear_num_key_heads 16 of dim 128, conv kernel 4, "
    "mamba_ssm_dtype float32) in three layers of four (full_attention_interval 4), gated full "
    "attention (attn_output_gate: q_proj twice as wide; head_dim 256, partial rotary 0.25) in the "
    "fourth; vocab 248320; max_position_embeddings 262144; bfloat16; mtp_num_hidden_layers 1. "
    f"{_PARAMS} with the vision tower (Qwen3-VL layout, depth 27, hidden 1152): "
)
_QWEN35_APPROX = (
    f"{_MTP_NOTE}. Approximated: the linear layers' state is a constant per request beside the "
    "paged KV cache of the full-attention layers (kvsim.model.kv_sizing.linear_state_bytes_per_seq); "
    "partial rotary and multimodal positions (mrope) are not modelled."
)


def _qwen35(
    name: str, repo: str, shape: dict[str, int], moe: tuple[int, int, int] | None, counts: str
) -> ModelSpec:
    """A Qwen3.5 preset: the shapes its config gives (``shape``), its MoE (experts, top-k,
    expert width, one shared expert as wide) if any, and the counts kvsim.model.hf_config reads."""
    layers, nv = shape["num_layers"], shape["linear_num_value_heads"]
    experts: dict[str, Any] = (
        {"num_experts": moe[0], "num_experts_per_token": moe[1], "num_shared_experts": 1}
        if moe is not None
        else {}
    )
    return ModelSpec(
        name=name,
        num_layers=layers,
        hidden_size=shape["hidden_size"],
        num_attention_heads=shape["num_attention_heads"],
        num_kv_heads=shape["num_kv_heads"],
        head_dim=256,
        intermediate_size=moe[2] if moe is not None else shape["intermediate_size"],
        vocab_size=248320,
        num_params=shape["num_params"],
        num_active_params=shape.get("num_active_params"),
        weight_dtype="bf16",
        max_model_len=262144,
        num_mtp_layers=1,
        num_linear_attention_layers=layers * 3 // 4,
        linear_num_key_heads=16,
        linear_num_value_heads=nv,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        linear_state_dtype="fp32",
        attn_output_gate=True,
        **experts,
        source=f"{_HF}/{repo}/blob/main/config.json (text_config: {layers} layers, hidden "
        f"{shape['hidden_size']}, {shape['num_attention_heads']} heads, {shape['num_kv_heads']} KV "
        f"heads, linear_num_value_heads {nv}; {_QWEN35_NOTE}{counts}; {_AIC_CONFIGS}"
        f"{repo.replace('/', '--')}_config.json); {_QWEN35_APPROX}",
    )


_QWEN35_REPOS: tuple[tuple[str, WeightDtype | None], ...] = (("", None), ("-fp8", "fp8_block"))

MODEL_PRESETS.update(
    _models(
        _qwen35(
            "qwen3.5-397b-a17b",
            "Qwen/Qwen3.5-397B-A17B",
            {
                "num_layers": 60,
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_kv_heads": 2,
                "linear_num_value_heads": 64,
                "num_params": 396_802_360_816,
                "num_active_params": 17_805_051_376,
            },
            (512, 10, 1024),
            "396.8B, 17.8B active, of which the vision tower 0.46B (model card: 397B total, 17B "
            "activated; 512 experts of 1024, 10 routed + 1 shared)",
        ),
        _qwen35(
            "qwen3.5-122b-a10b",
            "Qwen/Qwen3.5-122B-A10B",
            {
                "num_layers": 48,
                "hidden_size": 3072,
                "num_attention_heads": 32,
                "num_kv_heads": 2,
                "linear_num_value_heads": 64,
                "num_params": 122_562_817_776,
                "num_active_params": 10_222_579_440,
            },
            (256, 8, 1024),
            "122.6B, 10.2B active (model card: 122B total, 10B activated; 256 experts of 1024, "
            "8 routed + 1 shared)",
        ),
        _qwen35(
            "qwen3.5-35b-a3b",
            "Qwen/Qwen3.5-35B-A3B",
            {
                "num_layers": 40,
                "hidden_size": 2048,
                "num_attention_heads": 16,
                "num_kv_heads": 2,
                "linear_num_value_heads": 32,
                "num_params": 35_107_181_936,
                "num_active_params": 3_901_560_176,
            },
            (256, 8, 512),
            "35.1B, 3.9B active (model card: 35B total, 3B activated; 256 experts of 512, 8 "
            "routed + 1 shared)",
        ),
        _qwen35(
            "qwen3.5-27b",
            "Qwen/Qwen3.5-27B",
            {
                "num_layers": 64,
                "hidden_size": 5120,
                "num_attention_heads": 24,
                "num_kv_heads": 4,
                "linear_num_value_heads": 48,
                "intermediate_size": 17408,
                "num_params": 27_356_728_560,
            },
            None,
            "27.4B (model card: 27B; dense MLP 17408 wide)",
        ),
    )
)


def _gpus(*specs: GpuSpec) -> dict[str, GpuSpec]:
    return {spec.name: spec for spec in specs}


_A100_DATASHEET = (
    "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com, 2021), SXM column: BF16/FP16 tensor "
    "312 TFLOPS dense (624 with sparsity), INT8 624 TOPS dense, no FP8; NVLink 600 GB/s "
    "total = 300 GB/s per direction; PCIe Gen4 64 GB/s total = 32 GB/s per direction."
)
_HOPPER_DATASHEET = (
    "BF16/FP16 tensor 1,979 TFLOPS with sparsity = 989.5 dense, FP8 3,958 with sparsity = "
    "1,979 dense, INT8 3,958 TOPS with sparsity = 1,979 dense; NVLink 900 GB/s total = "
    "450 GB/s per direction; PCIe Gen5 128 GB/s total = 64 GB/s per direction."
)

GPU_PRESETS: dict[str, GpuSpec] = _gpus(
    GpuSpec(
        name="a100-40gb",
        memory_bytes=40 * GIB,
        hbm_bandwidth_bytes_per_s=1555e9,
        bf16_flops=312e12,
        fp16_flops=312e12,
        fp8_flops=None,
        int8_ops=624e12,
        interconnect_bandwidth_bytes_per_s=300e9,
        pcie_bandwidth_bytes_per_s=32e9,
        sm_version=80,
        source=f"A100 40GB SXM: 40GB HBM2, 1,555 GB/s. {_A100_DATASHEET}",
    ),
    GpuSpec(
        name="a100-80gb",
        memory_bytes=80 * GIB,
        hbm_bandwidth_bytes_per_s=2039e9,
        bf16_flops=312e12,
        fp16_flops=312e12,
        fp8_flops=None,
        int8_ops=624e12,
        interconnect_bandwidth_bytes_per_s=300e9,
        pcie_bandwidth_bytes_per_s=32e9,
        sm_version=80,
        source=f"A100 80GB SXM: 80GB HBM2e, 2,039 GB/s. {_A100_DATASHEET}",
    ),
    GpuSpec(
        name="h100-sxm",
        memory_bytes=80 * GIB,
        hbm_bandwidth_bytes_per_s=3.35e12,
        bf16_flops=989.5e12,
        fp16_flops=989.5e12,
        fp8_flops=1979e12,
        int8_ops=1979e12,
        interconnect_bandwidth_bytes_per_s=450e9,
        pcie_bandwidth_bytes_per_s=64e9,
        sm_version=90,
        source="NVIDIA H100 Tensor Core GPU datasheet (nvidia.com, 2023), H100 SXM column: "
        f"80GB HBM3, 3.35 TB/s; {_HOPPER_DATASHEET}",
    ),
    GpuSpec(
        name="h200",
        memory_bytes=141 * GIB,
        hbm_bandwidth_bytes_per_s=4.8e12,
        bf16_flops=989.5e12,
        fp16_flops=989.5e12,
        fp8_flops=1979e12,
        int8_ops=1979e12,
        interconnect_bandwidth_bytes_per_s=450e9,
        pcie_bandwidth_bytes_per_s=64e9,
        sm_version=90,
        source="NVIDIA H200 Tensor Core GPU datasheet (nvidia.com, 2024), H200 SXM column: "
        f"141GB HBM3e, 4.8 TB/s; {_HOPPER_DATASHEET}",
    ),
    GpuSpec(
        name="l4",
        memory_bytes=24 * GIB,
        hbm_bandwidth_bytes_per_s=300e9,
        bf16_flops=121e12,
        fp16_flops=121e12,
        fp8_flops=242.5e12,
        int8_ops=242.5e12,
        interconnect_bandwidth_bytes_per_s=32e9,
        pcie_bandwidth_bytes_per_s=32e9,
        sm_version=89,
        source="NVIDIA L4 Tensor Core GPU datasheet (nvidia.com, 2023): 24GB GDDR6, 300 GB/s; "
        "BF16/FP16 tensor 242 TFLOPS with sparsity = 121 dense, FP8 485 with sparsity = 242.5 "
        "dense, INT8 485 TOPS with sparsity = 242.5 dense; no NVLink: GPU-to-GPU and host "
        "traffic over PCIe Gen4 x16, 64 GB/s total = 32 GB/s per direction.",
    ),
    GpuSpec(
        name="t4",
        memory_bytes=16 * GIB,
        hbm_bandwidth_bytes_per_s=320e9,
        bf16_flops=65e12,
        fp16_flops=65e12,
        fp8_flops=None,
        int8_ops=130e12,
        interconnect_bandwidth_bytes_per_s=16e9,
        pcie_bandwidth_bytes_per_s=16e9,
        sm_version=75,
        source="NVIDIA T4 Tensor Core GPU datasheet (nvidia.com, 2019): 16GB GDDR6, 320+ GB/s; "
        "mixed-precision FP16/FP32 65 TFLOPS, INT8 130 TOPS (Turing has no sparsity, no FP8, "
        "no BF16: bf16_flops holds the FP16 figure, bf16 models run in fp16 there); "
        "no NVLink: PCIe Gen3 x16, 32 GB/s total = 16 GB/s per direction.",
    ),
)


_GEFORCE_NOTE = (
    "GeForce cards run fp16/bf16 tensor math with fp32 accumulation (what serving kernels "
    "use) at half the fp16-accumulate rate; no NVLink: GPU-to-GPU and host traffic over "
    "PCIe Gen4 x16, 64 GB/s total = 32 GB/s per direction."
)

GPU_PRESETS.update(
    _gpus(
        GpuSpec(
            name="rtx-4090",
            memory_bytes=24 * GIB,
            hbm_bandwidth_bytes_per_s=1008e9,
            bf16_flops=165.2e12,
            fp16_flops=165.2e12,
            fp8_flops=330.3e12,
            int8_ops=660.6e12,
            interconnect_bandwidth_bytes_per_s=32e9,
            pcie_bandwidth_bytes_per_s=32e9,
            sm_version=89,
            source="NVIDIA Ada GPU architecture whitepaper (v2.1, 2023), Appendix A, GeForce RTX "
            "4090: 24GB GDDR6X, 1,008 GB/s; peak FP16/BF16 tensor TFLOPS with FP32 accumulate "
            "165.2 dense (330.3 with sparsity), FP8 with FP32 accumulate 330.3 dense, INT8 "
            f"660.6 TOPS dense. {_GEFORCE_NOTE}",
        ),
        GpuSpec(
            name="rtx-3090",
            memory_bytes=24 * GIB,
            hbm_bandwidth_bytes_per_s=936e9,
            bf16_flops=71e12,
            fp16_flops=71e12,
            fp8_flops=None,
            int8_ops=284e12,
            interconnect_bandwidth_bytes_per_s=32e9,
            pcie_bandwidth_bytes_per_s=32e9,
            sm_version=86,
            source="NVIDIA Ampere GA102 GPU architecture whitepaper (v2.0, 2020), Table 9, GeForce "
            "RTX 3090: 24GB GDDR6X, 936 GB/s; peak FP16/BF16 tensor TFLOPS with FP32 accumulate "
            "71 dense (142 with sparsity), INT8 284 TOPS dense, no FP8. An NVLink bridge "
            f"(112.5 GB/s total) is optional and not assumed. {_GEFORCE_NOTE}",
        ),
        GpuSpec(
            name="rtx-3070",
            memory_bytes=8 * GIB,
            hbm_bandwidth_bytes_per_s=448e9,
            bf16_flops=40.6e12,
            fp16_flops=40.6e12,
            fp8_flops=None,
            int8_ops=162.6e12,
            interconnect_bandwidth_bytes_per_s=32e9,
            pcie_bandwidth_bytes_per_s=32e9,
            sm_version=86,
            source="The 8 GB card: NVIDIA Ampere GA102 GPU architecture whitepaper (v2.0, 2020), "
            "Appendix A, GeForce RTX 3070 (GA104): 8GB GDDR6, 448 GB/s; peak FP16/BF16 tensor "
            "TFLOPS with FP32 accumulate 40.6 dense (81.3 with sparsity), INT8 162.6 TOPS "
            f"dense, no FP8. {_GEFORCE_NOTE}",
        ),
    )
)


_AIC = "aiconfigurator-core 0.12.0 systems/"
_BLACKWELL_ULTRA_DATASHEET = (
    "NVIDIA Blackwell Ultra datasheet (resources.nvidia.com, 2025), per-GPU table, dense figures "
    "(the table's 'without sparsity' column)"
)
_NVLINK5 = "NVLink 5: 1.8 TB/s total = 900 GB/s per direction"

GPU_PRESETS.update(
    _gpus(
        # -- PCIe cards of the Ampere and Hopper generations -------------------------------
        GpuSpec(
            name="a100-pcie",
            memory_bytes=80 * GIB,
            hbm_bandwidth_bytes_per_s=1935e9,
            bf16_flops=312e12,
            fp16_flops=312e12,
            fp8_flops=None,
            int8_ops=624e12,
            interconnect_bandwidth_bytes_per_s=32e9,
            pcie_bandwidth_bytes_per_s=32e9,
            sm_version=80,
            source="NVIDIA A100 Tensor Core GPU datasheet (nvidia.com, 2021), A100 80GB PCIe column: "
            "80GB HBM2e, 1,935 GB/s; BF16/FP16 tensor 312 TFLOPS dense (624 with sparsity), INT8 "
            "624 TOPS dense, no FP8; PCIe Gen4 64 GB/s total = 32 GB/s per direction. An NVLink "
            "bridge joins pairs of cards (600 GB/s) and is not assumed: GPU-to-GPU traffic over "
            f"PCIe. Same figures as {_AIC}a100_pcie.yaml.",
        ),
        GpuSpec(
            name="h100-pcie",
            memory_bytes=80 * GIB,
            hbm_bandwidth_bytes_per_s=2.0e12,
            bf16_flops=756.5e12,
            fp16_flops=756.5e12,
            fp8_flops=1513e12,
            int8_ops=1513e12,
            interconnect_bandwidth_bytes_per_s=64e9,
            pcie_bandwidth_bytes_per_s=64e9,
            sm_version=90,
            source="NVIDIA H100 Tensor Core GPU datasheet (nvidia.com, 2023), H100 PCIe column: 80GB "
            "HBM2e, 2 TB/s; BF16/FP16 tensor 1,513 TFLOPS with sparsity = 756.5 dense, FP8 3,026 "
            "with sparsity = 1,513 dense, INT8 3,026 TOPS with sparsity = 1,513 dense; PCIe Gen5 "
            "128 GB/s total = 64 GB/s per direction. The NVLink bridge (600 GB/s) joins pairs of "
            "cards only and is not assumed: GPU-to-GPU traffic over PCIe. Same figures as "
            f"{_AIC}h100_pcie.yaml.",
        ),
        # -- Ada and Ampere inference cards --------------------------------------------------
        GpuSpec(
            name="l40s",
            memory_bytes=48 * GIB,
            hbm_bandwidth_bytes_per_s=864e9,
            bf16_flops=362.05e12,
            fp16_flops=362.05e12,
            fp8_flops=733e12,
            int8_ops=733e12,
            interconnect_bandwidth_bytes_per_s=32e9,
            pcie_bandwidth_bytes_per_s=32e9,
            sm_version=89,
            source="NVIDIA L40S GPU datasheet (nvidia.com, 2023): 48GB GDDR6 with ECC, 864 GB/s; BF16 "
            "/FP16 tensor 362.05 TFLOPS dense (733 with sparsity), FP8 733 dense (1,466 with "
            "sparsity), INT8 733 TOPS dense; no NVLink: PCIe Gen4 x16, 64 GB/s total = 32 GB/s per "
            f"direction. Same figures as {_AIC}l40s.yaml, whose mem_capacity is what nvidia-smi "
            "reports with ECC on: 46,068 MiB (45.0 GiB), 6% below this preset.",
        ),
        GpuSpec(
            name="a30",
            memory_bytes=24 * GIB,
            hbm_bandwidth_bytes_per_s=933e9,
            bf16_flops=165e12,
            fp16_flops=165e12,
            fp8_flops=None,
            int8_ops=330e12,
            interconnect_bandwidth_bytes_per_s=32e9,
            pcie_bandwidth_bytes_per_s=32e9,
            sm_version=80,
            source="NVIDIA A30 Tensor Core GPU datasheet (nvidia.com, 2021): 24GB HBM2, 933 GB/s; "
            "BF16/FP16 tensor 165 TFLOPS dense (330 with sparsity), INT8 330 TOPS dense (661 with "
            "sparsity), no FP8; PCIe Gen4 64 GB/s total = 32 GB/s per direction (the NVLink bridge, "
            f"200 GB/s between two cards, is not assumed). Same figures as {_AIC}a30.yaml.",
        ),
        # -- Blackwell -----------------------------------------------------------------------
        GpuSpec(
            name="b200",
            memory_bytes=180 * GIB,
            hbm_bandwidth_bytes_per_s=7.7e12,
            bf16_flops=2.25e15,
            fp16_flops=2.25e15,
            fp8_flops=4.5e15,
            int8_ops=4.5e15,
            fp4_flops=9e15,
            interconnect_bandwidth_bytes_per_s=900e9,
            pcie_bandwidth_bytes_per_s=64e9,
            sm_version=100,
            source=f"B200 (HGX B200, SXM): {_BLACKWELL_ULTRA_DATASHEET}, B200 column: 180 GB HBM3e, 7.7 "
            "TB/s; FP4 tensor 9 PFLOPS, FP8 4.5, INT8 4.5 POPS, FP16/BF16 2.25 PFLOPS; NVIDIA HGX "
            f"B200 datasheet: FP4 144 / FP8 72 / FP16 36 PFLOPS with sparsity over 8 GPUs; {_NVLINK5}; "
            "host link PCIe Gen5 x16, 128 GB/s total = 64 GB/s per direction. nvidia-smi reports "
            f"183,359 MiB (179.1 GiB). {_AIC}b200_sxm.yaml has the same compute, memory and "
            "bandwidth; it takes PCIe Gen6 (128 GB/s per direction) for the host link.",
        ),
        GpuSpec(
            name="b300",
            memory_bytes=270 * GIB,
            hbm_bandwidth_bytes_per_s=7.7e12,
            bf16_flops=2.25e15,
            fp16_flops=2.25e15,
            fp8_flops=4.5e15,
            int8_ops=0.15e15,
            fp4_flops=14e15,
            interconnect_bandwidth_bytes_per_s=900e9,
            pcie_bandwidth_bytes_per_s=128e9,
            sm_version=103,
            source=f"B300 (HGX B300, Blackwell Ultra SXM): {_BLACKWELL_ULTRA_DATASHEET}, B300 column: "
            "270 GB HBM3e (of the 288 GB stacks), 7.7 TB/s; FP4 tensor 14 PFLOPS, FP8 4.5, INT8 0.15 "
            f"POPS (Blackwell Ultra drops dense INT8), FP16/BF16 2.25 PFLOPS; {_NVLINK5}; host link "
            "PCIe Gen6 x16, 256 GB/s total = 128 GB/s per direction. nvidia-smi reports 275,040 MiB "
            f"(268.6 GiB, 0.5% below this preset; {_AIC}b300_sxm.yaml). That file has the same "
            "compute; it takes 7.75 TB/s (62 TB/s over 8 GPUs) and 153.5 TOPS INT8.",
        ),
        GpuSpec(
            name="gb200",
            memory_bytes=186 * GIB,
            hbm_bandwidth_bytes_per_s=8e12,
            bf16_flops=2.5e15,
            fp16_flops=2.5e15,
            fp8_flops=5e15,
            int8_ops=5e15,
            fp4_flops=10e15,
            interconnect_bandwidth_bytes_per_s=900e9,
            pcie_bandwidth_bytes_per_s=225e9,
            sm_version=100,
            source="GB200 (one Blackwell GPU of a GB200 NVL72): NVIDIA GB200 NVL72 datasheet (nvidia.com, "
            "2024), over its 72 GPUs: 13.4 TB HBM3e = 186 GB per GPU, 576 TB/s = 8 TB/s; FP4 tensor "
            "1,440 PFLOPS with sparsity = 10 dense per GPU, FP8 720 = 5 dense, INT8 720 POPS = 5 "
            f"dense, FP16/BF16 360 = 2.5 dense; {_NVLINK5}; host link NVLink-C2C, 900 GB/s total per "
            "Grace CPU shared by its two GPUs = 225 GB/s per GPU per direction. nvidia-smi reports "
            f"189,471 MiB (185.0 GiB; {_AIC}gb200.yaml, same compute and bandwidth; it takes PCIe "
            "Gen5, 64 GB/s, for the host link).",
        ),
        GpuSpec(
            name="gb300",
            memory_bytes=279 * GIB,
            hbm_bandwidth_bytes_per_s=8e12,
            bf16_flops=2.5e15,
            fp16_flops=2.5e15,
            fp8_flops=5e15,
            int8_ops=0.165e15,
            fp4_flops=15e15,
            interconnect_bandwidth_bytes_per_s=900e9,
            pcie_bandwidth_bytes_per_s=225e9,
            sm_version=103,
            source=f"GB300 (one Blackwell Ultra GPU of a GB300 NVL72): {_BLACKWELL_ULTRA_DATASHEET}, "
            "GB300 column: 279 GB HBM3e, 8 TB/s; FP4 tensor 15 PFLOPS, FP8 5, INT8 0.165 POPS, "
            "FP16/BF16 2.5 PFLOPS (GB300 NVL72 datasheet: 1,080 PFLOPS dense FP4, 20 TB, 576 TB/s "
            f"over 72 GPUs); {_NVLINK5}; host link NVLink-C2C, 900 GB/s total per Grace CPU shared by "
            "its two GPUs = 225 GB/s per GPU per direction. nvidia-smi reports 284,208 MiB (277.5 "
            f"GiB, 0.5% below this preset; {_AIC}gb300.yaml, same compute and bandwidth, PCIe Gen5 "
            "64 GB/s for the host link).",
        ),
        GpuSpec(
            name="rtx-pro-6000",
            memory_bytes=96 * GIB,
            hbm_bandwidth_bytes_per_s=1792e9,
            bf16_flops=500e12,
            fp16_flops=500e12,
            fp8_flops=1000e12,
            int8_ops=1000e12,
            fp4_flops=2000e12,
            interconnect_bandwidth_bytes_per_s=64e9,
            pcie_bandwidth_bytes_per_s=64e9,
            sm_version=120,
            source="NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet (nvidia.com, 2025): 96GB "
            "GDDR7 with ECC on a 512-bit bus at 28 Gbps = 1,792 GB/s; 4,000 AI TOPS (FP4 with "
            "sparsity) = 2,000 TFLOPS dense FP4, hence 1,000 dense FP8/INT8 and 500 dense FP16/BF16 "
            "(Blackwell tensor cores halve the rate at each doubling of width; professional cards "
            "run 16-bit at full rate with fp32 accumulation); no NVLink: PCIe Gen5 x16, 128 GB/s "
            f"total = 64 GB/s per direction. {_AIC}rtx_pro_6000_server.yaml scales the same "
            "figures to the 2,430 MHz clock it measured (467.8 / 935.6 / 1,871.2 TFLOPS, 7% "
            "lower); nvidia-smi reports 97,887 MiB (95.6 GiB).",
        ),
        # -- not NVIDIA ----------------------------------------------------------------------
        GpuSpec(
            name="arc-pro-b60",
            memory_bytes=24 * GIB,
            hbm_bandwidth_bytes_per_s=456e9,
            bf16_flops=98.5e12,
            fp16_flops=98.5e12,
            fp32_flops=12.28e12,
            fp8_flops=None,
            int8_ops=197e12,
            interconnect_bandwidth_bytes_per_s=32e9,
            pcie_bandwidth_bytes_per_s=32e9,
            source="Intel Arc Pro B60 (Battlemage BMG-G21) datasheet (intel.com, 2025): 24 GB GDDR6 "
            "on a 192-bit bus, 456 GB/s; peak INT8 197 TOPS on the XMX engines, hence 98.5 TFLOPS "
            "FP16/BF16 (half the INT8 rate); FP32 12.28 TFLOPS; no FP8 matrix engine; PCIe 5.0 x8, "
            "64 GB/s total = 32 GB/s per direction, no GPU-to-GPU link. This is "
            f"{_AIC}b60.yaml (an Intel card: it uses oneCCL), whose figures agree (98.3 TFLOPS BF16; "
            "28.4 GB/s measured between cards).",
        ),
    )
)


class UnknownPresetError(KvsimError, LookupError):
    """A model or GPU name is not a preset; the message suggests close matches."""


def unknown_name_message(kind: str, name: str, names: Iterable[str]) -> str:
    """ "unknown <kind> preset 'x' (did you mean ...?); available: ..." for users."""
    names = sorted(names)
    query = name.strip().lower()
    # Names the query begins ("h100" -> "h100-sxm") first, then difflib's nearest ones.
    close = sorted((n for n in names if query and n.startswith(query)), key=len)
    close += [n for n in difflib.get_close_matches(query, names, n=3, cutoff=0.6) if n not in close]
    close = close[:3]
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    shown = name if len(name) <= 100 else name[:97] + "..."
    return f"unknown {kind} preset {shown!r}{hint}; available: {', '.join(names)}"


#: Other names of the GPU presets, in normal form (`normal_gpu_name`): aiconfigurator-core's
#: system names (systems/*.yaml), nvidia-smi's product names, and common spellings. A bare
#: "h100" or "a100" stays unknown on purpose: SXM and PCIe parts differ in memory bandwidth.
GPU_ALIASES: dict[str, str] = {
    # aiconfigurator-core 0.12.0 systems/
    "a100-sxm": "a100-80gb",
    "h200-sxm": "h200",
    "b200-sxm": "b200",
    "b300-sxm": "b300",
    "rtx-pro-6000-server": "rtx-pro-6000",
    "b60": "arc-pro-b60",
    # nvidia-smi names (NVIDIA H100 80GB HBM3, NVIDIA A100-SXM4-80GB, ...) and common spellings
    "h100-80gb-hbm3": "h100-sxm",
    "h100-sxm5": "h100-sxm",
    "h100-sxm5-80gb": "h100-sxm",
    "h100-pcie-80gb": "h100-pcie",
    "h200-141gb": "h200",
    "h200-141gb-hbm3e": "h200",
    "a100-sxm4-80gb": "a100-80gb",
    "a100-sxm4-40gb": "a100-40gb",
    "a100-80gb-pcie": "a100-pcie",
    "a100-pcie-80gb": "a100-pcie",
    "b200-180gb": "b200",
    "hgx-b200": "b200",
    "dgx-b200": "b200",
    "hgx-b300": "b300",
    "dgx-b300": "b300",
    "gb200-nvl72": "gb200",
    "gb300-nvl72": "gb300",
    "tesla-t4": "t4",
    "geforce-rtx-4090": "rtx-4090",
    "geforce-rtx-3090": "rtx-3090",
    "geforce-rtx-3070": "rtx-3070",
    "rtx-pro-6000-blackwell": "rtx-pro-6000",
    "rtx-pro-6000-blackwell-server-edition": "rtx-pro-6000",
    "intel-arc-pro-b60": "arc-pro-b60",
}

#: NVIDIA's NVFP4 exports of DeepSeek-style models beside their 16-bit weights and nvfp4
#: routed experts (`MODEL_ALIASES`): the parts quantized when the exclusions keep the q/kv
#: projections alone, or the whole attention block.
_NVFP4_QKV: dict[WeightModule, WeightDtype] = {
    "attention_o": "nvfp4",
    "dense_mlp": "nvfp4",
    "shared_experts": "nvfp4",
}
_NVFP4_ATTN: dict[WeightModule, WeightDtype] = {"dense_mlp": "nvfp4", "shared_experts": "nvfp4"}

#: Hugging Face ids (lower case) of the model presets; an id may also name the precision its
#: checkpoint is served in (the ``-FP8`` / ``-FP4`` / ``-AWQ`` repositories), and for a mixture
#: of experts whose routed experts alone are quantized, their precision as a third entry:
#: (preset, weight_dtype, expert_weight_dtype), and the parts quantized besides them as a
#: fourth (``module_weight_dtypes``).
MODEL_ALIASES: dict[
    str,
    tuple[str, WeightDtype | None]
    | tuple[str, WeightDtype, WeightDtype]
    | tuple[str, WeightDtype, WeightDtype, dict[WeightModule, WeightDtype]],
] = {
    "meta-llama/llama-2-7b-hf": ("llama-2-7b", None),
    "meta-llama/llama-2-13b-hf": ("llama-2-13b", None),
    "meta-llama/llama-2-70b-hf": ("llama-2-70b", None),
    "meta-llama/meta-llama-3-8b": ("llama-3-8b", None),
    "meta-llama/meta-llama-3-8b-instruct": ("llama-3-8b", None),
    "meta-llama/meta-llama-3-70b": ("llama-3-70b", None),
    "meta-llama/meta-llama-3-70b-instruct": ("llama-3-70b", None),
    "mistralai/mistral-7b-v0.1": ("mistral-7b", None),
    "mistralai/mixtral-8x7b-v0.1": ("mixtral-8x7b", None),
    "mistralai/mixtral-8x7b-instruct-v0.1": ("mixtral-8x7b", None),
    "qwen/qwen2.5-7b-instruct": ("qwen2.5-7b", None),
    "qwen/qwen2.5-0.5b-instruct": ("qwen2.5-0.5b", None),
    "qwen/qwen2.5-1.5b-instruct": ("qwen2.5-1.5b", None),
    "qwen/qwen2.5-3b-instruct": ("qwen2.5-3b", None),
    "deepseek-ai/deepseek-v2-lite": ("deepseek-v2-lite", None),
    "tiiuae/falcon-7b": ("falcon-7b", None),
    "bigcode/starcoder": ("starcoder", None),
    "meta-llama/llama-3.2-1b": ("llama-3.2-1b", None),
    "meta-llama/llama-3.2-1b-instruct": ("llama-3.2-1b", None),
    "meta-llama/llama-3.2-3b": ("llama-3.2-3b", None),
    "meta-llama/llama-3.2-3b-instruct": ("llama-3.2-3b", None),
    "google/gemma-3-1b-it": ("gemma-3-1b", None),
    "google/gemma-3-4b-it": ("gemma-3-4b", None),
    "google/gemma-3-12b-it": ("gemma-3-12b", None),
    "google/gemma-3-27b-it": ("gemma-3-27b", None),
    "openai/gpt-oss-20b": ("gpt-oss-20b", None),
    "openai/gpt-oss-120b": ("gpt-oss-120b", None),
    # Llama 3.1 (Meta's own names, with and without "Meta-"; NVIDIA's ModelOpt exports)
    **{
        f"meta-llama/{prefix}llama-3.1-{size}{suffix}": (f"llama-3.1-{size}", None)
        for prefix in ("", "meta-")
        for size in ("8b", "70b", "405b")
        for suffix in ("", "-instruct")
    },
    "meta-llama/llama-3.1-405b-fp8": ("llama-3.1-405b", "fp8"),
    "meta-llama/llama-3.1-405b-instruct-fp8": ("llama-3.1-405b", "fp8"),
    **{
        f"nvidia/llama-3.1-{size}-instruct-fp8": (f"llama-3.1-{size}", "fp8")
        for size in ("8b", "70b", "405b")
    },
    **{
        f"nvidia/llama-3.1-{size}-instruct-fp4": (f"llama-3.1-{size}", "nvfp4")
        for size in ("8b", "70b", "405b")
    },
    # Qwen3: the FP8 repositories are block-scaled (quantization_config weight_block_size
    # [128, 128]); the AWQ ones are 4-bit, groups of 128; NVIDIA's are NVFP4.
    **{
        f"qwen/qwen3-{size}{base}": (f"qwen3-{size}", None) for size in _QWEN3_SIZES for base in ("", "-base")
    },
    **{f"qwen/qwen3-{size}-fp8": (f"qwen3-{size}", "fp8_block") for size in _QWEN3_SIZES},
    **{f"qwen/qwen3-{size}-awq": (f"qwen3-{size}", "int4") for size in _QWEN3_SIZES},
    **{f"nvidia/qwen3-{size}-fp4": (f"qwen3-{size}", "nvfp4") for size in _QWEN3_SIZES},
    **{f"nvidia/qwen3-{size}-nvfp4": (f"qwen3-{size}", "nvfp4") for size in _QWEN3_SIZES},
    **{f"nvidia/qwen3-{size}-fp8": (f"qwen3-{size}", "fp8") for size in _QWEN3_SIZES},
    # Frontier mixture-of-experts (issue 22). NVIDIA's ModelOpt NVFP4 exports quantize the
    # routed experts and leave (part of) attention in 16 bits, by their hf_quant_config.json
    # exclude_modules (aiconfigurator-core 0.12.0 model_configs/): DeepSeek-V3.1-NVFP4 keeps
    # only the q/kv projections (q_a, q_b, kv_a, kv_b) and quantizes o_proj, the dense layers
    # and the shared experts (`_NVFP4_QKV`); DeepSeek-R1-0528-FP4-v2 is R1-0528-FP4 that
    # "additionally quantizes the wo module" (its model card), the same split; R1-FP4,
    # R1-0528-FP4 and V3-0324-FP4 keep the whole self_attn block (aiconfigurator-core's
    # sdk/models/helpers.py on R1-0528-FP4), as GLM-5-NVFP4 (q/kv, o_proj and the indexer) and
    # Kimi-K2.5-NVFP4 (its config.json's ignore list: self_attn only) do, quantizing the dense
    # layers and shared experts (`_NVFP4_ATTN`); MiniMax-M2.5-NVFP4 (no dense layers or shared
    # experts) keeps attention and the router. nvidia/Qwen3-235B-A22B-NVFP4 quantizes attention
    # too (only the router gates excluded). DeepSeek-V3-0324 and V3.1 keep V3's config shapes;
    # R1-0528 keeps R1's.
    "deepseek-ai/deepseek-v3": ("deepseek-v3", None),
    "deepseek-ai/deepseek-v3-0324": ("deepseek-v3", None),
    "deepseek-ai/deepseek-v3.1": ("deepseek-v3", None),
    "nvidia/deepseek-v3-0324-fp4": ("deepseek-v3", "bf16", "nvfp4", _NVFP4_ATTN),
    "nvidia/deepseek-v3.1-nvfp4": ("deepseek-v3", "bf16", "nvfp4", _NVFP4_QKV),
    "deepseek-ai/deepseek-r1": ("deepseek-r1", None),
    "deepseek-ai/deepseek-r1-0528": ("deepseek-r1", None),
    "nvidia/deepseek-r1-fp4": ("deepseek-r1", "bf16", "nvfp4", _NVFP4_ATTN),
    "nvidia/deepseek-r1-nvfp4": ("deepseek-r1", "bf16", "nvfp4", _NVFP4_ATTN),
    "nvidia/deepseek-r1-0528-fp4": ("deepseek-r1", "bf16", "nvfp4", _NVFP4_ATTN),
    "nvidia/deepseek-r1-0528-fp4-v2": ("deepseek-r1", "bf16", "nvfp4", _NVFP4_QKV),
    "nvidia/deepseek-r1-0528-nvfp4-v2": ("deepseek-r1", "bf16", "nvfp4", _NVFP4_QKV),
    "moonshotai/kimi-k2.5": ("kimi-k2.5", None),
    "nvidia/kimi-k2.5-nvfp4": ("kimi-k2.5", "bf16", "nvfp4", _NVFP4_ATTN),
    **{
        f"qwen/qwen3-{size}{variant}": (f"qwen3-{size}", None)
        for size in ("30b-a3b", "235b-a22b")
        for variant in ("", "-base", "-instruct-2507", "-thinking-2507")
    },
    **{
        f"qwen/qwen3-{size}{variant}-fp8": (f"qwen3-{size}", "fp8_block")
        for size in ("30b-a3b", "235b-a22b")
        for variant in ("", "-instruct-2507", "-thinking-2507")
    },
    "nvidia/qwen3-235b-a22b-nvfp4": ("qwen3-235b-a22b", "nvfp4"),
    "nvidia/qwen3-235b-a22b-fp4": ("qwen3-235b-a22b", "nvfp4"),
    "nvidia/qwen3-30b-a3b-nvfp4": ("qwen3-30b-a3b", "nvfp4"),
    "nvidia/qwen3-30b-a3b-fp4": ("qwen3-30b-a3b", "nvfp4"),
    "qwen/qwen3-coder-480b-a35b-instruct": ("qwen3-coder-480b-a35b", None),
    "qwen/qwen3-coder-480b-a35b-instruct-fp8": ("qwen3-coder-480b-a35b", "fp8_block"),
    "minimaxai/minimax-m2.5": ("minimax-m2.5", None),
    "nvidia/minimax-m2.5-nvfp4": ("minimax-m2.5", "bf16", "nvfp4"),
    "zai-org/glm-5": ("glm-5", None),
    "zhipuai/glm-5": ("glm-5", None),  # silicon_sample.csv's name for it
    "zai-org/glm-5-fp8": ("glm-5", "fp8_block"),
    "nvidia/glm-5-nvfp4": ("glm-5", "bf16", "nvfp4", _NVFP4_ATTN),
    # Qwen3.5: Qwen's -FP8 repositories are block-scaled (weight_block_size [128, 128], as
    # Qwen3's); NVIDIA's NVFP4 exports leave linear_attn, self_attn, the shared experts and the
    # vision tower in 16 bits (aiconfigurator-core 0.12.0 model_configs/
    # nvidia--Qwen3.5-397B-A17B-NVFP4_hf_quant_config.json exclude_modules), the routed experts nvfp4.
    **{
        f"qwen/qwen3.5-{size}{suffix}": (f"qwen3.5-{size}", dtype)
        for size in ("397b-a17b", "122b-a10b", "35b-a3b", "27b")
        for suffix, dtype in _QWEN35_REPOS
    },
    "nvidia/qwen3.5-397b-a17b-nvfp4": ("qwen3.5-397b-a17b", "bf16", "nvfp4"),
    "nvidia/qwen3.5-122b-a10b-nvfp4": ("qwen3.5-122b-a10b", "bf16", "nvfp4"),
}


def normal_gpu_name(name: str) -> str:
    """Lower case, spaces and underscores as hyphens, without a leading "nvidia-"."""
    text = "-".join(name.strip().lower().replace("_", " ").split())
    return text.removeprefix("nvidia-")


def _quantized(
    name: str,
    dtype: WeightDtype | None,
    experts: WeightDtype | None = None,
    modules: dict[WeightModule, WeightDtype] | None = None,
) -> ModelSpec:
    """The preset ``name`` with its weights in ``dtype`` (all of them, unless ``experts``
    gives the routed experts' own precision and ``modules`` other parts'); itself when that
    changes nothing."""
    spec = MODEL_PRESETS[name]
    modules = modules or {}
    if dtype is None or (dtype, experts, modules) == (
        spec.weight_dtype,
        spec.expert_weight_dtype,
        spec.module_weight_dtypes,
    ):
        return spec
    return ModelSpec.model_validate(
        spec.model_dump()
        | {"weight_dtype": dtype, "expert_weight_dtype": experts, "module_weight_dtypes": modules}
    )


_ALIASED_MODELS: dict[str, ModelSpec] = {k: _quantized(*v) for k, v in MODEL_ALIASES.items()}


def resolve_model(model: str | ModelSpec) -> ModelSpec:
    """A `ModelSpec` from a preset name or Hugging Face id (case-insensitive) or an inline spec.

    A Hugging Face id of a quantized checkpoint (``nvidia/Llama-3.1-8B-Instruct-FP8``) gives
    the preset with that weight precision.
    """
    if isinstance(model, ModelSpec):
        return model
    key = model.strip().lower()
    found = MODEL_PRESETS.get(key) or _ALIASED_MODELS.get(key)
    if found is None:
        raise UnknownPresetError(unknown_name_message("model", model, MODEL_PRESETS))
    return found


def resolve_gpu(gpu: str | GpuSpec) -> GpuSpec:
    """A `GpuSpec` from a preset name or alias (`GPU_ALIASES`; case, spaces and underscores
    do not matter) or an inline spec."""
    if isinstance(gpu, GpuSpec):
        return gpu
    found = GPU_PRESETS.get(gpu.strip().lower())
    if found is None:
        key = normal_gpu_name(gpu)
        found = GPU_PRESETS.get(key) or GPU_PRESETS.get(GPU_ALIASES.get(key, ""))
    if found is None:
        raise UnknownPresetError(unknown_name_message("GPU", gpu, GPU_PRESETS))
    return found


def register_gpu(spec: GpuSpec, *, aliases: Iterable[str] = ()) -> GpuSpec:
    """Make ``spec`` a GPU preset: a scenario's ``replicas[].gpu``, `resolve_gpu` and the
    command line's ``--gpu`` then find it by its name or an alias, as the built-in ones.

    The name must be in normal form (`normal_gpu_name`: lower case, hyphens, no "nvidia-")
    and not taken; registering the same spec again does nothing. Returns ``spec``.
    """
    name = spec.name
    if normal_gpu_name(name) != name:
        raise ValueError(f"GPU preset name {name!r} must be in normal form ({normal_gpu_name(name)!r})")
    if name in GPU_PRESETS and GPU_PRESETS[name] != spec:
        raise ValueError(f"GPU preset {name!r} is already registered")
    keys = {normal_gpu_name(alias): alias for alias in aliases}
    for key, alias in keys.items():
        if key in GPU_PRESETS or GPU_ALIASES.get(key, name) != name:
            raise ValueError(f"GPU alias {alias!r} already names a GPU preset")
    GPU_PRESETS[name] = spec
    GPU_ALIASES.update(dict.fromkeys(keys, name))
    return spec


def unregister_gpu(name: str) -> None:
    """Remove a GPU preset and its aliases (tests that register one clean up with this)."""
    del GPU_PRESETS[name]
    for alias in [a for a, target in GPU_ALIASES.items() if target == name]:
        del GPU_ALIASES[alias]


def tp_problem(model: ModelSpec, tp: int) -> str | None:
    """Why ``tp`` cannot shard ``model`` (vLLM's rules), or None if it can.

    Query heads must split evenly; KV heads must either split evenly (tp <= kv heads)
    or be replicated a whole number of times (tp a multiple of kv heads). MLA models
    replicate their latent, so only the query-head rule applies.
    """
    heads, kv = model.num_attention_heads, model.num_kv_heads
    if heads % tp:
        return f"tp={tp} must divide the model's num_attention_heads ({heads})"
    if not model.is_mla and (kv % tp if tp <= kv else tp % kv):
        return (
            f"tp={tp} must divide num_kv_heads ({kv}) or be a multiple of it "
            "(KV heads are split, or replicated when tp exceeds them)"
        )
    return None
