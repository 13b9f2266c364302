"""Building a replica's engine from the resolved plan: its block pool, KV manager and
scheduler (again, cold, when an autoscaled replica restarts). With
`kvsim.engine.replica_engine` the only engine module that constructs core internals; the
SimPy layer gets engines from here."""

from __future__ import annotations

from kvsim.core.block_pool import BlockPool
from kvsim.core.hybrid_kv import make_model_kv_manager
from kvsim.core.scheduler import Scheduler
from kvsim.kv.tiers import TierStack
from kvsim.scenario.resolved import GroupPlan, Plan


def build_scheduler(plan: Plan, group: GroupPlan, tiers: TierStack | None) -> Scheduler:
    """A cold engine for one replica of ``group``: empty pool, ``tiers`` below it."""
    eng, kv = group.engine, group.kv
    pool = BlockPool(
        kv.num_blocks,
        enable_caching=eng.enable_prefix_caching,
        eviction_policy=eng.eviction_policy,
        offload=tiers,
    )
    return Scheduler(
        eng,
        pool,
        kv_manager=make_model_kv_manager(pool, eng.block_size, plan.model_of(group)),
        num_swap_blocks=kv.num_swap_blocks,
        max_model_len=group.max_model_len,
        role=group.role,
        seed=plan.scenario.seed,
    )
