"""Routed experts of one mixture-of-experts layer, run with torch, and the synthetic routing
that feeds them (the ``moe_perf`` table of `calibration.tables`).

What the engines' fused MoE kernels do, in torch ops (vLLM's ``fused_experts`` without its
quantisation): sort the (token, expert) pairs by expert, gather each pair's token, the
gate/up GEMM of every expert over its tokens, SiLU-and-multiply, the down GEMM, and the
weighted sum back to each token. The GEMMs are `torch._grouped_mm` (one launch for all
experts; CUDA compute capability 9.0+, and the CPU), else one `F.linear` per expert over
the routing's known slices (``torch.loop``). Router logits, shared experts and any
all-to-all are outside, as they are outside the tables' kernel.

Routing is synthetic, as in aiconfigurator's collector (collector/helper.py,
aiconfigurator-core 0.12.0's tables): a per-expert token count, then tokens assigned to
experts so that no token picks one expert twice.

- ``balanced``: every expert gets ``num_tokens x topk / num_experts`` pairs (the remainder
  one each to the first experts);
- ``power_law_<alpha>``: counts proportional to draws from a power law with exponent alpha
  between 1 and 0.8 x num_tokens (between 0.01 and 2 when there are fewer pairs than
  experts), rounded to integers that sum to ``num_tokens x topk``, none above
  ``num_tokens``. aiconfigurator's default workload is ``power_law_1.01``.

With expert parallelism (``moe_ep`` > 1) the GPU measured holds the ``num_experts /
moe_ep`` experts of the rank the routing loads most (the slowest rank sets the layer's
time), sees every token's routing and computes only its own pairs; with ``moe_tp`` > 1
each expert's width is ``inter_size / moe_tp``. Seeds are fixed: the same point routes
the same way on every run.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

#: Token-to-expert distributions measured (aiconfigurator's names).
DISTRIBUTIONS = ("balanced", "power_law_1.01", "power_law_1.2")
#: Largest relative difference from `reference_moe` accepted for bf16 (per output, in norm).
MOE_TOLERANCE = 2e-2


def _power_law_alpha(distribution: str) -> float:
    rule = f"distribution {distribution!r}: 'balanced' or 'power_law_<alpha>' with alpha > 0, not 1"
    if not distribution.startswith("power_law_"):
        raise ValueError(rule)
    try:
        alpha = float(distribution.removeprefix("power_law_"))
    except ValueError:
        raise ValueError(rule) from None
    if not np.isfinite(alpha) or alpha <= 0 or alpha == 1:
        raise ValueError(rule)
    return alpha


def expert_counts(
    num_tokens: int, num_experts: int, topk: int, distribution: str, rng: np.random.Generator
) -> np.ndarray:
    """(token, expert) pairs per expert: ``num_experts`` integers summing to ``num_tokens x
    topk``, each at most ``num_tokens`` (a token picks ``topk`` distinct experts)."""
    if num_tokens < 1 or num_experts < 1 or not 1 <= topk <= num_experts:
        raise ValueError(
            f"need num_tokens >= 1 and 1 <= topk <= num_experts, got {num_tokens}, {topk}, {num_experts}"
        )
    total = num_tokens * topk
    if distribution == "balanced":
        counts = np.full(num_experts, total // num_experts, dtype=np.int64)
        counts[: total % num_experts] += 1
        return counts
    alpha = _power_law_alpha(distribution)
    lo, hi = (1.0, 0.8 * num_tokens) if total > num_experts else (0.01, 2.0)
    hi = max(hi, lo * 1.0001)
    u = rng.random(num_experts)
    e = 1.0 - alpha
    draws = ((hi**e - lo**e) * u + lo**e) ** (1.0 / e)
    counts = np.minimum(np.round(draws / draws.sum() * total).astype(np.int64), num_tokens)
    # Settle the rounding (and the cap) one pair at a time: add to the least loaded experts
    # below the cap, take from the most loaded.
    while (delta := total - int(counts.sum())) != 0:
        if delta > 0:
            room = np.flatnonzero(counts < num_tokens)
            pick = room[np.argsort(counts[room], kind="stable")[:delta]]
            counts[pick] += 1
        else:
            pick = np.argsort(-counts, kind="stable")[: min(-delta, num_experts)]
            counts[pick] -= 1
    return counts


def assign(counts: np.ndarray, num_tokens: int, topk: int) -> np.ndarray:
    """Expert ids ``[num_tokens, topk]`` with each expert ``e`` appearing ``counts[e]`` times
    and never twice in one token's row: the pairs, most loaded expert first, fill the slots
    column by column (pair ``p`` is token ``p % num_tokens``'s slot ``p // num_tokens``)."""
    if int(counts.sum()) != num_tokens * topk or counts.max(initial=0) > num_tokens:
        raise ValueError("counts must sum to num_tokens x topk, none above num_tokens")
    order = np.argsort(-counts, kind="stable")
    flat = np.repeat(order, counts[order])
    return flat.reshape(topk, num_tokens).T.copy()


def slowest_rank(counts: np.ndarray, moe_ep: int) -> int:
    """The expert-parallel rank holding the most pairs (experts split in contiguous blocks)."""
    if moe_ep < 1 or len(counts) % moe_ep:
        raise ValueError(f"{len(counts)} experts do not split over moe_ep {moe_ep}")
    return int(np.argmax(counts.reshape(moe_ep, -1).sum(axis=1)))


def routing(
    num_tokens: int,
    num_experts: int,
    topk: int,
    distribution: str,
    *,
    moe_ep: int = 1,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, int]:
    """``(expert ids [T, topk], weights [T, topk], first local expert)`` of one point: the
    measured GPU holds experts ``first .. first + num_experts / moe_ep - 1``."""
    rng = np.random.default_rng([seed, num_tokens, num_experts, topk, moe_ep])
    counts = expert_counts(num_tokens, num_experts, topk, distribution, rng)
    ids = assign(counts, num_tokens, topk)
    weights = rng.random(ids.shape)
    weights /= weights.sum(axis=1, keepdims=True)
    first = slowest_rank(counts, moe_ep) * (num_experts // moe_ep)
    return ids, weights, first


class TorchMoE:
    """One GPU's routed experts: ``w13 [E, 2 x width, hidden]`` (gate rows, then up rows) and
    ``w2 [E, hidden, width]``, stored as vLLM stores them."""

    def __init__(self, w13: torch.Tensor, w2: torch.Tensor, grouped: bool) -> None:
        self.w13, self.w2, self.grouped = w13, w2, grouped
        self.num_local, self.width = w13.shape[0], w13.shape[1] // 2

    @property
    def kernel_source(self) -> str:
        return "torch._grouped_mm" if self.grouped else "torch.loop"

    def prepare(
        self, ids: np.ndarray, weights: np.ndarray, first: int, device: torch.device
    ) -> Callable[[torch.Tensor], torch.Tensor]:
        """The timed call for one routing: ``fn(x [T, hidden]) -> [T, hidden]``. Pairs routed to
        experts this GPU does not hold contribute nothing."""
        topk = ids.shape[1]
        local = ids.reshape(-1) - first
        outside = (local < 0) | (local >= self.num_local)
        local = np.where(outside, self.num_local, local)  # sorts after every local expert
        ids_t = torch.as_tensor(local, dtype=torch.int64, device=device)
        w_t = torch.as_tensor(weights.reshape(-1), dtype=torch.float32, device=device)
        e = self.num_local
        if self.grouped:
            ones = torch.ones_like(ids_t, dtype=torch.int32)

            def grouped(x: torch.Tensor) -> torch.Tensor:
                order = torch.argsort(ids_t, stable=True)
                counts = torch.zeros(e + 1, dtype=torch.int32, device=x.device).scatter_add_(0, ids_t, ones)
                offs = torch.cumsum(counts[:e], 0, dtype=torch.int32)
                token = torch.div(order, topk, rounding_mode="floor")
                h = torch._grouped_mm(x.index_select(0, token), self.w13.transpose(1, 2), offs=offs)
                a = F.silu(h[:, : self.width]) * h[:, self.width :]
                y = torch._grouped_mm(a, self.w2.transpose(1, 2), offs=offs)
                mine = (ids_t.index_select(0, order) < e).unsqueeze(1)
                y = torch.where(mine, y * w_t.index_select(0, order).unsqueeze(1).to(y.dtype), 0)
                return torch.zeros_like(x).index_add_(0, token, y)

            return grouped
        # One GEMM pair per expert over the slices the (known) routing gives it.
        order_np = np.argsort(local, kind="stable")
        bounds = np.searchsorted(local[order_np], np.arange(e + 1))
        order = torch.as_tensor(order_np, dtype=torch.int64, device=device)
        token = torch.div(order, topk, rounding_mode="floor")
        scale = w_t.index_select(0, order).unsqueeze(1)
        slices = [(i, int(bounds[i]), int(bounds[i + 1])) for i in range(e) if bounds[i + 1] > bounds[i]]
        end = int(bounds[e])

        def loop(x: torch.Tensor) -> torch.Tensor:
            xs = x.index_select(0, token[:end])
            y = torch.empty_like(xs)
            for i, lo, hi in slices:
                h = F.linear(xs[lo:hi], self.w13[i])
                y[lo:hi] = F.linear(F.silu(h[:, : self.width]) * h[:, self.width :], self.w2[i])
            y = y * scale[:end].to(y.dtype)
            return torch.zeros_like(x).index_add_(0, token[:end], y)

        return loop


def reference_moe(
    x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, ids: np.ndarray, weights: np.ndarray, first: int
) -> torch.Tensor:
    """Token by token, in float32: what `TorchMoE` must compute (tests and the harness's check)."""
    width = w13.shape[1] // 2
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for t in range(ids.shape[0]):
        for j in range(ids.shape[1]):
            i = int(ids[t, j]) - first
            if 0 <= i < w13.shape[0]:
                h = w13[i].float() @ x[t].float()
                out[t] += float(weights[t, j]) * (w2[i].float() @ (F.silu(h[:width]) * h[width:]))
    return out


__all__ = [
    "DISTRIBUTIONS",
    "MOE_TOLERANCE",
    "TorchMoE",
    "assign",
    "expert_counts",
    "reference_moe",
    "routing",
    "slowest_rank",
]
