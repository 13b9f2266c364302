"""A request's state inside one engine: token counters, block table, block hashes, timings.

Token layout (block_size 4, prompt 6 tokens, 3 generated so far):

    tokens     p p p p | p p o o | o
    blocks     [  b0   ][  b1   ][ b2 ]
    num_tokens = 9 (prompt + generated); num_computed_tokens <= num_tokens.

A decoding request has ``num_computed_tokens == num_tokens - 1``: the last sampled token's
KV is computed by the next iteration, which samples the following token. Prefill is the
same catch-up, many tokens at a time; there is no separate prefill phase.

Block hashes are chained: ``hash(parent_hash, block content)``; the first block's parent
is the tenant salt, so tenants never share cache entries. Block content is described by
the request's segments (see `kvsim.request`), not by token ids.

When the engine knows every request up front it passes the content ids that occur in more
than one request. From the first segment whose id is not among them, the request's
blocks are *private*: no other request's chain can ever equal theirs. They are cached
without being hashed (see `kvsim.core.block_pool.PRIVATE`), which saves most of the
hashing of a workload of unique prompts without changing any result.

A beam's blocks are never private, whatever the content ids: a fork puts the parent's
blocks into the child's table, so a beam can hold blocks another request computed (its
preemption would publish them under its own hashes), and the blocks the child drops at
the fork are its own content, which it may look up again after a preemption (in the GPU
cache or an offload tier). vLLM hashes every full block; so do beams here.
"""

from __future__ import annotations

import functools
import math
import zlib
from collections.abc import Callable, Set
from enum import Enum
from typing import TypeVar

from kvsim.core.block import KVBlock
from kvsim.request import RequestSpec, Segment

T = TypeVar("T")

_FIRST_BLOCK_MARK = 0x6B7673696D  # distinguishes the first block's parent from real hashes
_ALIAS_OF_MINUS_ONE = -(2**60) - 1
NEVER_PRIVATE = 1 << 62  # private_from_token of a request whose content may all be shared


@functools.lru_cache(maxsize=4096)
def tenant_salt(tenant: str) -> int:
    """Stable integer salt of a tenant name (the same in every process). Cached: a tenant's
    requests share one int object instead of 32 bytes each."""
    return zlib.crc32(tenant.encode("utf-8"))


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    SWAPPED = "swapped"
    FINISHED = "finished"
    REJECTED = "rejected"
    TRANSFERRING = "transferring"  # prefilled; its KV is on the way to a decode replica


class RequestMetrics:
    """What the request table reports about a request (`kvsim.results.result.REQUEST_COLUMNS`),
    written by the engine when it happens. Apart from the request's state: nothing the
    engine decides reads it, except a re-admission, which counts as a recompute once the
    request was preempted (``num_preemptions``), and a sliding window's own-cache rule (the
    prompt tokens it hit)."""

    __slots__ = (
        "decode_scheduled_s",
        "evicted_miss_tokens",
        "finish_s",
        "first_scheduled_s",
        "first_token_s",
        "max_itl_s",
        "num_preemptions",
        "num_swaps",
        "offload_hits_tokens",
        "prefix_cache_hits_tokens",
        "recompute_hits_tokens",
    )

    def __init__(self) -> None:
        self.first_scheduled_s = math.nan
        self.first_token_s = math.nan
        self.decode_scheduled_s = math.nan  # disaggregated: first iteration on the decode replica
        self.finish_s = math.nan
        self.max_itl_s = math.nan  # longest time between two of its tokens (NaN: fewer than two)
        self.prefix_cache_hits_tokens = 0
        self.recompute_hits_tokens = 0
        self.offload_hits_tokens = 0
        self.evicted_miss_tokens = 0  # prompt tokens whose cached block was evicted before a lookup
        self.num_preemptions = 0
        self.num_swaps = 0


class Request:
    """Mutable per-engine state of one request; what the tables report is in ``metrics``."""

    __slots__ = (
        "_cursor_off",
        "_cursor_seg",
        "arrival_s",
        "block_hashes",
        "blocks",
        "group_views",
        "kv_transferred",
        "last_token_s",
        "lazy_due",
        "lazy_finish",
        "lazy_phase",
        "lazy_step",
        "metrics",
        "num_cached_blocks",
        "num_computed_tokens",
        "num_output_tokens",
        "num_skipped_blocks",
        "num_spec_tokens",
        "num_tokens",
        "prefill_replica",
        "private_from_token",
        "prompt_tokens",
        "published_from",
        "replica",
        "request_id",
        "run_seq",
        "salt",
        "segments",
        "spec",
        "status",
        "swapped_blocks",
        "target_output_tokens",
    )

    def __init__(
        self,
        spec: RequestSpec,
        arrival_s: float | None = None,
        *,
        shared_content_ids: Set[int] | None = None,
        salt_by_tenant: bool = True,
    ) -> None:
        self.spec = spec
        self.request_id = spec.request_id
        self.arrival_s = spec.arrival_s if arrival_s is None else arrival_s
        # CPython hashes -1 like -2; give content id -1 another identity so that it
        # cannot collide with -2 inside a block hash.
        self.segments: tuple[Segment, ...] = tuple(
            s if s.content_id != -1 else Segment(_ALIAS_OF_MINUS_ONE, s.num_tokens)
            for s in (*spec.prompt, spec.output_segment)
        )
        self.prompt_tokens = spec.prompt_tokens
        # Tokens from here on follow content no other request contains, so their blocks
        # can only be hit by this request itself. None: every id may be shared.
        self.private_from_token = NEVER_PRIVATE
        # Where the private content began when a preemption published its blocks' hashes
        # (`FullAttentionManager.publish_private_blocks`); NEVER_PRIVATE: never published.
        self.published_from = NEVER_PRIVATE
        if shared_content_ids is not None and spec.beam_group is None:  # beams: see above
            start = 0
            for seg in (*spec.prompt, spec.output_segment):
                if seg.content_id not in shared_content_ids:
                    self.private_from_token = start
                    break
                start += seg.num_tokens
        self.target_output_tokens = spec.output_tokens
        self.num_tokens = self.prompt_tokens
        self.num_computed_tokens = 0
        self.num_output_tokens = 0
        self.num_spec_tokens = 0  # speculative decoding: drafts the next step verifies
        self.salt = tenant_salt(spec.tenant) if salt_by_tenant else 0
        self.blocks: list[KVBlock | None] = []
        self.num_cached_blocks = 0  # leading blocks registered in the prefix cache
        self.num_skipped_blocks = 0  # leading blocks dropped by a sliding window
        self.group_views: list[Request] | None = None  # hybrid models: the other layer groups' tables
        self.block_hashes: list[int] = []
        self._cursor_seg = 0
        self._cursor_off = 0
        self.status = Status.WAITING
        self.replica = -1
        self.prefill_replica = -1  # disaggregated serving: where the prompt was prefilled
        self.kv_transferred = False  # its computed tokens' KV arrived from a prefill replica
        self.last_token_s = math.nan  # when its last token was sampled (the next gap starts there)
        self.metrics = RequestMetrics()
        self.swapped_blocks = 0
        # Order among the running requests (set when it starts running) and the decode
        # cohort's marks (`kvsim.core.cohort`): meaningful only while it is a member.
        self.run_seq = 0
        self.lazy_step = 0
        self.lazy_phase = 0
        self.lazy_finish = -1
        self.lazy_due = -1

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id}, {self.status.value}, computed={self.num_computed_tokens}/"
            f"{self.num_tokens}, out={self.num_output_tokens}/{self.target_output_tokens})"
        )

    @property
    def total_tokens(self) -> int:
        """Prompt plus all requested output tokens (the most KV it will ever need)."""
        return self.prompt_tokens + self.target_output_tokens

    def forget_hashes(self) -> None:
        """Drop the block hashes (recomputed on demand): a finished request's are dead weight."""
        self.block_hashes = []
        self._cursor_seg = self._cursor_off = 0

    def match_prefix(self, block_size: int, lookup: Callable[[int], T | None], start: int = 0) -> list[T]:
        """The longest run of blocks ``start, start+1, ...`` whose hashes ``lookup`` finds.

        The one prefix walk of kvsim: the GPU pool, the offload tier and routers all look
        prefixes up through it. At least one token is always left to compute (its logits
        give the next token), so at most ``(num_tokens - 1) // block_size`` blocks match.
        Hashes are computed lazily and stop at the first miss.
        """
        max_blocks = (self.num_tokens - 1) // block_size
        hashes = self.block_hashes
        found: list[T] = []
        for j in range(start, max_blocks):
            if j >= len(hashes):
                self.ensure_hashes(j + 1, block_size)
            value = lookup(hashes[j])
            if value is None:
                break
            found.append(value)
        return found

    def ensure_hashes(self, num_blocks: int, block_size: int) -> list[int]:
        """Extend ``block_hashes`` to cover the first ``num_blocks`` full blocks.

        A block inside one segment hashes ``(parent, content_id, offset)``; a block
        spanning segments hashes ``(parent, ((content_id, offset, length), ...))``.
        """
        hashes = self.block_hashes
        need = num_blocks - len(hashes)
        if need <= 0:
            return hashes
        segs = self.segments
        seg, off = self._cursor_seg, self._cursor_off
        parent = hashes[-1] if hashes else hash((_FIRST_BLOCK_MARK, self.salt))
        append = hashes.append
        while need:
            cid, n = segs[seg]
            inside = (n - off) // block_size
            if inside:  # blocks lying inside this segment: the common case, kept tight
                if inside > need:
                    inside = need
                need -= inside
                for _ in range(inside):
                    parent = hash((parent, cid, off))
                    append(parent)
                    off += block_size
                if off == n:
                    seg, off = seg + 1, 0
                continue
            pieces = []
            left = block_size
            while left:
                cid, n = segs[seg]
                take = min(left, n - off)
                pieces.append((cid, off, take))
                left -= take
                off += take
                if off == n:
                    seg, off = seg + 1, 0
            parent = hash((parent, tuple(pieces)))
            append(parent)
            need -= 1
        self._cursor_seg, self._cursor_off = seg, off
        return hashes


def decode_in_place(req: Request, nc: int, block_size: int, caching: bool) -> bool:
    """The block-boundary rule: whether a decode of token ``nc`` (its computed tokens) is
    plain: its slot lies in a block it already holds, and (with prefix caching) the token
    does not fill that block, which would then be registered. Every other decode is at a
    block boundary: it needs a new block, or its full block registered. The scheduler's
    phases, the decode cohort's filing (`kvsim.core.cohort.DecodeCohort.refile`, the same
    rule solved for the step) and a decode run's allocations all follow it."""
    return len(req.blocks) * block_size > nc and (not caching or (nc + 1) % block_size != 0)


def advance_decoder(req: Request, num_computed: int, t_last: float, gap: float) -> int:
    """The one way a request's tokens advance when it samples: its computed tokens become
    ``num_computed`` (the sampled tokens' KV is computed by the next iteration), the tokens
    sampled join its output, its last one at ``t_last``; ``gap`` is the longest time
    between two of its tokens among those just sampled (NaN for its first token, which
    leaves ``metrics.max_itl_s`` NaN). Returns its output tokens.

    Stepping calls it once per iteration and request; the decode cohort and a decode run
    call it once for many iterations, with the longest of their gaps."""
    num_output = req.num_output_tokens + num_computed + 1 - req.num_tokens
    req.num_computed_tokens = num_computed
    req.num_output_tokens = num_output
    req.num_tokens = num_computed + 1
    metrics = req.metrics
    if not gap <= metrics.max_itl_s:  # also replaces the initial NaN
        metrics.max_itl_s = gap
    req.last_token_s = t_last
    return num_output
