"""Layer shapes of a dense decoder-only transformer, as one tensor-parallel shard sees them.

Plain dataclass (no pydantic) so that the harness runs on machines that only have torch
and numpy. The CLI builds it from a `kvsim.model.specs.ModelSpec`.

Sharding follows Megatron-style tensor parallelism as vLLM applies it: QKV and MLP
gate/up are column-parallel (output features split over TP), the output projection and
MLP down are row-parallel (input features split), the LM head is split over the
vocabulary, and each shard keeps at least one KV head (KV heads are replicated when
tp > num_kv_heads).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: Element sizes of the dtypes the harness measures.
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp8": 1}


@dataclass(frozen=True)
class ModelShape:
    """What the harness needs to know about a model: its shapes and dtype."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    dtype: str = "bf16"
    #: Routed experts and how many each token uses (0 and 0: a dense model); with experts,
    #: ``intermediate_size`` is one expert's width.
    num_experts: int = 0
    experts_per_token: int = 0

    def __post_init__(self) -> None:
        for field_name in (
            "num_layers",
            "hidden_size",
            "num_attention_heads",
            "num_kv_heads",
            "head_dim",
            "intermediate_size",
            "vocab_size",
        ):
            if getattr(self, field_name) <= 0:
                raise ValueError(f'"{field_name}" must be > 0')
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError('"num_attention_heads" must be a multiple of "num_kv_heads"')
        if self.num_experts < 0 or not 0 <= self.experts_per_token <= self.num_experts:
            raise ValueError('"experts_per_token" must be between 0 and "num_experts"')
        if bool(self.num_experts) != bool(self.experts_per_token):
            raise ValueError('"num_experts" and "experts_per_token" are both 0 (dense) or both > 0')
        if self.dtype not in ("fp16", "bf16"):
            raise ValueError(f'"dtype" must be fp16 or bf16 for calibration, got {self.dtype!r}')

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def check_tp(self, tp: int) -> None:
        """Raise ValueError unless the model splits evenly over ``tp`` GPUs."""
        if tp < 1:
            raise ValueError('"tp" must be >= 1')
        for field_name in ("num_attention_heads", "intermediate_size", "vocab_size"):
            if getattr(self, field_name) % tp:
                raise ValueError(f'"{field_name}" ({getattr(self, field_name)}) is not divisible by tp={tp}')

    def heads_per_shard(self, tp: int) -> int:
        return self.num_attention_heads // tp

    def kv_heads_per_shard(self, tp: int) -> int:
        return max(1, self.num_kv_heads // tp)

    def linear_shapes(self, tp: int) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of each linear layer on one TP shard."""
        hd = self.head_dim
        qkv_out = (self.heads_per_shard(tp) + 2 * self.kv_heads_per_shard(tp)) * hd
        return {
            "qkv": (self.hidden_size, qkv_out),
            "o": (self.heads_per_shard(tp) * hd, self.hidden_size),
            "gate_up": (self.hidden_size, 2 * self.intermediate_size // tp),
            "down": (self.intermediate_size // tp, self.hidden_size),
            "lm_head": (self.hidden_size, self.vocab_size // tp),
        }
