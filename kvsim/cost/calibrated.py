"""Calibrated cost model: iteration times from kernel curves measured by ``kvsim calibrate``.

An iteration of T tokens from S sequences (decoding requests plus prefill chunks) on a
model of L layers takes

    L * dense(T)                      QKV + O + gate/up + down GEMMs + elementwise, per layer
    + lm_head(S)                      logits for one row per sequence
    + sum over chunks L * prefill(q, c)
    + L * decode(n, context / n)      n decoding requests at their mean context
    + 2 L * allreduce(T * h * 2 bytes)    when tp > 1 (measured curve, else the GPU's
                                          interconnect latency + ring bandwidth)
    + per_iteration_overhead_s        CPU: scheduling, sampling, input preparation

Curves are interpolated piecewise-linearly on the measured grid after being made
monotone (running maximum along every axis, so more work never costs less). Below the
grid the first point is used (launch-bound); beyond it the value at the grid edge is
scaled by the work ratio: tokens for the dense and LM-head curves, attended pairs
q*c + q(q+1)/2 for prefill attention, batch x context for decode attention.

Tables are built once at construction; a prediction is a few bisections and
multiplications in plain Python (`step_time_s`) or numpy (`decode_steps_s`), which run
the same float operations in the same order so that they agree bit for bit.
"""

from __future__ import annotations

from bisect import bisect_right

import numpy as np

from kvsim.cost.base import Batch
from kvsim.cost.profile import GEMM_OPS, Profile
from kvsim.model.specs import GpuSpec, ModelSpec


class Curve1D:
    """Monotone piecewise-linear curve y(x) with proportional extrapolation beyond the grid."""

    def __init__(self, xs: list[float] | np.ndarray, ys: list[float] | np.ndarray) -> None:
        x = np.asarray(xs, dtype=np.float64)
        y = np.maximum.accumulate(np.asarray(ys, dtype=np.float64))
        if x.ndim != 1 or x.shape != y.shape or len(x) == 0:
            raise ValueError("a curve needs as many x as y values, at least one")
        if np.any(np.diff(x) <= 0):
            raise ValueError("curve x values must be strictly increasing")
        self.x, self.y = x, y
        self._xl: list[float] = x.tolist()
        self._yl: list[float] = y.tolist()

    def __call__(self, x: float) -> float:
        xs, ys = self._xl, self._yl
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            return ys[-1] * (x / xs[-1])
        i = bisect_right(xs, x)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * ((x - x0) / (x1 - x0))


class Table2D:
    """Monotone bilinear table z(x, y) with work-proportional extrapolation beyond the grid.

    ``work(x, y)`` is the amount of work at a point; outside the grid the value at the
    clamped point is multiplied by ``work(x, y) / work(clamped)``.
    """

    def __init__(self, xs: list[float], ys: list[float], z: list[list[float]], kind: str) -> None:
        zz = np.asarray(z, dtype=np.float64)
        zz = np.maximum.accumulate(np.maximum.accumulate(zz, axis=0), axis=1)
        self.x, self.y, self.z = np.asarray(xs, np.float64), np.asarray(ys, np.float64), zz
        if zz.shape != (len(xs), len(ys)):
            raise ValueError("table shape does not match its grids")
        if kind not in ("prefill", "decode"):
            raise ValueError(f"unknown table kind {kind!r}")
        self.kind = kind
        self._xl: list[float] = self.x.tolist()
        self._yl: list[float] = self.y.tolist()
        self._zl: list[list[float]] = zz.tolist()

    def _work(self, x: float, y: float) -> float:
        if self.kind == "prefill":
            return x * y + x * (x + 1.0) / 2.0
        return x * y

    def _x_weights(self, x: float) -> tuple[int, int, float, float]:
        """Row indices, weight and clamped value along x (scalar; shared by both paths)."""
        xs = self._xl
        xc = min(max(x, xs[0]), xs[-1])
        if len(xs) == 1:
            return 0, 0, 0.0, xc
        i = min(max(bisect_right(xs, xc), 1), len(xs) - 1)
        return i - 1, i, (xc - xs[i - 1]) / (xs[i] - xs[i - 1]), xc

    def __call__(self, x: float, y: float) -> float:
        i0, i1, wx, xc = self._x_weights(x)
        ys, zl = self._yl, self._zl
        yc = min(max(y, ys[0]), ys[-1])
        if len(ys) == 1:
            j0 = j1 = 0
            wy = 0.0
        else:
            j = min(max(bisect_right(ys, yc), 1), len(ys) - 1)
            j0, j1 = j - 1, j
            wy = (yc - ys[j0]) / (ys[j1] - ys[j0])
        r0 = zl[i0][j0] + (zl[i0][j1] - zl[i0][j0]) * wy
        r1 = zl[i1][j0] + (zl[i1][j1] - zl[i1][j0]) * wy
        v = r0 + (r1 - r0) * wx
        if x > xc or y > yc:
            v = v * (self._work(x, y) / self._work(xc, yc))
        return v

    def at_x(self, x: float, y: np.ndarray) -> np.ndarray:
        """Vectorised ``[self(x, yi) for yi in y]`` with the same float operations."""
        i0, i1, wx, xc = self._x_weights(x)
        ys, z = self.y, self.z
        yc = np.clip(y, ys[0], ys[-1])
        if len(ys) == 1:
            j0 = j1 = np.zeros(len(y), dtype=np.intp)
            wy = np.zeros(len(y))
        else:
            j = np.clip(np.searchsorted(ys, yc, side="right"), 1, len(ys) - 1)
            j0, j1 = j - 1, j
            wy = (yc - ys[j0]) / (ys[j1] - ys[j0])
        r0 = z[i0, j0] + (z[i0, j1] - z[i0, j0]) * wy
        r1 = z[i1, j0] + (z[i1, j1] - z[i1, j0]) * wy
        v = r0 + (r1 - r0) * wx
        out = (y > yc) | (x > xc)
        if out.any():
            v = np.where(out, v * (self._work_array(x, y) / self._work_array(xc, yc)), v)
        result: np.ndarray = v
        return result

    def _work_array(self, x: float, y: np.ndarray) -> np.ndarray:
        if self.kind == "prefill":
            return x * y + x * (x + 1.0) / 2.0
        return x * y


class CalibratedCostModel:
    """Iteration time from a kernels profile (see the module docstring for the formula)."""

    def __init__(
        self,
        profile: Profile,
        *,
        model: ModelSpec,
        gpu: GpuSpec,
        tp: int,
        kv_cache_dtype: str = "auto",
        per_iteration_overhead_s: float | None = None,
    ) -> None:
        if profile.kind != "kernels":
            raise ValueError(
                f"{profile.source}: a calibrated model needs a 'kernels' profile, not {profile.kind!r}"
            )
        if model.num_linear_attention_layers:
            raise ValueError(
                f"unsupported: a calibrated profile measures full-attention layers; {model.name}'s "
                f"{model.num_linear_attention_layers} linear-attention layers need cost_model kind kernels or roofline"
            )
        data = profile.data
        self.profile, self.model, self.gpu, self.tp = profile, model, gpu, tp
        self.num_layers = model.num_layers
        gemm = data["gemm"]
        dense = np.zeros(len(gemm["tokens"]))
        for op in GEMM_OPS:
            if op != "lm_head":
                dense += np.asarray(gemm["time_s"][op], dtype=np.float64)
        ew = data["elementwise"]
        if ew["tokens"] != gemm["tokens"]:
            raise ValueError(f"{profile.source}: elementwise.tokens must equal gemm.tokens")
        dense += np.asarray(ew["time_s"], dtype=np.float64)
        self.dense = Curve1D(gemm["tokens"], dense)
        self.lm_head = Curve1D(gemm["tokens"], gemm["time_s"]["lm_head"])
        pf = data["prefill_attention"]
        self.prefill = Table2D(pf["chunk_tokens"], pf["context_tokens"], pf["time_s"], "prefill")
        kv = model.weight_dtype if kv_cache_dtype == "auto" else kv_cache_dtype
        dec = data["decode_attention"][kv]
        self.decode = Table2D(dec["batch_sizes"], dec["context_tokens"], dec["time_s"], "decode")
        self.per_iteration_overhead_s = (
            per_iteration_overhead_s
            if per_iteration_overhead_s is not None
            else float(data["per_iteration_overhead_s"])
        )
        # All-reduce of one layer's activations: measured curve over message bytes, else
        # the GPU's interconnect latency plus ring bandwidth (2 (tp-1)/tp bytes per GPU).
        self._ar_bytes_per_token = model.hidden_size * 2.0
        ar = data["allreduce"]
        self.allreduce: Curve1D | None = None
        if tp > 1 and ar["status"] == "measured":
            self.allreduce = Curve1D(ar["bytes"], ar["time_s"])
        self._ar_lat = gpu.interconnect_latency_s
        self._ar_s_per_byte = 2.0 * (tp - 1) / tp / gpu.interconnect_bandwidth_bytes_per_s
        host = data["host_transfer"]
        self._pcie_bw = (
            float(host["bandwidth_bytes_per_s"])
            if host["status"] == "measured"
            else gpu.pcie_bandwidth_bytes_per_s
        )

    def _allreduce_s(self, n_tokens: int) -> float:
        if self.tp == 1:
            return 0.0
        nbytes = self._ar_bytes_per_token * n_tokens
        one = (
            self.allreduce(nbytes)
            if self.allreduce is not None
            else self._ar_lat + self._ar_s_per_byte * nbytes
        )
        return 2 * self.num_layers * one

    def _base_s(self, n_tokens: int, n_seqs: int) -> float:
        t = self.num_layers * self.dense(n_tokens)
        t += self.lm_head(n_seqs)
        return t

    # Hot path: called once per engine iteration; plain float arithmetic, no numpy.
    def step_time_s(self, batch: Batch) -> float:
        n_dec = batch.num_decode_seqs
        n_tokens = n_dec + batch.num_prefill_tokens
        if n_tokens == 0:
            return 0.0
        t = self._base_s(n_tokens, n_dec + len(batch.prefill_chunks))
        for q, c in batch.prefill_chunks:
            t += self.num_layers * self.prefill(q, c)
        if n_dec:
            t += self.num_layers * self.decode(n_dec, batch.decode_context_tokens / n_dec)
        t += self._allreduce_s(n_tokens)
        t += self.per_iteration_overhead_s
        return t

    def decode_steps_s(self, num_seqs: int, context_tokens: np.ndarray) -> np.ndarray:
        # Same operations, in the same order, as step_time_s for a pure-decode batch.
        ctx = np.asarray(context_tokens, dtype=np.float64)
        if num_seqs == 0:
            return np.zeros(len(ctx))
        t = self._base_s(num_seqs, num_seqs) + self.num_layers * self.decode.at_x(num_seqs, ctx / num_seqs)
        t = t + self._allreduce_s(num_seqs)
        return t + self.per_iteration_overhead_s

    def pcie_transfer_s(self, num_bytes: float) -> float:
        return num_bytes / self._pcie_bw
