"""The reference the bit-exact comparisons run against: kvsim's engine with its speed
strategies off, every iteration stepped and every running request walked.

`kvsim.engine.replica_engine.ReplicaEngine` executes where it can with the decode cohort
(plain decoders advanced lazily, `kvsim.core.cohort`) and fast-forwarded decode runs
(`kvsim.core.decode_run`); neither may change a result. `EagerEngine` is the same engine
without either, so the scheduler's step-by-step phase 1 decides every iteration for every
request: what vLLM's scheduler does. Tests compare ``kvsim.run(scenario)`` with
``run_eager(scenario)`` table by table, bit for bit.
"""

from __future__ import annotations

from typing import Any

import kvsim
from kvsim.core.scheduler import Scheduler
from kvsim.engine.replica_engine import ReplicaEngine


class EagerEngine(ReplicaEngine):
    """A replica engine that steps every iteration over every running request."""

    def use_speed_strategies(self, scheduler: Scheduler, fast_forward: bool) -> None:
        self.fast_forward = False  # and no decode cohort


def run_eager(scenario: Any = None, **kwargs: Any) -> kvsim.Result:
    """`kvsim.run` on the oracle engine (same arguments)."""
    return kvsim.run(scenario, engine=EagerEngine, **kwargs)
