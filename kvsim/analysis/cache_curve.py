"""Cache-only analysis: a workload's prefix reuse against a block cache of a given size, no timing.

Requests are taken in arrival order. Each prompt is cut into blocks of ``block_size``
tokens; a block's key is chained from its parent's key and the content it holds (and the
tenant, on the first block, like the engine's cache salt), so two blocks share a key only
when their whole prefixes are equal:

    prompt [sys:1000][user:300], block_size 512
    block 0: tokens 0..511    key k0 = (tenant, (sys, 0, 512))
    block 1: tokens 512..1023 key k1 = (k0, (sys, 512, 1000), (user, 0, 24))
    block 2: tokens 1024..1299 (partial, 276 tokens) key k2 = (k1, (user, 24, 300))

A request *hits* the longest run of leading blocks found in the cache (lookup stops at the
first miss, as in vLLM); then all its blocks are inserted or refreshed, tail first, so
that under LRU a request's tail blocks are evicted before its head (vLLM frees a request's
blocks in reverse order). Every request finishes before the next one arrives.

Hit ratios:

- ``block_hit_ratio`` = hit blocks / blocks looked up (partial last blocks count as blocks);
- ``token_hit_ratio`` = tokens in hit blocks / prompt tokens.

With ``partial_blocks=False`` partial last blocks are neither looked up nor cached (vLLM
hashes full blocks only); they still count in the prompt tokens.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from kvsim.errors import WorkLimitError
from kvsim.limits import MAX_CACHE_CURVE_BLOCKS, MAX_CACHE_CURVE_LOOKUPS, MAX_CAPACITIES
from kvsim.request import RequestSpec, Segment

Policy = Literal["lru", "lfu"]


@dataclass(frozen=True)
class CurvePoint:
    """Hit ratios of one cache capacity."""

    capacity_blocks: int | None  # None: unbounded
    policy: str
    block_size: int
    num_requests: int
    num_blocks: int
    hit_blocks: int
    block_hit_ratio: float
    prompt_tokens: int
    hit_tokens: int
    token_hit_ratio: float
    num_evictions: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _KeyInterner:
    """Gives each distinct (parent key, block content) one small integer key."""

    def __init__(self) -> None:
        self._ids: dict[tuple[Any, ...], int] = {}

    def key(self, parent: int | str, runs: tuple[tuple[int, int, int], ...]) -> int:
        return self._ids.setdefault((parent, runs), len(self._ids))


def block_keys(
    prompt: Sequence[Segment],
    block_size: int,
    tenant: str,
    interner: _KeyInterner,
    *,
    partial_blocks: bool = True,
) -> tuple[list[int], list[int]]:
    """Chained keys of a prompt's blocks and the tokens each holds."""
    keys: list[int] = []
    tokens: list[int] = []
    parent: int | str = f"tenant:{tenant}"
    runs: list[tuple[int, int, int]] = []
    filled = 0
    for seg in prompt:
        start = 0
        while start < seg.num_tokens:
            take = min(block_size - filled, seg.num_tokens - start)
            runs.append((seg.content_id, start, start + take))
            start += take
            filled += take
            if filled == block_size:
                parent = interner.key(parent, tuple(runs))
                keys.append(parent)
                tokens.append(block_size)
                runs, filled = [], 0
    if filled and partial_blocks:
        keys.append(interner.key(parent, tuple(runs)))
        tokens.append(filled)
    return keys, tokens


class _Lru:
    """Least recently used: an ordered dict, oldest first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.order: OrderedDict[int, None] = OrderedDict()
        self.evictions = 0

    def __contains__(self, key: int) -> bool:
        return key in self.order

    def access(self, key: int) -> None:
        if key in self.order:
            self.order.move_to_end(key)
            return
        if len(self.order) >= self.capacity:
            self.order.popitem(last=False)
            self.evictions += 1
        self.order[key] = None


class _Lfu:
    """Least frequently used (ties: least recently used); counts reset on eviction. O(1) per access."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.freq: dict[int, int] = {}
        self.buckets: dict[int, OrderedDict[int, None]] = {}
        self.min_freq = 0
        self.evictions = 0

    def __contains__(self, key: int) -> bool:
        return key in self.freq

    def access(self, key: int) -> None:
        f = self.freq.get(key)
        if f is not None:
            bucket = self.buckets[f]
            del bucket[key]
            if not bucket:
                del self.buckets[f]
                if self.min_freq == f:
                    self.min_freq = f + 1
            self.freq[key] = f + 1
            self.buckets.setdefault(f + 1, OrderedDict())[key] = None
            return
        if len(self.freq) >= self.capacity:
            bucket = self.buckets[self.min_freq]
            victim, _ = bucket.popitem(last=False)
            if not bucket:
                del self.buckets[self.min_freq]
            del self.freq[victim]
            self.evictions += 1
        self.freq[key] = 1
        self.buckets.setdefault(1, OrderedDict())[key] = None
        self.min_freq = 1


class _Unbounded:
    def __init__(self) -> None:
        self.keys: set[int] = set()
        self.evictions = 0

    def __contains__(self, key: int) -> bool:
        return key in self.keys

    def access(self, key: int) -> None:
        self.keys.add(key)


def _replay(
    lookups: list[tuple[list[int], list[int], list[int]]], cache: _Lru | _Lfu | _Unbounded
) -> tuple[int, int, int]:
    """Look up each request's prompt blocks, then insert its blocks tail first."""
    num_blocks = hit_blocks = hit_tokens = 0
    for keys, tokens, inserted in lookups:
        n = 0
        while n < len(keys) and keys[n] in cache:
            n += 1
        num_blocks += len(keys)
        hit_blocks += n
        hit_tokens += sum(tokens[:n])
        for key in reversed(inserted):
            cache.access(key)
    return num_blocks, hit_blocks, hit_tokens


def _num_blocks(tokens: int, block_size: int, partial_blocks: bool) -> int:
    full, rest = divmod(tokens, block_size)
    return full + (1 if rest and partial_blocks else 0)


def _check_work(
    requests: Sequence[RequestSpec],
    num_capacities: int,
    block_size: int,
    partial_blocks: bool,
    cache_outputs: bool,
) -> None:
    """A `WorkLimitError` if the curve would build more block keys or do more lookups than
    `MAX_CACHE_CURVE_BLOCKS` / `MAX_CACHE_CURVE_LOOKUPS`: counted from the lengths alone,
    before a key is built (a 2**31-token prompt in 1-token blocks would be 2**31 keys)."""
    if num_capacities > MAX_CAPACITIES:
        raise WorkLimitError(f"{num_capacities:,} capacities; at most {MAX_CAPACITIES:,}")
    blocks = sum(_num_blocks(r.prompt_tokens, block_size, partial_blocks) for r in requests)
    if cache_outputs:
        blocks += sum(
            _num_blocks(r.prompt_tokens + r.output_tokens, block_size, partial_blocks) for r in requests
        )
    if blocks > MAX_CACHE_CURVE_BLOCKS:
        raise WorkLimitError(
            f"{len(requests):,} requests in blocks of {block_size:,} tokens are {blocks:,} blocks, more "
            f"than {MAX_CACHE_CURVE_BLOCKS:,} (the most kvsim builds); use a larger block size or fewer "
            "requests (--max-requests)"
        )
    if blocks * num_capacities > MAX_CACHE_CURVE_LOOKUPS:
        raise WorkLimitError(
            f"{num_capacities:,} capacities x {blocks:,} blocks are {blocks * num_capacities:,} block "
            f"lookups, more than {MAX_CACHE_CURVE_LOOKUPS:,} (the most kvsim does); give fewer "
            f"capacities (at most {max(MAX_CACHE_CURVE_LOOKUPS // max(blocks, 1), 1):,} for this trace)"
        )


def cache_curve(
    requests: Iterable[RequestSpec],
    capacities: Sequence[int | None],
    *,
    block_size: int = 512,
    policy: Policy = "lru",
    partial_blocks: bool = True,
    cache_outputs: bool = False,
) -> list[CurvePoint]:
    """Hit ratios of ``requests`` (in the given order) for each cache capacity (None: unbounded).

    ``cache_outputs`` inserts each request's prompt + output blocks after it finishes (what
    a serving engine caches), so later turns of a conversation can hit earlier outputs.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if policy not in ("lru", "lfu"):
        raise ValueError(f"policy must be 'lru' or 'lfu', got {policy!r}")
    for c in capacities:
        if c is not None and c < 1:
            raise ValueError(f"capacities must be >= 1 block (or None for unbounded), got {c}")
    requests = list(requests)
    _check_work(requests, len(capacities), block_size, partial_blocks, cache_outputs)
    interner = _KeyInterner()
    lookups: list[tuple[list[int], list[int], list[int]]] = []
    prompt_tokens = 0
    for r in requests:
        keys, tokens = block_keys(r.prompt, block_size, r.tenant, interner, partial_blocks=partial_blocks)
        inserted = keys
        if cache_outputs:
            seq = (*r.prompt, r.output_segment)
            inserted, _ = block_keys(seq, block_size, r.tenant, interner, partial_blocks=partial_blocks)
        lookups.append((keys, tokens, inserted))
        prompt_tokens += r.prompt_tokens
    points = []
    for cap in capacities:
        cache: _Lru | _Lfu | _Unbounded = _Unbounded()
        if cap is not None:
            cache = _Lru(cap) if policy == "lru" else _Lfu(cap)
        num_blocks, hit_blocks, hit_tokens = _replay(lookups, cache)
        points.append(
            CurvePoint(
                capacity_blocks=cap,
                policy=policy if cap is not None else "unbounded",
                block_size=block_size,
                num_requests=len(lookups),
                num_blocks=num_blocks,
                hit_blocks=hit_blocks,
                block_hit_ratio=hit_blocks / num_blocks if num_blocks else 0.0,
                prompt_tokens=prompt_tokens,
                hit_tokens=hit_tokens,
                token_hit_ratio=hit_tokens / prompt_tokens if prompt_tokens else 0.0,
                num_evictions=cache.evictions,
            )
        )
    return points


def parse_capacities(text: str) -> list[int | None]:
    """``"1000,1e4,inf"`` -> ``[1000, 10000, None]`` (at most `MAX_CAPACITIES`, counted first)."""
    parts = text.split(",")
    if len(parts) > MAX_CAPACITIES:
        raise ValueError(f"{len(parts):,} capacities; at most {MAX_CAPACITIES:,}")
    out: list[int | None] = []
    for part in parts:
        part = part.strip().lower()
        if part in ("inf", "unbounded", "none"):
            out.append(None)
            continue
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"capacity {part!r} is not a number or 'inf'") from None
        if not math.isfinite(value) or value < 1 or not value.is_integer():
            raise ValueError(f"capacity {part!r} must be a whole number of blocks >= 1, or 'inf'")
        out.append(int(value))
    return out
