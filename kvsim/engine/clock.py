"""Ordering within one simulated instant.

    EARLY (cluster ticks: load snapshots, autoscaling, replicas becoming ready)
      < NORMAL (arrivals, transfers, SimPy's own timeouts)
      < LATE (iteration boundaries and wake-ups)

An iteration boundary at time t must come after every ordinary event of t, so that a
request arriving exactly at a boundary joins the iteration starting there (and, at a
wake-up, all of the instant's arrivals are in before the first decision). SimPy orders
events of one instant by priority, then by insertion; its `Timeout` always has NORMAL
priority and it has no public way to give an event another one, so `LateTimeout` does
what `simpy.Timeout.__init__` does with the `LATE` priority. It is the only place kvsim
touches SimPy's event internals.
"""

from __future__ import annotations

import simpy
from simpy.events import NORMAL, URGENT, EventPriority

#: Event priority of iteration boundaries and wake-ups: after NORMAL events at the same time.
LATE = EventPriority(NORMAL + 1)
#: Event priority of the cluster's periodic observations and decisions: before anything else
#: of their instant, so that what they see never depends on how many events fast-forward
#: saved (SimPy breaks ties by creation order).
EARLY = URGENT


class LateTimeout(simpy.Event):
    """A timeout of ``delay`` seconds processed after all NORMAL events of its instant."""

    priority = LATE

    def __init__(self, env: simpy.Environment, delay: float) -> None:
        if delay < 0:
            raise ValueError(f"negative delay {delay}")
        super().__init__(env)
        self._ok = True  # its outcome is set at creation, as simpy.Timeout's is
        self._value = None
        env.schedule(self, self.priority, delay)


class EarlyTimeout(LateTimeout):
    """A timeout of ``delay`` seconds processed before every NORMAL event of its instant."""

    priority = EARLY
