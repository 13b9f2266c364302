"""The resolved plan of a run: names looked up and sizes derived once, for everyone.

    Scenario ──resolve_plan──> Plan
                                 ├── model        ModelSpec (preset, Hugging Face id, inline, hf_config)
                                 ├── groups[]     GroupPlan: the model as the group serves it
                                 │                (engine.quantization applied), GpuSpec,
                                 │                KvCapacity, KvGeometry, max_model_len,
                                 │                replica names, offload tiers
                                 └── shared_pool  TierPlan of the cluster-wide KV store, if any

The engine, the cost models, the router and the recorder read block sizes, bytes per
block and block counts from here instead of resolving names or recomputing them.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.model.kv_sizing import GIB, KvCapacity, engine_kv_capacity, kv_layer_groups
from kvsim.model.memory_fit import max_context_tokens, served_model
from kvsim.model.presets import resolve_gpu, resolve_model
from kvsim.model.specs import GpuSpec, ModelSpec
from kvsim.scenario.schema import EngineConfig, ReplicaGroup, Scenario, SharedPoolConfig, TierConfig

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
    #: The block tables of a request (`kvsim.model.kv_sizing.kv_layer_groups`): one pool block
    #: holds a block of tokens of one group. A model of one kind has one group of all its
    #: layers; sliding-window groups hold only the window (and the sinks) of a sequence.
    num_full_groups: int = 1
    num_window_groups: int = 0
    sliding_window: int | None = None
    num_sink_tokens: int = 0
    #: A linear-attention model's recurrent state of one request on one shard (Qwen3.5's
    #: Gated DeltaNet conv and SSM states, `kv_sizing.linear_state_bytes_per_seq`): a fixed
    #: size whatever the length, sent with the KV.
    state_bytes_per_seq_per_shard: float = 0.0

    @property
    def bytes_per_block(self) -> float:
        """One block's bytes on all shards of the replica together."""
        return self.bytes_per_block_per_shard * self.tp

    def _window_tokens(self, num_tokens: int) -> int:
        """Tokens a sliding-window group keeps of a sequence of ``num_tokens``: the window and
        the sinks (`kvsim.model.kv_sizing.kv_tokens_held`)."""
        if self.sliding_window is None:
            return num_tokens
        return min(num_tokens, self.sliding_window + self.num_sink_tokens)

    def bytes_for_tokens(self, num_tokens: int) -> float:
        """Bytes of the KV a sequence of ``num_tokens`` tokens keeps, all groups and shards
        together (a transfer's size): every token in the full-attention groups, the window
        and the sinks in the sliding-window ones, and a linear-attention model's state."""
        held = self.num_full_groups * num_tokens
        if self.num_window_groups:
            held += self.num_window_groups * self._window_tokens(num_tokens)
        kv = held * self.bytes_per_block_per_shard * self.tp / self.block_size
        return kv + self.state_bytes_per_seq_per_shard * self.tp if self.state_bytes_per_seq_per_shard else kv

    def blocks_for_tokens(self, num_tokens: int) -> int:
        """Pool blocks a sequence of ``num_tokens`` tokens holds, all groups together: the
        window groups' blocks from the first one the window reaches, and the sinks'."""
        bs = self.block_size
        blocks = -(-num_tokens // bs)
        held = self.num_full_groups * blocks
        if self.num_window_groups:
            window = blocks
            if self.sliding_window is not None:
                skipped = max(0, num_tokens - self.sliding_window + 1) // bs
                window -= skipped - min(-(-self.num_sink_tokens // bs), skipped)
            held += self.num_window_groups * window
        return held


@dataclass(frozen=True, slots=True)
class TierPlan:
    """One offload tier, resolved: capacity in blocks and the link it loads over.

    ``bandwidth_bytes_per_s`` None means the GPU's PCIe link as the cost model prices it
    (host DRAM). ``per_shard``: whether each tensor-parallel GPU moves its own shard over its
    own link (local tiers) or the replica's whole blocks cross one link (the shared pool).
    """

    kind: str
    capacity_blocks: int
    bandwidth_bytes_per_s: float | None
    latency_s: float
    eviction_policy: str
    write_through: bool
    per_shard: bool = True


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
    tiers: tuple[TierPlan, ...] = ()  # local offload tiers, lookup order (the shared pool apart)
    #: The model as this group serves it: the scenario's, with engine.quantization applied
    #: (`kvsim.model.memory_fit.served_model`); None only for plans built by hand without one.
    served: ModelSpec | None = None

    @property
    def initial_count(self) -> int:
        """Replicas taking requests at the start (all of replica_names without autoscaling):
        count instances of attention_dp ranks each."""
        return self.config.count * self.config.attention_dp

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
    shared_pool: TierPlan | None = None

    @property
    def replicas(self) -> list[tuple[str, GroupPlan]]:
        """(replica name, its group) for every replica, in declaration order."""
        return [(name, g) for g in self.groups for name in g.replica_names]

    @property
    def replica_names(self) -> list[str]:
        return [name for g in self.groups for name in g.replica_names]

    def model_of(self, group: GroupPlan) -> ModelSpec:
        """The model ``group`` serves (engine.quantization applied)."""
        return group.served if group.served is not None else self.model

    @property
    def salt_by_tenant(self) -> bool:
        """Whether block hashes are salted with the tenant (one mode for all groups, checked)."""
        return self.scenario.replicas[0].engine.cache_isolation == "tenant"


def _tier(kind: str, cfg: TierConfig, bytes_per_block: float) -> TierPlan:
    return TierPlan(
        kind=kind,
        capacity_blocks=max(1, int(cfg.capacity_gib * GIB // bytes_per_block)),
        bandwidth_bytes_per_s=cfg.bandwidth_bytes_per_s,
        latency_s=cfg.latency_s,
        eviction_policy=cfg.eviction_policy,
        write_through=cfg.write_policy == "write_through",
    )


def _local_tiers(group: ReplicaGroup, per_shard: float, num_dram_blocks: int) -> tuple[TierPlan, ...]:
    """The group's DRAM tier (engine.cpu_offload_gib or offload.dram) and NVMe tier."""
    eng, off = group.engine, group.offload
    if not eng.enable_prefix_caching:
        return ()
    tiers: list[TierPlan] = []
    if off is not None and off.dram is not None:
        tiers.append(_tier("dram", off.dram, per_shard))
    elif num_dram_blocks:
        tiers.append(TierPlan("dram", num_dram_blocks, None, 0.0, "lru", False))
    if off is not None and off.nvme is not None:
        tiers.append(_tier("nvme", off.nvme, per_shard))
    return tuple(tiers)


def resolve_group(model: ModelSpec, group: ReplicaGroup, index: int = 0) -> GroupPlan:
    """One group resolved; ``model`` is the scenario's, served at ``engine.quantization``."""
    gpu = resolve_gpu(group.gpu)
    eng = group.engine
    model = served_model(model, eng.quantization)
    draft = draft_model_of(eng)
    cap = engine_kv_capacity(model, gpu, group.tp, eng, draft_model=draft, attention_dp=group.attention_dp)
    per_shard = cap.bytes_per_block_per_shard
    tiers = _local_tiers(group, per_shard, int(eng.cpu_offload_gib * GIB // per_shard))
    layers = kv_layer_groups(model)
    kv = KvGeometry(
        block_size=eng.block_size,
        num_blocks=cap.num_blocks - NULL_BLOCKS,
        bytes_per_block_per_shard=per_shard,
        tp=group.tp,
        num_swap_blocks=int(eng.swap_space_gib * GIB // per_shard),
        num_offload_blocks=sum(t.capacity_blocks for t in tiers if t.kind == "dram"),
        num_full_groups=layers.num_full_groups,
        num_window_groups=layers.num_window_groups,
        sliding_window=model.sliding_window,
        num_sink_tokens=model.num_sink_tokens,
        state_bytes_per_seq_per_shard=cap.linear_state_bytes_per_seq_per_shard,
    )
    # An instance of attention_dp ranks is attention_dp replicas of tp GPUs each (the
    # router spreads requests over the ranks); the cost model prices their shared experts.
    count = (group.autoscale.max_count if group.autoscale is not None else group.count) * group.attention_dp
    return GroupPlan(
        index=index,
        config=group,
        gpu=gpu,
        capacity=cap,
        kv=kv,
        max_model_len=served_max_model_len(model, eng, cap),
        replica_names=tuple(f"{group.name}-{i}" for i in range(count)),
        draft_model=draft,
        tiers=tiers,
        served=model,
    )


def served_max_model_len(model: ModelSpec, engine: EngineConfig, capacity: KvCapacity) -> int:
    """The longest request a replica accepts: engine.max_model_len, else the model's.

    vLLM refuses to start when one such request does not fit the KV pool (the scenario checks
    do the same); SGLang and TensorRT-LLM start and cap the length to what the pool holds
    (SGLang's tp_worker.py: max_req_len = min(context_len - 1, max_total_num_tokens - 1);
    TensorRT-LLM's KVCacheManager: "maxAttentionWindow and maxSequenceLen are too large for at
    least one sequence to fit in kvCache. They are reduced to ...").
    """
    limit = engine.max_model_len or model.max_model_len
    if engine.backend == "vllm" or capacity.num_blocks < 1:
        return limit
    return max(
        1, min(limit, max_context_tokens(model, capacity.num_blocks - NULL_BLOCKS, capacity.block_size))
    )


def _shared_pool(cfg: SharedPoolConfig | None, groups: tuple[GroupPlan, ...]) -> TierPlan | None:
    if cfg is None:
        return None
    bytes_per_block = groups[0].kv.bytes_per_block  # equal in every group (checked)
    return TierPlan(
        kind="shared_pool",
        capacity_blocks=max(1, int(cfg.capacity_gib * GIB // bytes_per_block)),
        bandwidth_bytes_per_s=cfg.bandwidth_bytes_per_s,
        latency_s=cfg.latency_s,
        eviction_policy=cfg.eviction_policy,
        write_through=cfg.write_policy == "write_through",
        per_shard=False,
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
    return Plan(
        scenario=scenario,
        model=model,
        groups=groups,
        shared_pool=_shared_pool(scenario.shared_kv_pool, groups),
    )
