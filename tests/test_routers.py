"""Routers on hand-built cluster views: which replica each picks, and why."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from kvsim.engine.routers import LeastLoadedRouter, PrefixAwareRouter, RoundRobinRouter, make_router
from kvsim.engine.view import ClusterView
from kvsim.registry import ROUTERS
from kvsim.scenario.schema import RouterConfig


@dataclass
class FakeReplica:
    """A ReplicaView with fixed numbers; ``cached`` maps request ids to cached prefix tokens."""

    index: int
    name: str = ""
    num_outstanding: int = 0
    num_running: int = 0
    num_waiting: int = 0
    kv_usage: float = 0.0
    cached: dict[int, int] = field(default_factory=dict)

    def cached_prefix_tokens(self, req) -> int:
        return self.cached.get(req.request_id, 0)


@dataclass
class FakeRequest:
    request_id: int
    num_tokens: int


def view(*replicas: FakeReplica) -> ClusterView:
    return ClusterView(replicas)


def test_round_robin_takes_replicas_in_turn():
    v = view(FakeReplica(0), FakeReplica(1), FakeReplica(2))
    router = RoundRobinRouter()
    picks = [router.route(FakeRequest(i, 10), v).index for i in range(7)]
    assert picks == [0, 1, 2, 0, 1, 2, 0]


def test_least_loaded_picks_the_fewest_outstanding_and_the_lowest_index_on_ties():
    v = view(
        FakeReplica(0, num_outstanding=3),
        FakeReplica(1, num_outstanding=1),
        FakeReplica(2, num_outstanding=1),
    )
    assert LeastLoadedRouter().route(FakeRequest(0, 10), v).index == 1


def test_prefix_aware_weighs_cached_share_against_relative_load():
    # Prompt of 100 tokens. Replica 0 has 64 of them cached but 4 requests; replica 1 none, idle.
    # mean load 2, scale max(1, 2) = 2:
    #   score0 = 64/100 - 0.5 * (4 - 2) / 2 = 0.14
    #   score1 =  0/100 - 0.5 * (0 - 2) / 2 = 0.50  -> replica 1
    busy_cached = FakeReplica(0, num_outstanding=4, cached={7: 64})
    idle = FakeReplica(1, num_outstanding=0)
    req = FakeRequest(7, 100)
    assert (
        PrefixAwareRouter(RouterConfig(kind="prefix_aware", load_weight=0.5))
        .route(req, view(busy_cached, idle))
        .index
        == 1
    )
    # With load_weight 0.1: score0 = 0.64 - 0.1 = 0.54 > score1 = 0.1 -> the cache wins.
    assert (
        PrefixAwareRouter(RouterConfig(kind="prefix_aware", load_weight=0.1))
        .route(req, view(busy_cached, idle))
        .index
        == 0
    )
    # Load ignored: the cache alone decides.
    assert (
        PrefixAwareRouter(RouterConfig(kind="prefix_aware", load_weight=0.0))
        .route(req, view(busy_cached, idle))
        .index
        == 0
    )


def test_prefix_aware_ties_go_to_the_lowest_index():
    v = view(FakeReplica(0, cached={1: 32}), FakeReplica(1, cached={1: 32}), FakeReplica(2))
    assert PrefixAwareRouter().route(FakeRequest(1, 64), v).index == 0


def test_make_router_builds_the_registered_class_from_the_config():
    assert isinstance(make_router(RouterConfig(kind="least_loaded")), LeastLoadedRouter)
    router = make_router(RouterConfig(kind="prefix_aware", load_weight=0.25))
    assert isinstance(router, PrefixAwareRouter) and router.load_weight == 0.25
    assert set(ROUTERS.names()) >= {"round_robin", "least_loaded", "prefix_aware"}
    with pytest.raises(KeyError, match="unknown router 'nope'; registered: round_robin"):
        ROUTERS["nope"]
