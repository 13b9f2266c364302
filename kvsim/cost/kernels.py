"""Iteration times from measured kernels: the ``kernels`` cost model.

One engine iteration of a dense transformer on one tensor-parallel shard runs, per layer
(T tokens in the step, S sequences, B of them decoding; h hidden, q/kv heads per GPU):

    add + RMSNorm ─ QKV GEMM (T x h -> (q + 2 kv) x head_dim) ─ RoPE, KV write ─ attention
    ─ O GEMM (T x q head_dim -> h) ─ all-reduce (T x h, tp > 1) ─ add + RMSNorm
    ─ gate/up GEMM (T x h -> 2 i/tp) ─ SiLU x mul ─ down GEMM (T x i/tp -> h) ─ all-reduce

then the LM head (S x h -> vocab/tp, logits only for each sequence's last position).
Each GEMM, attention call and all-reduce is priced from NVIDIA's measured tables for that
GPU and engine (`kvsim.cost.tables`): the GEMM of the weight precision at m = T (m padded
to the engine's CUDA-graph size when the step is captured), decode attention at (B, mean
context), each prefill chunk's attention from a full prefill of its length scaled by the
share of attention pairs the chunk computes, the engine's custom all-reduce (its
CUDA-graph variant when captured). What the tables do not measure is modelled and named:

    elementwise   norms, RoPE, KV-cache write, SiLU x mul, residual adds: memory-bound
                  kernels, bytes / (HBM bandwidth x elementwise_memory_efficiency) plus
                  elementwise_kernel_s each (aiconfigurator-core's systems/*.yaml give 0.8
                  of datasheet bandwidth and 3 us, "nonofficial corrections")
    per layer     per_layer_overhead_s (launch gaps outside CUDA graphs)
    per step      per_iteration_overhead_s (the engine's CPU time: scheduling, input
                  preparation, sampling, output processing)

The two overheads are the only constants fitted to real deployments, on H200 rows only
(docs/validation.md, "Real GPU deployments"); the defaults per backend are those fits.

A decode-only iteration's time depends on (B, total context) only, and
``decode_steps_s`` computes it with the same operations as ``step_time_s``: the
fast-forwarded engine and the stepped one agree bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kvsim.cost.base import Batch
from kvsim.cost.config import KernelCostConfig
from kvsim.cost.tables import (
    MS,
    Curve,
    Grid,
    TableIndex,
    package_tables_root,
    read_table,
    table_index,
)
from kvsim.errors import ProfileError
from kvsim.model.specs import KV_DTYPE_BYTES, GpuSpec, ModelSpec

#: kvsim GPU presets -> aiconfigurator-core system names (the tables' folders).
GPU_SYSTEMS: dict[str, str] = {
    "a100-80gb": "a100_sxm",
    "a100-pcie": "a100_pcie",
    "a30": "a30",
    "h100-sxm": "h100_sxm",
    "h100-pcie": "h100_pcie",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "b300": "b300_sxm",
    "gb200": "gb200",
    "gb300": "gb300",
    "l4": "l4",
    "l40s": "l40s",
    "rtx-pro-6000": "rtx_pro_6000_server",
    "arc-pro-b60": "b60",
}

#: Weight precision -> the tables' gemm_dtype.
GEMM_DTYPES: dict[str, str] = {
    "bf16": "bfloat16",
    "fp16": "bfloat16",  # same tensor-core rate; the tables measure bf16
    "fp8": "fp8",
    "fp8_block": "fp8_block",
    "nvfp4": "nvfp4",
    "mxfp4": "mxfp4",
    "int4": "int4_wo",
}
#: KV-cache dtype -> the tables' kv_cache_dtype ("auto" is the model's 16-bit dtype).
KV_DTYPES: dict[str, str] = {"auto": "bfloat16", "bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}

#: The engine's all-reduce table and its CUDA-graph / eager variants (column ``backend``).
ALLREDUCE_VARIANTS: dict[str, tuple[str, str]] = {
    "vllm": ("vllm_graph", "vllm_eager"),
    "sglang": ("sglang_graph", "sglang_eager"),
    "trtllm": ("trtllm", "trtllm"),
}


@dataclass(frozen=True)
class Overheads:
    """The kernels model's three constants for one engine (see the module docstring)."""

    per_iteration_overhead_s: float
    per_layer_overhead_s: float
    elementwise_kernel_s: float


#: Each engine's constants, fitted on h200_sxm deployments only (issue 20's rule: every
#: other GPU is held out) by `python benchmarks/silicon.py --fit BACKEND`; docs/validation.md
#: has the command, the objective and the figures. A config's own values win.
#: - vllm: 81 H200 rows (60 Llama-3.1-70B InferenceMAX, 21 Llama-3.1-8B gap analysis);
#:   objective (median |TTFT error| + median |TPOT error|) 0.2236 at (0, 0, 3 us) -> 0.2182.
#: - sglang: not fitted. Its 46 H200 rows (Llama-3.1-8B) run at SGLang's page size of 1
#:   token, about 15 minutes per evaluation of the grid on two cores; it takes vLLM's values
#:   (the same CUDA kernels' launch and host costs, a documented stand-in).
#: - trtllm: 72 H200 rows (Llama-3.1-70B InferenceMAX); objective 0.3556 -> 0.3017, every
#:   term at zero, consistent with TensorRT-LLM fusing the elementwise kernels into its GEMMs
#:   and attention and its overlap scheduler hiding the host work behind the GPU.
FITTED: dict[str, Overheads] = {
    "vllm": Overheads(0.5e-3, 5e-6, 1.5e-6),
    "sglang": Overheads(0.5e-3, 5e-6, 1.5e-6),
    "trtllm": Overheads(0.0, 0.0, 0.0),
}


#: vLLM's CUDA-graph capture sizes (vllm/config/vllm.py, _set_cudagraph_sizes, 0.32.0):
#: 1, 2, 4, multiples of 8 below 256, then multiples of 16 up to the largest size, which
#: is min(2 x max_num_seqs, 512), or 1,024 on data-center Blackwell.
_GRAPH_SIZES = [1, 2, 4, *range(8, 256, 8), *range(256, 1024 + 1, 16)]


def graph_padded(tokens: int, max_graph_tokens: int) -> int:
    """The token count a CUDA-graph-captured step runs at (unchanged when not captured)."""
    if tokens > max_graph_tokens:
        return tokens
    i = np.searchsorted(_GRAPH_SIZES, tokens)
    return int(_GRAPH_SIZES[int(i)]) if i < len(_GRAPH_SIZES) else tokens


@dataclass(frozen=True)
class KernelSource:
    """Which measured tables price a replica: a system, an engine and its version."""

    index: TableIndex
    system: str
    backend: str
    version: str | None

    def table(self, op: str, name: str) -> pd.DataFrame:
        path = self.index.folder(self.system, op, self.backend, self.version_for(op)) / f"{name}.parquet"
        return read_table(path)

    def version_for(self, op: str) -> str | None:
        """The requested version if this op was measured for it, else the newest measured."""
        versions = self.index.versions(self.system, op, self.backend)
        return self.version if self.version in versions else None


def resolve_source(
    config: KernelCostConfig, gpu: GpuSpec, backend: str, base_dir: Path | None = None
) -> KernelSource:
    """The tables a config names, or those of the GPU preset and the engine's backend."""
    if config.tables is not None:
        root = Path(config.tables).expanduser()
        if not root.is_absolute() and base_dir is not None:
            root = base_dir / root
        if not root.is_dir():
            raise ProfileError(f"kernel tables folder {str(root)!r} does not exist")
    else:
        found = package_tables_root()
        if found is None:
            raise ProfileError(
                "cost_model kind kernels needs NVIDIA's measured kernel tables: install the kernels extra "
                "(pip install -e '.[kernels]', aiconfigurator-core 0.12.0) or give cost_model.tables"
            )
        root = found
    index = table_index(root.resolve())
    system = config.system or GPU_SYSTEMS.get(gpu.name)
    if system is None:
        raise ProfileError(
            f"no kernel tables are known for GPU {gpu.name!r}: set cost_model.system to one of "
            f"{', '.join(index.systems())}"
        )
    if system not in index.systems():
        raise ProfileError(
            f"{root}: no kernel tables for system {system!r} (measured: {', '.join(index.systems())})"
        )
    chosen = config.backend or backend
    if config.version is not None and config.version not in index.versions(system, "gemm", chosen):
        index.folder(system, "gemm", chosen, config.version)  # raises, listing the versions
    return KernelSource(index, system, chosen, config.version)


def _weights(x: float, keys: list[float]) -> list[tuple[float, float]]:
    """(key, weight) pairs interpolating ``x`` linearly among sorted ``keys``: the nearest key
    held below the smallest, scaled by x / key above the largest."""
    if x <= keys[0]:
        return [(keys[0], 1.0)]
    if x >= keys[-1]:
        return [(keys[-1], x / keys[-1])]
    i = int(np.searchsorted(keys, x, side="right"))
    k0, k1 = keys[i - 1], keys[i]
    w = (x - k0) / (k1 - k0)
    return [(k0, 1.0 - w), (k1, w)] if w > 0 else [(k0, 1.0)]


def gemm_curve(frame: pd.DataFrame, dtype: str, n: int, k: int, what: str, warn: list[str]) -> Curve:
    """Latency (s) of an (m x k) @ (k x n) GEMM of ``dtype`` as a function of m.

    Where several kernels were measured for the dtype (fp8 block scaling: DeepGEMM,
    CUTLASS, FlashInfer), each shape takes the fastest, as the engines dispatch by shape.
    """
    rows = frame[frame["gemm_dtype"] == dtype]
    if rows.empty:
        have = ", ".join(sorted(frame["gemm_dtype"].astype(str).unique()))
        raise ProfileError(f"no {dtype} GEMM was measured on this system (measured: {have})")
    best = rows.groupby(["n", "k", "m"], sort=True)["latency"].min()
    ns = sorted(float(v) for v in best.index.get_level_values("n").unique())
    ks = sorted(float(v) for v in best.index.get_level_values("k").unique())
    for name, value, keys in (("n", n, ns), ("k", k, ks)):
        if not keys[0] <= value <= keys[-1]:
            warn.append(f"{what} GEMM: {name}={value} outside the measured {keys[0]:g}..{keys[-1]:g}")
    parts: list[tuple[Curve, float]] = []
    expected = 0.0
    for n_key, wn in _weights(n, ns):
        for k_key, wk in _weights(k, ks):
            expected += wn * wk
            try:
                measured = best.loc[(int(n_key), int(k_key))]
            except KeyError:
                continue
            parts.append((Curve(measured.index.to_numpy(float), measured.to_numpy(float) * MS), wn * wk))
    if not parts:
        raise ProfileError(f"{what} GEMM: no measurement near n={n}, k={k}")
    # Weights sum to 1 inside the grid and scale past its end; a corner never measured
    # leaves its weight to the others.
    scale = expected / sum(w for _, w in parts)
    m_grid = np.unique(np.concatenate([c.sizes for c, _ in parts]))
    ys = np.zeros(len(m_grid))
    for curve, w in parts:
        ys += curve.at(m_grid) * (w * scale)
    return Curve(m_grid, ys)


def _pick_kernel(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of the kernel an engine runs by default: the one measured on the most shapes."""
    if "kernel_source" not in rows.columns or rows.empty:
        return rows
    counts = rows["kernel_source"].value_counts()
    return rows[rows["kernel_source"] == counts.index[0]]


def attention_grid(
    frame: pd.DataFrame,
    *,
    heads: int,
    kv_heads: int,
    head_dim: int,
    kv_dtype: str,
    length_column: str,
    what: str,
    warn: list[str],
) -> Grid:
    """Attention latency (s) over (batch size, length) for one head layout per GPU.

    ``length_column`` is ``step`` (decode: the tokens already cached) or ``isl`` (prefill).
    Query-head counts between measured ones interpolate linearly.
    """
    rows = frame[
        (frame["kv_cache_dtype"] == kv_dtype)
        & (frame["num_key_value_heads"] == kv_heads)
        & (frame["head_dim"] == head_dim)
    ]
    for column, value in (("window_size", 0), ("beam_width", 1), ("attn_dtype", "bfloat16")):
        if column in rows.columns and (rows[column] == value).any():
            rows = rows[rows[column] == value]
    rows = _pick_kernel(rows)
    if rows.empty:
        raise ProfileError(
            f"{what}: no measurement for {kv_heads} KV heads of dimension {head_dim} with a {kv_dtype} KV cache"
        )
    keys = sorted(float(h) for h in rows["num_heads"].unique())
    if not keys[0] <= heads <= keys[-1]:
        warn.append(f"{what}: {heads} query heads outside the measured {keys[0]:g}..{keys[-1]:g}")
    by_heads = {
        key: rows[rows["num_heads"] == key].pivot_table(
            index="batch_size", columns=length_column, values="latency", aggfunc="median"
        )
        for key, _ in _weights(float(heads), keys)
    }
    parts = [(by_heads[key], w) for key, w in _weights(float(heads), keys)]
    xs = sorted(set().union(*(p.index for p, _ in parts)))
    ys = sorted(set().union(*(p.columns for p, _ in parts)))
    total = np.zeros((len(xs), len(ys)))
    for pivot, w in parts:
        grid = Grid(pivot.index.to_numpy(float), pivot.columns.to_numpy(float), pivot.to_numpy(float) * MS)
        total += w * np.stack([grid.at(float(x), np.asarray(ys, dtype=np.float64)) for x in xs])
    return Grid(xs, ys, total)


class KernelCostModel:
    """Iteration time of a dense model from measured kernel tables (module docstring)."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        config: KernelCostConfig,
        *,
        tp: int = 1,
        kv_cache_dtype: str = "auto",
        backend: str = "vllm",
        max_num_seqs: int = 256,
        base_dir: Path | None = None,
    ) -> None:
        if tp < 1:
            raise ValueError('"tp" must be >= 1')
        if model.is_moe or model.is_mla:
            raise ProfileError(
                f"cost_model kind kernels prices dense models; {model.name} is "
                f"{'a mixture of experts' if model.is_moe else 'MLA'} (use the roofline)"
            )
        self.model, self.gpu, self.config, self.tp = model, gpu, config, tp
        self.source = resolve_source(config, gpu, backend, base_dir)
        self.warnings: list[str] = []
        gemm_dtype = GEMM_DTYPES.get(model.weight_dtype)
        kv_dtype = KV_DTYPES.get(kv_cache_dtype)
        if gemm_dtype is None:
            raise ProfileError(f"no kernel tables for {model.weight_dtype} weights")
        if kv_dtype is None:
            raise ProfileError(f"no kernel tables for a {kv_cache_dtype} KV cache")
        if model.num_attention_heads % tp or model.intermediate_size % tp:
            raise ProfileError(f"{model.name} cannot be split over tp {tp}")
        h, hd = model.hidden_size, model.head_dim
        q_heads = model.num_attention_heads // tp
        kv_heads = max(1, model.num_kv_heads // tp)
        inter = model.intermediate_size // tp
        graph_cap = 1024 if self.source.system in ("b200_sxm", "b300_sxm", "gb200", "gb300") else 512
        self.max_graph_tokens = min(2 * max_num_seqs, graph_cap) if self.source.backend == "vllm" else 0

        gemm = self.source.table("gemm", "gemm_perf")
        w = self.warnings
        self._gemms = [
            gemm_curve(gemm, gemm_dtype, (q_heads + 2 * kv_heads) * hd, h, "QKV", w),
            gemm_curve(gemm, gemm_dtype, h, q_heads * hd, "O", w),
            gemm_curve(gemm, gemm_dtype, 2 * inter, h, "gate/up", w),
            gemm_curve(gemm, gemm_dtype, h, inter, "down", w),
        ]
        # Engines keep the LM head in 16 bits whatever the weights (aiconfigurator does too).
        self._lm_head = gemm_curve(gemm, "bfloat16", max(1, model.vocab_size // tp), h, "LM head", w)

        def attention(table: str, length_column: str, what: str) -> Grid:
            frame = self.source.table("attention", table)
            return attention_grid(
                frame, heads=q_heads, kv_heads=kv_heads, head_dim=hd, kv_dtype=kv_dtype,
                length_column=length_column, what=what, warn=w,
            )  # fmt: skip

        self._decode = attention("generation_attention_perf", "step", "decode attention")
        prefill = attention("context_attention_perf", "isl", "prefill attention")
        isl = prefill.ys
        self._prefill = Curve(isl, prefill.at(1.0, isl))  # one sequence of each length
        self._attention_floor = self._prefill(1.0)
        self._allreduce = self._allreduce_curves() if tp > 1 else None
        # Elementwise bytes per token per layer, 16-bit activations (see the docstring):
        # two fused add+RMSNorm (read 2h, write 2h), RoPE on q and k (read and write),
        # the KV write (read k and v, write them in the cache's dtype), SiLU x mul (read
        # 2 i, write i).
        kv_bytes = KV_DTYPE_BYTES["bf16" if kv_cache_dtype == "auto" else kv_cache_dtype]
        self._elementwise_bytes_per_token = (
            2 * 4 * h * 2.0
            + 2 * (q_heads + kv_heads) * hd * 2.0
            + 2 * kv_heads * hd * (2.0 + kv_bytes)
            + 3 * inter * 2.0
        )
        self._elementwise_kernels = 5
        self._hbm_rate = gpu.hbm_bandwidth_bytes_per_s * config.elementwise_memory_efficiency
        fitted = FITTED[self.source.backend] if self.source.backend in FITTED else Overheads(0.0, 0.0, 3e-6)
        self.overheads = Overheads(
            *(
                fitted_value if given is None else given
                for given, fitted_value in (
                    (config.per_iteration_overhead_s, fitted.per_iteration_overhead_s),
                    (config.per_layer_overhead_s, fitted.per_layer_overhead_s),
                    (config.elementwise_kernel_s, fitted.elementwise_kernel_s),
                )
            )
        )
        self._per_step_s = self.overheads.per_iteration_overhead_s
        self._by_tokens: dict[int, float] = {}
        self._by_seqs: dict[int, float] = {}
        self._pcie_bw = gpu.pcie_bandwidth_bytes_per_s

    def _allreduce_curves(self) -> tuple[Curve, Curve]:
        """(CUDA graph, eager) all-reduce latency by message elements on ``tp`` GPUs."""
        graph, eager = ALLREDUCE_VARIANTS.get(self.source.backend, ("", ""))
        index = self.source.index
        if index.versions(self.source.system, "comm", self.source.backend):
            frame = self.source.table("comm", "custom_allreduce_perf")
            rows = frame[frame["num_gpus"] == self.tp]
            column = "backend" if "backend" in frame.columns else "implementation"
            if not rows.empty:
                picked = []
                for variant in (graph, eager):
                    sub = rows[rows[column] == variant] if column in rows.columns else rows
                    sub = sub if not sub.empty else rows
                    med = sub.groupby("message_size")["latency"].median()
                    picked.append(Curve(med.index.to_numpy(float), med.to_numpy(float) * MS))
                return picked[0], picked[1]
        nccl_versions = index.versions(self.source.system, "comm", "nccl")
        if not nccl_versions:
            raise ProfileError(f"no all-reduce was measured on {self.source.system} for tp {self.tp}")
        frame = read_table(
            index.folder(self.source.system, "comm", "nccl", nccl_versions[-1]) / "nccl_perf.parquet"
        )
        gpus = sorted(int(g) for g in frame["num_gpus"].unique())
        n = self.tp if self.tp in gpus else gpus[-1]
        if n != self.tp:
            self.warnings.append(f"all-reduce: tp {self.tp} not measured; priced as {n} GPUs")
        rows = frame[(frame["op_name"] == "all_reduce") & (frame["num_gpus"] == n)]
        med = rows.groupby("message_size")["latency"].median()
        curve = Curve(med.index.to_numpy(float), med.to_numpy(float) * MS)
        return curve, curve

    # -- the pieces of a step ---------------------------------------------------------------

    def _token_terms_s(self, tokens: int) -> float:
        """Everything in a step that depends only on its token count: GEMMs, elementwise
        kernels and all-reduces of every layer, and the per-layer overhead."""
        cached = self._by_tokens.get(tokens)
        if cached is not None:
            return cached
        m = graph_padded(tokens, self.max_graph_tokens)
        layer = sum(curve(m) for curve in self._gemms)
        layer += (
            m * self._elementwise_bytes_per_token / self._hbm_rate
            + self._elementwise_kernels * self.overheads.elementwise_kernel_s
        )
        if self._allreduce is not None:
            curve = self._allreduce[0] if m <= self.max_graph_tokens else self._allreduce[1]
            # The tables' message_size counts elements (aiconfigurator's collector,
            # collector/network/collect_all_reduce.py, allocates [tokens, 4096] tensors of it).
            layer += 2 * curve(float(m * self.model.hidden_size))
        layer += self.overheads.per_layer_overhead_s
        t = self.model.num_layers * layer
        self._by_tokens[tokens] = t
        return t

    def _lm_head_s(self, seqs: int) -> float:
        cached = self._by_seqs.get(seqs)
        if cached is None:
            cached = self._by_seqs[seqs] = self._lm_head(seqs)
        return cached

    def _chunk_extra_s(self, q: int, c: int) -> float:
        """A prefill chunk of q tokens after c cached ones, beyond the attention launch.

        The tables measure whole prompts; a chunk computes q c + q (q + 1) / 2 of the
        (q + c)(q + c + 1) / 2 query-key pairs of its whole prompt."""
        n = q + c
        full = self._prefill(float(n)) - self._attention_floor
        return max(full, 0.0) * ((q * c + q * (q + 1) / 2) / (n * (n + 1) / 2))

    def _decode_attention_s(self, num_seqs: int, context: np.ndarray) -> np.ndarray:
        """Decode attention for ``num_seqs`` requests at a total ``context`` (each row)."""
        step = np.maximum(context / num_seqs - 1.0, 1.0)  # the tables' step: tokens before this one
        return self._decode.at(float(num_seqs), step)

    # -- the CostModel protocol -----------------------------------------------------------

    def step_time_s(self, batch: Batch) -> float:
        if not batch.prefill_chunks:
            if batch.num_decode_seqs == 0:
                return 0.0
            ctx = np.array([batch.decode_context_tokens], dtype=np.float64)
            return float(self.decode_steps_s(batch.num_decode_seqs, ctx)[0])
        tokens, seqs = batch.num_decode_seqs, batch.num_decode_seqs
        extra = 0.0
        for q, c in batch.prefill_chunks:
            tokens += q
            seqs += 1
            extra += self._chunk_extra_s(q, c)
        if batch.num_decode_seqs:
            ctx = np.array([batch.decode_context_tokens], dtype=np.float64)
            attention = float(self._decode_attention_s(batch.num_decode_seqs, ctx)[0]) + extra
        else:
            attention = self._attention_floor + extra
        t = self._token_terms_s(tokens) + self._lm_head_s(seqs)
        return t + self.model.num_layers * attention + self._per_step_s

    def decode_steps_s(self, num_seqs: int, context_tokens: np.ndarray) -> np.ndarray:
        ctx = np.asarray(context_tokens, dtype=np.float64)
        if num_seqs == 0:
            return np.zeros(len(ctx))
        t = self._token_terms_s(num_seqs) + self._lm_head_s(num_seqs)
        return t + self.model.num_layers * self._decode_attention_s(num_seqs, ctx) + self._per_step_s

    def pcie_transfer_s(self, num_bytes: float) -> float:
        return num_bytes / self._pcie_bw

    def describe(self) -> str:
        versions = {op: self.source.version_for(op) or "newest" for op in ("gemm", "attention", "comm")}
        return (
            f"kernel tables {self.source.system} / {self.source.backend} "
            + ", ".join(f"{op} {v}" for op, v in versions.items())
            + f" ({self.source.index.root})"
        )
