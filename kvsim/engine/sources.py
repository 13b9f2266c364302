"""Where a cluster's requests come from, and when each is sent.

A `RequestSource` is asked twice: once at the start, for the requests sent at times known
in advance, and whenever a request is done (finished or rejected), for the requests that
completion lets go. The cluster sends each `Release` at its time (one SimPy timeout per
request released later, never one per token) and reports every completion back:

    source.start() ──> [Release(spec, at_s)] ──> cluster sends each at at_s ──> replica
    replica: finished / rejected ──> source.on_done(req, now) ──> [Release, ...] ──┘

Two sources:

- `ConversationSource` (every workload but ``bench_serve``): each request at its own
  ``arrival_s``; a follow-up turn ``think_time_s`` after its parent finishes, and never
  when its parent was rejected (``dropped``: ``parent_rejected``).
- `BenchClientSource` (``bench_serve``): a benchmark client's closed loop. The first
  ``max_concurrency`` requests go at once; each completion sends the next request in order,
  when it is ready (``ready_s``: a finite request rate paces them). The ready check, the
  warm-ups and the measured run follow one another, each waiting for the last completion of
  the one before, as ``vllm bench serve`` does (vLLM 0.32.0, ``benchmarks/serve.py``,
  ``benchmark``: an ``asyncio.Semaphore(max_concurrency)`` around each request, tasks
  created in dataset order; the warm-ups ``gather``-ed before the measured run starts).

A request released at the instant another finishes reaches its replica after that
replica's scheduling decision at that instant: a busy replica admits it at its next
iteration boundary, an idle one at once (the client's response-to-request turnaround).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kvsim.core.request_state import Request, Status
from kvsim.request import RequestSpec
from kvsim.workload.bench_serve import BenchClient


@dataclass(frozen=True, slots=True)
class Release:
    """A request a source lets go: sent at ``at_s`` (not before now), or never (``dropped``:
    why it is rejected unsent). ``ready_s``: when a client had it ready to send, if a client
    held it back (its wait for a free slot is ``at_s - ready_s``); NaN otherwise."""

    spec: RequestSpec
    at_s: float = math.nan
    ready_s: float = math.nan
    dropped: str = ""


class RequestSource(Protocol):
    """What feeds a cluster: requests sent at fixed times, and requests released by others."""

    def start(self) -> Iterable[Release]:
        """The requests sent at times known at the start, in order of ``at_s``."""
        ...

    def on_done(self, req: Request, now: float) -> Sequence[Release]:
        """The requests that ``req`` finishing or being rejected (at ``now``) lets go."""
        ...


class ConversationSource:
    """Requests at their arrival times; follow-up turns think time after their parent finishes."""

    def __init__(self, specs: Iterable[RequestSpec]) -> None:
        self._children: dict[int, list[RequestSpec]] = defaultdict(list)
        self._roots: list[RequestSpec] = []
        for spec in specs:
            (self._children[spec.parent_id] if spec.parent_id is not None else self._roots).append(spec)

    def start(self) -> list[Release]:
        roots = sorted(self._roots, key=lambda s: (s.arrival_s, s.request_id))
        return [Release(spec, spec.arrival_s) for spec in roots]

    def on_done(self, req: Request, now: float) -> list[Release]:
        out: list[Release] = []
        for child in self._children.pop(req.request_id, ()):
            if req.status is Status.FINISHED:
                out.append(Release(child, req.metrics.finish_s + child.think_time_s))
            elif req.status is Status.REJECTED:
                # The conversation ends here: its next turns are never sent.
                out.append(Release(child, dropped="parent_rejected"))
        return out


@dataclass
class _Phase:
    """One part of a client's run: requests sent in order, at most ``limit`` in flight."""

    ids: tuple[int, ...]
    offsets_s: tuple[float, ...] | None  # ready times after the phase's start (None: all at once)
    limit: int
    start_s: float = 0.0
    num_sent: int = 0
    num_done: int = 0


class BenchClientSource:
    """``vllm bench serve``'s client: a ready check, warm-ups and the measured run, each a
    closed loop of at most ``max_concurrency`` requests in flight.

    ``measured_start_s`` is when the measured run began (vLLM's ``benchmark_start_time``:
    the last warm-up's finish, 0 without warm-ups); NaN until then.
    """

    def __init__(self, specs: Iterable[RequestSpec], client: BenchClient) -> None:
        self.specs = {spec.request_id: spec for spec in specs}
        self.client = client
        n = len(self.specs)
        limit = client.max_concurrency or n
        phases = []
        if client.ready_check is not None:
            phases.append(_Phase((client.ready_check,), None, 1))
        if client.warmups:
            phases.append(_Phase(client.warmups, None, limit))
        phases.append(_Phase(client.measured, client.ready_offsets_s, limit))
        self._phases = phases
        self._current = 0
        self.measured_start_s = math.nan

    def start(self) -> list[Release]:
        return self._begin(0, 0.0)

    def on_done(self, req: Request, now: float) -> list[Release]:
        phase = self._phases[self._current]
        phase.num_done += 1
        # A finished request frees its slot at the exact end of its last iteration.
        t = req.metrics.finish_s if req.status is Status.FINISHED else now
        if phase.num_done == len(phase.ids):
            if self._current + 1 == len(self._phases):
                return []
            return self._begin(self._current + 1, t)
        if phase.num_sent < len(phase.ids):
            return [self._send_next(phase, t)]
        return []

    def _begin(self, index: int, t: float) -> list[Release]:
        self._current = index
        phase = self._phases[index]
        phase.start_s = t
        if index == len(self._phases) - 1:
            self.measured_start_s = t
        first_wave = min(phase.limit, len(phase.ids))
        return [self._send_next(phase, t) for _ in range(first_wave)]

    def _send_next(self, phase: _Phase, t: float) -> Release:
        """The next request of ``phase``, sent when a slot is free (``t``) and it is ready."""
        i = phase.num_sent
        phase.num_sent += 1
        spec = self.specs[phase.ids[i]]
        if phase.offsets_s is None:
            return Release(spec, t, t)
        ready = phase.start_s + phase.offsets_s[i]
        return Release(spec, max(t, ready), ready)


__all__ = ["BenchClientSource", "ConversationSource", "Release", "RequestSource"]
