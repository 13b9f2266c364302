"""The KV-event index and the load board routers read, on hand-made events."""

from __future__ import annotations

from conftest import spec

from kvsim.core.block import PRIVATE
from kvsim.core.request_state import Request
from kvsim.engine.index import KvEventIndex, MinBoard


def prompt(rid: int, segments: list[tuple[int, int]]) -> Request:
    return Request(spec(rid, segments, output=4))


def hashes(req: Request, n: int, bs: int = 16) -> list[int]:
    return list(req.ensure_hashes(n, bs)[:n])


def test_matches_counts_each_replicas_run_of_blocks_from_the_start():
    # A 100-token prompt: 6 full blocks of 16, at most (100 - 1) // 16 = 6 can hit.
    req = prompt(0, [(1, 100)])
    h = hashes(req, 6)
    index = KvEventIndex()
    index.publish(0.0, 0, [(True, x) for x in h[:4]])  # replica 0: blocks 0-3
    index.publish(0.0, 1, [(True, x) for x in h])  # replica 1: all six
    index.publish(0.0, 2, [(True, h[0]), (True, h[2])])  # replica 2: 0 and 2 (a hole at 1)
    index.publish(0.0, 3, [(True, h[1])])  # replica 3: not the first block: nothing
    assert index.matches(req, 16, lambda r: True) == {0: 64, 1: 96, 2: 16}
    assert index.matches(req, 16, lambda r: r != 1) == {0: 64, 2: 16}  # 1 takes no requests
    assert index.depth_tokens(req, 16, 1) == 96 and index.depth_tokens(req, 16, 3) == 0


def test_removed_blocks_leave_the_index_and_private_ones_never_enter():
    req = prompt(0, [(1, 64)])
    h = hashes(req, 3)
    index = KvEventIndex()
    index.publish(1.0, 0, [(True, h[0]), (True, h[1]), (True, PRIVATE)])
    index.publish(2.0, 0, [(False, h[1])])
    assert index.matches(req, 16, lambda r: True) == {0: 16}
    assert PRIVATE not in index.holders and index.num_events == 3
    index.publish(3.0, 0, [(False, h[0])])
    assert index.holders == {} and index.matches(req, 16, lambda r: True) == {}


def test_a_delay_holds_events_back_until_their_time_plus_the_delay():
    req = prompt(0, [(1, 64)])
    h = hashes(req, 3)
    index = KvEventIndex(delay_s=0.5)
    index.publish(1.0, 0, [(True, h[0]), (True, h[1])])
    index.publish(1.2, 1, [(True, h[0])])
    index.catch_up(1.4)
    assert index.matches(req, 16, lambda r: True) == {}
    index.catch_up(1.5)  # stamped 1.0: applied at 1.0 + 0.5
    assert index.matches(req, 16, lambda r: True) == {0: 32}
    index.publish(1.6, 0, [(False, h[1])])
    index.catch_up(1.8)
    assert index.matches(req, 16, lambda r: True) == {0: 32, 1: 16}
    index.catch_up(2.1)
    assert index.matches(req, 16, lambda r: True) == {0: 16, 1: 16}


def test_sync_runs_once_over_the_first_blocks_holders_before_the_walk():
    req = prompt(0, [(1, 64)])
    h = hashes(req, 3)
    index = KvEventIndex()
    index.publish(0.0, 0, [(True, x) for x in h])
    index.publish(0.0, 1, [(True, x) for x in h])
    seen = []

    def sync(positions):  # replica 1 catches up: its blocks 1 and 2 were evicted meanwhile
        seen.append(sorted(positions))
        index.publish(0.0, 1, [(False, h[1]), (False, h[2])])

    assert index.matches(req, 16, lambda r: True, sync) == {0: 48, 1: 16}
    assert seen == [[0, 1]]


def test_min_board_tracks_the_least_key_with_ties_to_the_lowest_position():
    board = MinBoard([3, 1, 1, None, 5])
    assert board.best() == 1
    board.set(1, 2)
    assert board.best() == 2
    board.set(2, None)
    board.set(1, None)
    assert board.best() == 0  # keys: 3, -, -, -, 5
    board.set(3, 0)
    assert board.best() == 3
    empty = MinBoard([None, None])
    assert empty.best() is None
    tuples = MinBoard([(0.5, 2), (0.5, 1), (0.7, 0)])  # KV usage, then load
    assert tuples.best() == 1
