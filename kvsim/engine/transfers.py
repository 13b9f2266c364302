"""Transfers on shared links, driven by SimPy: a transfer is an event that fires on arrival.

`TransferService` wraps a `kvsim.kv.links.FairShareNetwork`: `send` starts a transfer
along a path of links and returns an event that succeeds when its last byte has crossed
the slowest share of its path plus the path's latency. One SimPy timeout is pending at any
time, for the next transfer to end; a start or an end that changes the rates re-arms it
(the superseded timeout still fires and is ignored: at most one extra event per transfer).
"""

from __future__ import annotations

from dataclasses import dataclass

import simpy

from kvsim.kv.links import FairShareNetwork, transfer_time_s


@dataclass(slots=True)
class Transfer:
    """A transfer in flight: its SimPy event, when it started and its uncontended time."""

    event: simpy.Event
    start_s: float
    latency_s: float
    alone_s: float  # latency + bytes / the path's slowest link: the time without contention


class TransferService:
    """Starts transfers on a shared network and fires their events when they arrive."""

    def __init__(self, env: simpy.Environment, network: FairShareNetwork) -> None:
        self.env = env
        self.network = network
        self._transfers: dict[int, Transfer] = {}
        self._armed_at: float | None = None
        self._generation = 0
        self.num_transfers = 0
        self.bytes_sent = 0.0

    def send(self, num_bytes: float, path: tuple[int, ...], latency_s: float = 0.0) -> Transfer:
        """Start moving ``num_bytes`` along ``path`` now; `Transfer.event` fires on arrival."""
        env = self.env
        # The network may stand an ulp ahead of SimPy's clock (it ended a transfer exactly
        # at the computed instant, which SimPy reached by adding a delay).
        now = max(env.now, self.network.now)
        event = env.event()
        alone = transfer_time_s(num_bytes, self.network.path_bandwidth(path), latency_s)
        transfer = Transfer(event, now, latency_s, alone)
        if num_bytes <= 0:
            self._arrive(transfer)
            return transfer
        fid = self.network.start(now, num_bytes, path)
        self._transfers[fid] = transfer
        self.num_transfers += 1
        self.bytes_sent += num_bytes
        self._rearm()
        return transfer

    def _rearm(self) -> None:
        t = self.network.next_finish_s()
        if t is None or t == self._armed_at:
            return
        self._armed_at = t
        self._generation += 1
        gen = self._generation
        timer = self.env.timeout(max(t - self.env.now, 0.0))
        timer.callbacks.append(lambda _ev: self._on_timer(gen))

    def _on_timer(self, gen: int) -> None:
        if gen != self._generation:
            return  # superseded by a later start or end
        t = max(self.env.now, self._armed_at or 0.0, self.network.now)
        self._armed_at = None
        for fid in self.network.pop_finished(t):
            self._arrive(self._transfers.pop(fid))
        self._rearm()

    def _arrive(self, transfer: Transfer) -> None:
        if transfer.latency_s > 0:
            timer = self.env.timeout(transfer.latency_s)
            timer.callbacks.append(lambda _ev: _succeed(transfer.event))
        else:
            transfer.event.succeed()


def _succeed(event: simpy.Event) -> None:
    event.succeed()
