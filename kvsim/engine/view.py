"""What routers see: a read-only view of the cluster, never its pools or schedulers.

    ClusterView.replicas[i]   ReplicaView
        .index / .name        position among the candidates, replica id
        .num_outstanding      submitted and not yet finished or handed off
        .num_running          requests in the running batch
        .num_waiting          waiting for admission (swapped out included)
        .kv_usage             used blocks / total blocks
        .cached_prefix_tokens(req)   prompt tokens the replica would hit for req now

`LiveReplicaView` answers from a running replica; tests hand-build views with plain
objects that have the same attributes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kvsim.core.request_state import Request

if TYPE_CHECKING:
    from kvsim.engine.replica import Replica

__all__ = ["ClusterView", "LiveReplicaView", "ReplicaView", "Request"]


class ReplicaView(Protocol):
    """One replica as a router may see it."""

    @property
    def index(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def num_outstanding(self) -> int: ...

    @property
    def num_running(self) -> int: ...

    @property
    def num_waiting(self) -> int: ...

    @property
    def kv_usage(self) -> float: ...

    def cached_prefix_tokens(self, req: Request) -> int: ...


@dataclass(frozen=True)
class ClusterView:
    """The replicas a router chooses among (the entry replicas, or the decode replicas)."""

    replicas: Sequence[ReplicaView]


class LiveReplicaView:
    """A `ReplicaView` of a running replica, at the current simulated time."""

    __slots__ = ("_replica", "index")

    def __init__(self, replica: Replica, index: int) -> None:
        self._replica = replica
        self.index = index

    @property
    def name(self) -> str:
        return self._replica.name

    @property
    def num_outstanding(self) -> int:
        return self._replica.num_outstanding

    @property
    def num_running(self) -> int:
        return self._replica.num_running

    @property
    def num_waiting(self) -> int:
        return self._replica.num_waiting

    @property
    def kv_usage(self) -> float:
        return self._replica.kv_usage

    def cached_prefix_tokens(self, req: Request) -> int:
        return self._replica.cached_prefix_tokens(req)
