"""Routers on hand-built cluster views: which replica each picks, and why."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from conftest import spec

from kvsim.core.request_state import Request
from kvsim.engine.routers import (
    ConsistentHashRouter,
    LeastKvUsageRouter,
    LeastLoadedRouter,
    PrefixAwareRouter,
    RandomRouter,
    RoundRobinRouter,
    SessionAffinityRouter,
    make_router,
)
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


# --------------------------------------------------------------------------- the new routers


def real(rid: int, prompt, output: int = 4, **kw) -> Request:
    """A real engine request (routers that hash prompts read its segments and salt)."""
    return Request(spec(rid, prompt, output, **kw))


def test_least_outstanding_is_least_loaded_under_another_name():
    assert ROUTERS["least_outstanding"] is LeastLoadedRouter
    v = view(
        FakeReplica(0, num_outstanding=2),
        FakeReplica(1, num_outstanding=2),
        FakeReplica(2, num_outstanding=5),
    )
    assert make_router(RouterConfig(kind="least_outstanding")).route(FakeRequest(0, 8), v).index == 0


def test_random_is_seeded_and_covers_every_replica():
    v = view(*(FakeReplica(i) for i in range(4)))
    picks = [RandomRouter(rng=np.random.default_rng(3)).route(FakeRequest(i, 8), v).index for i in range(1)]
    a = RandomRouter(rng=np.random.default_rng(3))
    b = RandomRouter(rng=np.random.default_rng(3))
    seq_a = [a.route(FakeRequest(i, 8), v).index for i in range(400)]
    seq_b = [b.route(FakeRequest(i, 8), v).index for i in range(400)]
    assert seq_a == seq_b and picks[0] == seq_a[0]
    counts = np.bincount(seq_a, minlength=4)
    assert counts.min() > 70  # 100 expected each; 5 sigma is ~43
    # make_router hands the scenario's generator to routers that take one
    router = make_router(RouterConfig(kind="random"), np.random.default_rng(3))
    assert [router.route(FakeRequest(i, 8), v).index for i in range(5)] == seq_a[:5]


def test_least_kv_usage_breaks_ties_by_load_then_index():
    v = view(
        FakeReplica(0, kv_usage=0.5, num_outstanding=0),
        FakeReplica(1, kv_usage=0.2, num_outstanding=3),
        FakeReplica(2, kv_usage=0.2, num_outstanding=1),
        FakeReplica(3, kv_usage=0.2, num_outstanding=1),
    )
    assert LeastKvUsageRouter().route(FakeRequest(0, 8), v).index == 2


def test_prefix_aware_threshold_ignores_short_hits():
    # Replica 0 holds 16 of 100 tokens (16%) and 2 requests; replica 1 is idle (mean 1, scale 1).
    # load_weight 0.05: score0 = 0.16 - 0.05 x (2 - 1) = 0.11 > score1 = 0 - 0.05 x (0 - 1) = 0.05.
    # With prefix_threshold 0.2 the 16% hit counts as none: score0 = -0.05 < 0.05.
    v = view(FakeReplica(0, num_outstanding=2, cached={5: 16}), FakeReplica(1, num_outstanding=0))
    req = FakeRequest(5, 100)
    cfg = RouterConfig(kind="prefix_aware", load_weight=0.05)
    assert PrefixAwareRouter(cfg).route(req, v).index == 0
    cfg = RouterConfig(kind="prefix_aware", load_weight=0.05, prefix_threshold=0.2)
    assert PrefixAwareRouter(cfg).route(req, v).index == 1


def test_prefix_aware_scores_only_holders_and_the_least_loaded():
    # Replicas 1 and 3 hold nothing and are busier than replica 2: they cannot win, and the
    # router reads only the prefix matches, the least loaded replica and the winner's load.
    v = view(
        FakeReplica(0, num_outstanding=4, cached={9: 48}),
        FakeReplica(1, num_outstanding=5),
        FakeReplica(2, num_outstanding=1),
        FakeReplica(3, num_outstanding=6),
    )
    # mean 4, scale 4: score0 = 0.75 - 0.5 * 0 = 0.75; score2 = 0 - 0.5 * (1 - 4) / 4 = 0.375
    assert PrefixAwareRouter().route(FakeRequest(9, 64), v).index == 0
    # With load weight 0 and no hit anywhere the lowest index wins (all score 0).
    cfg = RouterConfig(kind="prefix_aware", load_weight=0.0)
    assert PrefixAwareRouter(cfg).route(FakeRequest(1, 64), v).index == 0


def test_session_affinity_keeps_a_conversation_and_leaves_an_overloaded_replica():
    reps = [
        FakeReplica(0, num_outstanding=1),
        FakeReplica(1, num_outstanding=0),
        FakeReplica(2, num_outstanding=3),
    ]
    v = view(*reps)
    router = SessionAffinityRouter(RouterConfig(kind="session_affinity", session_max_load_ratio=2.0))
    first = real(10, 32)
    assert router.route(first, v).index == 1  # a new conversation: the least loaded
    reps[1].num_outstanding = 2
    turn2 = real(11, 40, parent_id=10)
    assert router.route(turn2, v).index == 1  # sticks: 2 <= 2 x mean (2)
    turn3 = real(12, 48, parent_id=11)  # the chain's root is request 10
    reps[1].num_outstanding = 9  # mean 13 / 3 = 4.33: limit 8.67 < 9 -> leaves for replica 0
    assert router.route(turn3, v).index == 0 and router.num_fallbacks == 1
    reps[1].num_outstanding = 0
    assert router.route(real(13, 56, parent_id=12), v).index == 0  # and sticks to the new one
    # An explicit session id wins over the parent chain.
    assert router.session(real(14, 8, session_id=10)) == 10


def test_session_affinity_moves_a_conversation_off_a_replica_that_left():
    router = SessionAffinityRouter()
    both = view(FakeReplica(0), FakeReplica(1, num_outstanding=5))
    assert router.route(real(1, 16), both).index == 0
    only_one = view(FakeReplica(1, num_outstanding=5))  # replica 0 was drained
    assert router.route(real(2, 16, parent_id=1), only_one).index == 1


def test_consistent_hash_keeps_shared_prefixes_together_and_spreads_the_rest():
    v = view(*(FakeReplica(i, name=f"replica-{i}") for i in range(8)))
    router = ConsistentHashRouter(
        RouterConfig(kind="consistent_hash", hash_prefix_tokens=1024, hash_load_bound=None)
    )
    # Same first 1,024 tokens (a conversation's history), different tails -> the same replica.
    a = router.route(real(1, [(7, 1024), (100, 50)]), v).index
    b = router.route(real(2, [(7, 1024), (101, 900)]), v).index
    assert a == b
    spread = {router.route(real(i, [(1000 + i, 2000)]), v).index for i in range(200)}
    assert len(spread) == 8
    # The ring is the same in another router (names, not process state, place the points).
    again = ConsistentHashRouter(RouterConfig(kind="consistent_hash", hash_load_bound=None))
    assert again.route(real(3, [(7, 1024), (102, 1)]), v).index == a


def test_consistent_hash_with_bounded_loads_passes_a_full_replica_by():
    reps = [FakeReplica(i, name=f"replica-{i}") for i in range(4)]
    v = view(*reps)
    free = ConsistentHashRouter(RouterConfig(kind="consistent_hash", hash_load_bound=None))
    req = real(1, [(42, 2048)])
    home = free.route(req, v).index
    reps[home].num_outstanding = 10  # total 10: bound ceil(1.25 x 11 / 4) = 4 < 10
    bounded = ConsistentHashRouter(RouterConfig(kind="consistent_hash", hash_load_bound=1.25))
    assert bounded.route(req, v).index != home
    assert free.route(req, v).index == home


def test_consistent_hash_rebuilds_its_ring_when_replicas_leave():
    reps = [FakeReplica(i, name=f"replica-{i}") for i in range(4)]
    router = ConsistentHashRouter(RouterConfig(kind="consistent_hash", hash_load_bound=None))
    keys = [real(i, [(500 + i, 1500)]) for i in range(100)]
    before = [router.route(r, view(*reps)).index for r in keys]
    smaller = view(*reps[:3])
    smaller.version = 1
    after = [router.route(r, smaller).index for r in keys]
    # Only the keys of the replica that left move.
    assert all(a == b for a, b in zip(before, after, strict=True) if a != 3)
    assert 3 not in after
