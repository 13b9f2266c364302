"""Routers: which replica an arriving request goes to.

A router is a class with ``route(req, view) -> ReplicaView``; it sees the cluster only
through `kvsim.engine.view` (load, KV usage, cached prefix length) and keeps whatever
state it needs itself. Built-ins register in `kvsim.registry.ROUTERS` under the names
``router.kind`` takes; a user's router is one more class registered the same way, or an
instance passed to ``kvsim.run(..., router=...)``.
"""

from __future__ import annotations

from typing import Protocol

from kvsim.engine.view import ClusterView, ReplicaView, Request
from kvsim.registry import ROUTERS
from kvsim.scenario.schema import RouterConfig


class Router(Protocol):
    def route(self, req: Request, view: ClusterView) -> ReplicaView:
        """The replica ``req`` goes to, among ``view.replicas``."""
        ...


@ROUTERS.register("round_robin")
class RoundRobinRouter:
    """Replicas in turn, in declaration order."""

    def __init__(self, config: RouterConfig | None = None) -> None:
        self._next = 0

    def route(self, req: Request, view: ClusterView) -> ReplicaView:
        replicas = view.replicas
        r = replicas[self._next % len(replicas)]
        self._next = (self._next + 1) % len(replicas)
        return r


@ROUTERS.register("least_loaded")
class LeastLoadedRouter:
    """Fewest unfinished requests; ties go to the lowest index."""

    def __init__(self, config: RouterConfig | None = None) -> None:
        pass

    def route(self, req: Request, view: ClusterView) -> ReplicaView:
        return min(view.replicas, key=lambda r: r.num_outstanding)


@ROUTERS.register("prefix_aware")
class PrefixAwareRouter:
    """Cache hits weighed against load, after the vLLM production stack's load-aware routing.

    Each replica scores ``cached / prompt - load_weight * (load - mean) / max(1, mean)``,
    where ``cached`` is the longest prefix of the request found in the replica's prefix
    cache (tokens, whole blocks, at most all but the last token, as the engine would hit)
    and ``load`` its unfinished requests. Highest score wins; ties go to the lowest index.
    Source: vLLM production-stack docs, "Load Aware Routing" (score formula).
    """

    def __init__(self, config: RouterConfig | None = None) -> None:
        self.load_weight = (config or RouterConfig()).load_weight

    def route(self, req: Request, view: ClusterView) -> ReplicaView:
        replicas = view.replicas
        loads = [r.num_outstanding for r in replicas]
        mean = sum(loads) / len(loads)
        scale = max(1.0, mean)
        best, best_score = replicas[0], -float("inf")
        for replica, load in zip(replicas, loads, strict=True):
            score = (
                replica.cached_prefix_tokens(req) / req.num_tokens - self.load_weight * (load - mean) / scale
            )
            if score > best_score:
                best, best_score = replica, score
        return best


def make_router(config: RouterConfig) -> Router:
    """The registered router ``config.kind`` names, built from ``config``."""
    router: Router = ROUTERS[config.kind](config)
    return router
