"""Linear-attention (Gated DeltaNet) layers in the cost models: Qwen3.5's three layers of four.

A Gated DeltaNet layer (Yang et al., "Gated Delta Networks", arXiv:2412.06464; Qwen3.5's
``linear_attention`` layers, `kvsim.model.specs.ModelSpec.num_linear_attention_layers`) keeps
per request a constant state instead of a KV cache: a causal-conv window and a recurrent
matrix of ``dk x dv`` per value head (`kvsim.model.kv_sizing.linear_state_bytes_per_seq`). Per
layer and TP shard (nk, nv key / value heads, dk, dv their dimensions, h hidden):

    in_proj_qkvz   GEMM T x h -> (2 nk dk + 2 nv dv) / tp      (q, k, v and the output gate z)
    in_proj_ba     GEMM T x h -> 2 nv / tp                     (the decay and beta gates)
    causal conv    over q, k, v: the window of conv_kernel - 1 earlier inputs per request
    delta rule     decode: one recurrent update per request (read and write its state);
                   prefill: the chunked scan over a chunk's tokens (the state read and written once)
    out_proj       GEMM T x nv dv / tp -> h

The roofline (`linear_roofline_terms`) counts the projections with the other weights
(``num_params`` holds them), the state traffic (read + write of each scheduled request's
state per step) with the KV traffic, and the delta rule's FLOPs, about 6 dk dv per value head
and token (the state's decay and rank-1 update, 4 dk dv, and the output, 2 dk dv), with the
attention FLOPs; linear layers have no per-token KV.

The ``kernels`` model (`GdnKernels`) prices the projections from the GEMM table and the conv
and delta-rule kernels from NVIDIA's measured ``gdn_perf`` table (aiconfigurator-core 0.12.0,
``systems/data/<system>/linear_attention/<backend>/<version>/gdn_perf.parquet``: per kernel
``causal_conv1d_fn`` and ``chunk_gated_delta_rule`` (phase context, by batch and seq_len),
``causal_conv1d_update`` and ``fused_recurrent_gated_delta_rule_packed_decode`` (phase
generation, by batch), keyed by d_model and the heads per GPU shard, as aiconfigurator's own
estimator reads it: sdk/models/qwen35.py passes ``linear_num_key_heads // tp``). A prefill
chunk of q tokens is priced as one sequence of q tokens (its state carried in, not
recomputed). Approximated: the layer's elementwise kernels are taken as a full-attention
layer's (norms, gating and the conv's activation in place of RoPE and the KV write).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from kvsim.cost.tables import MS, Curve, read_table
from kvsim.errors import ProfileError
from kvsim.model.kv_sizing import linear_state_bytes_per_seq
from kvsim.model.specs import ModelSpec

if TYPE_CHECKING:
    from kvsim.cost.kernels import KernelSource

#: The gdn_perf kernels kvsim reads: (phase, kernel_source) for the conv and the delta rule.
GDN_KERNELS = {
    "context": ("causal_conv1d_fn", "chunk_gated_delta_rule"),
    "generation": ("causal_conv1d_update", "fused_recurrent_gated_delta_rule_packed_decode"),
}


def _shape(model: ModelSpec) -> tuple[int, int, int, int, int]:
    nk, nv = model.linear_num_key_heads, model.linear_num_value_heads
    dk, dv, kernel = model.linear_key_head_dim, model.linear_value_head_dim, model.linear_conv_kernel_dim
    assert nk is not None and nv is not None and dk is not None and dv is not None and kernel is not None
    return nk, nv, dk, dv, kernel


def linear_roofline_terms(model: ModelSpec, tp: int) -> tuple[float, float]:
    """(delta-rule FLOPs per token, state bytes moved per scheduled request and step) of all
    linear layers on one TP shard; (0, 0) without linear layers. See the module docstring."""
    if not model.num_linear_attention_layers:
        return 0.0, 0.0
    _, nv, dk, dv, _ = _shape(model)
    flops = 6.0 * model.num_linear_attention_layers * max(1, nv // tp) * dk * dv
    return flops, 2.0 * linear_state_bytes_per_seq(model, tp)


class GdnKernels:
    """The measured kernels of a model's Gated DeltaNet layers on one TP shard (module docstring).

    ``gemm(n, k, what)`` builds a GEMM latency curve of the weights' dtype (the kernels
    model's `kvsim.cost.kernels.gemm_curve` on its table).
    """

    def __init__(
        self, model: ModelSpec, tp: int, source: KernelSource, gemm: object, warn: list[str]
    ) -> None:
        nk, nv, dk, dv, kernel = _shape(model)
        if nk % tp or nv % tp:
            raise ProfileError(
                f"{model.name}: linear attention's {nk} key / {nv} value heads cannot be split over tp {tp}"
            )
        self.layers = model.num_linear_attention_layers
        h = model.hidden_size
        build = gemm  # a callable (n, k, what) -> Curve
        self.gemms: list[Curve] = [
            build(2 * (nk * dk + nv * dv) // tp, h, "linear attention in_proj_qkvz"),  # type: ignore[operator]
            build(2 * nv // tp, h, "linear attention in_proj_ba"),  # type: ignore[operator]
            build(h, nv * dv // tp, "linear attention out_proj"),  # type: ignore[operator]
        ]
        frame = _gdn_table(source, warn)
        key = {
            "d_model": h, "num_k_heads": nk // tp, "num_v_heads": nv // tp,
            "head_k_dim": dk, "head_v_dim": dv, "d_conv": kernel,
        }  # fmt: skip
        rows = frame
        for column, value in key.items():
            rows = rows[rows[column] == value]
        if rows.empty:
            have = sorted(
                {
                    (int(a), int(b), int(c))
                    for a, b, c in zip(
                        frame["d_model"], frame["num_k_heads"], frame["num_v_heads"], strict=True
                    )
                }
            )
            raise ProfileError(
                f"linear attention: no gdn_perf measurement for d_model {h}, {nk // tp} key / {nv // tp} value "
                f"heads per GPU, head dims {dk}/{dv}, conv {kernel} (measured d_model / key / value heads: "
                + ", ".join(f"{a}/{b}/{c}" for a, b, c in have)
                + ")"
            )
        self._decode = [_curve(rows, "generation", name, "batch_size") for name in GDN_KERNELS["generation"]]
        self._prefill = [_curve(rows, "context", name, "seq_len") for name in GDN_KERNELS["context"]]

    def gemms_s(self, m: int) -> float:
        """One linear layer's projection GEMMs at m tokens."""
        return sum(curve(m) for curve in self.gemms)

    def decode_s(self, num_seqs: int) -> float:
        """All linear layers' conv update and recurrent step for ``num_seqs`` decoding requests."""
        return self.layers * sum(curve(float(num_seqs)) for curve in self._decode) if num_seqs else 0.0

    def chunk_s(self, q: int) -> float:
        """All linear layers' conv and chunked scan over a prefill chunk of ``q`` tokens."""
        return self.layers * sum(curve(float(q)) for curve in self._prefill)


def _gdn_table(source: KernelSource, warn: list[str]) -> pd.DataFrame:
    """The engine's ``gdn_perf`` table: its version's, else the newest measured, with a warning
    (SGLang's are measured for 0.5.14 only on most systems)."""
    versions = source.index.versions(source.system, "linear_attention", source.backend)
    if not versions:
        raise ProfileError(
            f"linear attention: no gdn_perf table for {source.system} / {source.backend} "
            "(aiconfigurator-core 0.12.0 measures SGLang, vLLM and TensorRT-LLM on some systems)"
        )
    chosen = source.version if source.version in versions else versions[-1]
    if source.version is not None and chosen != source.version:
        warn.append(f"linear attention: no {source.backend} {source.version} gdn_perf table; read {chosen}'s")
    path = source.index.folder(source.system, "linear_attention", source.backend, chosen) / "gdn_perf.parquet"
    return read_table(path)


def _curve(rows: pd.DataFrame, phase: str, kernel: str, size_column: str) -> Curve:
    """One kernel's latency (s) by ``size_column`` (context: one sequence of seq_len tokens)."""
    sub = rows[(rows["phase"] == phase) & (rows["kernel_source"] == kernel)].dropna(subset=["latency"])
    if phase == "context":
        sub = sub[sub["batch_size"] == 1]
    if sub.empty:
        raise ProfileError(f"linear attention: no {phase} {kernel} measurement for this shape")
    med = sub.groupby(size_column)["latency"].median()
    return Curve(med.index.to_numpy(float), med.to_numpy(float) * MS)
