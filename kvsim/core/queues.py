"""Waiting queues, one class per scheduling policy, each with its choice of victim.

A queue orders the requests waiting for admission (new ones, and running ones preempted
for recompute, which go back in front under FCFS) and, when a running request cannot get
blocks, says which running request to preempt:

    fcfs      arrival order; preempt the last admitted       (vLLM: FCFSRequestQueue)
    priority  (priority, arrival); preempt the lowest priority,
              latest arrival among equals                     (vLLM: PriorityRequestQueue)

Adding a policy is one class registered in `kvsim.registry.SCHEDULING_POLICIES`; the
scenario's ``engine.scheduling_policy`` names it.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator
from typing import Protocol

from kvsim.core.request_state import Request
from kvsim.registry import SCHEDULING_POLICIES


class RequestQueue(Protocol):
    """The waiting queue of one replica.

    A queue may set ``arrivals_queue_behind = True`` when a request pushed now never goes
    ahead of one already waiting (FCFS): while the head cannot be admitted, neither can a
    new arrival, so the engine lets arrivals ride along a decode run instead of ending it.
    """

    def __len__(self) -> int: ...

    def push(self, req: Request) -> None:
        """Queue a request at its place (new arrival, hand-off)."""
        ...

    def push_preempted(self, req: Request) -> None:
        """Queue a request preempted for recompute."""
        ...

    def peek(self) -> Request | None:
        """The request admission tries next, or None."""
        ...

    def pop(self) -> Request:
        """Remove and return the request `peek` returns."""
        ...

    def victim_index(self, running: list[Request]) -> int:
        """Index in ``running`` (non-empty) of the request to preempt."""
        ...

    def __iter__(self) -> Iterator[Request]:
        """The waiting requests in admission order (for inspection, not the hot path)."""
        ...


@SCHEDULING_POLICIES.register("fcfs")
class FcfsQueue:
    """First come, first served: preempted requests go back in front."""

    __slots__ = ("_fifo",)
    arrivals_queue_behind = True

    def __init__(self) -> None:
        self._fifo: deque[Request] = deque()

    def __len__(self) -> int:
        return len(self._fifo)

    def push(self, req: Request) -> None:
        self._fifo.append(req)

    def push_preempted(self, req: Request) -> None:
        self._fifo.appendleft(req)

    def peek(self) -> Request | None:
        return self._fifo[0] if self._fifo else None

    def pop(self) -> Request:
        return self._fifo.popleft()

    def victim_index(self, running: list[Request]) -> int:
        return len(running) - 1

    def __iter__(self) -> Iterator[Request]:
        return iter(self._fifo)


@SCHEDULING_POLICIES.register("priority")
class PriorityQueue:
    """Lowest ``priority`` first, then earliest arrival, then insertion order."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Request]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, req: Request) -> None:
        heapq.heappush(self._heap, (req.spec.priority, req.arrival_s, next(self._seq), req))

    def push_preempted(self, req: Request) -> None:
        self.push(req)  # its priority and arrival decide, as for everyone

    def peek(self) -> Request | None:
        return self._heap[0][3] if self._heap else None

    def pop(self) -> Request:
        return heapq.heappop(self._heap)[3]

    def victim_index(self, running: list[Request]) -> int:
        worst = max(running, key=lambda r: (r.spec.priority, r.arrival_s))
        return running.index(worst)

    def __iter__(self) -> Iterator[Request]:
        return iter(entry[3] for entry in sorted(self._heap, key=lambda e: e[:3]))
