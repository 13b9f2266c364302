"""Every rule of a scenario that involves more than one field: which combinations exist.

Field types and ranges are the schema's (`kvsim.scenario.schema`); this module holds the
rest, as ``(field_path, rule)`` problems, checked in three rounds (a round runs only if
the ones before found nothing, as each assumes the last passed):

1. combinations of fields: disaggregated roles, one cache isolation and block size where
   the router or hashing needs it, unique group names, contiguous KV without caching;
   the cluster layer's: offload tiers, the shared pool, autoscaling bounds;
2. presets: model and GPU names, TP against the heads, weights and one KV block in memory,
   an engine max_model_len within the model's;
3. cost profiles: readable, and measured for the scenario's model, GPU, dtype, KV dtype, TP.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvsim.backends.defaults import KNOB_NAMES
from kvsim.cost.config import ProfileCostConfig
from kvsim.cost.profile import check_profile_matches, load_profile
from kvsim.errors import KvsimError
from kvsim.model.kv_sizing import GIB, KvCapacity, engine_kv_capacity, weight_bytes
from kvsim.model.memory_fit import max_model_len_problem, served_model
from kvsim.model.presets import UnknownPresetError, resolve_gpu, resolve_model, tp_problem
from kvsim.model.specs import GpuSpec, ModelSpec
from kvsim.scenario.schema import ReplicaGroup, Scenario

Problems = list[tuple[str, str]]

_HYBRID_ONLY = (
    "%s mixes sliding-window and full-attention layers (one block table per layer group): "
    "modelled with paged KV, without an offload tier"
)


def check_scenario(scenario: Scenario, base_dir: Path | None = None) -> Problems:
    """All problems of a schema-valid scenario (empty if it can run)."""
    problems = check_combinations(scenario)
    if problems:
        return problems
    specs = _Specs.resolve(scenario)
    return check_presets(scenario, specs) or check_cost_references(scenario, base_dir, specs)


@dataclass(frozen=True)
class _Specs:
    """The scenario's model and GPUs looked up once (None where the name is unknown)."""

    model: ModelSpec | None
    gpus: tuple[GpuSpec | None, ...]
    problems: Problems

    @classmethod
    def resolve(cls, scenario: Scenario) -> _Specs:
        problems: Problems = []
        model: ModelSpec | None = None
        try:
            model = resolve_model(scenario.model)
        except UnknownPresetError as exc:
            problems.append(("model", str(exc)))
        gpus: list[GpuSpec | None] = []
        for i, group in enumerate(scenario.replicas):
            try:
                gpus.append(resolve_gpu(group.gpu))
            except UnknownPresetError as exc:
                gpus.append(None)
                problems.append((f"replicas.{i}.gpu", str(exc)))
        return cls(model, tuple(gpus), problems)


# -- 1. combinations -----------------------------------------------------------------


def check_combinations(scenario: Scenario) -> Problems:
    problems: Problems = []
    for i, group in enumerate(scenario.replicas):
        eng = group.engine
        if eng.kv_allocation != "paged" and eng.enable_prefix_caching:
            problems.append(
                (
                    f"replicas.{i}.engine",
                    f"kv_allocation {eng.kv_allocation!r} reserves private contiguous memory per "
                    "request: set enable_prefix_caching: false",
                )
            )
    roles = {g.role for g in scenario.replicas}
    if roles != {"both"} and roles != {"prefill", "decode"}:
        problems.append(
            (
                "",
                "replica roles: either every group is 'both', or groups are split into 'prefill' "
                f"and 'decode' (at least one of each) for disaggregated serving; got {sorted(roles)}",
            )
        )
    elif roles == {"prefill", "decode"} and any(g.engine.kv_allocation != "paged" for g in scenario.replicas):
        problems.append(("", "disaggregated serving is modelled with paged KV only (kv_allocation: paged)"))
    if roles == {"both"} and scenario.decode_router != "least_loaded":
        problems.append(
            (
                "decode_router",
                "picks decode replicas in disaggregated serving: no replica group has role 'decode'",
            )
        )
    modes = {g.engine.cache_isolation for g in scenario.replicas}
    if len(modes) > 1:
        problems.append(
            (
                "",
                "all replica groups need the same engine.cache_isolation: a request's block "
                f"hashes must not depend on where it runs (got {sorted(modes)})",
            )
        )
    sizes = {g.engine.block_size for g in scenario.replicas}
    if scenario.router.kind == "prefix_aware" and len(sizes) > 1:
        problems.append(
            (
                "",
                "router.kind prefix_aware compares cached prefixes block by block: all replica "
                f"groups need the same engine.block_size (got {sorted(sizes)})",
            )
        )
    names = [g.name for g in scenario.replicas]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        problems.append(("", f"replica group names must be unique; repeated: {', '.join(dup)}"))
    return problems + _side_channel_tenants(scenario) + _retention_policy(scenario) + check_cluster(scenario)


def _retention_priorities(workload: object) -> bool:
    """Whether a synthetic or mixture workload gives any request a retention priority."""
    components = getattr(workload, "components", None)
    if components is not None:
        return any(_retention_priorities(c) for c in components)
    retention = getattr(workload, "retention", None)
    tenants = getattr(workload, "tenants", [])
    kinds = [retention.kind if retention is not None else "default"]
    kinds += [t.retention.kind for t in tenants if t.retention is not None]
    return "priority" in kinds


def _retention_policy(scenario: Scenario) -> Problems:
    """Retention priorities are kept by the retention free queue only."""
    if not _retention_priorities(scenario.workload):
        return []
    return [
        (
            f"replicas.{i}.engine.eviction_policy",
            "requests with retention priorities need eviction_policy: retention",
        )
        for i, g in enumerate(scenario.replicas)
        if g.engine.eviction_policy != "retention"
    ]


def _side_channel_tenants(scenario: Scenario) -> Problems:
    """The side-channel analysis names two distinct tenants of a synthetic workload's list."""
    cfg = scenario.analysis.side_channel
    if cfg is None:
        return []
    if cfg.attacker == cfg.victim:
        return [("analysis.side_channel", "attacker and victim must be different tenants")]
    tenants = getattr(scenario.workload, "tenants", None)
    if tenants is None:
        return []  # a trace names its tenants per row
    known = {t.name for t in tenants}
    missing = [n for n in (cfg.attacker, cfg.victim) if n not in known]
    if missing:
        return [
            (
                "analysis.side_channel",
                f"tenant(s) {', '.join(missing)} not in workload.tenants ({', '.join(sorted(known)) or 'none'})",
            )
        ]
    return []


def check_cluster(scenario: Scenario) -> Problems:
    """Offload tiers, the shared KV pool and autoscaling: what must agree for them to work."""
    problems: Problems = []
    for i, group in enumerate(scenario.replicas):
        off, eng = group.offload, group.engine
        if off is not None and (off.dram or off.nvme) and not eng.enable_prefix_caching:
            problems.append(
                (
                    f"replicas.{i}.offload",
                    "offload tiers hold cached prefix blocks: set enable_prefix_caching: true",
                )
            )
        if off is not None and off.dram is not None and eng.cpu_offload_gib > 0:
            problems.append(
                (
                    f"replicas.{i}.offload.dram",
                    "give the host DRAM tier once: offload.dram or engine.cpu_offload_gib, not both",
                )
            )
        problems += _autoscale_problems(group, f"replicas.{i}")
    pool = scenario.shared_kv_pool
    if pool is not None:
        groups = scenario.replicas
        for what, values in (
            ("engine.block_size", {g.engine.block_size for g in groups}),
            ("engine.kv_cache_dtype", {g.engine.kv_cache_dtype for g in groups}),
        ):
            if len(values) > 1:
                problems.append(
                    (
                        "shared_kv_pool",
                        f"every replica reads the same blocks from the shared pool: all groups need "
                        f"the same {what} (got {sorted(map(str, values))})",
                    )
                )
        if not all(g.engine.enable_prefix_caching for g in groups):
            problems.append(
                (
                    "shared_kv_pool",
                    "the shared pool holds cached prefixes: enable_prefix_caching on every group",
                )
            )
    return problems


def _autoscale_problems(group: ReplicaGroup, where: str) -> Problems:
    auto = group.autoscale
    if auto is None:
        return []
    problems: Problems = []
    if group.attention_dp > 1:
        problems.append(
            (
                f"{where}.autoscale",
                "unsupported: autoscaling a group with attention_dp > 1 (instances of ranks)",
            )
        )
    if not auto.min_count <= group.count <= auto.max_count:
        problems.append(
            (
                f"{where}.count",
                f"an autoscaled group starts with count replicas: need min_count ({auto.min_count}) "
                f"<= count ({group.count}) <= max_count ({auto.max_count})",
            )
        )
    if not auto.scale_down_below < auto.scale_up_above:
        problems.append(
            (
                f"{where}.autoscale",
                f"scale_down_below ({auto.scale_down_below}) must be < scale_up_above ({auto.scale_up_above})",
            )
        )
    if auto.metric == "kv_usage" and auto.scale_up_above > 1:
        problems.append((f"{where}.autoscale.scale_up_above", "kv_usage is a share of the pool: at most 1"))
    return problems


# -- 2. presets ------------------------------------------------------------------------


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB:.2f} GiB"


def check_presets(scenario: Scenario, specs: _Specs | None = None) -> Problems:
    """Unknown names, TP, weights and KV in memory, max_model_len (needs the presets).

    A fp8 KV cache on a GPU without fp8 compute is allowed: vLLM stores fp8 and upcasts
    to fp16 for attention.
    """
    specs = specs or _Specs.resolve(scenario)
    problems = [p for p in specs.problems if p[0] == "model"]
    model = specs.model
    if model is not None and model.is_hybrid:
        for i, group in enumerate(scenario.replicas):
            eng = group.engine
            if eng.cpu_offload_gib:
                problems.append((f"replicas.{i}.engine.cpu_offload_gib", _HYBRID_ONLY % model.name))
            if eng.kv_allocation != "paged":
                problems.append((f"replicas.{i}.engine.kv_allocation", _HYBRID_ONLY % model.name))
    for i, (group, gpu) in enumerate(zip(scenario.replicas, specs.gpus, strict=True)):
        if gpu is None:
            problems += [p for p in specs.problems if p[0] == f"replicas.{i}.gpu"]
        elif model is not None:
            problems += _group_fits(
                served_model(model, group.engine.quantization), gpu, group, f"replicas.{i}"
            )
    return problems


def _group_fits(model: ModelSpec, gpu: GpuSpec, group: ReplicaGroup, where: str) -> Problems:
    engine = group.engine
    bad_tp = tp_problem(model, group.tp)
    if bad_tp:
        return [(f"{where}.tp", bad_tp)]
    problems: Problems = []
    problems += _moe_layout_problems(model, group, where)
    if engine.max_model_len is not None and engine.max_model_len > model.max_model_len:
        problems.append(
            (
                f"{where}.engine.max_model_len",
                f"{engine.max_model_len} exceeds {model.name}'s max_model_len ({model.max_model_len})",
            )
        )
    draft, draft_problems = _draft_model(model, group, where)
    if draft_problems:
        return problems + draft_problems
    cap = engine_kv_capacity(
        model, gpu, group.tp, engine, use_override=False, draft_model=draft, attention_dp=group.attention_dp
    )
    if cap.weight_bytes_per_shard > cap.budget_bytes:
        allows = (
            f"{_gib(gpu.memory_bytes)} x gpu_memory_utilization {engine.gpu_memory_utilization}"
            if engine.backend == "vllm"
            else f"{engine.backend}'s {KNOB_NAMES['gpu_memory_utilization'][engine.backend]} "
            f"{engine.gpu_memory_utilization} of {_gib(gpu.memory_bytes)}"
        )
        problems.append(
            (
                f"{where}.tp",
                f"{model.name} weights need {_gib(cap.weight_bytes_per_shard)} per GPU "
                f"({_gib(weight_bytes(model))} / tp={group.tp}{_dp_note(group)}) but {gpu.name} allows "
                f"{_gib(cap.budget_bytes)} ({allows}); raise tp or pick a larger GPU",
            )
        )
    elif engine.num_gpu_blocks_override is None and cap.num_blocks < 2:
        problems.append(
            (
                f"{where}.engine.gpu_memory_utilization",
                f"no room for one KV block besides vLLM's null block ({cap.bytes_per_block_per_shard:,.0f} "
                "bytes each): "
                f"{_gib(cap.budget_bytes)} budget - {_gib(cap.weight_bytes_per_shard)} weights - "
                f"{_gib(cap.activation_reserve_bytes)} activation reserve"
                + (
                    f" - {_gib(cap.linear_state_pool_bytes_per_shard)} linear-attention request states "
                    f"(max_num_seqs {engine.max_num_seqs} x {cap.linear_state_bytes_per_seq_per_shard / 2**20:,.1f} MiB)"
                    if cap.linear_state_pool_bytes_per_shard and engine.backend != "sglang"
                    else ""
                )
                + f" = {_gib(cap.kv_bytes_per_shard)} per GPU",
            )
        )
    elif engine.num_gpu_blocks_override is None and engine.backend == "vllm":
        # vLLM refuses to start; SGLang and TensorRT-LLM cap the length (kvsim.scenario.resolved.served_max_model_len)
        problems += _max_model_len_fits(model, gpu, group, cap, where)
    return problems


def _dp_note(group: ReplicaGroup) -> str:
    return f", experts / (tp x attention_dp={group.attention_dp})" if group.attention_dp > 1 else ""


def _moe_layout_problems(model: ModelSpec, group: ReplicaGroup, where: str) -> Problems:
    """Expert parallelism (moe_ep > 1) needs experts, and a whole number of them per rank;
    attention-DP balancing needs ranks that step together (a mixture of experts, attention_dp > 1)."""
    if group.engine.attention_dp_balance is not None and (
        group.attention_dp == 1 or model.num_experts is None
    ):
        return [
            (
                f"{where}.engine.attention_dp_balance",
                "balances the attention-DP ranks of a mixture of experts, which step together: it needs "
                f"attention_dp > 1 and experts ({model.name}, attention_dp={group.attention_dp})",
            )
        ]
    moe_ep = group.moe_layout[1]
    if moe_ep == 1:
        return []
    name = "expert_parallel" if group.expert_parallel else "moe_ep" if group.moe_ep is not None else "moe_tp"
    if model.num_experts is None:
        return [
            (
                f"{where}.{name}",
                f"{model.name} is not a mixture of experts: expert parallelism (moe_ep={moe_ep}) does not "
                "apply (attention_dp alone serves a dense model as data-parallel replicas)",
            )
        ]
    if model.num_experts % moe_ep:
        degree = "tp" if group.expert_parallel and group.attention_dp == 1 else "moe_ep"
        return [
            (
                f"{where}.{name}",
                f"expert parallelism places num_experts / moe_ep whole experts on each GPU group: "
                f"{model.name} has {model.num_experts} experts, not a multiple of {degree}={moe_ep}",
            )
        ]
    return []


def _draft_model(model: ModelSpec, group: ReplicaGroup, where: str) -> tuple[ModelSpec | None, Problems]:
    """The speculative draft model, or why it cannot serve ``model`` on this group."""
    spec = group.engine.speculative_config
    if spec is not None and spec.method == "mtp" and model.num_mtp_layers < 1:
        return None, [
            (
                f"{where}.engine.speculative_config.method",
                f"method mtp drafts with the model's own multi-token-prediction layers and "
                f"{model.name} has none (num_mtp_layers 0): use eagle, draft_model or ngram",
            )
        ]
    if spec is None or spec.model is None:
        return None, []
    field = f"{where}.engine.speculative_config.model"
    try:
        draft = resolve_model(spec.model)
    except UnknownPresetError as exc:
        return None, [(field, str(exc))]
    if model.sliding_window is not None or draft.sliding_window is not None:
        return draft, [
            (field, "a draft model beside a sliding-window model is not modelled (their KV shares blocks)")
        ]
    bad_tp = tp_problem(draft, group.tp)
    if bad_tp:
        return draft, [(field, f"the draft model {draft.name}: {bad_tp}")]
    return draft, []


def _max_model_len_fits(
    model: ModelSpec, gpu: GpuSpec, group: ReplicaGroup, cap: KvCapacity, where: str
) -> Problems:
    """vLLM's start-up check: one request of max_model_len tokens fits the KV pool.

    Skipped with ``num_gpu_blocks_override`` (vLLM applies it there too): tiny pools are
    kvsim's way to study pressure, and a request longer than the pool is rejected at
    arrival instead (docs/engine.md).
    """
    engine = group.engine
    limit = engine.max_model_len or model.max_model_len
    problem = max_model_len_problem(model, cap, limit, engine.max_num_batched_tokens)
    if problem is None:
        return []
    if engine.max_model_len is None:
        problem += f" (engine.max_model_len is unset: {model.name}'s own limit applies)"
    return [(f"{where}.engine.max_model_len", f"{problem}; on {gpu.name} x tp {group.tp}")]


# -- 3. cost profiles ------------------------------------------------------------------


def check_cost_references(
    scenario: Scenario, base_dir: Path | None = None, specs: _Specs | None = None
) -> Problems:
    """Problems with the profiles a scenario names (unreadable, or measured for another setup)."""
    specs = specs or _Specs.resolve(scenario)
    problems: Problems = []
    for i, (group, gpu) in enumerate(zip(scenario.replicas, specs.gpus, strict=True)):
        cfg = group.cost_model
        if not isinstance(cfg, ProfileCostConfig) or specs.model is None or gpu is None:
            continue  # unknown names are check_presets' to report
        try:
            profile = load_profile(cfg.profile, base_dir)
            check_profile_matches(
                profile,
                model=served_model(specs.model, group.engine.quantization),
                gpu=gpu,
                tp=group.tp,
                kv_cache_dtype=group.engine.kv_cache_dtype,
            )
        except KvsimError as exc:
            problems.append((f"replicas.{i}.cost_model.profile", str(exc)))
    return problems
