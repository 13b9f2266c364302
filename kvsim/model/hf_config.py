"""A `ModelSpec` from a Hugging Face ``config.json``: shapes, precision and parameter count.

    load_hf_config("models/Qwen3-32B/config.json")          # a ModelSpec named "Qwen3-32B"
    scenario:  model: {hf_config: models/Qwen3-32B/config.json}
    CLI:       kvsim fit --model models/Qwen3-32B/config.json --gpu h100-sxm

Supported ``model_type`` families (`SUPPORTED_MODEL_TYPES`): Llama, Mistral, Mixtral,
Qwen2 / Qwen3 / Qwen3-MoE, DeepSeek-V2 / V3 / V3.2 and Kimi-K2 (MLA), GLM-5 (MLA with a
DSA indexer), gpt-oss, Gemma / Gemma 2 / Gemma 3, MiniMax-M2, MiMo, Qwen3.5 (Gated DeltaNet
linear-attention layers beside gated full attention, dense and MoE); configs that wrap a
language model in ``text_config`` (Gemma 3, Kimi-K2.5, Qwen3.5) are read through it.
Anything else (Qwen3-Next, Mamba hybrids, chunked-attention Llama 4, ...) is refused with an
error naming the file and the field.

Parameter count, from the shapes alone (every tensor the checkpoint stores for inference;
``h`` hidden, ``H`` query heads, ``K`` KV heads, ``d`` head_dim, ``I`` MLP width, ``V``
vocabulary, ``E`` routed experts, ``S`` shared experts)::

    embeddings      V h, and V h more for an untied LM head; a final norm of h
    attention       h H d + 2 h K d + H d h   (+ h H d for Qwen3.5's output gate,
                    + biases where the config says so,
                    + 2 d for Qwen3's q/k norms, + H d + K d for MiniMax's per-layer norms,
                    + H sink logits for gpt-oss)
    MLA attention   h q_lora + q_lora + q_lora H (nope + rope)   (or h H (nope + rope)
                    without q_lora) + h (kv_lora + rope) + kv_lora + kv_lora H (nope + v)
                    + H v h   (+ the DSA indexer's projections for GLM-5 / DeepSeek-V3.2)
    dense MLP       3 h I (gated: gate, up, down)
    Gated DeltaNet  h (2 nk dk + 2 nv dv) + 2 h nv + (2 nk dk + nv dv) conv + 2 nv + dv
                    + nv dv h   (Qwen3.5's linear layers, in place of attention)
    MoE layer       E 3 h I_moe + S 3 h I_moe + h E (router, + E for a correction bias;
                    + h for Qwen3.5's shared-expert gate)
    norms           2 h per layer (4 h for Gemma 2 / 3)

Gemma 3's SigLIP vision tower and Qwen3.5's (Qwen3-VL's layout) are added when the config
has a ``vision_config`` (the engines load them); Kimi-K2.5's vision tower is not counted. Multi-token
prediction layers (DeepSeek ``num_nextn_predict_layers``, MiniMax ``num_mtp_modules`` x
``mtp_transformer_layers`` when ``use_mtp``) are recorded in ``num_mtp_layers`` and left out
of the count: engines load them only for speculative decoding. Active parameters of a
mixture of experts are the total less the routed experts a token skips (Mixtral's
convention). The counts agree with the presets' checkpoint counts within 0.5%
(tests/test_hf_config.py).

Precision: ``quantization_config`` in config.json (fp8 with ``weight_block_size`` is
fp8_block; awq/gptq 4-bit is int4; mxfp4; compressed-tensors and ModelOpt schemes) or a
ModelOpt ``hf_quant_config.json`` beside it; otherwise ``torch_dtype``. A scheme that
leaves attention unquantized in a mixture of experts sets ``expert_weight_dtype``; the parts an
exclusion list names (attention's q/kv or output projections, the dense layers, the shared
experts) get their own precision (``module_weight_dtypes``).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvsim.errors import KvsimError
from kvsim.limits import MAX_HF_CONFIG_BYTES
from kvsim.model.specs import WEIGHT_DTYPE_BYTES, ModelSpec, WeightDtype, WeightModule

#: model_type values whose shapes kvsim reads (see the module docstring).
SUPPORTED_MODEL_TYPES = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "mimo",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "kimi_k2",
    "glm_moe_dsa",
    "gpt_oss",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "minimax_m2",
    "qwen3_5_text",
    "qwen3_5_moe_text",
)
#: Multimodal wrappers whose language model is ``text_config``.
_WRAPPERS = ("gemma3", "kimi_k25", "qwen3_5", "qwen3_5_moe")
#: Qwen3.5: Gated DeltaNet linear-attention layers beside gated full attention.
_QWEN35 = ("qwen3_5_text", "qwen3_5_moe_text")
_MLA = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm_moe_dsa")
_DSA = ("deepseek_v32", "glm_moe_dsa")
#: Why some families are refused (the field that shows it).
_UNSUPPORTED_WHY = {
    "qwen3_next": "layer_types mixes linear_attention (Gated DeltaNet) layers, whose state is not a KV cache",
    "nemotron_h": "hybrid_override_pattern mixes Mamba layers, whose state is not a KV cache",
    "llama4": "chunked (local) attention layers and interleaved MoE layers are not modelled",
    "nemotron-nas": "block_configs gives every layer its own shape (not modelled)",
}

_DTYPES: dict[str, WeightDtype] = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "bf16",  # engines serve fp32 checkpoints in 16 bits ("auto" dtype)
    "float": "bf16",
}


class HfConfigError(KvsimError, ValueError):
    """A config.json kvsim cannot read: the message names the file and the field."""


def read_json_capped(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from ``path``, read with a size cap; errors name the file."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_HF_CONFIG_BYTES + 1)  # capped: the path may be /dev/zero
    except (OSError, ValueError) as exc:
        raise HfConfigError(f"{path}: cannot read {what}: {exc}") from None
    if len(raw) > MAX_HF_CONFIG_BYTES:
        raise HfConfigError(f"{path}: cannot read {what}: larger than {MAX_HF_CONFIG_BYTES:,} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise HfConfigError(f"{path}: cannot read {what}: not UTF-8 at byte {exc.start}") from None
    except RecursionError:
        raise HfConfigError(f"{path}: cannot read {what}: JSON nested too deeply") from None
    except ValueError as exc:
        raise HfConfigError(f"{path}: cannot read {what}: {exc}") from None
    if not isinstance(data, dict):
        raise HfConfigError(f"{path}: {what} must be a JSON object, got {type(data).__name__}")
    return data


def looks_like_hf_config(data: Mapping[str, Any]) -> bool:
    """Whether a JSON object is a Hugging Face model config rather than a kvsim ModelSpec."""
    return "model_type" in data or "architectures" in data


def quant_config_path(config_path: Path) -> Path | None:
    """The ModelOpt ``hf_quant_config.json`` beside a config, if there is one.

    Hugging Face layout: ``hf_quant_config.json`` in the config's folder; aiconfigurator's
    ``model_configs/``: ``<name>_hf_quant_config.json`` beside ``<name>_config.json``.
    """
    candidates = [config_path.with_name("hf_quant_config.json")]
    if config_path.name.endswith("_config.json"):
        candidates.insert(
            0, config_path.with_name(config_path.name[: -len("config.json")] + "hf_quant_config.json")
        )
    for c in candidates:
        if c != config_path and c.is_file():
            return c
    return None


def default_name(config_path: Path) -> str:
    """A model name for a config file: its folder (``Qwen3-32B/config.json``) or its prefix
    (aiconfigurator's ``Qwen--Qwen3-32B_config.json`` is ``Qwen/Qwen3-32B``)."""
    if config_path.name == "config.json":
        return config_path.parent.name or "hf-model"
    stem = config_path.name.removesuffix(".json").removesuffix("_config")
    return stem.replace("--", "/") or "hf-model"


def load_hf_config(
    path: str | os.PathLike[str],
    *,
    name: str | None = None,
    weight_dtype: WeightDtype | None = None,
) -> ModelSpec:
    """Read ``path`` (a config.json) and build its `ModelSpec` (`HfConfigError` if it cannot)."""
    config_path = Path(path)
    config = read_json_capped(config_path, "config.json")
    quant_path = quant_config_path(config_path)
    quant = read_json_capped(quant_path, "hf_quant_config.json") if quant_path is not None else None
    return model_spec_from_hf_config(
        config,
        source=str(config_path),
        name=name or default_name(config_path),
        hf_quant_config=quant,
        weight_dtype=weight_dtype,
    )


# -- field access ----------------------------------------------------------------------


class _Fields:
    """Typed reads of one config mapping; errors name the file and the field."""

    def __init__(self, data: Mapping[str, Any], source: str, prefix: str = "") -> None:
        self.data, self.source, self.prefix = data, source, prefix

    def error(self, key: str, rule: str) -> HfConfigError:
        return HfConfigError(f"{self.source}: {self.prefix}{key}: {rule}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def integer(self, key: str, default: int | None = None, *, minimum: int = 1) -> int:
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise self.error(key, "missing (needed to size the model)")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"must be an integer, got {value!r}")
        if value < minimum:
            raise self.error(key, f"must be >= {minimum}, got {value}")
        return value

    def opt_int(self, key: str, *, minimum: int = 1) -> int | None:
        return self.integer(key, minimum=minimum) if self.has(key) else None

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {value!r}")
        return value

    def text(self, key: str, default: str = "") -> str:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, got {value!r}")
        return value

    def items(self, key: str) -> list[Any] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.error(key, f"must be a list, got {type(value).__name__}")
        return value

    def sub(self, key: str) -> _Fields:
        value = self.data.get(key)
        if not isinstance(value, Mapping):
            raise self.error(key, "missing or not an object")
        return _Fields(value, self.source, f"{self.prefix}{key}.")


# -- the spec ---------------------------------------------------------------------------


def model_spec_from_hf_config(
    config: Mapping[str, Any],
    *,
    source: str,
    name: str,
    hf_quant_config: Mapping[str, Any] | None = None,
    weight_dtype: WeightDtype | None = None,
) -> ModelSpec:
    """The `ModelSpec` of a parsed config.json (``source`` names it in errors)."""
    top = _Fields(config, source)
    model_type = top.text("model_type")
    if not model_type:
        raise top.error("model_type", "missing (kvsim picks the architecture by it)")
    f = top
    vision: _Fields | None = None
    if model_type in _WRAPPERS and top.has("text_config"):
        f = top.sub("text_config")
        if top.has("vision_config") and model_type in ("gemma3", "qwen3_5", "qwen3_5_moe"):
            vision = top.sub("vision_config")
        default_text = {"gemma3": "gemma3_text", "kimi_k25": "deepseek_v3"}.get(
            model_type, f"{model_type}_text"
        )
        model_type = f.text("model_type", default_text)
    if model_type not in SUPPORTED_MODEL_TYPES:
        why = _UNSUPPORTED_WHY.get(model_type, "not a supported architecture")
        raise HfConfigError(
            f"{source}: {f.prefix}model_type {model_type!r}: {why} (supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)})"
        )
    layer_types = f.items("layer_types") or []
    if model_type in _DSA:  # DSA layers keep an MLA cache and their indexer's keys (`dsa_index_bytes`)
        layer_types = ["full_attention" if t == "deepseek_sparse_attention" else t for t in layer_types]
    known = ("full_attention", "sliding_attention", *(("linear_attention",) if model_type in _QWEN35 else ()))
    if any(t not in known for t in layer_types):
        bad = sorted({str(t) for t in layer_types} - set(known))
        raise f.error("layer_types", f"{', '.join(bad)} layers are not modelled (only {', '.join(known)})")

    shape = _Shape.read(f, model_type)
    params, active = shape.num_params(vision)
    dtypes = _precision(top, f, hf_quant_config, shape, weight_dtype)
    window, num_window = _sliding_window(f, model_type, shape.num_layers, layer_types)
    text = (
        f"hf_config {source} (model_type {model_type}); parameter count computed from the shapes "
        "(kvsim.model.hf_config)"
    )
    try:
        return ModelSpec(
            name=name,
            num_layers=shape.num_layers,
            hidden_size=shape.hidden,
            num_attention_heads=shape.heads,
            num_kv_heads=shape.heads if shape.mla else shape.kv_heads,
            head_dim=shape.head_dim,
            intermediate_size=shape.moe_intermediate if shape.is_moe else shape.intermediate,
            vocab_size=shape.vocab,
            num_params=float(params),
            num_active_params=float(active) if shape.is_moe else None,
            weight_dtype=dtypes[0],
            expert_weight_dtype=dtypes[1] if shape.is_moe else None,
            module_weight_dtypes=dtypes[2],
            q_lora_rank=shape.q_lora_rank,
            qk_nope_head_dim=shape.qk_nope_head_dim,
            index_topk=shape.index_topk,
            index_head_dim=shape.index_head_dim,
            max_model_len=f.integer("max_position_embeddings"),
            sliding_window=window,
            num_sliding_window_layers=num_window,
            kv_lora_rank=shape.kv_lora_rank,
            qk_rope_head_dim=shape.qk_rope_head_dim,
            num_experts=shape.num_experts,
            num_experts_per_token=shape.top_k,
            num_shared_experts=shape.num_shared if shape.is_moe else 0,
            num_dense_layers=shape.num_dense if shape.is_moe else 0,
            tie_word_embeddings=shape.tied,
            num_mtp_layers=shape.num_mtp,
            qk_norm_across_heads=model_type == "minimax_m2" and f.flag("use_qk_norm", False),
            **shape.linear.fields(),
            source=text,
        )
    except ValueError as exc:  # pydantic: a field out of range, an inconsistent pair
        raise HfConfigError(f"{source}: the shapes do not make a valid model: {exc}") from None


class _Shape:
    """The dimensions of one decoder, read from its config."""

    num_layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    mla: bool = False
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None  # MLA, where it is not v_head_dim (GLM-5)
    index_topk: int | None = None  # DSA
    index_head_dim: int | None = None  # DSA: its indexer keys, cached beside the latent
    qk_rope_head_dim: int | None = None
    num_experts: int | None = None
    top_k: int | None = None
    moe_intermediate: int = 0
    num_shared: int = 0
    num_dense: int = 0
    num_mtp: int = 0
    model_type: str = ""
    f: _Fields
    linear: _LinearAttention

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None

    @classmethod
    def read(cls, f: _Fields, model_type: str) -> _Shape:
        s = cls()
        s.f, s.model_type = f, model_type
        s.num_layers = f.integer("num_hidden_layers")
        s.hidden = f.integer("hidden_size")
        s.heads = f.integer("num_attention_heads")
        s.kv_heads = f.integer("num_key_value_heads", s.heads)
        gemma = model_type.startswith("gemma")
        s.tied = f.flag("tie_word_embeddings", gemma)
        s.vocab = f.integer("vocab_size")
        s.intermediate = f.integer("intermediate_size", 0, minimum=0)
        if model_type in _MLA:
            s.mla = True
            s.kv_lora_rank = f.integer("kv_lora_rank")
            s.q_lora_rank = f.opt_int("q_lora_rank")
            s.qk_rope_head_dim = f.integer("qk_rope_head_dim")
            s.head_dim = f.integer("v_head_dim")
            nope = f.integer("qk_nope_head_dim")
            s.qk_nope_head_dim = nope if nope != s.head_dim else None
            if model_type in _DSA:
                s.index_topk = f.integer("index_topk")
                s.index_head_dim = f.integer("index_head_dim")
        else:
            s.head_dim = f.integer("head_dim", s.hidden // s.heads)
        if model_type in ("mixtral", "minimax_m2", "gpt_oss"):
            s.num_experts = f.integer("num_local_experts")
            s.top_k = (
                f.integer("num_experts_per_tok")
                if f.has("num_experts_per_tok")
                else f.integer("experts_per_token")
            )
            s.moe_intermediate = (
                s.intermediate if model_type != "minimax_m2" else f.integer("intermediate_size")
            )
            if model_type == "minimax_m2" and f.integer("shared_intermediate_size", 0, minimum=0):
                raise f.error("shared_intermediate_size", "shared experts of another width are not modelled")
        elif model_type == "qwen3_5_moe_text":
            s.num_experts = f.integer("num_experts")
            s.top_k = f.integer("num_experts_per_tok")
            s.moe_intermediate = f.integer("moe_intermediate_size")
            shared = f.integer("shared_expert_intermediate_size", 0, minimum=0)
            if shared % s.moe_intermediate:
                raise f.error(
                    "shared_expert_intermediate_size",
                    "not a multiple of moe_intermediate_size (not modelled)",
                )
            s.num_shared = shared // s.moe_intermediate
            if f.items("mlp_only_layers"):
                raise f.error("mlp_only_layers", "dense layers between MoE layers are not modelled")
        elif model_type == "qwen3_moe":
            s.num_experts = f.integer("num_experts")
            s.top_k = f.integer("num_experts_per_tok")
            s.moe_intermediate = f.integer("moe_intermediate_size")
            if f.items("mlp_only_layers") or f.integer("decoder_sparse_step", 1) != 1:
                raise f.error("mlp_only_layers", "dense layers between MoE layers are not modelled")
        elif s.mla and f.has("n_routed_experts"):
            s.num_experts = f.integer("n_routed_experts")
            s.top_k = f.integer("num_experts_per_tok")
            s.moe_intermediate = f.integer("moe_intermediate_size")
            s.num_shared = f.integer("n_shared_experts", 0, minimum=0)
            s.num_dense = f.integer("first_k_dense_replace", 0, minimum=0)
            if f.integer("moe_layer_freq", 1) != 1:
                raise f.error("moe_layer_freq", "MoE layers every other layer are not modelled")
            if s.num_dense and not s.intermediate:
                raise f.error("intermediate_size", "missing (the width of the first dense layers)")
        if not s.is_moe and not s.intermediate:
            raise f.error("intermediate_size", "missing (needed to size the model)")
        s.num_mtp = f.integer("num_nextn_predict_layers", 0, minimum=0)  # DeepSeek, Kimi, GLM-5, MiMo
        if model_type == "minimax_m2" and f.flag("use_mtp", False):  # modules of mtp_transformer_layers
            s.num_mtp = f.integer("num_mtp_modules", 0, minimum=0) * f.integer("mtp_transformer_layers", 1)
        if model_type in _QWEN35:
            s.num_mtp = f.integer("mtp_num_hidden_layers", 0, minimum=0)
        s.linear = _LinearAttention.read(f, model_type, s.num_layers)
        return s

    # -- parameter count ---------------------------------------------------------------

    def _attention(self) -> int:
        f, h, H, K, d = self.f, self.hidden, self.heads, self.kv_heads, self.head_dim
        if self.mla:
            assert self.kv_lora_rank is not None and self.qk_rope_head_dim is not None
            nope, rope, v = f.integer("qk_nope_head_dim"), self.qk_rope_head_dim, self.head_dim
            q_lora = self.q_lora_rank
            q = h * H * (nope + rope) if q_lora is None else h * q_lora + q_lora + q_lora * H * (nope + rope)
            kv = h * (self.kv_lora_rank + rope) + self.kv_lora_rank + self.kv_lora_rank * H * (nope + v)
            out = q + kv + H * v * h
            if self.model_type in _DSA:  # the DSA indexer: its query, key, weights and key norm
                ih, ihd = f.integer("index_n_heads"), f.integer("index_head_dim")
                out += (q_lora or h) * ih * ihd + h * ihd + h * ih + 2 * ihd
            return out
        out = h * H * d + 2 * h * K * d + H * d * h
        if self.linear.output_gate:
            out += h * H * d  # q_proj also emits the output gate (Qwen3.5)
        if self.model_type in ("qwen2", "mimo"):
            out += H * d + 2 * K * d  # q, k, v biases
        elif f.flag("attention_bias", False):
            out += H * d + 2 * K * d + h
        if self.model_type in ("qwen3", "qwen3_moe", "gemma3_text", *_QWEN35):
            out += 2 * d  # q_norm, k_norm over one head
        if self.model_type == "minimax_m2" and f.flag("use_qk_norm", False):
            out += H * d + K * d  # per-layer q/k norms over all heads
        if self.model_type == "gpt_oss":
            out += H  # attention sink logits
        return out

    def _mlp_dense(self, width: int) -> int:
        return 3 * self.hidden * width

    def _moe(self) -> tuple[int, int]:
        """(all parameters, parameters one token uses) of one MoE layer's MLP."""
        assert self.num_experts is not None and self.top_k is not None
        h, E, k = self.hidden, self.num_experts, self.top_k
        expert = 3 * h * self.moe_intermediate
        if self.model_type == "gpt_oss":  # experts and router carry biases
            expert += 3 * self.moe_intermediate
            router = h * E + E
        else:
            # DeepSeek-V3's aux-loss-free routing (topk_method noaux_tc) and MiniMax's routing bias
            # add one correction bias per expert.
            bias = self.f.text("topk_method") == "noaux_tc" or self.f.flag("use_routing_bias", False)
            router = h * E + (E if bias else 0)
        shared = self.num_shared * 3 * h * self.moe_intermediate
        if self.model_type == "qwen3_5_moe_text" and self.num_shared:
            shared += h  # shared_expert_gate: one sigmoid gate per token
        return E * expert + shared + router, k * expert + shared + router

    def num_params(self, vision: _Fields | None = None) -> tuple[int, int]:
        """(total, active) parameters: see the module docstring."""
        h = self.hidden
        norms = 4 * h if self.model_type in ("gemma2", "gemma3_text") else 2 * h
        lin = self.linear.layers
        total = active = (self.num_layers - lin) * self._attention() + lin * self.linear.params(h)
        total = active = total + self.num_layers * norms
        if self.is_moe:
            moe_all, moe_active = self._moe()
            moe_layers = self.num_layers - self.num_dense
            dense = self.num_dense * self._mlp_dense(self.intermediate)
            total += moe_layers * moe_all + dense
            active += moe_layers * moe_active + dense
        else:
            total += self.num_layers * self._mlp_dense(self.intermediate)
            active = total
        embed = self.vocab * h * (1 if self.tied else 2) + h
        total += embed
        active += embed
        if vision is not None and self.model_type in _QWEN35:
            extra = _qwen_vision_params(vision)
            total += extra
            active += extra
        elif vision is not None:
            extra = _siglip_params(vision) + vision.integer("hidden_size") * (h + 1)  # + projector
            total += extra
            active += extra
        return total, active


@dataclass(frozen=True)
class _LinearAttention:
    """Qwen3.5's Gated DeltaNet layers and its gated attention, as a config gives them."""

    layers: int = 0
    key_heads: int = 0
    value_heads: int = 0
    key_dim: int = 0
    value_dim: int = 0
    conv_kernel: int = 0
    state_dtype: str = "fp32"
    output_gate: bool = False

    @classmethod
    def read(cls, f: _Fields, model_type: str, num_layers: int) -> _LinearAttention:
        """The layers from ``layer_types`` (else one full layer every ``full_attention_interval``)."""
        if model_type not in _QWEN35:
            return cls()
        types = f.items("layer_types")
        if types:
            if len(types) != num_layers:
                raise f.error("layer_types", f"has {len(types)} entries for {num_layers} layers")
            layers = sum(t == "linear_attention" for t in types)
        else:
            interval = f.integer("full_attention_interval")
            layers = sum((i + 1) % interval != 0 for i in range(num_layers))
        ssm = f.text("mamba_ssm_dtype", "float32")
        dtype = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(ssm)
        if dtype is None:
            raise f.error("mamba_ssm_dtype", f"unknown dtype {ssm!r} (float32, bfloat16 or float16)")
        return cls(
            layers=layers,
            key_heads=f.integer("linear_num_key_heads"),
            value_heads=f.integer("linear_num_value_heads"),
            key_dim=f.integer("linear_key_head_dim"),
            value_dim=f.integer("linear_value_head_dim"),
            conv_kernel=f.integer("linear_conv_kernel_dim"),
            state_dtype=dtype,
            output_gate=f.flag("attn_output_gate", False),
        )

    def params(self, h: int) -> int:
        """One Gated DeltaNet layer: in_proj_qkvz (q, k, v and the output gate z), in_proj_ba
        (two scalars per value head), the depthwise causal conv over q, k, v (no bias), A_log
        and dt_bias per value head, the gated RMSNorm over one value head, out_proj."""
        k, v = self.key_heads * self.key_dim, self.value_heads * self.value_dim
        return (
            h * (2 * k + 2 * v)
            + h * 2 * self.value_heads
            + (2 * k + v) * self.conv_kernel
            + 2 * self.value_heads
            + self.value_dim
            + v * h
        )

    def fields(self) -> dict[str, Any]:
        """The `ModelSpec` fields (none for other families)."""
        if not self.layers:
            return {"attn_output_gate": True} if self.output_gate else {}
        return {
            "num_linear_attention_layers": self.layers,
            "linear_num_key_heads": self.key_heads,
            "linear_num_value_heads": self.value_heads,
            "linear_key_head_dim": self.key_dim,
            "linear_value_head_dim": self.value_dim,
            "linear_conv_kernel_dim": self.conv_kernel,
            "linear_state_dtype": self.state_dtype,
            "attn_output_gate": self.output_gate,
        }


def _qwen_vision_params(v: _Fields) -> int:
    """Qwen3.5's vision tower (Qwen3-VL's layout, transformers' Qwen3VLVisionModel): a Conv3d
    patch embedding with bias, learned positions, ViT blocks (two LayerNorms, fused qkv and
    proj with biases, a 2-layer GELU MLP with biases) and the patch merger (LayerNorm, two
    linears from spatial_merge_size^2 patches to out_hidden_size), plus one merger per
    deepstack index."""
    d, inner, depth = v.integer("hidden_size"), v.integer("intermediate_size"), v.integer("depth")
    patch, temporal, channels = (
        v.integer("patch_size"),
        v.integer("temporal_patch_size"),
        v.integer("in_channels", 3),
    )
    out, merge = v.integer("out_hidden_size"), v.integer("spatial_merge_size")
    block = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (2 * d * inner + inner + d)
    embed = channels * temporal * patch * patch * d + d + v.integer("num_position_embeddings") * d
    wide = d * merge * merge
    merger = (wide * wide + wide) + (wide * out + out)
    deepstack = len(v.items("deepstack_visual_indexes") or [])
    return depth * block + embed + merger + 2 * d + deepstack * (merger + 2 * wide)


def _siglip_params(v: _Fields) -> int:
    """A SigLIP vision tower (Gemma 3): patch and position embeddings, ViT layers, final norm."""
    d, inner, layers = (
        v.integer("hidden_size"),
        v.integer("intermediate_size"),
        v.integer("num_hidden_layers"),
    )
    patch, image, channels = v.integer("patch_size"), v.integer("image_size"), v.integer("num_channels", 3)
    per_layer = 4 * (d * d + d) + 2 * (d * inner) + inner + d + 4 * d  # attention, MLP, 2 LayerNorms
    embeddings = channels * patch * patch * d + d + (image // patch) ** 2 * d
    return layers * per_layer + embeddings + 2 * d


def _sliding_window(
    f: _Fields, model_type: str, num_layers: int, layer_types: list[Any]
) -> tuple[int | None, int | None]:
    """(sliding_window, layers using it) as ModelSpec wants them (None, None: full attention)."""
    if model_type in ("qwen2", "qwen3", "qwen3_moe", "mimo") and not f.flag("use_sliding_window", False):
        return None, None
    window = f.opt_int("sliding_window")
    if window is None:
        return None, None
    if layer_types:
        num = sum(t == "sliding_attention" for t in layer_types)
        if len(layer_types) != num_layers:
            raise f.error("layer_types", f"has {len(layer_types)} entries for {num_layers} layers")
    elif model_type == "gemma2":
        num = (num_layers + 1) // 2  # even layers are local (transformers' Gemma2)
    elif model_type == "gemma3_text":
        pattern = f.integer("sliding_window_pattern", 6)
        num = sum((i + 1) % pattern != 0 for i in range(num_layers))
    else:
        num = num_layers
    if num == 0:
        return None, None
    return window, (None if num == num_layers else num)


# -- precision --------------------------------------------------------------------------


def _precision(
    top: _Fields,
    f: _Fields,
    hf_quant: Mapping[str, Any] | None,
    shape: _Shape,
    override: WeightDtype | None,
) -> tuple[WeightDtype, WeightDtype | None, dict[WeightModule, WeightDtype]]:
    """(weight_dtype, expert_weight_dtype, module_weight_dtypes) from the quantization config
    or torch_dtype.

    A scheme whose exclusion list keeps a mixture of experts' attention in 16 bits gives the
    16-bit weights with the scheme's routed experts, and the parts it does quantize besides
    (nvidia/DeepSeek-V3.1-NVFP4: o_proj, the dense layers, the shared experts) at the scheme's
    precision; any other scheme quantizes everything but the parts it excludes."""
    base_name = (
        top.text("torch_dtype") or top.text("dtype") or f.text("torch_dtype") or f.text("dtype") or "bfloat16"
    )
    base = _DTYPES.get(base_name)
    if base is None:
        raise top.error("torch_dtype", f"unknown dtype {base_name!r} (expected bfloat16, float16 or float32)")
    if override is not None:
        return override, None, {}
    qc = top.data.get("quantization_config") or f.data.get("quantization_config")
    scheme: tuple[WeightDtype, Any] | None = None
    if isinstance(qc, Mapping):
        scheme = _quant_method(_Fields(qc, top.source, "quantization_config."))
    elif hf_quant is not None:
        q = hf_quant.get("quantization", hf_quant)
        if isinstance(q, Mapping):
            scheme = _modelopt(_Fields(q, top.source + " (hf_quant_config.json)", "quantization."))
    if scheme is None:
        return base, None, {}
    dtype, patterns = scheme
    kept = _excluded_modules(patterns, shape.num_dense if shape.is_moe else 0)
    present: list[WeightModule] = ["attention_qkv", "attention_o"]
    if not shape.is_moe or shape.num_dense:
        present.append("dense_mlp")
    if shape.is_moe and shape.num_shared:
        present.append("shared_experts")
    if shape.is_moe and kept & {"attention_qkv", "attention_o"}:
        return base, dtype, {m: dtype for m in present if m not in kept}
    return dtype, None, {m: base for m in present if m in kept}


_MODELOPT: dict[str, WeightDtype] = {
    "FP8": "fp8",
    "FP8_BLOCK_SCALES": "fp8_block",
    "FP8_PB_WO": "fp8_block",
    "NVFP4": "nvfp4",
    "MXFP4": "mxfp4",
    "W4A16_AWQ": "int4",
    "W4A8_AWQ": "int4",
    "INT8_SQ": "int8",
    "W8A16": "int8",
}


#: Exclusion-list entries (ModelOpt's exclude_modules, compressed-tensors' ignore, HF's
#: modules_to_not_convert) that keep a part of every layer in 16 bits: the whole attention
#: block, its q/k/v (MLA: q_a, q_b, kv_a, kv_b) projections, its output projection (not merely
#: a norm or the DSA indexer inside self_attn), the shared experts.
_EXCLUDED: tuple[tuple[re.Pattern[str], tuple[WeightModule, ...]], ...] = (
    (re.compile(r"self_attn(\*|\.\*|$)|re:\.\*self_attn\.\*"), ("attention_qkv", "attention_o")),
    (
        re.compile(
            r"self_attn\.(q_proj|k_proj|v_proj|qkv_proj|q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj)\b"
        ),
        ("attention_qkv",),
    ),
    (re.compile(r"self_attn\.o_proj\b"), ("attention_o",)),
    (re.compile(r"shared_expert"), ("shared_experts",)),
)
#: An entry that keeps one layer whole, or its MLP, in 16 bits (``model.layers.0*``,
#: ``model.layers.2.mlp``): the dense layers' MLP when it names every dense layer.
_LAYER_EXCLUDED = re.compile(r"layers\.(\d+)(\*|\.\*|$|\.mlp(\*|\.\*|$|\.(gate_proj|up_proj|down_proj)\b))")


def _excluded_modules(patterns: Any, num_dense: int) -> set[WeightModule]:
    """The parts of the model a quantization scheme's exclusion list keeps in 16 bits."""
    entries = [str(e) for e in (patterns if isinstance(patterns, list) else [patterns] if patterns else [])]
    kept: set[WeightModule] = set()
    layers: set[int] = set()
    for entry in entries:
        for pattern, modules in _EXCLUDED:
            if pattern.search(entry):
                kept.update(modules)
        if match := _LAYER_EXCLUDED.search(entry):
            layers.add(int(match.group(1)))
    if num_dense and set(range(num_dense)) <= layers:
        kept.add("dense_mlp")
    return kept


def _modelopt(q: _Fields) -> tuple[WeightDtype, Any] | None:
    algo = q.text("quant_algo")
    if not algo:
        return None
    if algo == "MIXED_PRECISION":
        layers = q.data.get("quantized_layers")
        algos = Counter(
            str(v.get("quant_algo"))
            for v in (layers.values() if isinstance(layers, Mapping) else [])
            if isinstance(v, Mapping)
        )
        if not algos:
            raise q.error("quantized_layers", "MIXED_PRECISION without per-layer quant_algo entries")
        algo = algos.most_common(1)[0][0]  # the precision most layers use
    if algo not in _MODELOPT:
        raise q.error("quant_algo", f"{algo!r} is not a known scheme ({', '.join(_MODELOPT)})")
    excluded = q.data.get("exclude_modules") or q.data.get("ignore")
    return _MODELOPT[algo], excluded


def _quant_method(q: _Fields) -> tuple[WeightDtype, Any] | None:
    """(precision, exclusion list) of a quantization_config."""
    method = q.text("quant_method")
    if method == "fp8":
        return ("fp8_block" if q.has("weight_block_size") else "fp8"), q.data.get("modules_to_not_convert")
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto-round"):
        bits = q.integer("bits", 4)
        if bits not in (4, 8):
            raise q.error("bits", f"{bits}-bit weights are not modelled (4 or 8)")
        return ("int4" if bits == 4 else "int8"), None
    if method == "mxfp4":
        return "mxfp4", q.data.get("modules_to_not_convert")
    if method == "modelopt":
        return _modelopt(q)
    if not method and q.has("quant_algo"):  # a ModelOpt export's quantization_config
        return _modelopt(q)
    if method == "compressed-tensors" or (not method and q.has("config_groups")):
        groups = q.data.get("config_groups")
        weights: list[Mapping[str, Any]] = [
            g["weights"]
            for g in (groups.values() if isinstance(groups, Mapping) else [])
            if isinstance(g, Mapping) and isinstance(g.get("weights"), Mapping)
        ]
        if not weights:
            raise q.error("config_groups", "no weights scheme to read the precision from")
        w = weights[0]
        num_bits, kind = w.get("num_bits"), w.get("type")
        dtype: WeightDtype
        if num_bits == 4 and kind == "int":
            dtype = "int4"
        elif num_bits == 4 and kind == "float":
            dtype = "nvfp4"
        elif num_bits == 8 and kind == "float":
            dtype = "fp8_block" if w.get("strategy") == "block" else "fp8"
        elif num_bits == 8 and kind == "int":
            dtype = "int8"
        else:
            raise q.error("config_groups", f"weights of {num_bits} bits, type {kind!r}, are not modelled")
        return dtype, q.data.get("ignore")
    if not method:
        return None
    raise q.error(
        "quant_method",
        f"{method!r} is not a modelled scheme (fp8, awq, gptq, mxfp4, modelopt, compressed-tensors)",
    )


# -- references in scenarios ------------------------------------------------------------

#: Keys of ``model: {hf_config: PATH, ...}`` in a scenario.
HF_CONFIG_KEYS = ("hf_config", "name", "weight_dtype")


def read_model_ref(value: Any) -> Any:
    """``{hf_config: PATH, name?, weight_dtype?}`` read into a `ModelSpec`; anything else as is.

    Scenarios call this when they are validated, so the resolved scenario holds the spec
    itself (its ``source`` names the file) and reloads without the file. A relative PATH is
    relative to the scenario file's folder (`resolve_model_paths`), or to the working
    folder for a scenario given as data.
    """
    if not isinstance(value, Mapping) or "hf_config" not in value:
        return value
    unknown = sorted(set(value) - set(HF_CONFIG_KEYS))
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(unknown)} beside hf_config (allowed: {', '.join(HF_CONFIG_KEYS)})"
        )
    path, name, dtype = value["hf_config"], value.get("name"), value.get("weight_dtype")
    if not isinstance(path, str) or not path.strip() or "\x00" in path:
        raise ValueError("hf_config must be the path of a config.json")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ValueError("name must be a non-empty string")
    if dtype is not None and dtype not in WEIGHT_DTYPE_BYTES:
        raise ValueError(f"weight_dtype {dtype!r} is not one of: {', '.join(WEIGHT_DTYPE_BYTES)}")
    return load_hf_config(path, name=name, weight_dtype=dtype)


def resolve_model_paths(data: dict[str, Any], base_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Copy of plain scenario data whose relative ``hf_config`` paths (the model's and a
    speculative draft's) are made absolute against ``base_dir`` (a scenario file's folder)."""

    def fix(ref: Any) -> Any:
        if isinstance(ref, Mapping) and isinstance(ref.get("hf_config"), str):
            try:
                p = Path(ref["hf_config"]).expanduser()
                return {**ref, "hf_config": str(p if p.is_absolute() else (Path(base_dir) / p).resolve())}
            except (OSError, ValueError, RuntimeError):
                return ref  # a path no file can have: reading it reports it
        return ref

    data = dict(data)
    if "model" in data:
        data["model"] = fix(data["model"])
    groups = data.get("replicas")
    if isinstance(groups, list):
        fixed = []
        for group in groups:
            engine = group.get("engine") if isinstance(group, Mapping) else None
            spec = engine.get("speculative_config") if isinstance(engine, Mapping) else None
            if isinstance(engine, Mapping) and isinstance(spec, Mapping) and "model" in spec:
                group = {
                    **group,
                    "engine": {**engine, "speculative_config": {**spec, "model": fix(spec["model"])}},
                }
            fixed.append(group)
        data["replicas"] = fixed
    return data
