"""Model and GPU presets and name resolution.

    resolve_model("Llama-2-70B")    # case-insensitive; unknown names suggest close ones
    resolve_gpu("h100-sxm")

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

from kvsim.errors import KvsimError
from kvsim.kv_sizing import GIB
from kvsim.specs import GpuSpec, ModelSpec

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
        expert_weight_dtype="int4",
        max_model_len=131072,
        sliding_window=128,
        num_sliding_window_layers=12,
        num_experts=32,
        num_experts_per_token=4,
        source=f"{_HF}/openai/gpt-oss-20b/blob/main/config.json (24 layers, hidden 2880, 64 heads, "
        "8 KV heads, head_dim 64, num_local_experts 32, experts_per_token 4, intermediate 2880, "
        "vocab 201088, max_position_embeddings 131072, sliding_window 128, layer_types "
        "alternating sliding_attention / full_attention; MoE weights in MXFP4 (4.25 bits, "
        "counted as int4), attention, router and embeddings in bf16); OpenAI 2025, gpt-oss-120b "
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
        expert_weight_dtype="int4",
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
            source="The 8 GB card: NVIDIA Ampere GA102 GPU architecture whitepaper (v2.0, 2020), "
            "Appendix A, GeForce RTX 3070 (GA104): 8GB GDDR6, 448 GB/s; peak FP16/BF16 tensor "
            "TFLOPS with FP32 accumulate 40.6 dense (81.3 with sparsity), INT8 162.6 TOPS "
            f"dense, no FP8. {_GEFORCE_NOTE}",
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


def resolve_model(model: str | ModelSpec) -> ModelSpec:
    """A `ModelSpec` from a preset name (case-insensitive) or an inline spec."""
    if isinstance(model, ModelSpec):
        return model
    try:
        return MODEL_PRESETS[model.strip().lower()]
    except KeyError:
        raise UnknownPresetError(unknown_name_message("model", model, MODEL_PRESETS)) from None


def resolve_gpu(gpu: str | GpuSpec) -> GpuSpec:
    """A `GpuSpec` from a preset name (case-insensitive) or an inline spec."""
    if isinstance(gpu, GpuSpec):
        return gpu
    try:
        return GPU_PRESETS[gpu.strip().lower()]
    except KeyError:
        raise UnknownPresetError(unknown_name_message("GPU", gpu, GPU_PRESETS)) from None


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
