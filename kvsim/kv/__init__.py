"""KV movement below and between engines: offload tiers, swap space, transfer links.

    GPU block pool ──evict──> offload tier (CpuOffloadTier)   prefix blocks by hash
                  <──load───
    preempted request ──swap out──> SwapSpace ──swap in──> back to the pool
    prefill replica ──KvLink──> decode replica                 disaggregated serving

In the spirit of vLLM's KV connector: each tier and link is one class behind a small
protocol, so the next ones (NVMe, a cluster-wide store, links shared by concurrent
transfers) are one class each.
"""

from kvsim.kv.links import DedicatedLink, KvLink
from kvsim.kv.swap import SwapSpace
from kvsim.kv.tiers import CpuOffloadTier, OffloadTier

__all__ = ["CpuOffloadTier", "DedicatedLink", "KvLink", "OffloadTier", "SwapSpace"]
