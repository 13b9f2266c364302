"""Shared links: max-min fair shares, computed by hand, with and without SimPy."""

from __future__ import annotations

import pytest
import simpy

from kvsim.engine.transfers import TransferService
from kvsim.kv.links import DedicatedLink, FairShareNetwork

MB = 1e6


def test_two_transfers_overlapping_on_one_link_share_it_equally():
    # 100 MB/s. A: 100 MB from 0; B: 100 MB from 0.5.
    #   0.0-0.5 A alone (50 MB left); 0.5-1.5 both at 50 MB/s (A done); 1.5-2.0 B alone.
    net = FairShareNetwork()
    link = net.add_link("l", "nic_tx", 100 * MB)
    a = net.start(0.0, 100 * MB, (link,))
    assert net.next_finish_s() == 1.0
    b = net.start(0.5, 100 * MB, (link,))
    assert net.flows[a].rate == net.flows[b].rate == 50 * MB
    assert net.next_finish_s() == 1.5
    assert net.pop_finished(1.5) == [a]
    assert net.flows[b].rate == 100 * MB and net.next_finish_s() == 2.0
    assert net.pop_finished(2.0) == [b]
    assert net.links[link].bytes_carried == pytest.approx(200 * MB)
    assert net.links[link].busy_s == 2.0
    assert net.utilization(4.0) == {"nic_tx": (0.5, 0.5)}


def test_max_min_fairness_gives_the_unconstrained_transfer_what_is_left():
    # Link x 100 MB/s carries A and B; link y 30 MB/s carries B and C.
    # y is the bottleneck: B and C get 15 each; A gets 100 - 15 = 85 on x.
    net = FairShareNetwork()
    x = net.add_link("x", "nic_tx", 100 * MB)
    y = net.add_link("y", "fabric", 30 * MB)
    a = net.start(0.0, 85 * MB, (x,))
    b = net.start(0.0, 15 * MB, (x, y))
    c = net.start(0.0, 30 * MB, (y,))
    assert [net.flows[f].rate for f in (a, b, c)] == [85 * MB, 15 * MB, 15 * MB]
    # A and B end at 1.0 s; C then has y alone: 15 MB left at 30 MB/s -> 1.5 s.
    assert net.pop_finished(1.0) == [a, b]
    assert net.flows[c].rate == 30 * MB and net.next_finish_s() == 1.5


def test_independent_links_do_not_disturb_each_other():
    net = FairShareNetwork()
    x = net.add_link("x", "pcie_h2d", 10 * MB)
    y = net.add_link("y", "pcie_h2d", 10 * MB)
    a = net.start(0.0, 10 * MB, (x,))
    net.start(0.2, 10 * MB, (y,))
    assert net.flows[a].finish_s == 1.0


def test_the_network_refuses_to_go_back_in_time_and_empty_paths():
    net = FairShareNetwork()
    link = net.add_link("l", "nic_tx", MB)
    net.start(1.0, MB, (link,))
    with pytest.raises(ValueError, match="cannot go back"):
        net.advance(0.5)
    with pytest.raises(ValueError, match="at least one link"):
        net.start(1.0, MB, ())
    with pytest.raises(ValueError, match="must be > 0"):
        net.add_link("z", "nic_tx", 0)


def test_dedicated_link_prices_every_transfer_alone():
    link = DedicatedLink(50e9, 1e-4)
    assert link.transfer_time_s(50e9) == pytest.approx(1.0001)


def test_transfer_service_fires_events_at_the_hand_computed_times_plus_latency():
    env = simpy.Environment()
    net = FairShareNetwork()
    link = net.add_link("l", "nic_tx", 100 * MB)
    service = TransferService(env, net)
    arrived: dict[str, float] = {}

    def sender(name: str, at: float, latency: float):
        yield env.timeout(at)
        transfer = service.send(100 * MB, (link,), latency)
        yield transfer.event
        arrived[name] = env.now
        assert transfer.alone_s == pytest.approx(1.0 + latency)

    env.process(sender("a", 0.0, 0.0))
    env.process(sender("b", 0.5, 0.25))
    env.run()
    assert arrived == {"a": 1.5, "b": 2.25}
    assert service.num_transfers == 2 and service.bytes_sent == 200 * MB
