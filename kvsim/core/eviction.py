"""Free-block queues: the order in which free blocks are reused, i.e. the eviction order.

A free block may still hold a cached prefix; the queue decides which one new data takes
first (and so which cached prefix is evicted first):

    lru  a doubly linked list: freed blocks join the tail, new data takes the head, a
         prefix hit pulls a block out of the middle in O(1)  (vLLM: FreeKVCacheBlockQueue)
    lfu  the free block hit least often first, ties by time freed (a heap)
    retention  LRU within TensorRT-LLM-style retention priorities, with expiry

A policy is a class built from the pool's blocks with `append` (a freed cached block),
`appendleft` (a freed block holding nothing reusable: it is reused first, as vLLM 0.32
prepends blocks without a hash), `popleft`, `remove`, `__len__` and `__iter__` (head
first); adding one is one class registered in `kvsim.registry.EVICTION_POLICIES`, and the
scenario's ``engine.eviction_policy`` names it.

The queue owns its list surgery: the block pool takes and gives back runs of blocks with
the bulk forms `popleft_n`, `append_n` and `appendleft_n` (vLLM's ``popleft_n`` /
``append_n``) and never touches a queue's links. `LruFreeQueue` splices a run at once; a
policy that defines only the five methods above gets the bulk forms as loops over them
(`bulk_ops`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from kvsim.core.block import KVBlock
from kvsim.registry import EVICTION_POLICIES


class FreeQueue(Protocol):
    """Free blocks in reuse order (head: reused first)."""

    def __len__(self) -> int: ...

    def append(self, block: KVBlock) -> None:
        """A cached block whose last reference was dropped (reused after those before it)."""
        ...

    def appendleft(self, block: KVBlock) -> None:
        """A freed block that holds nothing reusable (no hash): reuse it before any other."""
        ...

    def popleft(self) -> KVBlock:
        """Take the block to reuse next (raises IndexError when empty)."""
        ...

    def remove(self, block: KVBlock) -> None:
        """Take out a free block that a prefix hit reuses."""
        ...

    def __iter__(self) -> Iterator[KVBlock]: ...


#: A free queue's bulk forms: popleft_n(n), append_n(blocks), appendleft_n(blocks).
BulkOps = tuple[
    Callable[[int], list[KVBlock]], Callable[[list[KVBlock]], None], Callable[[list[KVBlock]], None]
]


def bulk_ops(queue: FreeQueue) -> BulkOps:
    """``queue``'s bulk forms: its own where it has them, else loops over its five methods.

    ``popleft_n(n)`` takes the ``n`` blocks to reuse next, in reuse order (the caller has
    checked there are ``n``); ``append_n(blocks)`` appends each, in order;
    ``appendleft_n(blocks)`` puts them before every free block, the first reused first.
    """
    take, give_back, give_back_first = (
        getattr(queue, name, None) for name in ("popleft_n", "append_n", "appendleft_n")
    )
    if take is not None and give_back is not None and give_back_first is not None:
        return take, give_back, give_back_first

    def popleft_n(n: int) -> list[KVBlock]:
        return [queue.popleft() for _ in range(n)]

    def append_n(blocks: list[KVBlock]) -> None:
        for block in blocks:
            queue.append(block)

    def appendleft_n(blocks: list[KVBlock]) -> None:
        for block in reversed(blocks):
            queue.appendleft(block)

    return popleft_n, append_n, appendleft_n


@EVICTION_POLICIES.register("lru")
class LruFreeQueue:
    """Doubly linked list of free blocks; O(1) append, popleft and removal from the middle,
    and runs of blocks taken from the head or given back at either end in one splice.

    ``head`` and ``tail`` are sentinels:

        head <-> [b7] <-> [b3] <-> [b9] <-> tail
                  popleft_n(2) = [b7, b3]     append_n splices here ^

    Built with `fresh` (`BlockPool` does), the blocks never used yet are not objects but a
    count behind a third sentinel, the mark, where they sit in the queue's order: blocks given
    back with `appendleft` go before it, with `append` after it, and `popleft` reaches it
    only when the blocks before it are gone, when it makes the next block with ``make()``
    (ids in order, as the eager queue would hand them out). A pool of millions of blocks
    (SGLang's page size 1 on a large GPU) then costs only the blocks it touches; every order
    and count is that of the eager queue.
    """

    __slots__ = ("_make", "_mark", "_unmade", "head", "num_free_blocks", "tail")

    def __init__(self, blocks: Iterable[KVBlock] = ()) -> None:
        self.head = KVBlock(-1)
        self.tail = KVBlock(-1)
        self.head.next = self.tail
        self.tail.prev = self.head
        self.num_free_blocks = 0
        self._mark: KVBlock | None = None
        self._unmade = 0
        self._make: Callable[[], KVBlock] | None = None
        for b in blocks:
            self.append(b)

    @classmethod
    def fresh(cls, count: int, make: Callable[[], KVBlock]) -> LruFreeQueue:
        """A queue of ``count`` blocks not made yet: ``make()`` makes the next one when it is
        taken (it must give ids in order, as the eager queue holds them)."""
        queue = cls()
        if count > 0:
            mark = KVBlock(-2)
            queue.head.next = mark
            mark.prev = queue.head
            mark.next = queue.tail
            queue.tail.prev = mark
            queue._mark, queue._unmade, queue._make = mark, count, make
            queue.num_free_blocks = count
        return queue

    def __len__(self) -> int:
        return self.num_free_blocks

    def append(self, block: KVBlock) -> None:
        last = self.tail.prev
        assert last is not None
        last.next = block
        block.prev = last
        block.next = self.tail
        self.tail.prev = block
        self.num_free_blocks += 1

    def appendleft(self, block: KVBlock) -> None:
        first = self.head.next
        assert first is not None
        block.prev = self.head
        block.next = first
        first.prev = block
        self.head.next = block
        self.num_free_blocks += 1

    def popleft(self) -> KVBlock:
        block = self.head.next
        if block is self._mark:
            return self._take_unmade(1)[0]
        if block is self.tail or block is None:
            raise IndexError("no free blocks")
        nxt = block.next
        assert nxt is not None
        self.head.next = nxt
        nxt.prev = self.head
        block.prev = block.next = None
        self.num_free_blocks -= 1
        return block

    def _take_unmade(self, n: int) -> list[KVBlock]:
        """Make up to ``n`` of the blocks behind the mark (the mark is first in the queue);
        the mark leaves the queue with the last of them."""
        make, mark = self._make, self._mark
        assert make is not None and mark is not None
        n = min(n, self._unmade)
        out = [make() for _ in range(n)]
        self._unmade -= n
        self.num_free_blocks -= n
        if not self._unmade:
            prev, nxt = mark.prev, mark.next
            assert prev is not None and nxt is not None
            prev.next = nxt
            nxt.prev = prev
            mark.prev = mark.next = None
            self._mark = self._make = None
        return out

    def remove(self, block: KVBlock) -> None:
        prev, nxt = block.prev, block.next
        assert prev is not None and nxt is not None, "block is not in the free queue"
        prev.next = nxt
        nxt.prev = prev
        block.prev = block.next = None
        self.num_free_blocks -= 1

    # Hot paths (every allocation and every free of the simulator): one splice per run.
    def popleft_n(self, n: int) -> list[KVBlock]:
        """Unlink the first ``n`` blocks at once (the caller has checked that there are ``n``)."""
        assert n <= self.num_free_blocks, "fewer free blocks than asked for"
        if self._mark is not None:
            return self._popleft_n_past_mark(n)
        out: list[KVBlock] = []
        head = self.head
        node: KVBlock = head.next  # type: ignore[assignment]  # a sentinel ends the list
        for _ in range(n):
            out.append(node)
            nxt = node.next
            node.prev = node.next = None
            node = nxt  # type: ignore[assignment]
        head.next = node
        node.prev = head
        self.num_free_blocks -= n
        return out

    def _popleft_n_past_mark(self, n: int) -> list[KVBlock]:
        """`popleft_n` while blocks not made yet remain: the linked blocks before the mark,
        then made ones, then (the mark gone) the linked blocks after it."""
        out: list[KVBlock] = []
        head, tail = self.head, self.tail
        while len(out) < n:
            mark = self._mark
            node: KVBlock = head.next  # type: ignore[assignment]
            taken = 0
            need = n - len(out)
            while taken < need and node is not mark and node is not tail:
                out.append(node)
                nxt = node.next
                node.prev = node.next = None
                node = nxt  # type: ignore[assignment]
                taken += 1
            head.next = node
            node.prev = head
            self.num_free_blocks -= taken
            if taken < need:
                assert node is mark, "fewer free blocks than asked for"
                out += self._take_unmade(need - taken)
        return out

    def append_n(self, blocks: list[KVBlock]) -> None:
        """Splice ``blocks`` onto the tail, in order."""
        last = self.tail.prev
        assert last is not None
        self._splice_after(last, blocks)

    def appendleft_n(self, blocks: list[KVBlock]) -> None:
        """Splice ``blocks`` in right after the head, in order (the first is reused first)."""
        self._splice_after(self.head, blocks)

    def _splice_after(self, prev: KVBlock, blocks: list[KVBlock]) -> None:
        """Link ``blocks``, in order, between ``prev`` and the node after it."""
        after = prev.next
        assert after is not None
        for block in blocks:
            prev.next = block
            block.prev = prev
            prev = block
        prev.next = after
        after.prev = prev
        self.num_free_blocks += len(blocks)

    def make_all(self) -> None:
        """Make every block behind the mark, in its place (for whoever walks all blocks)."""
        mark = self._mark
        if mark is None:
            return
        prev = mark.prev
        assert prev is not None
        self._splice_after(prev, self._take_unmade(self._unmade))  # the mark leaves with them

    def __iter__(self) -> Iterator[KVBlock]:
        self.make_all()
        node = self.head.next
        while node is not None and node is not self.tail:
            yield node
            node = node.next


@EVICTION_POLICIES.register("lfu")
class LfuFreeQueue:
    """Free blocks ordered by (num_hits, time freed): the least used block is reused first.

    Blocks holding nothing reusable (`appendleft`) come before all of them, the most recently
    freed first. A heap with lazy deletion: removing a block from the middle only marks its
    entry stale.
    """

    __slots__ = ("_entry", "_heap", "_tick")

    def __init__(self, blocks: Iterable[KVBlock] = ()) -> None:
        self._heap: list[tuple[int, int, KVBlock]] = []
        self._entry: dict[int, int] = {}  # block_id -> tick of its live heap entry
        self._tick = 0
        for b in blocks:
            self.append(b)

    def __len__(self) -> int:
        return len(self._entry)

    def append(self, block: KVBlock) -> None:
        self._tick += 1
        self._entry[block.block_id] = self._tick
        heapq.heappush(self._heap, (block.num_hits, self._tick, block))

    def appendleft(self, block: KVBlock) -> None:
        self._tick += 1
        self._entry[block.block_id] = -self._tick  # keyed (-1, -tick): before all, latest first
        heapq.heappush(self._heap, (-1, -self._tick, block))

    def popleft(self) -> KVBlock:
        while self._heap:
            _, tick, block = heapq.heappop(self._heap)
            if self._entry.get(block.block_id) == tick:
                del self._entry[block.block_id]
                return block
        raise IndexError("no free blocks")

    def remove(self, block: KVBlock) -> None:
        del self._entry[block.block_id]

    def __iter__(self) -> Iterator[KVBlock]:
        live = [(h, t, b) for h, t, b in self._heap if self._entry.get(b.block_id) == t]
        return iter(b for _, _, b in sorted(live, key=lambda e: (e[0], e[1])))


#: TensorRT-LLM's default retention priority (kvsim.request.DEFAULT_RETENTION_PRIORITY).
DEFAULT_PRIORITY = 35
#: The level of free blocks dropped uncached (``retention: none``): reused before any other.
UNCACHED_LEVEL = -1


@EVICTION_POLICIES.register("retention")
class RetentionFreeQueue:
    """LRU within retention priorities (TensorRT-LLM's prioritized eviction).

    Free blocks sit in one LRU list per priority (0..100); new data takes the head of the
    lowest non-empty level. A block freed with a ``duration_s`` returns to the default
    level (35), at its tail, once the queue's clock passes its expiry:

        level  -1  [b4 b9]             dropped uncached (retention: none), reused first
        level  35  [b7 b2 b5]          default
        level  80  [b3 b1]             a system prompt kept until t = 120 s, then level 35

    The block pool frees blocks at ``set_retention(priority, expiry_s)`` (default level
    otherwise) and tells the queue the time with ``set_time`` before freeing or taking
    blocks. Every operation first moves the blocks whose time ran out, in expiry order, so
    the order does not depend on when anyone looks.
    """

    __slots__ = ("_expiry", "_heap", "_level", "_levels", "_next_expiry", "_next_level", "_tick", "now")

    def __init__(self, blocks: Iterable[KVBlock] = ()) -> None:
        self._levels: dict[int, LruFreeQueue] = {}
        self._level: dict[int, int] = {}  # block_id -> its level while free
        self._expiry: dict[int, float] = {}  # block_id -> when it falls back to the default level
        self._heap: list[tuple[float, int, KVBlock]] = []
        self._tick = 0
        self._next_level = DEFAULT_PRIORITY
        self._next_expiry: float | None = None
        self.now = 0.0
        for b in blocks:
            self.append(b)

    def set_retention(self, priority: int, expiry_s: float | None) -> None:
        """The level (and fall-back time) of the blocks freed next; reset with (35, None)."""
        self._next_level, self._next_expiry = priority, expiry_s

    def set_time(self, now: float) -> None:
        self.now = now

    def __len__(self) -> int:
        return len(self._level)

    def _push(self, block: KVBlock, level: int, left: bool = False) -> None:
        queue = self._levels.get(level)
        if queue is None:
            queue = self._levels[level] = LruFreeQueue()
        if left:
            queue.appendleft(block)
        else:
            queue.append(block)
        self._level[block.block_id] = level

    def append(self, block: KVBlock) -> None:
        # Expire first: a block whose priority ran out earlier joins the default level
        # before the blocks freed now (the order is by time, whenever the queue looks).
        self._expire()
        level, expiry = self._next_level, self._next_expiry
        if expiry is not None and expiry <= self.now:
            level, expiry = DEFAULT_PRIORITY, None
        self._push(block, level)
        if expiry is not None and level != DEFAULT_PRIORITY:
            self._tick += 1
            self._expiry[block.block_id] = expiry
            heapq.heappush(self._heap, (expiry, self._tick, block))

    def appendleft(self, block: KVBlock) -> None:
        """A block dropped uncached: reused before every cached one."""
        self._expire()
        self._push(block, UNCACHED_LEVEL, left=True)

    def _expire(self) -> None:
        heap = self._heap
        while heap and heap[0][0] <= self.now:
            expiry, _, block = heapq.heappop(heap)
            bid = block.block_id
            if self._expiry.get(bid) != expiry:
                continue  # taken since, or freed again with another expiry
            del self._expiry[bid]
            self._levels[self._level[bid]].remove(block)
            self._push(block, DEFAULT_PRIORITY)

    def popleft(self) -> KVBlock:
        self._expire()
        for level in sorted(self._levels):
            queue = self._levels[level]
            if len(queue):
                block = queue.popleft()
                self._forget(block)
                return block
        raise IndexError("no free blocks")

    def _forget(self, block: KVBlock) -> None:
        del self._level[block.block_id]
        self._expiry.pop(block.block_id, None)

    def remove(self, block: KVBlock) -> None:
        self._levels[self._level[block.block_id]].remove(block)
        self._forget(block)

    def level_of(self, block: KVBlock) -> int | None:
        """The level of a free block (None if it is not free)."""
        return self._level.get(block.block_id)

    def __iter__(self) -> Iterator[KVBlock]:
        """Free blocks in reuse order, as of the queue's clock (expiries applied first)."""
        self._expire()
        for level in sorted(self._levels):
            yield from self._levels[level]
