"""What routers see: a read-only view of the cluster, never its pools or schedulers.

    ClusterView                      the replicas a router chooses among
        .replicas                    those taking requests now (ReplicaView each)
        .replica(index)              one of them by index (None if it takes no requests)
        .prefix_matches(req)         index -> prompt tokens cached, for replicas holding any
        .least_outstanding()         fewest unfinished requests (ties: lowest index)
        .least_kv_usage()            lowest KV usage (ties: fewer unfinished, lowest index)
        .total_outstanding()         unfinished requests over .replicas
        .version                     changes whenever .replicas does (autoscaling)
    ReplicaView
        .index / .name               position among all the candidates (stable), replica id
        .num_outstanding             submitted and not yet finished or handed off
        .num_running / .num_waiting  running batch; waiting for admission (swapped out included)
        .kv_usage                    used blocks / total blocks
        .cached_prefix_tokens(req)   prompt tokens the replica would hit for req

`ClusterView` itself answers every query from its replicas (tests hand-build views with
plain objects); `LiveClusterView` answers for a running cluster, as configured by the
scenario's ``router.view``:

- ``cache: exact`` reads every pool (a query costs the replicas x the prompt's blocks);
  ``cache: events`` (default) asks a `kvsim.engine.index.KvEventIndex` fed by the KV
  events replicas publish, ``kv_events_delay_s`` late: a query costs the prompt's blocks
  and the replicas holding them, nothing for the others. With no delay both are equal.
- ``load_refresh_s`` > 0: loads and KV usage are snapshots taken every so many seconds
  (the router does not even see its own last decisions); 0: live values.

Least-loaded queries use a `kvsim.engine.index.MinBoard` (O(log R) per load change).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from kvsim.core.request_state import Request
from kvsim.engine.index import KvEventIndex, MinBoard

if TYPE_CHECKING:
    from kvsim.engine.replica import Replica

__all__ = ["ClusterView", "LiveClusterView", "LiveReplicaView", "ReplicaView", "Request"]


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


class ClusterView:
    """The replicas a router chooses among (the entry replicas, or the decode replicas).

    Built by hand from any objects with `ReplicaView`'s attributes, every query scans them;
    ``block_size`` is the replicas' block size (routers that hash prompts need it).
    """

    def __init__(self, replicas: Sequence[ReplicaView], block_size: int = 16) -> None:
        self._replicas: Sequence[ReplicaView] = replicas
        self.block_size = block_size
        self.version = 0
        self._by_index = {r.index: r for r in replicas}

    @property
    def replicas(self) -> Sequence[ReplicaView]:
        return self._replicas

    def replica(self, index: int) -> ReplicaView | None:
        return self._by_index.get(index)

    def prefix_matches(self, req: Request) -> dict[int, int]:
        out = {}
        for r in self.replicas:
            tokens = r.cached_prefix_tokens(req)
            if tokens > 0:
                out[r.index] = tokens
        return out

    def least_outstanding(self) -> ReplicaView:
        return min(self.replicas, key=lambda r: r.num_outstanding)

    def least_kv_usage(self) -> ReplicaView:
        return min(self.replicas, key=lambda r: (r.kv_usage, r.num_outstanding))

    def total_outstanding(self) -> int:
        return sum(r.num_outstanding for r in self.replicas)


class LiveReplicaView:
    """A `ReplicaView` of a running replica: live loads, cache from the pool or the index."""

    __slots__ = ("_cluster", "_replica", "index")

    def __init__(self, replica: Replica, index: int, cluster: LiveClusterView) -> None:
        self._replica = replica
        self.index = index
        self._cluster = cluster

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
        self._replica.sync()  # a pool mid-run first catches up with the iterations already started
        return self._replica.kv_usage

    def cached_prefix_tokens(self, req: Request) -> int:
        return self._cluster.cached_tokens(req, self.index)


class SnapshotReplicaView(LiveReplicaView):
    """Loads as of the last snapshot (``load_refresh_s``); the cache as the view's source says."""

    __slots__ = ()

    @property
    def num_outstanding(self) -> int:
        return self._cluster.snapshot[self.index][0]

    @property
    def num_running(self) -> int:
        return self._cluster.snapshot[self.index][1]

    @property
    def num_waiting(self) -> int:
        return self._cluster.snapshot[self.index][2]

    @property
    def kv_usage(self) -> float:
        return self._cluster.snapshot[self.index][3]


class LiveClusterView(ClusterView):
    """The view of a running cluster's candidates (entry or decode replicas).

    ``index`` (None: ``cache: exact``) is the KV-event index; ``now`` is the clock. The
    cluster reports load changes (`load_changed`) and membership (`set_active`).
    """

    def __init__(
        self,
        replicas: Sequence[Replica],
        *,
        block_size: int,
        now: Callable[[], float],
        index: KvEventIndex | None = None,
        load_refresh_s: float = 0.0,
        active: Sequence[bool] | None = None,
    ) -> None:
        view_cls = SnapshotReplicaView if load_refresh_s > 0 else LiveReplicaView
        self.members: list[LiveReplicaView] = [view_cls(r, i, self) for i, r in enumerate(replicas)]
        self._live = list(replicas)
        self.active = list(active) if active is not None else [True] * len(replicas)
        super().__init__(tuple(m for m, a in zip(self.members, self.active, strict=True) if a), block_size)
        self.now = now
        self.kv_index = index
        self.snapshot_mode = load_refresh_s > 0
        self.snapshot: list[tuple[int, int, int, float]] = [(0, 0, 0, 0.0)] * len(replicas)
        self._total = 0
        self._board = MinBoard([0 if a else None for a in self.active])
        self._kv_board: MinBoard | None = None
        self._last: tuple[int, float, dict[int, int]] | None = None  # the last prefix query
        if self.snapshot_mode:
            self.refresh()

    # -- membership and loads (the cluster calls these) -------------------------------
    def set_active(self, position: int, active: bool) -> None:
        """A replica starts or stops taking requests."""
        self.active[position] = active
        self._replicas = tuple(m for m, a in zip(self.members, self.active, strict=True) if a)
        self._by_index = {r.index: r for r in self._replicas}
        self.version += 1
        if self.snapshot_mode:
            self.refresh()
        else:
            self._total = sum(self._live[i].num_outstanding for i, a in enumerate(self.active) if a)
            self._board.set(position, self._live[position].num_outstanding if active else None)

    def load_changed(self, position: int, delta: int) -> None:
        """A replica's unfinished requests changed by ``delta`` (live loads only)."""
        if self.snapshot_mode or not self.active[position]:
            return
        self._total += delta
        self._board.set(position, self._live[position].num_outstanding)

    def refresh(self) -> None:
        """Take a load snapshot (``load_refresh_s`` mode)."""
        for r in self._live:  # a pool mid-run first catches up with the iterations already started
            r.sync()
        snap = [(r.num_outstanding, r.num_running, r.num_waiting, r.kv_usage) for r in self._live]
        self.snapshot = snap
        keys = [s[0] if a else None for s, a in zip(snap, self.active, strict=True)]
        self._board = MinBoard(keys)
        self._total = sum(k for k in keys if k is not None)
        self._kv_board = MinBoard(
            [(s[3], s[0]) if a else None for s, a in zip(snap, self.active, strict=True)]
        )

    # -- queries ------------------------------------------------------------------------
    def least_outstanding(self) -> ReplicaView:
        best = self._board.best()
        if best is None:
            raise LookupError("no replica takes requests")
        return self.members[best]

    def least_kv_usage(self) -> ReplicaView:
        if self._kv_board is not None:
            best = self._kv_board.best()
            if best is None:
                raise LookupError("no replica takes requests")
            return self.members[best]
        return super().least_kv_usage()

    def total_outstanding(self) -> int:
        return self._total

    def prefix_matches(self, req: Request) -> dict[int, int]:
        index = self.kv_index
        if index is None:
            out = super().prefix_matches(req)
        else:
            index.catch_up(self.now())
            out = index.matches(req, self.block_size, self.active.__getitem__, self._sync_holders)
        self._last = (req.request_id, self.now(), out)
        return out

    def cached_tokens(self, req: Request, position: int) -> int:
        """Prompt tokens the view says replica ``position`` holds for ``req``."""
        last = self._last
        if last is not None and last[0] == req.request_id and last[1] == self.now():
            return last[2].get(position, 0)
        index = self.kv_index
        if index is None:
            replica = self._live[position]
            replica.sync()  # the pool as stepping would have left it by now
            return replica.cached_prefix_tokens(req)
        index.catch_up(self.now())
        self._sync_holders([position])
        return index.depth_tokens(req, self.block_size, position)

    def forget(self) -> None:
        """Drop the memo of the last prefix query (the pools may have changed since)."""
        self._last = None

    def _sync_holders(self, positions: Sequence[int]) -> None:
        """Bring these replicas' pools up to what the index may know by now, then apply it."""
        index = self.kv_index
        assert index is not None
        now = self.now()
        delay = index.delay_s
        for p in positions:
            # No delay: what stepping would have done strictly before now (an arrival comes
            # before the iteration boundary of its instant); a delay: up to now - delay.
            self._live[p].sync(now - delay, inclusive=delay > 0)
        index.catch_up(now)
