"""Routers: which replica an arriving request goes to."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kvsim.config import RouterConfig
from kvsim.core.request_state import Request
from kvsim.engine.replica import Replica


class Router(Protocol):
    def route(self, req: Request) -> Replica: ...


class RoundRobinRouter:
    """Replicas in turn, in declaration order."""

    def __init__(self, replicas: Sequence[Replica]) -> None:
        self.replicas = list(replicas)
        self._next = 0

    def route(self, req: Request) -> Replica:
        r = self.replicas[self._next]
        self._next = (self._next + 1) % len(self.replicas)
        return r


class LeastLoadedRouter:
    """Fewest unfinished requests; ties go to the lowest index."""

    def __init__(self, replicas: Sequence[Replica]) -> None:
        self.replicas = list(replicas)

    def route(self, req: Request) -> Replica:
        return min(self.replicas, key=lambda r: r.num_outstanding)


def make_router(config: RouterConfig, replicas: Sequence[Replica]) -> Router:
    if config.kind == "round_robin":
        return RoundRobinRouter(replicas)
    if config.kind == "least_loaded":
        return LeastLoadedRouter(replicas)
    raise ValueError(f"unknown router kind {config.kind!r}")
