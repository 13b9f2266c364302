"""The grids of ``kvsim calibrate --tables``: which GEMMs, attention shapes and all-reduces.

``FULL`` is aiconfigurator-core's own sweep (its collector's cases for vLLM: 74 token
counts x 22 x 22 feature sizes for GEMMs, 9 batches x 17 prompt lengths for context
attention, 12 batches x 17 contexts for generation attention, every (heads, KV heads,
head_dim) layout, all-reduces of 128 to 512M elements over 2, 4 and 8 GPUs; MoE layers at
the 16 expert shapes of the packaged bf16 table x 27 token counts x every moe_tp or moe_ep
layout x 3 routings): hours on
one GPU (an estimate). ``SMALL`` (the default) is a subset of every axis of ``FULL``, so
its points can be compared with the packaged tables one for one: 1,172 points measured on
one H200 in under 2.5 minutes (2026-12-04, torch 2.11.0; docs/cost-model.md, "The harness
on a real H200"). ``CPU`` is tiny, the same
code paths; the tests run it. `for_model` narrows a grid to one model's layer shapes on a
TP shard, which is what its cost model looks up.

Grid rules, as aiconfigurator's collector applies them: context attention only where
``batch x isl`` <= 65,536 tokens (MHA) or 131,072 (GQA); generation attention only where
``batch x step x num_heads`` <= 8M x 128 / head_dim.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from calibration.shapes import ModelShape

#: GEMM token counts of aiconfigurator's collector (collector/cases/base_ops/gemm.yaml).
FULL_GEMM_M = [
    *range(1, 18),
    *(v for base in (32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256) for v in (base, base + 1)),
    *(v for base in range(512, 4353, 256) for v in (base, base + 1)),
    8192,
    16384,
    32768,
]
#: GEMM feature sizes (n and k) of the packaged h200_sxm vLLM 0.24.0 table (the collector's
#: list without 1280, which later collectors added); 65536 x 65536 is left out, as there.
FULL_FEATURES = [32, 64, 128, 256, 512, 768, 1024, 1536, 2048, 2560, 3072, 3584, 4096]
FULL_FEATURES += [5120, 6144, 7168, 8192, 10240, 12288, 16384, 51200, 65536]
#: MoE token counts of the packaged h200_sxm vLLM 0.24.0 ``moe_perf`` table (27 values).
FULL_MOE_TOKENS = [1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024]
FULL_MOE_TOKENS += [1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384]
#: (hidden_size, inter_size, topk, num_experts) of that table's bf16 rows: Qwen3-30B-A3B,
#: Qwen3-235B-A22B, Qwen3-Coder-480B, Qwen3.5-35B/122B/397B, GLM-5's shape, Mixtral-8x7B/8x22B,
#: and the collector's other models.
FULL_MOE_SHAPES = [
    (2048, 512, 8, 256),
    (2048, 768, 8, 128),
    (2048, 5120, 22, 512),
    (2688, 1856, 6, 128),
    (2816, 704, 8, 128),
    (3072, 1024, 8, 256),
    (4096, 1024, 10, 512),
    (4096, 1536, 8, 128),
    (4096, 2048, 8, 256),
    (4096, 14336, 2, 8),
    (5120, 8192, 1, 16),
    (5120, 8192, 1, 128),
    (6144, 2048, 8, 256),
    (6144, 2560, 8, 160),
    (6144, 3072, 4, 128),
    (6144, 16384, 2, 8),
]


def _moe_layouts(max_tp: int, max_ep: int) -> list[tuple[int, int]]:
    """(moe_tp, moe_ep) pairs: tensor parallel or expert parallel, never both (vLLM's rule)."""
    tps = [(tp, 1) for tp in (1, 2, 4, 8, 16, 32) if tp <= max_tp]
    return tps + [(1, ep) for ep in (2, 4, 8, 16, 32, 64, 128, 256) if ep <= max_ep]


def _full_nk() -> list[tuple[int, int]]:
    return [(n, k) for n in FULL_FEATURES for k in FULL_FEATURES if (n, k) != (65536, 65536)]


def _heads(head_dims: list[int]) -> list[tuple[int, int, int]]:
    """(num_heads, num_kv_heads, head_dim) of the collector's attention sweep."""
    out = []
    for d in head_dims:
        for h in (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 64):
            for kv in (h, 1, 2, 4, 8):
                if kv <= h and h % kv == 0 and (h, kv, d) not in out:
                    out.append((h, kv, d))
    return out


@dataclass(frozen=True)
class TableGrids:
    """The points one ``--tables`` run measures."""

    name: str
    gemm_m: list[int]
    gemm_nk: list[tuple[int, int]]
    gemm_dtypes: list[str]
    #: (num_heads, num_kv_heads, head_dim) per shard.
    attention_heads: list[tuple[int, int, int]]
    kv_dtypes: list[str]
    context_batch_sizes: list[int]
    context_isl: list[int]
    generation_batch_sizes: list[int]
    #: Tokens each request attends to, its new one included (the table's ``step``).
    generation_steps: list[int]
    #: Token slots per KV page of the paged decode kernel (64: aiconfigurator's vLLM collector).
    page_tokens: int
    allreduce_num_gpus: list[int]
    #: All-reduce message sizes in elements (bf16).
    allreduce_elements: list[int]
    warmup: int
    repeats: int
    #: MoE layers: (hidden_size, inter_size, topk, num_experts), the expert width before any split.
    moe_shapes: list[tuple[int, int, int, int]] = field(default_factory=list)
    moe_tokens: list[int] = field(default_factory=list)
    #: (moe_tp, moe_ep) layouts; a layout that does not divide a shape is left out for it.
    moe_layouts: list[tuple[int, int]] = field(default_factory=lambda: [(1, 1)])
    #: Token-to-expert routing (`calibration.moe.DISTRIBUTIONS`).
    moe_distributions: list[str] = field(default_factory=lambda: ["balanced", "power_law_1.01"])
    l2_flush_bytes: int = 256 << 20

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def context_points(self, heads: int, kv_heads: int) -> list[tuple[int, int]]:
        limit = 65536 if heads == kv_heads else 131072
        return [(b, s) for b in self.context_batch_sizes for s in self.context_isl if b * s <= limit]

    def generation_points(self, heads: int, head_dim: int) -> list[tuple[int, int]]:
        limit = 8192 * 1024 * 128 // head_dim
        return [
            (b, s)
            for b in self.generation_batch_sizes
            for s in self.generation_steps
            if b * s * heads <= limit
        ]

    def moe_cases(self) -> list[tuple[tuple[int, int, int, int], int, int]]:
        """(shape, moe_tp, moe_ep) of every MoE case: each layout that splits the shape evenly
        (width over moe_tp, experts over moe_ep)."""
        return [
            (shape, tp, ep)
            for shape in self.moe_shapes
            for tp, ep in self.moe_layouts
            if shape[1] % tp == 0 and shape[3] % ep == 0 and (shape[1] // tp) % 8 == 0
        ]


FULL = TableGrids(
    name="full",
    gemm_m=FULL_GEMM_M,
    gemm_nk=_full_nk(),
    gemm_dtypes=["bf16", "fp8"],
    attention_heads=_heads([64, 128, 256]),
    kv_dtypes=["bf16", "fp8"],
    context_batch_sizes=[1, 2, 4, 8, 16, 32, 64, 128, 256],
    context_isl=[1, 16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 10240, 12288, 16384],
    generation_batch_sizes=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048],
    generation_steps=[2**i - 1 for i in range(1, 18)],
    page_tokens=64,
    allreduce_num_gpus=[2, 4, 8],
    allreduce_elements=[128 << i for i in range(23)],
    warmup=3,
    repeats=10,
    moe_shapes=FULL_MOE_SHAPES,
    moe_tokens=FULL_MOE_TOKENS,
    moe_layouts=_moe_layouts(32, 256),
    moe_distributions=["balanced", "power_law_1.01", "power_law_1.2"],
)

SMALL = TableGrids(
    name="small",
    gemm_m=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
    gemm_nk=[(n, k) for n in (1024, 4096, 8192, 16384) for k in (1024, 4096, 8192, 16384)],
    gemm_dtypes=["bf16", "fp8"],
    attention_heads=[(32, 8, 128), (32, 32, 128), (64, 8, 128), (16, 2, 128), (8, 1, 128)],
    kv_dtypes=["bf16", "fp8"],
    context_batch_sizes=[1, 4, 16],
    context_isl=[16, 128, 512, 1024, 2048, 4096, 8192, 16384],
    generation_batch_sizes=[1, 4, 16, 64, 256],
    generation_steps=[127, 511, 1023, 4095, 16383],
    page_tokens=64,
    allreduce_num_gpus=[2, 4, 8],
    allreduce_elements=[1024, 16384, 131072, 1048576, 8388608, 67108864],
    warmup=2,
    repeats=5,
    # Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3.5-397B-A17B and Mixtral-8x7B's experts
    moe_shapes=[(2048, 768, 8, 128), (4096, 1536, 8, 128), (4096, 1024, 10, 512), (4096, 14336, 2, 8)],
    moe_tokens=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
    moe_layouts=[(1, 1), (4, 1), (1, 8)],
)

CPU = TableGrids(
    name="cpu",
    gemm_m=[1, 4, 16],
    gemm_nk=[(32, 64), (64, 32)],
    gemm_dtypes=["bf16", "fp8"],
    attention_heads=[(4, 2, 16)],
    kv_dtypes=["bf16", "fp8"],
    context_batch_sizes=[1, 2],
    context_isl=[16, 32],
    generation_batch_sizes=[1, 3],
    generation_steps=[7, 31],
    page_tokens=16,
    allreduce_num_gpus=[1],
    allreduce_elements=[128, 1024],
    warmup=0,
    repeats=1,
    moe_shapes=[(64, 32, 2, 8)],
    moe_tokens=[1, 5, 16],
    moe_layouts=[(1, 1), (2, 1), (1, 4)],
    l2_flush_bytes=0,
)


def grids_for(device_type: str, full: bool) -> TableGrids:
    """The grid for a device type ('cuda' or 'cpu') and the --full-grid flag."""
    if device_type == "cpu":
        return CPU
    return FULL if full else SMALL


def for_model(grids: TableGrids, shape: ModelShape, tp: int) -> TableGrids:
    """``grids`` with the GEMM shapes and head layout of ``shape`` on one of ``tp`` shards.

    The linear layers' (n = out, k = in) features, as `ModelShape.linear_shapes` shards them
    (the LM head included), and the shard's (query heads, KV heads, head_dim); a MoE model's
    router GEMM and experts (``intermediate_size`` is the expert width) at moe_tp 1, and at moe_tp ``tp`` and
    moe_ep ``tp``; a dense model measures no MoE.
    """
    shape.check_tp(tp)
    nk = sorted({(out, inp) for inp, out in shape.linear_shapes(tp).values()})
    heads = (shape.heads_per_shard(tp), shape.kv_heads_per_shard(tp), shape.head_dim)
    moe: dict[str, Any] = {"moe_shapes": []}
    if shape.num_experts:
        nk = sorted({*nk, (shape.num_experts, shape.hidden_size)})  # the router (bf16 in the engines)
        # its experts, unsplit and as ``tp`` GPUs would run them: moe_tp (vLLM's default) or moe_ep
        moe["moe_shapes"] = [
            (shape.hidden_size, shape.intermediate_size, shape.experts_per_token, shape.num_experts)
        ]
        moe["moe_layouts"] = [(1, 1), (tp, 1), (1, tp)] if tp > 1 else [(1, 1)]
    return replace(
        grids, name=f"{grids.name}/{shape.name}-tp{tp}", gemm_nk=nk, attention_heads=[heads], **moe
    )
