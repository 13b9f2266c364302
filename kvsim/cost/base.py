"""The cost-model protocol: how long one engine iteration takes.

An iteration is summarised by what it computes:

    prefill_chunks   [(new_tokens, context_tokens_before), ...]   one per prefilling request
    num_decode_seqs  requests decoding one token each
    num_verify_chunks  speculative decoding: the last chunks are verify passes (1 + k tokens)
    decode_context_tokens  sum over those requests of the tokens each attends to
                           (its cached context plus the new token)

Implementations: `RooflineCostModel` (datasheet figures), `ConstantCostModel` (tests),
and the calibrated model built from a measured profile.

`decode_steps_s` prices a run of pure-decode iterations at once (the engine's
fast-forward). It must return, element by element, exactly what `step_time_s` returns
for the same iterations (same float operations in the same order), so that
fast-forwarded and step-by-step simulations agree bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass(slots=True)
class Batch:
    """Composition of one engine iteration, as the cost model sees it."""

    prefill_chunks: list[tuple[int, int]] = field(default_factory=list)
    num_decode_seqs: int = 0
    decode_context_tokens: int = 0
    #: Speculative decoding: the last ``num_verify_chunks`` prefill chunks are verify passes,
    #: (1 + draft tokens, context) each, priced as chunks (`kvsim.cost.speculative`).
    num_verify_chunks: int = 0
    #: Attention data parallelism in lockstep (`kvsim.engine.lockstep`): the tokens the MoE
    #: layers of this step run on, gathered from every rank of the instance. None: every rank
    #: as this one (its own tokens x attention_dp), as ranks stepping alike are.
    moe_tokens: int | None = None

    @property
    def num_prefill_tokens(self) -> int:
        return sum(q for q, _ in self.prefill_chunks)

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_seqs


@runtime_checkable
class CostModel(Protocol):
    """Predicts the duration of engine iterations on one replica."""

    def step_time_s(self, batch: Batch) -> float:
        """Duration of one iteration, seconds."""
        ...

    def decode_steps_s(self, num_seqs: int, context_tokens: np.ndarray) -> np.ndarray:
        """Durations of consecutive pure-decode iterations of ``num_seqs`` requests.

        ``context_tokens[i]`` is the iteration's ``decode_context_tokens``. Element i must
        equal ``step_time_s(Batch(num_decode_seqs=num_seqs, decode_context_tokens=context_tokens[i]))``.
        """
        ...

    def pcie_transfer_s(self, num_bytes: float) -> float:
        """Time to copy ``num_bytes`` between host and one GPU (swap, CPU offload), seconds."""
        ...


class ConstantCostModel:
    """Every iteration takes the same time."""

    def __init__(self, step_time_s: float, pcie_bandwidth_bytes_per_s: float = float("inf")) -> None:
        if step_time_s <= 0:
            raise ValueError('"step_time_s" must be > 0')
        if pcie_bandwidth_bytes_per_s <= 0:
            raise ValueError('"pcie_bandwidth_bytes_per_s" must be > 0')
        self._step = float(step_time_s)
        self._pcie_bw = float(pcie_bandwidth_bytes_per_s)

    def step_time_s(self, batch: Batch) -> float:
        return self._step

    def pcie_transfer_s(self, num_bytes: float) -> float:
        return num_bytes / self._pcie_bw

    def decode_steps_s(self, num_seqs: int, context_tokens: np.ndarray) -> np.ndarray:
        return np.full(len(context_tokens), self._step)
