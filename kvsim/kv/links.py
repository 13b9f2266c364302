"""Links that carry KV: between replicas (disaggregation, the shared pool) and to host tiers.

Two models, behind the scenario's ``kv_transfer.sharing``:

- `DedicatedLink` (``dedicated``): every transfer gets the whole link, no contention:
  ``latency_s + num_bytes / bandwidth_bytes_per_s``.
- `FairShareNetwork` (``fair_share``): links of fixed bandwidth (a replica's NIC each way,
  its PCIe link each way, its NVMe drive, the cluster fabric, the shared pool's servers)
  shared by the transfers crossing them at the same time. A transfer follows a path of
  links and gets its max-min fair share (progressive filling: the most constrained link
  splits its bandwidth equally among its transfers, the others share what is left), so
  two transfers on one link each get half of it::

      link 100 MB/s      A: 100 MB from t=0        B: 100 MB from t=0.5
        0.0-0.5  A alone at 100 MB/s   (A has 50 MB left)
        0.5-1.5  A and B at 50 MB/s    (A done at 1.5; B has 50 MB left)
        1.5-2.0  B alone at 100 MB/s   (B done at 2.0)

  Rates change only when a transfer starts or ends; between those instants every
  transfer's remaining bytes fall linearly. The network is a plain object driven by the
  caller's clock (`start`, `advance`, `next_finish_s`, `pop_finished`), so it can be
  tested by hand; `kvsim.engine.transfers` drives it from SimPy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol


def transfer_time_s(num_bytes: float, bandwidth_bytes_per_s: float, latency_s: float = 0.0) -> float:
    """The one price of a transfer that has its link to itself: latency plus bytes over
    bandwidth (a dedicated link, a tier's link, a shared path's bottleneck when alone)."""
    return latency_s + num_bytes / bandwidth_bytes_per_s


class KvLink(Protocol):
    """Prices one KV transfer."""

    def transfer_time_s(self, num_bytes: float) -> float:
        """Seconds from the start of a transfer of ``num_bytes`` to its arrival."""
        ...


class DedicatedLink:
    """Fixed latency plus bytes over bandwidth, the same for every transfer."""

    __slots__ = ("bandwidth_bytes_per_s", "latency_s")

    def __init__(self, bandwidth_bytes_per_s: float, latency_s: float) -> None:
        if not bandwidth_bytes_per_s > 0:
            raise ValueError('"bandwidth_bytes_per_s" must be > 0')
        if not latency_s >= 0:
            raise ValueError('"latency_s" must be >= 0')
        self.bandwidth_bytes_per_s = bandwidth_bytes_per_s
        self.latency_s = latency_s

    def transfer_time_s(self, num_bytes: float) -> float:
        return transfer_time_s(num_bytes, self.bandwidth_bytes_per_s, self.latency_s)


@dataclass(slots=True)
class Link:
    """One shared link: its bandwidth, and what it carried (for utilisation)."""

    name: str
    kind: str
    bandwidth_bytes_per_s: float
    bytes_carried: float = 0.0
    busy_s: float = 0.0  # time with at least one transfer on it
    flows: set[int] = field(default_factory=set)


@dataclass(slots=True)
class Flow:
    """One transfer in progress: bytes left, its path and its current rate."""

    remaining_bytes: float
    path: tuple[int, ...]
    rate: float = 0.0
    finish_s: float = math.inf


class FairShareNetwork:
    """Links shared by concurrent transfers with max-min fair rates; see the module docstring."""

    def __init__(self) -> None:
        self.links: list[Link] = []
        self.flows: dict[int, Flow] = {}
        self.now = 0.0
        self._next_id = 0
        self._active: set[int] = set()  # links with a transfer on them

    def add_link(self, name: str, kind: str, bandwidth_bytes_per_s: float) -> int:
        """A new link; returns its id (for paths)."""
        if not bandwidth_bytes_per_s > 0:
            raise ValueError(f'link {name}: "bandwidth_bytes_per_s" must be > 0')
        self.links.append(Link(name, kind, float(bandwidth_bytes_per_s)))
        return len(self.links) - 1

    def path_bandwidth(self, path: tuple[int, ...]) -> float:
        """The rate a transfer on ``path`` gets alone (its slowest link)."""
        return min(self.links[i].bandwidth_bytes_per_s for i in path)

    # -- the clock -----------------------------------------------------------------
    def advance(self, now: float) -> None:
        """Move every transfer forward to ``now`` at its current rate."""
        dt = now - self.now
        if dt < 0:
            raise ValueError(f"the network is at {self.now} s, cannot go back to {now} s")
        if dt > 0 and self.flows:
            flows = self.flows
            for flow in flows.values():
                flow.remaining_bytes -= flow.rate * dt
            for i in self._active:
                link = self.links[i]
                link.busy_s += dt
                link.bytes_carried += dt * sum(flows[f].rate for f in link.flows)
        self.now = now

    def start(self, now: float, num_bytes: float, path: tuple[int, ...]) -> int:
        """Begin a transfer of ``num_bytes`` along ``path`` at ``now``; returns its id."""
        if not path:
            raise ValueError("a transfer needs at least one link")
        if not num_bytes > 0:
            raise ValueError('"num_bytes" must be > 0')
        self.advance(now)
        fid = self._next_id
        self._next_id += 1
        self.flows[fid] = Flow(float(num_bytes), tuple(path))
        for i in path:
            self.links[i].flows.add(fid)
            self._active.add(i)
        self._reallocate(path)
        return fid

    def next_finish_s(self) -> float | None:
        """When the next transfer ends at the current rates (None: nothing in flight)."""
        if not self.flows:
            return None
        return min(f.finish_s for f in self.flows.values())

    def pop_finished(self, now: float) -> list[int]:
        """Advance to ``now`` and take out the transfers that ended by then, in id order."""
        self.advance(now)
        done = sorted(fid for fid, f in self.flows.items() if f.finish_s <= now)
        touched: set[int] = set()
        for fid in done:
            flow = self.flows.pop(fid)
            for i in flow.path:
                link = self.links[i]
                link.flows.discard(fid)
                if not link.flows:
                    self._active.discard(i)
                touched.add(i)
        if touched:
            self._reallocate(tuple(sorted(touched)))
        return done

    # -- fair shares -----------------------------------------------------------------
    def _component(self, seeds: tuple[int, ...]) -> tuple[set[int], set[int]]:
        """Links and flows connected to ``seeds`` (only they can change rate)."""
        links, flows = self.links, self.flows
        seen_links, seen_flows = set(seeds), set()
        todo = list(seeds)
        while todo:
            for fid in links[todo.pop()].flows:
                if fid not in seen_flows:
                    seen_flows.add(fid)
                    for j in flows[fid].path:
                        if j not in seen_links:
                            seen_links.add(j)
                            todo.append(j)
        return seen_links, seen_flows

    def _reallocate(self, seeds: tuple[int, ...]) -> None:
        """Max-min fair rates by progressive filling, then each transfer's finish time.

        Only the transfers connected to ``seeds`` (sharing a link, transitively) can change.
        """
        component, members = self._component(seeds)
        links, flows = self.links, self.flows
        left = {i: links[i].bandwidth_bytes_per_s for i in component}
        unfixed = {i: set(links[i].flows) for i in component if links[i].flows}
        pending = set(members)
        while pending:
            share, bottleneck = min((max(left[i], 0.0) / len(fs), i) for i, fs in unfixed.items())
            for fid in sorted(unfixed.pop(bottleneck)):
                flow = flows[fid]
                flow.rate = share
                pending.discard(fid)
                for i in flow.path:
                    left[i] -= share
                    fs = unfixed.get(i)
                    if fs is not None:
                        fs.discard(fid)
                        if not fs:
                            del unfixed[i]
        now = self.now
        for fid in members:
            flow = flows[fid]
            rate = flow.rate
            flow.finish_s = now + max(flow.remaining_bytes, 0.0) / rate if rate > 0 else math.inf

    def utilization(self, span_s: float) -> dict[str, tuple[float, float]]:
        """Per kind of link: (mean, max) of bytes carried / (bandwidth x span_s)."""
        out: dict[str, list[float]] = {}
        for link in self.links:
            u = link.bytes_carried / (link.bandwidth_bytes_per_s * span_s) if span_s > 0 else math.nan
            out.setdefault(link.kind, []).append(u)
        return {k: (sum(v) / len(v), max(v)) for k, v in out.items()}
