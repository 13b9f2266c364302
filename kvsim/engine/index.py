"""What a router can know without looking into the replicas: a KV-event index and load boards.

    replica pools ──KV events (stored / removed), after delay_s──> KvEventIndex
                                                                   hash -> replicas holding it
    replica loads ──every change (live) or every refresh (snapshot)──> MinBoard
                                                                   least loaded in O(log R)

`KvEventIndex` is the index a KV-aware router builds from the events vLLM publishes
(``BlockStored`` / ``BlockRemoved``, as llm-d's and Dynamo's KV routers consume them):
each replica's events of one engine step reach the index ``delay_s`` later. Lookups cost
the prompt's blocks times the replicas still matching, never replicas x blocks of every
replica: a replica that does not hold the prompt's first block is never touched.

`MinBoard` keeps the replica with the smallest key (load, then index) under point updates
in O(log R), so that least-loaded choices need not scan a thousand replicas per request.

Plain objects: no SimPy, no engine internals. ``stamp`` and ``now`` are simulated seconds.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kvsim.core.block import PRIVATE
from kvsim.core.request_state import Request

#: One KV event: (stored?, block hash); see `kvsim.core.block_pool`.
KvEventRecord = tuple[bool, int]


class KvEventIndex:
    """Block hash -> replicas (candidate positions) that published it and not its removal.

    With ``delay_s`` > 0 an event stamped ``t`` is applied at the first lookup at or after
    ``t + delay_s`` (`catch_up`); with 0 it is applied when published, so the index equals
    the pools' exact state.
    """

    def __init__(self, delay_s: float = 0.0) -> None:
        if not delay_s >= 0:
            raise ValueError('"delay_s" must be >= 0')
        self.delay_s = delay_s
        self.holders: dict[int, set[int]] = {}
        self._pending: list[tuple[float, int, int, list[KvEventRecord]]] = []
        self._seq = 0
        self.num_events = 0  # applied (stored + removed), for tests and stats

    def publish(self, stamp: float, replica: int, events: list[KvEventRecord]) -> None:
        """Events of ``replica`` that happened at ``stamp`` (the list is taken over)."""
        if not events:
            return
        if self.delay_s == 0:
            self._apply(replica, events)
            return
        heapq.heappush(self._pending, (stamp, self._seq, replica, events))
        self._seq += 1

    def catch_up(self, now: float) -> None:
        """Apply every event stamped at or before ``now - delay_s``."""
        pending = self._pending
        if not pending:
            return
        bound = now - self.delay_s
        while pending and pending[0][0] <= bound:
            _, _, replica, events = heapq.heappop(pending)
            self._apply(replica, events)

    def _apply(self, replica: int, events: Iterable[KvEventRecord]) -> None:
        holders = self.holders
        n = 0
        for stored, h in events:
            if h == PRIVATE:
                continue  # cached without a hash: nobody else can ask for it
            n += 1
            s = holders.get(h)
            if stored:
                if s is None:
                    holders[h] = {replica}
                else:
                    s.add(replica)
            elif s is not None:
                s.discard(replica)
                if not s:
                    del holders[h]
        self.num_events += n

    def depth_tokens(self, req: Request, block_size: int, replica: int) -> int:
        """Prompt tokens of ``req`` the index says ``replica`` holds (whole blocks)."""
        get = self.holders.get

        def held(h: int) -> bool | None:
            s = get(h)
            return True if s is not None and replica in s else None

        return len(req.match_prefix(block_size, held)) * block_size

    def matches(
        self,
        req: Request,
        block_size: int,
        is_candidate: Callable[[int], bool],
        sync: Callable[[Sequence[int]], None] | None = None,
    ) -> dict[int, int]:
        """Replica -> prompt tokens held, for every candidate holding the first block.

        Walks the prompt's blocks keeping the replicas that hold every block so far (as
        the engine hits only a run from the start, all but the last token). ``sync`` is
        called once with the holders of the first block before the walk (the engine
        brings their pools up to date; `catch_up` is the caller's).
        """
        max_blocks = (req.num_tokens - 1) // block_size
        if max_blocks < 1:
            return {}
        hashes = req.ensure_hashes(1, block_size)
        holders = self.holders
        first = holders.get(hashes[0])
        if not first:
            return {}
        if sync is not None:
            sync(sorted(first))
            first = holders.get(hashes[0])
            if not first:
                return {}
        cand = {r for r in first if is_candidate(r)}
        out: dict[int, int] = {}
        j = 1
        while cand and j < max_blocks:
            if j >= len(hashes):
                hashes = req.ensure_hashes(j + 1, block_size)
            s = holders.get(hashes[j])
            if s is None:
                break
            kept = cand & s
            if len(kept) != len(cand):
                for r in cand - kept:
                    out[r] = j * block_size
                cand = kept
            j += 1
        for r in cand:
            out[r] = j * block_size
        return out


class MinBoard:
    """The position with the smallest ``(key, position)``, under point updates (a segment tree).

    Positions whose key is None (replicas not taking requests) never win; `best` is then
    None if every key is None.
    """

    __slots__ = ("_size", "_tree")

    def __init__(self, keys: Sequence[Any]) -> None:
        size = 1
        while size < max(1, len(keys)):
            size *= 2
        self._size = size
        tree: list[tuple[Any, int]] = [(_NEVER, -1)] * (2 * size)
        for i, k in enumerate(keys):
            tree[size + i] = (_NEVER if k is None else (0, k), i)
        for p in range(size - 1, 0, -1):
            a, b = tree[2 * p], tree[2 * p + 1]
            tree[p] = a if a <= b else b
        self._tree = tree

    def set(self, position: int, key: Any) -> None:
        """``key``: anything comparable with the other keys (a number, a tuple); None: out."""
        tree = self._tree
        p = self._size + position
        tree[p] = (_NEVER if key is None else (0, key), position)
        p >>= 1
        while p:
            a, b = tree[2 * p], tree[2 * p + 1]
            tree[p] = a if a <= b else b
            p >>= 1

    def best(self) -> int | None:
        key, position = self._tree[1]
        return None if key is _NEVER else position


#: Key of positions out of the running: (1,) sorts after every (0, key).
_NEVER = (1,)
