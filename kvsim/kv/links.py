"""Links that carry KV between replicas (disaggregated prefill -> decode).

A link answers how long moving ``num_bytes`` takes when a transfer starts. `DedicatedLink`
is a point-to-point link with a fixed latency and bandwidth that every transfer gets
whole (no contention): ``latency_s + num_bytes / bandwidth_bytes_per_s``.
"""

from __future__ import annotations

from typing import Protocol


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
        return self.latency_s + num_bytes / self.bandwidth_bytes_per_s
