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


class PrefixAwareRouter:
    """Cache hits weighed against load, after the vLLM production stack's load-aware routing.

    Each replica scores ``cached / prompt - load_weight * (load - mean) / max(1, mean)``,
    where ``cached`` is the longest prefix of the request found in the replica's prefix
    cache (tokens, whole blocks, at most all but the last token, as the engine would hit)
    and ``load`` its unfinished requests. Highest score wins; ties go to the lowest index.
    Source: vLLM production-stack docs, "Load Aware Routing" (score formula).
    """

    def __init__(self, replicas: Sequence[Replica], load_weight: float) -> None:
        self.replicas = list(replicas)
        self.load_weight = load_weight
        self.block_size = self.replicas[0].scheduler.block_size

    def cached_tokens(self, replica: Replica, req: Request) -> int:
        """Prompt tokens ``replica`` would hit for ``req`` now."""
        replica.sync()  # mid-run pools first catch up with the iterations already started
        pool = replica.scheduler.pool
        if not pool.enable_caching:
            return 0
        bs = self.block_size
        max_blocks = (req.num_tokens - 1) // bs
        cached = pool.cached
        hashes = req.block_hashes
        n = 0
        while n < max_blocks:
            if n == len(hashes):
                req.ensure_hashes(n + 1, bs)
            if hashes[n] not in cached:
                break
            n += 1
        return n * bs

    def route(self, req: Request) -> Replica:
        loads = [r.num_outstanding for r in self.replicas]
        mean = sum(loads) / len(loads)
        scale = max(1.0, mean)
        best, best_score = self.replicas[0], -float("inf")
        for replica, load in zip(self.replicas, loads, strict=True):
            score = (
                self.cached_tokens(replica, req) / req.num_tokens - self.load_weight * (load - mean) / scale
            )
            if score > best_score:
                best, best_score = replica, score
        return best


def make_router(config: RouterConfig, replicas: Sequence[Replica]) -> Router:
    if config.kind == "round_robin":
        return RoundRobinRouter(replicas)
    if config.kind == "least_loaded":
        return LeastLoadedRouter(replicas)
    if config.kind == "prefix_aware":
        return PrefixAwareRouter(replicas, config.load_weight)
    raise ValueError(f"unknown router kind {config.kind!r}")
