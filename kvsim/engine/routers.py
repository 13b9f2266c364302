"""Routers: which replica an arriving request goes to.

A router is a class with ``route(req, view) -> ReplicaView``; it sees the cluster only
through `kvsim.engine.view` (loads, KV usage, cached prefix lengths, membership) and keeps
whatever state it needs itself. Built-ins register in `kvsim.registry.ROUTERS` under the
names ``router.kind`` takes; a user's router is one more class registered the same way, or
an instance passed to ``kvsim.run(..., router=...)``.

    round_robin        replicas in turn
    random             uniformly at random (seeded from the scenario seed)
    least_loaded       fewest unfinished requests (also registered as least_outstanding)
    least_kv_usage     lowest used share of the KV pool
    session_affinity   a conversation sticks to its replica, unless that one is overloaded
    prefix_aware       cached share of the prompt against relative load, with a threshold
    consistent_hash    a hash ring keyed by the prompt's first tokens, with bounded loads

A router class that never reads cached prefixes says so with ``reads_prefix_cache =
False``: the engine then publishes no KV events for it (any other router gets the index).
A router that needs random numbers takes an ``rng`` keyword (a numpy Generator spawned
from the scenario seed).
"""

from __future__ import annotations

import bisect
import inspect
import math
import zlib
from typing import Protocol

import numpy as np

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

    reads_prefix_cache = False

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

    reads_prefix_cache = False

    def __init__(self, config: RouterConfig | None = None) -> None:
        pass

    def route(self, req: Request, view: ClusterView) -> ReplicaView:
        return view.least_outstanding()


@ROUTERS.register("prefix_aware")
class PrefixAwareRouter:
    """Cache hits weighed against load, after the vLLM production stack's load-aware routing.

    Each replica scores ``cached / prompt - load_weight * (load - mean) / max(1, mean)``,
    where ``cached`` is the longest prefix of the request found in the replica's prefix
    cache as the view sees it (tokens, whole blocks, at most all but the last token, as
    the engine would hit), counted as 0 when ``cached / prompt`` is below
    ``prefix_threshold``, and ``load`` its unfinished requests. Highest score wins; ties go
    to the lowest index. Source: vLLM production-stack docs, "Load Aware Routing".

    Only replicas holding part of the prompt, plus the best of the others (the least
    loaded: every other one scores lower), are scored, so a query costs the prompt's
    blocks and the replicas holding them, not every replica.
    """

    def __init__(self, config: RouterConfig | None = None) -> None:
        config = config or RouterConfig()
        self.load_weight = config.load_weight
        self.prefix_threshold = config.prefix_threshold

    def route(self, req: Request, view: ClusterView) -> ReplicaView:
        replicas = view.replicas
        n = req.num_tokens
        matches = view.prefix_matches(req)
        threshold = self.prefix_threshold
        if threshold > 0:
            matches = {i: t for i, t in matches.items() if t / n >= threshold}
        # Among replicas with nothing cached, the least loaded scores best; with no load
        # weight they all score 0 and the lowest index wins.
        other = view.least_outstanding() if self.load_weight > 0 else replicas[0]
        mean = view.total_outstanding() / len(replicas)
        scale = max(1.0, mean)
        best: ReplicaView | None = None
        best_score = -math.inf
        for index in sorted({*matches, other.index}):
            replica = view.replica(index)
            assert replica is not None
            score = matches.get(index, 0) / n - self.load_weight * (replica.num_outstanding - mean) / scale
            if score > best_score:
                best, best_score = replica, score
        assert best is not None
        return best


@ROUTERS.register("random")
class RandomRouter:
    """A replica drawn uniformly, from a generator spawned from the scenario seed."""

    reads_prefix_cache = False

    def __init__(self, config: RouterConfig | None = None, *, rng: np.random.Generator | None = None) -> None:
        self.rng = rng if rng is not None else np.random.default_rng(0)

    def route(self, req: Request, view: ClusterView) -> ReplicaView:
        replicas = view.replicas
        return replicas[int(self.rng.integers(len(replicas)))]


@ROUTERS.register("least_kv_usage")
class LeastKvUsageRouter:
    """The lowest share of KV blocks in use; ties: fewer unfinished requests, lowest index."""

    reads_prefix_cache = False

    def __init__(self, config: RouterConfig | None = None) -> None:
        pass

    def route(self, req: Request, view: ClusterView) -> ReplicaView:
        return view.least_kv_usage()


@ROUTERS.register("session_affinity")
class SessionAffinityRouter:
    """Sticky sessions: every turn of a conversation goes where its first turn went.

    A conversation is the request's ``session_id``, or else the first request of its chain
    of follow-ups (``parent_id``). A new conversation, or one whose replica no longer takes
    requests or has more than ``session_max_load_ratio`` x the mean unfinished requests (at
    least 1), goes to the least loaded replica and sticks there from then on.
    """

    reads_prefix_cache = False

    def __init__(self, config: RouterConfig | None = None) -> None:
        self.max_load_ratio = (config or RouterConfig()).session_max_load_ratio
        self._session_of: dict[int, int] = {}  # request id -> its session
        self._replica_of: dict[int, int] = {}  # session -> replica index
        self.num_fallbacks = 0

    def session(self, req: Request) -> int:
        spec = req.spec
        if spec.session_id is not None:
            session = spec.session_id
        elif spec.parent_id is not None:
            session = self._session_of.get(spec.parent_id, spec.parent_id)
        else:
            session = req.request_id
        self._session_of[req.request_id] = session
        return session

    def route(self, req: Request, view: ClusterView) -> ReplicaView:
        session = self.session(req)
        index = self._replica_of.get(session)
        if index is not None:
            sticky = view.replica(index)
            if sticky is not None:
                limit = self.max_load_ratio * max(1.0, view.total_outstanding() / len(view.replicas))
                if sticky.num_outstanding <= limit:
                    return sticky
            self.num_fallbacks += 1
        chosen = view.least_outstanding()
        self._replica_of[session] = chosen.index
        return chosen


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: spreads integer keys evenly over 64 bits."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


@ROUTERS.register("consistent_hash")
class ConsistentHashRouter:
    """A hash ring keyed by the prompt's first ``hash_prefix_tokens`` tokens (and its tenant).

    Each replica owns ``hash_virtual_nodes`` points of a 64-bit ring (from its name, so the
    ring is the same in every process); a key goes to the first point clockwise. Requests
    sharing their first tokens (a conversation, a long system prompt) land together without
    the router knowing any cache. With ``hash_load_bound`` c, a replica holding more than
    ceil(c x (total + 1) / replicas) unfinished requests passes the key on clockwise
    (consistent hashing with bounded loads, Mirrokni, Thorup and Zadimoghaddam, SODA 2018).
    The ring is rebuilt when replicas join or leave (a key moves only if its owner changed).
    """

    reads_prefix_cache = False

    def __init__(self, config: RouterConfig | None = None) -> None:
        config = config or RouterConfig()
        self.prefix_tokens = config.hash_prefix_tokens
        self.load_bound = config.hash_load_bound
        self.vnodes = config.hash_virtual_nodes
        self._version: int | None = None
        self._points: list[int] = []
        self._owners: list[int] = []

    def key(self, req: Request) -> int:
        """The ring position of ``req``: its salt and its first prompt tokens' content."""
        left = min(self.prefix_tokens, req.prompt_tokens)
        parts: list[tuple[int, int]] = []
        for cid, n in req.segments:
            if left <= 0:
                break
            parts.append((cid, min(n, left)))
            left -= n
        return _mix64(hash((req.salt, tuple(parts))) & 0xFFFFFFFFFFFFFFFF)

    def _build(self, view: ClusterView) -> None:
        ring = sorted(
            (_mix64(zlib.crc32(f"{r.name}#{v}".encode()) | (v << 32)), r.index)
            for r in view.replicas
            for v in range(self.vnodes)
        )
        self._points = [p for p, _ in ring]
        self._owners = [i for _, i in ring]
        self._version = view.version

    def route(self, req: Request, view: ClusterView) -> ReplicaView:
        if self._version != view.version or not self._points:
            self._build(view)
        start = bisect.bisect_left(self._points, self.key(req))
        n = len(self._points)
        cap = math.inf
        if self.load_bound is not None:
            cap = math.ceil(self.load_bound * (view.total_outstanding() + 1) / len(view.replicas))
        seen: set[int] = set()
        for k in range(n):
            index = self._owners[(start + k) % n]
            if index in seen:
                continue
            seen.add(index)
            replica = view.replica(index)
            if replica is not None and replica.num_outstanding < cap:
                return replica
        return view.least_outstanding()  # every replica is at the bound


ROUTERS.register("least_outstanding")(LeastLoadedRouter)


def make_router(config: RouterConfig, rng: np.random.Generator | None = None) -> Router:
    """The registered router ``config.kind`` names, built from ``config`` (and ``rng``)."""
    cls = ROUTERS[config.kind]
    takes_rng = "rng" in inspect.signature(cls).parameters
    router: Router = cls(config, rng=rng) if takes_rng and rng is not None else cls(config)
    return router


def reads_prefix_cache(router: object) -> bool:
    """Whether ``router`` may ask the view for cached prefixes (unknown routers: yes)."""
    return bool(getattr(router, "reads_prefix_cache", True))
