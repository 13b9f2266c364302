"""The resolved plan of a run: names looked up and sizes derived once, for everyone.

    Scenario ──resolve_plan──> Plan
                                 ├── model        ModelSpec (preset or inline)
                                 └── groups[]     GroupPlan: GpuSpec, KvCapacity, KvGeometry,
                                                  max_model_len, replica names

The engine, the cost models, the router and the recorder read block sizes, bytes per
block and block counts from here instead of resolving names or recomputing them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.kv_sizing import GIB, KvCapacity, engine_kv_capacity
from kvsim.presets import resolve_gpu, resolve_model
from kvsim.scenario.schema import EngineConfig, ReplicaGroup, Scenario
from kvsim.specs import GpuSpec, ModelSpec

#: Blocks of the memory-sized (or overridden) pool that never hold KV: vLLM keeps block 0
#: as a null block, out of the free queue (vLLM 0.32 `BlockPool.__init__`), so a pool of N
#: blocks (vLLM's "# GPU blocks") has N - 1 usable ones.
NULL_BLOCKS = 1


@dataclass(frozen=True, slots=True)
class KvGeometry:
    """Block layout of one replica: block size, usable pool blocks, bytes per block, swap and
    offload room. One replica spans ``tp`` GPUs; each holds its shard of every block.
    """

    block_size: int
    num_blocks: int
    bytes_per_block_per_shard: float
    tp: int
    num_swap_blocks: int = 0
    num_offload_blocks: int = 0

    @property
    def bytes_per_block(self) -> float:
        """One block's bytes on all shards of the replica together."""
        return self.bytes_per_block_per_shard * self.tp

    def bytes_for_tokens(self, num_tokens: int) -> float:
        """Bytes of ``num_tokens`` tokens' KV, all shards together (a transfer's size)."""
        return num_tokens * self.bytes_per_block_per_shard * self.tp / self.block_size

    def blocks_for_tokens(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)


@dataclass(frozen=True)
class GroupPlan:
    """One replica group, resolved."""

    index: int
    config: ReplicaGroup
    gpu: GpuSpec
    capacity: KvCapacity
    kv: KvGeometry
    max_model_len: int
    replica_names: tuple[str, ...]
    draft_model: ModelSpec | None = None  # speculative decoding's draft model (method draft_model)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def engine(self) -> EngineConfig:
        return self.config.engine

    @property
    def role(self) -> str:
        return self.config.role

    @property
    def tp(self) -> int:
        return self.config.tp


@dataclass(frozen=True)
class Plan:
    """A scenario with every name resolved and every size derived."""

    scenario: Scenario
    model: ModelSpec
    groups: tuple[GroupPlan, ...]

    @property
    def replicas(self) -> list[tuple[str, GroupPlan]]:
        """(replica name, its group) for every replica, in declaration order."""
        return [(name, g) for g in self.groups for name in g.replica_names]

    @property
    def replica_names(self) -> list[str]:
        return [name for g in self.groups for name in g.replica_names]

    @property
    def salt_by_tenant(self) -> bool:
        """Whether block hashes are salted with the tenant (one mode for all groups, checked)."""
        return self.scenario.replicas[0].engine.cache_isolation == "tenant"


def resolve_group(model: ModelSpec, group: ReplicaGroup, index: int = 0) -> GroupPlan:
    gpu = resolve_gpu(group.gpu)
    eng = group.engine
    draft = draft_model_of(eng)
    cap = engine_kv_capacity(model, gpu, group.tp, eng, draft_model=draft)
    per_shard = cap.bytes_per_block_per_shard
    kv = KvGeometry(
        block_size=eng.block_size,
        num_blocks=cap.num_blocks - NULL_BLOCKS,
        bytes_per_block_per_shard=per_shard,
        tp=group.tp,
        num_swap_blocks=int(eng.swap_space_gib * GIB // per_shard),
        num_offload_blocks=int(eng.cpu_offload_gib * GIB // per_shard) if eng.enable_prefix_caching else 0,
    )
    return GroupPlan(
        index=index,
        config=group,
        gpu=gpu,
        capacity=cap,
        kv=kv,
        max_model_len=eng.max_model_len or model.max_model_len,
        replica_names=tuple(f"{group.name}-{i}" for i in range(group.count)),
        draft_model=draft,
    )


def draft_model_of(engine: EngineConfig) -> ModelSpec | None:
    """The speculative draft model an engine names (None without one)."""
    spec = engine.speculative_config
    if spec is None or spec.model is None:
        return None
    return resolve_model(spec.model)


def resolve_plan(scenario: Scenario) -> Plan:
    """The plan of a validated scenario (`kvsim.load_scenario` checked every name)."""
    model = resolve_model(scenario.model)
    groups = tuple(resolve_group(model, g, i) for i, g in enumerate(scenario.replicas))
    return Plan(scenario=scenario, model=model, groups=groups)
