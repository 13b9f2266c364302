"""Autoscaling: how many replicas of a group to run, decided from a load metric.

    every interval_s:  metric (mean over the replicas taking requests)
        > scale_up_above                         and provisioned < max_count  -> start one
        < scale_down_below for scale_down_delay_s and taking    > min_count  -> drain one

A started replica is paid for from the decision and takes requests ``cold_start_s`` later
(model loading); a drained one takes no new requests and leaves when its last one is done.
One step per decision, as Ray Serve's and llm-d's threshold autoscalers move; a scale-down
waits while a replica is still starting. The policy is a plain object (`ThresholdPolicy`);
`kvsim.engine.cluster` runs it and keeps the replica-seconds (GPU-hours) it costs.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.scenario.schema import AutoscaleConfig


@dataclass
class ThresholdPolicy:
    """The decision of one autoscaled group; `decide` is called every ``interval_s``."""

    config: AutoscaleConfig
    below_since: float | None = None  # when the metric last went below scale_down_below

    def decide(self, now: float, metric: float, num_taking: int, num_starting: int) -> int:
        """+1: start a replica; -1: drain one; 0: nothing."""
        cfg = self.config
        if metric > cfg.scale_up_above:
            self.below_since = None
            return 1 if num_taking + num_starting < cfg.max_count else 0
        if metric >= cfg.scale_down_below:
            self.below_since = None
            return 0
        if self.below_since is None:
            self.below_since = now
        if num_starting or num_taking <= cfg.min_count or now - self.below_since < cfg.scale_down_delay_s:
            return 0
        self.below_since = now  # the next step down waits a whole delay again
        return -1
