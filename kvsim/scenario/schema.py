"""The scenario schema: every field one simulation reads, with its type, range and description.

A scenario names a model, one or more *replica groups* (GPU type, tensor parallelism,
engine knobs named as vLLM names them, cost model), a router and a workload. Every model
is frozen and rejects unknown keys; every field carries a description that the CLI's
``kvsim schema`` and the dashboard render. Rules that involve several fields, presets or
profiles live in `kvsim.scenario.checks`; loading and overrides in `kvsim.scenario.loading`.

    scenario
    ├── model                  preset name or inline ModelSpec
    ├── replicas[]             replica groups: count x (gpu, tp, engine, cost_model)
    │     ├── offload          host DRAM / NVMe tiers below the GPU pool
    │     └── autoscale        replicas added and removed with the load
    ├── router                 how arrivals pick a replica, and what it sees (view)
    ├── admission              which arrivals the cluster refuses
    ├── kv_transfer            the prefill -> decode link (one NIC per replica)
    ├── network                dedicated or fair-shared links, fabric limit
    ├── shared_kv_pool         a cluster-wide KV store every replica reads over the network
    ├── workload               arrivals, lengths, prefix structure
    ├── slo                    targets for goodput
    └── sim                    simulator knobs (fast-forward, time limit)
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from kvsim.backends.defaults import DEFAULTED_KNOBS, Backend, resolve_engine
from kvsim.cost.config import CostModelConfig, RooflineCostConfig, _CostHolder
from kvsim.errors import KvsimError
from kvsim.frozen import FrozenModel, Name
from kvsim.limits import (
    MAX_BANDWIDTH_BYTES_PER_S,
    MAX_FRONTEND_TOKEN_S,
    MAX_GPU_MEMORY_BYTES,
    MAX_NUM_REQUESTS,
    MAX_STEP_TIME_S,
    MAX_TIME_S,
    MAX_TOKENS,
    MAX_WEIGHT,
    MIN_BANDWIDTH_BYTES_PER_S,
    MIN_PERIOD_S,
)
from kvsim.model.hf_config import read_model_ref
from kvsim.model.memory_fit import served_model
from kvsim.model.presets import resolve_gpu, resolve_model
from kvsim.model.specs import GpuSpec, KvDtype, ModelSpec, WeightDtype
from kvsim.registry import EVICTION_POLICIES, ROUTERS, SCHEDULING_POLICIES
from kvsim.workload.config import SyntheticWorkload, WorkloadConfig

#: A model named by preset or Hugging Face id, given inline, or read from a config.json:
#: ``{hf_config: PATH, name: ..., weight_dtype: ...}`` becomes a ModelSpec when validated.
ModelRef = Annotated[str | ModelSpec, BeforeValidator(read_model_ref)]
_MODEL_REF_HELP = (
    "a preset name or Hugging Face id (kvsim.model.presets; e.g. llama-3.1-8b, Qwen/Qwen3-32B-FP8), an "
    "inline model spec, or {hf_config: PATH} to read a Hugging Face config.json (kvsim.model.hf_config)"
)

#: Largest block size, tokens; most KV blocks of one pool; most host memory for swap or
#: offload, GiB (a pebibyte); most replicas per group, GPUs per replica, groups per scenario.
MAX_BLOCK_SIZE = 65_536
MAX_NUM_BLOCKS = 2**31 - 1
MAX_HOST_GIB = 1024.0**2
MAX_REPLICAS_PER_GROUP = 65_536
MAX_TP = 1024
MAX_GROUPS = 128
#: Most iterations an engine may leave arrivals unseen or hold prompts back (the engines take
#: any int; a million iterations is hours of serving).
MAX_RECV_INTERVAL = 1_000_000
#: Most points per replica on a consistent-hash ring.
MAX_HASH_VIRTUAL_NODES = 4096
#: Largest simulated time limit, seconds; largest seed (exact in JSON and in the dashboard).
MAX_SIM_TIME_S = 1e12
MAX_SEED = 2**53 - 1


class SpeculativeConfig(FrozenModel):
    """Speculative decoding, as vLLM's ``speculative_config``: a draft proposes
    ``num_speculative_tokens`` tokens per step, the target verifies them in one pass.

    Acceptance is per draft position, each conditional on the ones before (a rejected token
    ends the run): ``acceptance_rate`` alpha at every position, or ``acceptance_per_position``.
    Expected tokens per verify step: 1 + sum_i prod_{j <= i} p_j (Leviathan et al. 2023,
    "Fast Inference from Transformers via Speculative Decoding", ICML, section 3.1).
    """

    method: Literal["draft_model", "eagle", "mtp", "ngram"] = Field(
        default="draft_model",
        description="draft_model: a smaller model with its own weights, cost and KV (`model`); "
        "eagle: a one-layer draft head on the target's hidden states (its cost, no KV of its own "
        "here); mtp: the target's own multi-token-prediction layer (DeepSeek-V3/R1, Kimi-K2.5, "
        "GLM-5, Qwen3.5: num_mtp_layers >= 1), priced by the target's cost model kind, no KV of "
        "its own here; ngram: prompt-lookup drafting on the CPU (free, no KV).",
    )
    num_speculative_tokens: int = Field(
        ge=1, le=32, description="Draft tokens proposed per step (vLLM's num_speculative_tokens)."
    )
    model: ModelRef | None = Field(
        default=None, description=f"method draft_model: the draft model: {_MODEL_REF_HELP}."
    )
    acceptance_rate: float | None = Field(
        default=None,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Chance each draft token is accepted given the ones before it were (alpha).",
    )
    acceptance_per_position: list[float] | None = Field(
        default=None,
        description="Conditional acceptance of draft position 1..num_speculative_tokens, each in [0, 1] "
        "(replaces acceptance_rate).",
    )

    @model_validator(mode="after")
    def _check(self) -> SpeculativeConfig:
        per_pos = self.acceptance_per_position
        if (self.acceptance_rate is None) == (per_pos is None):
            raise ValueError("give exactly one of acceptance_rate and acceptance_per_position")
        if per_pos is not None:
            if len(per_pos) != self.num_speculative_tokens:
                raise ValueError(
                    f"acceptance_per_position has {len(per_pos)} entries for "
                    f"num_speculative_tokens {self.num_speculative_tokens}"
                )
            if not all(0 <= p <= 1 for p in per_pos):  # also refuses NaN
                raise ValueError("acceptance_per_position entries must lie in [0, 1]")
        if (self.method == "draft_model") != (self.model is not None):
            raise ValueError("method draft_model needs `model`; eagle, mtp and ngram take none")
        return self

    def acceptance(self) -> tuple[float, ...]:
        """Conditional acceptance of each draft position."""
        if self.acceptance_per_position is not None:
            return tuple(self.acceptance_per_position)
        assert self.acceptance_rate is not None
        return (self.acceptance_rate,) * self.num_speculative_tokens

    def expected_tokens_per_step(self) -> float:
        """Tokens a verify step produces on average: the accepted run plus the bonus token."""
        total, run = 1.0, 1.0
        for p in self.acceptance():
            run *= p
            total += run
        return total


class FrontendConfig(FrozenModel):
    """The server's work on a request before its scheduler sees it: the HTTP request parsed,
    the prompt's text tokenized, the request handed to the engine's scheduler process.

    A request routed to the replica joins its scheduler ``request_s + per_prompt_token_s x
    prompt tokens`` after it was sent; its TTFT and end-to-end latency count that time, the
    GPU does not (the front end runs on the host, beside the engine). Zero by default: an
    engine fed token ids in-process (vLLM's ``LLM`` / ``LLMEngine``, kvsim's recorded traces)
    has no front end in the way. ``benchmarks/silicon.py`` sets 20 ms a request on vLLM's
    aggregated rows (``VLLM_FRONTEND_REQUEST_S``, fitted on H200 rows; no per-token term: that
    fit was tried and not adopted, docs/validation.md, "A server's front end, tried and not
    adopted").
    """

    request_s: float = Field(
        default=0.0,
        ge=0,
        le=MAX_STEP_TIME_S,
        description="Fixed front-end time of each request (HTTP, input processing, the hand-off to "
        "the scheduler), seconds.",
    )
    per_prompt_token_s: float = Field(
        default=0.0,
        ge=0,
        le=MAX_FRONTEND_TOKEN_S,
        description="Front-end time per prompt token (tokenizing the text), seconds.",
    )


class AttentionDpBalance(FrozenModel):
    """TensorRT-LLM's attention-DP balancing (``attention_dp_config: {enable_balance: true,
    timeout_iters, batching_wait_iters}``, tensorrt_llm/llmapi/llm_args.py AttentionDpConfig;
    PyExecutor._balance_adp_requests, tensorrt_llm/_torch/pyexecutor/py_executor.py, 1.1-1.2).

    The instance's ranks step in lockstep; every iteration, unless every rank has a prompt to
    start and room for it, new prompts are held (a counter +1, released when it reaches
    ``timeout_iters`` or some rank has nothing decoding); once every rank has one and every rank
    decodes, they are held ``batching_wait_iters`` iterations more. The counter runs whether
    or not anything waits, as the engine's does, so a held prompt waits 0 to timeout_iters.
    """

    timeout_iters: int = Field(
        default=50,
        ge=0,
        le=MAX_RECV_INTERVAL,
        description="Iterations prompts are held while some rank has none to start (TensorRT-LLM's "
        "default 50).",
    )
    batching_wait_iters: int = Field(
        default=10,
        ge=0,
        le=MAX_RECV_INTERVAL,
        description="Iterations prompts are held more once every rank has one, while every rank "
        "decodes (TensorRT-LLM's default 10).",
    )


class EngineConfig(FrozenModel):
    """Serving-engine knobs of one replica, with vLLM's names.

    A knob left unset takes the default of ``backend`` at ``backend_version`` on the group's
    GPU and TP degree (`kvsim.backends.defaults`); a knob set always wins. The field defaults below are
    kvsim's own, which vLLM without a backend_version keeps.
    """

    backend: Backend = Field(
        default="vllm",
        description="The serving engine whose defaults fill the knobs left unset: vllm, sglang or "
        "trtllm (TensorRT-LLM's trtllm-serve). kvsim schedules as vLLM does; docs/backends.md says "
        "what is approximated for the others.",
    )
    backend_version: str | None = Field(
        default=None,
        max_length=64,
        description="The backend's release (e.g. 0.11.2, 0.5.9, 1.2.0rc6) whose defaults apply, as its "
        "online server sets them. None: for vllm, kvsim's own defaults (docs/backends.md lists how "
        "they differ from each vLLM release); for sglang and trtllm, the newest release tabulated.",
    )
    quantization: WeightDtype | None = Field(
        default=None,
        description="Weight precision this deployment serves (vLLM's --quantization): fp8, fp8_block, "
        "int8, int4, nvfp4, mxfp4, fp16, bf16. None: the model's weight_dtype.",
    )
    block_size: int = Field(
        default=16, ge=1, le=MAX_BLOCK_SIZE, description="Tokens per KV block (vLLM default 16)."
    )
    max_num_seqs: int = Field(
        default=256, ge=1, le=MAX_NUM_REQUESTS, description="Most requests running in one iteration."
    )
    max_num_batched_tokens: int = Field(
        default=8192,
        ge=1,
        le=MAX_TOKENS,
        description="Token budget of one iteration (prefill chunks + decodes); vLLM's default "
        "for its OpenAI server on a large GPU.",
    )
    enable_chunked_prefill: bool = Field(
        default=True, description="Split long prompts into chunks that fit the token budget."
    )
    long_prefill_token_threshold: int = Field(
        default=0,
        ge=0,
        le=MAX_TOKENS,
        description="Cap on one request's prefill tokens per iteration (0: no cap).",
    )
    enable_prefix_caching: bool = Field(
        default=True, description="Reuse cached KV blocks of shared prefixes."
    )
    gpu_memory_utilization: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="Fraction of GPU memory the engine may use (weights + activations + KV). With "
        "backend sglang it is mem_fraction_static (weights + KV); with trtllm, "
        "kv_cache_config.free_gpu_memory_fraction: the share of the memory left after weights and "
        "activations that the KV cache takes.",
    )
    kv_cache_dtype: KvDtype = Field(
        default="auto", description="KV-cache element type; 'auto' uses the model's dtype."
    )
    preemption_mode: Literal["recompute", "swap"] = Field(
        default="recompute",
        description="How a preempted request comes back: prefill again, or swap its blocks via host memory.",
    )
    scheduling_policy: str = Field(
        default="fcfs",
        description="Order of the waiting queue and choice of preemption victim: fcfs (arrival "
        "order; the last admitted is preempted) or priority (lowest priority value first; the "
        "lowest priority, latest arrival is preempted); or a policy registered in "
        "kvsim.registry.SCHEDULING_POLICIES.",
        json_schema_extra=SCHEDULING_POLICIES.json_schema_enum,
    )
    eviction_policy: str = Field(
        default="lru",
        description="Which cached-but-free block is reused first: lru (least recently freed) or "
        "lfu (least often hit); or a policy registered in kvsim.registry.EVICTION_POLICIES.",
        json_schema_extra=EVICTION_POLICIES.json_schema_enum,
    )
    cpu_offload_gib: float = Field(
        default=0.0,
        ge=0,
        le=MAX_HOST_GIB,
        description="Host memory per GPU for a second-tier prefix cache: evicted cached blocks are "
        "written back to it and a prefix hit there is loaded over PCIe instead of recomputed "
        "(vLLM CPU offloading, LMCache, SGLang HiCache); 0 disables.",
    )
    swap_space_gib: float = Field(
        default=4.0,
        ge=0,
        le=MAX_HOST_GIB,
        description="Host memory per GPU for swapped-out blocks, GiB (vLLM's swap_space).",
    )
    num_gpu_blocks_override: int | None = Field(
        default=None,
        ge=2,
        le=MAX_NUM_BLOCKS,
        description="Use exactly this many KV blocks instead of sizing from memory (vLLM's "
        "num_gpu_blocks_override; as there, one of them is the null block, so N - 1 hold KV).",
    )
    max_total_tokens: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TOKENS,
        description="Cap on the KV pool, tokens per rank: the pool holds the fewer of this and what "
        "memory gives (SGLang's --max-total-tokens, TensorRT-LLM's kv_cache_config.max_tokens). "
        "None: memory alone. num_gpu_blocks_override, which fixes the pool, wins over it.",
    )
    activation_reserve_gib: float | None = Field(
        default=None,
        ge=0,
        le=MAX_GPU_MEMORY_BYTES / 1024**3,
        description="Memory held for activations per GPU, GiB; None estimates it.",
    )
    max_model_len: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TOKENS,
        description="Longest prompt + output accepted; None uses the model's limit.",
    )
    kv_allocation: Literal["paged", "reserve_max", "reserve_pow2", "reserve_oracle"] = Field(
        default="paged",
        description="paged: blocks on demand (vLLM). reserve_*: one contiguous run of blocks per "
        "request, reserved at admission as Orca-style systems do, for max_model_len tokens (max), "
        "prompt + output rounded up to a power of two (pow2), or exactly prompt + output (oracle); "
        "the vLLM paper's baselines (Kwon et al., SOSP 2023, section 6.1).",
    )
    cache_isolation: Literal["tenant", "shared"] = Field(
        default="tenant",
        description="tenant: the first block of every prompt is salted with its tenant, so tenants "
        "never share cache entries (vLLM's cache_salt, one per tenant); shared: one cache for "
        "everyone (vLLM without cache_salt), whose hits reveal through timing what others sent.",
    )
    speculative_config: SpeculativeConfig | None = Field(
        default=None,
        description="Speculative decoding (vLLM's speculative_config); None: off.",
    )
    scheduler_recv_interval: int = Field(
        default=1,
        ge=1,
        le=MAX_RECV_INTERVAL,
        description="SGLang's --scheduler-recv-interval (backend sglang only): while it decodes, "
        "the scheduler takes new requests in only once every N decode iterations (at once after a "
        "prefill batch, and when idle); requests sent in between wait unseen. 1: every iteration.",
    )
    enable_mixed_chunk: bool = Field(
        default=False,
        description="SGLang's --enable-mixed-chunk (backend sglang only). False, SGLang's default: an "
        "iteration runs prompts or decodes, never both; whenever a prompt can start (or one is "
        "part-way through its chunks) the iteration prefills prompts up to chunked_prefill_size "
        "and the running decodes wait. True: prompt chunks and decodes share iterations.",
    )
    async_scheduling: bool = Field(
        default=False,
        description="Schedule each iteration while the one before it runs (vLLM's async_scheduling, "
        "its default from 0.14; SGLang's and TensorRT-LLM's overlap schedulers, on by default): a "
        "request that arrives during an iteration joins the one after the next, not the next. "
        "False: the scheduler decides after each iteration's outcome (vLLM with "
        "async_scheduling=False, as kvsim's recorded traces run it).",
    )
    frontend: FrontendConfig = Field(
        default_factory=FrontendConfig,
        description="The server's time on a request before its scheduler sees it (HTTP, "
        "tokenization): request_s + per_prompt_token_s x prompt tokens, counted in TTFT, not on "
        "the GPU. Default 0: token ids fed in-process.",
    )
    batch_wait_timeout_iters: int = Field(
        default=0,
        ge=0,
        le=MAX_RECV_INTERVAL,
        description="TensorRT-LLM's batch_wait_timeout_iters (backend trtllm only): while requests "
        "decode, new prompts are held for up to this many iterations, until the iteration's "
        "scheduled tokens with theirs reach batch_wait_max_tokens_ratio of the token budget. 0: off.",
    )
    batch_wait_max_tokens_ratio: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="TensorRT-LLM's batch_wait_max_tokens_ratio (backend trtllm only): the share of "
        "max_num_batched_tokens at which held prompts start at once. 0: off (holding needs both).",
    )
    attention_dp_balance: AttentionDpBalance | None = Field(
        default=None,
        description="TensorRT-LLM's attention_dp_config with enable_balance (backend trtllm, a "
        "mixture of experts with attention_dp > 1 only): the instance's ranks start new prompts "
        "together, holding them up to timeout_iters iterations. None: off (the engine's default).",
    )
    enable_kv_cache: bool = Field(
        default=True,
        description="False prices every decode step as recomputing the whole sequence, as a model "
        "without a KV cache must (the quadratic-cost demonstration); memory accounting is unchanged.",
    )

    @model_validator(mode="after")
    def _intake_knobs_of_their_backend(self) -> EngineConfig:
        """SGLang's recv interval and mixed chunks, TensorRT-LLM's batch waiting and attention-DP
        balancing are theirs alone."""
        if self.scheduler_recv_interval != 1 and self.backend != "sglang":
            raise ValueError(
                f"scheduler_recv_interval is SGLang's --scheduler-recv-interval: it needs backend "
                f"sglang, not {self.backend}"
            )
        if self.enable_mixed_chunk and self.backend != "sglang":
            raise ValueError(
                f"enable_mixed_chunk is SGLang's --enable-mixed-chunk: it needs backend sglang, "
                f"not {self.backend} (whose iterations mix prompts and decodes anyway)"
            )
        if self.attention_dp_balance is not None and self.backend != "trtllm":
            raise ValueError(
                f"attention_dp_balance is TensorRT-LLM's attention_dp_config enable_balance: it needs "
                f"backend trtllm, not {self.backend}"
            )
        waits = self.batch_wait_timeout_iters or self.batch_wait_max_tokens_ratio
        if waits and self.backend != "trtllm":
            raise ValueError(
                f"batch_wait_timeout_iters / batch_wait_max_tokens_ratio are TensorRT-LLM's batch "
                f"waiting: they need backend trtllm, not {self.backend}"
            )
        return self

    @field_validator("scheduling_policy")
    @classmethod
    def _known_scheduling_policy(cls, name: str) -> str:
        return SCHEDULING_POLICIES.check(name)

    @model_validator(mode="after")
    def _backend_defaults(self) -> EngineConfig:
        """Unset knobs at the backend's defaults for an unknown GPU (the scenario resolves them
        again with its GPU, TP degree and model: `Scenario._resolve_engines`)."""
        resolved = resolve_engine(self)  # raises BackendVersionError (a ValueError) for a bad version
        if resolved is not self:
            for key in DEFAULTED_KNOBS:
                object.__setattr__(self, key, getattr(resolved, key))  # still unset: fields_set unchanged
        return self

    @field_validator("eviction_policy")
    @classmethod
    def _known_eviction_policy(cls, name: str) -> str:
        return EVICTION_POLICIES.check(name)


WritePolicy = Literal["write_on_evict", "write_through"]


class TierConfig(FrozenModel):
    """One offload tier of a replica: capacity, link to the GPU, replacement policy."""

    capacity_gib: float = Field(gt=0, le=MAX_HOST_GIB, description="Capacity per replica, GiB.")
    bandwidth_bytes_per_s: float | None = Field(
        default=None,
        ge=MIN_BANDWIDTH_BYTES_PER_S,
        le=MAX_BANDWIDTH_BYTES_PER_S,
        description="Bytes per second between this tier and one GPU; None: the GPU's PCIe "
        "bandwidth (host DRAM; required for nvme).",
    )
    latency_s: float = Field(
        default=0.0, ge=0, le=MAX_STEP_TIME_S, description="Fixed cost of one load from this tier, seconds."
    )
    eviction_policy: Literal["lru", "fifo"] = Field(
        default="lru",
        description="Which block the tier drops when full: lru (stored or hit longest ago) or fifo "
        "(stored first; hits do not refresh).",
    )
    write_policy: WritePolicy = Field(
        default="write_on_evict",
        description="write_on_evict: blocks arrive when the tier above drops them (vLLM CPU "
        "offloading, SGLang HiCache); write_through: every block the GPU caches is written at "
        "once (LMCache's store-on-compute), and evictions write nothing.",
    )


class OffloadConfig(FrozenModel):
    """Tiers below one replica's GPU pool, looked up in this order (host DRAM, then NVMe)."""

    dram: TierConfig | None = Field(
        default=None, description="Host DRAM tier (replaces engine.cpu_offload_gib when set)."
    )
    nvme: TierConfig | None = Field(
        default=None,
        description="Local NVMe tier; its bandwidth must be given (e.g. 7e9 for one PCIe 4.0 x4 drive).",
    )

    @field_validator("nvme")
    @classmethod
    def _nvme_has_bandwidth(cls, tier: TierConfig | None) -> TierConfig | None:
        if tier is not None and tier.bandwidth_bytes_per_s is None:
            raise ValueError("an nvme tier needs its bandwidth_bytes_per_s")
        return tier


class AutoscaleConfig(FrozenModel):
    """Replicas of a group added and removed with the load, between min_count and max_count.

    Every ``interval_s`` the policy reads ``metric`` averaged over the group's replicas that
    take requests: above ``scale_up_above`` it starts one more (it takes requests after
    ``cold_start_s``); below ``scale_down_below`` for ``scale_down_delay_s`` it stops routing
    to one, which leaves once its last request is done. The group's ``count`` is the start.
    """

    metric: Literal["queue_length", "kv_usage", "outstanding"] = Field(
        default="queue_length",
        description="queue_length: waiting requests per replica; kv_usage: used share of the KV "
        "pool; outstanding: unfinished requests per replica.",
    )
    scale_up_above: float = Field(
        ge=0, le=MAX_NUM_REQUESTS, description="Start a replica when the metric is above this."
    )
    scale_down_below: float = Field(
        ge=0, le=MAX_NUM_REQUESTS, description="Drain a replica when the metric stays below this."
    )
    interval_s: float = Field(
        default=10.0, ge=MIN_PERIOD_S, le=MAX_TIME_S, description="Seconds between two decisions."
    )
    cold_start_s: float = Field(
        default=60.0,
        ge=0,
        le=MAX_TIME_S,
        description="Seconds from the decision to start a replica until it takes requests (model "
        "load, warm-up); it is paid for from the decision on.",
    )
    scale_down_delay_s: float = Field(
        default=60.0,
        ge=0,
        le=MAX_TIME_S,
        description="How long the metric must stay below scale_down_below before a replica is drained.",
    )
    min_count: int = Field(
        default=1, ge=1, le=MAX_REPLICAS_PER_GROUP, description="Fewest replicas taking requests."
    )
    max_count: int = Field(
        ge=1, le=MAX_REPLICAS_PER_GROUP, description="Most replicas provisioned (starting ones included)."
    )


class ReplicaGroup(_CostHolder):
    """``count`` identical instances: one GPU, one tensor-parallel group, or (attention_dp > 1)
    attention_dp ranks of tp GPUs each sharing one mixture of experts."""

    name: Name = Field(default="replica", min_length=1, description="Group name; replica ids are NAME-INDEX.")
    count: int = Field(
        default=1,
        ge=1,
        le=MAX_REPLICAS_PER_GROUP,
        description="Number of replicas (instances: attention_dp ranks each) in this group.",
    )
    gpu: str | GpuSpec = Field(default="h100-sxm", description="GPU preset name or an inline GPU spec.")
    tp: int = Field(default=1, ge=1, le=MAX_TP, description="Tensor-parallel degree (GPUs per replica).")
    engine: EngineConfig = Field(default_factory=EngineConfig, description="Engine knobs.")
    cost_model: CostModelConfig = Field(
        default_factory=RooflineCostConfig, description="How iteration times are computed."
    )
    role: Literal["both", "prefill", "decode"] = Field(
        default="both",
        description="both: prefill and decode on the same replica; prefill / decode: "
        "disaggregated serving, prompts on prefill replicas, KV sent to decode replicas.",
    )
    expert_parallel: bool = Field(
        default=False,
        description="Mixture of experts: place whole experts on the instance's GPUs (moe_ep = tp x "
        "attention_dp, moe_tp = 1), as vLLM's --enable-expert-parallel does, instead of splitting "
        "every expert over them (tensor parallelism). Shorthand for moe_ep; set one or the other.",
    )
    attention_dp: int = Field(
        default=1,
        ge=1,
        le=MAX_TP,
        description="Attention data parallelism: one instance is attention_dp ranks of tp GPUs each, "
        "every rank its own scheduler, batch (engine.max_num_seqs each) and KV pool, the attention "
        "weights replicated per rank and the experts of a mixture of experts split over all "
        "tp x attention_dp GPUs (moe_tp x moe_ep), the ranks stepping together (the busiest "
        "rank's iteration is everyone's). The router spreads requests over the ranks; count "
        "counts instances. A dense model's ranks are plain data-parallel replicas.",
    )
    moe_tp: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TP,
        description="Mixture of experts: GPUs each expert is split over (tensor parallelism inside "
        "the experts). moe_tp x moe_ep = tp x attention_dp. None: tp x attention_dp / moe_ep.",
    )
    moe_ep: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TP,
        description="Mixture of experts: expert-parallel degree, whole experts placed on moe_ep GPU "
        "groups (num_experts / moe_ep each) with tokens exchanged between them. moe_tp x moe_ep = "
        "tp x attention_dp. None: 1, or tp x attention_dp with expert_parallel, or tp x "
        "attention_dp / moe_tp.",
    )
    offload: OffloadConfig | None = Field(
        default=None,
        description="Host DRAM and NVMe tiers below each replica's GPU pool (None: none, "
        "or engine.cpu_offload_gib).",
    )
    autoscale: AutoscaleConfig | None = Field(
        default=None,
        description="Add and remove replicas of this group with the load (None: count is fixed).",
    )

    @property
    def gpus_per_instance(self) -> int:
        """GPUs of one instance: tp x attention_dp (the moe_tp x moe_ep GPUs the experts span)."""
        return self.tp * self.attention_dp

    @property
    def moe_layout(self) -> tuple[int, int]:
        """(moe_tp, moe_ep) as given or defaulted (see the fields); the rule is checked at load."""
        gpus = self.gpus_per_instance
        if self.moe_tp is not None and self.moe_ep is not None:
            return self.moe_tp, self.moe_ep
        if self.moe_ep is not None:
            return max(1, gpus // self.moe_ep), self.moe_ep
        if self.moe_tp is not None:
            return self.moe_tp, max(1, gpus // self.moe_tp)
        return (1, gpus) if self.expert_parallel else (gpus, 1)

    @model_validator(mode="after")
    def _moe_layout_spans_the_instance(self) -> ReplicaGroup:
        """moe_tp x moe_ep = tp x attention_dp: the experts live on the instance's GPUs, all of them."""
        gpus = self.gpus_per_instance
        most = max(self.count, self.autoscale.max_count if self.autoscale is not None else 0)
        if most * self.attention_dp > MAX_REPLICAS_PER_GROUP:
            raise ValueError(
                f"count x attention_dp = {most} x {self.attention_dp} ranks exceeds {MAX_REPLICAS_PER_GROUP:,} "
                "replicas per group"
            )
        if self.expert_parallel and (self.moe_ep not in (None, gpus) or self.moe_tp not in (None, 1)):
            raise ValueError(
                f"expert_parallel means moe_ep = tp x attention_dp = {gpus} and moe_tp = 1; "
                f"got moe_tp={self.moe_tp}, moe_ep={self.moe_ep}: set moe_tp / moe_ep or expert_parallel"
            )
        for name, value in (("moe_tp", self.moe_tp), ("moe_ep", self.moe_ep)):
            if value is not None and gpus % value:
                raise ValueError(
                    f"{name}={value} does not divide tp x attention_dp = {self.tp} x {self.attention_dp} = {gpus}"
                )
        moe_tp, moe_ep = self.moe_layout
        if moe_tp * moe_ep != gpus:
            raise ValueError(
                f"moe_tp x moe_ep = {moe_tp} x {moe_ep} = {moe_tp * moe_ep} must equal "
                f"tp x attention_dp = {self.tp} x {self.attention_dp} = {gpus}"
            )
        return self


class RouterViewConfig(FrozenModel):
    """What a router sees of the replicas, and how late."""

    cache: Literal["events", "exact"] = Field(
        default="events",
        description="events: cached prefixes come from an index of the KV events (block stored / "
        "removed) each replica publishes, as vLLM's KV events feed llm-d's and Dynamo's routers; "
        "exact: the router reads every replica's prefix cache directly.",
    )
    kv_events_delay_s: float = Field(
        default=0.0,
        ge=0,
        le=MAX_TIME_S,
        description="cache events: seconds from an engine step to its KV events reaching the "
        "index (0: at once, which routes exactly as cache: exact).",
    )
    load_refresh_s: float = Field(
        default=0.0,
        ge=0,
        le=MAX_TIME_S,
        description="Seconds between load snapshots (outstanding, running, waiting requests, KV "
        "usage) the router reads; 0: live values.",
    )


class RouterConfig(FrozenModel):
    """How an arriving request picks a replica."""

    kind: str = Field(
        default="round_robin",
        description="round_robin: in turn; least_loaded (= least_outstanding): fewest unfinished "
        "requests (ties: lowest index); prefix_aware: the best score cached-prefix share - "
        "load_weight x relative load (vLLM production stack's load-aware KV routing); random "
        "(seeded); least_kv_usage: lowest used share of the KV pool; session_affinity: a "
        "conversation stays on its replica unless that one is overloaded; consistent_hash: a "
        "ring of replicas keyed by the prompt's first tokens, with bounded loads; or a router "
        "registered in kvsim.registry.ROUTERS.",
        json_schema_extra=ROUTERS.json_schema_enum,
    )
    load_weight: float = Field(
        default=0.5,
        ge=0,
        le=MAX_WEIGHT,
        description="prefix_aware: weight of a replica's relative load, (load - mean) / max(1, mean), "
        "against the share of the prompt it has cached; 0 routes on cache hits alone.",
    )
    prefix_threshold: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="prefix_aware: a cached share of the prompt below this counts as none (so a "
        "short common prefix does not pull requests to a busy replica); 0: every hit counts.",
    )
    session_max_load_ratio: float = Field(
        default=2.0,
        ge=1,
        le=MAX_WEIGHT,
        description="session_affinity: a conversation leaves its replica (for the least loaded one) "
        "when that replica has more than this times the mean unfinished requests (at least 1).",
    )
    hash_prefix_tokens: int = Field(
        default=1024,
        ge=1,
        le=MAX_TOKENS,
        description="consistent_hash: how many leading prompt tokens (with the tenant) form the key.",
    )
    hash_load_bound: float | None = Field(
        default=1.25,
        ge=1,
        le=MAX_WEIGHT,
        description="consistent_hash: a replica takes a key only while it has at most this times the "
        "mean load (rounded up), else the next on the ring does (Mirrokni et al., consistent "
        "hashing with bounded loads, SODA 2018); None: plain consistent hashing.",
    )
    hash_virtual_nodes: int = Field(
        default=64,
        ge=1,
        le=MAX_HASH_VIRTUAL_NODES,
        description="consistent_hash: points per replica on the ring.",
    )
    view: RouterViewConfig = Field(
        default_factory=RouterViewConfig,
        description="What the router sees (exact state, KV-event index, snapshots).",
    )

    @field_validator("kind")
    @classmethod
    def _known_router(cls, name: str) -> str:
        return ROUTERS.check(name)


class AdmissionConfig(FrozenModel):
    """Which arrivals the cluster refuses; refused requests are rejected with their reason."""

    max_waiting_per_replica: int | None = Field(
        default=None,
        ge=0,
        le=MAX_NUM_REQUESTS,
        description="Bounded waiting queue: a request routed to a replica already holding this many "
        "waiting requests is rejected (queue_full); None: unbounded.",
    )
    max_cluster_waiting: int | None = Field(
        default=None,
        ge=0,
        le=MAX_NUM_REQUESTS,
        description="Reject arrivals while the entry replicas hold this many waiting requests in "
        "all (cluster_queue); None: no limit.",
    )
    max_estimated_wait_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIME_S,
        description="Reject a request whose chosen replica's estimated wait exceeds this "
        "(estimated_wait): waiting requests / requests the replica admitted per second over the "
        "last estimate_window_s; None: no limit.",
    )
    estimate_window_s: float = Field(
        default=10.0,
        gt=0,
        le=MAX_TIME_S,
        description="Window of the admission rate behind the estimated wait.",
    )
    max_kv_usage: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Reject a request when the replica the router chose has at least this share of "
        "its KV blocks in use (kv_usage): the best the cluster offers is full; None: no limit.",
    )


class KvTransferConfig(FrozenModel):
    """The link that carries KV from prefill to decode replicas (disaggregated serving)."""

    bandwidth_bytes_per_s: float = Field(
        default=50e9,
        ge=MIN_BANDWIDTH_BYTES_PER_S,
        le=MAX_BANDWIDTH_BYTES_PER_S,
        description="Bytes per second between a prefill and a decode replica; default one 400 Gb/s "
        "RDMA NIC (50 GB/s), the class of link Mooncake and DistServe transfer KV over.",
    )
    latency_s: float = Field(
        default=50e-6, ge=0, le=MAX_STEP_TIME_S, description="Fixed cost of one request's transfer, seconds."
    )


class NetworkConfig(FrozenModel):
    """Whether KV transfers share their links (and the cluster fabric) or each gets them whole."""

    sharing: Literal["dedicated", "fair_share"] = Field(
        default="dedicated",
        description="dedicated: every transfer gets its whole link (latency + bytes / bandwidth), "
        "writes to tiers cost nothing; fair_share: disaggregation's KV transfers, swaps, tier "
        "loads and writes cross shared links (each replica's NIC each way at "
        "kv_transfer.bandwidth_bytes_per_s, its PCIe link each way at the GPU's PCIe bandwidth, "
        "its NVMe drive, the shared pool, the fabric), each link split max-min fairly among the "
        "transfers on it.",
    )
    fabric_bandwidth_bytes_per_s: float | None = Field(
        default=None,
        ge=MIN_BANDWIDTH_BYTES_PER_S,
        le=MAX_BANDWIDTH_BYTES_PER_S,
        description="fair_share: one cluster-wide limit that every transfer between replicas (and "
        "to the shared pool) also crosses, bytes/s; None: no fabric limit.",
    )


class SharedPoolConfig(FrozenModel):
    """A cluster-wide KV store below every replica's own tiers, read over the network
    (Mooncake's store: Qin et al., FAST 2025)."""

    capacity_gib: float = Field(gt=0, le=MAX_HOST_GIB, description="Capacity of the whole pool, GiB.")
    bandwidth_bytes_per_s: float = Field(
        default=50e9,
        ge=MIN_BANDWIDTH_BYTES_PER_S,
        le=MAX_BANDWIDTH_BYTES_PER_S,
        description="Bytes per second between the pool and one replica (its NIC; default one "
        "400 Gb/s RDMA NIC).",
    )
    pool_bandwidth_bytes_per_s: float | None = Field(
        default=None,
        ge=MIN_BANDWIDTH_BYTES_PER_S,
        le=MAX_BANDWIDTH_BYTES_PER_S,
        description="network.sharing fair_share: the pool servers' total bandwidth, shared by all "
        "reads and writes; None: no limit beyond each replica's NIC.",
    )
    latency_s: float = Field(
        default=50e-6, ge=0, le=MAX_STEP_TIME_S, description="Fixed cost of one load from the pool, seconds."
    )
    eviction_policy: Literal["lru", "fifo"] = Field(
        default="lru", description="Which block the pool drops when full (lru or fifo)."
    )
    write_policy: WritePolicy = Field(
        default="write_on_evict",
        description="write_on_evict: blocks arrive when a replica's last tier (or GPU) drops them; "
        "write_through: every block a GPU caches is written at once (as Mooncake's prefill "
        "nodes store their KV).",
    )


class SloConfig(FrozenModel):
    """Latency targets; a request meeting all of them counts towards goodput."""

    ttft_s: float = Field(
        default=2.0, gt=0, le=MAX_TIME_S, description="Time-to-first-token target, seconds."
    )
    tpot_s: float = Field(
        default=0.1, gt=0, le=MAX_TIME_S, description="Mean time-per-output-token target, seconds."
    )


class SimConfig(FrozenModel):
    """Simulator knobs that do not change what is simulated, only how."""

    fast_forward: bool = Field(
        default=True,
        description="Advance runs of identical decode iterations in one event (results equal step-by-step).",
    )
    max_time_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SIM_TIME_S,
        description="Stop at this simulated time (unfinished requests are reported).",
    )
    max_requests: int = Field(
        default=10_000_000,
        ge=1,
        le=MAX_NUM_REQUESTS,
        description="Refuse to start a run of more engine requests than this (prompts x parallel "
        "samples x beams, or a trace's rows); kvsim run --force skips the check.",
    )
    max_memory_gib: float = Field(
        default=16.0,
        gt=0,
        le=MAX_HOST_GIB,
        description="Refuse to start a run whose estimated memory (about 10 KiB per request and 128 "
        "bytes per KV block, kvsim.scenario.estimate) exceeds this, GiB; kvsim run --force skips the check.",
    )


class SideChannelAnalysis(FrozenModel):
    """Measure the prefix-cache timing side channel as an attacker tenant would (kvsim.analysis.side_channel)."""

    attacker: str = Field(default="attacker", min_length=1, description="Tenant that probes prefixes.")
    victim: str = Field(
        default="victim", min_length=1, description="Tenant whose prefixes the attacker tries to detect."
    )


class AnalysisConfig(FrozenModel):
    """Analyses computed after the run and added to its summary."""

    side_channel: SideChannelAnalysis | None = Field(
        default=None,
        description="Attacker's accuracy at telling from its own TTFT whether the victim sent a prefix, "
        "and the KS statistic of those TTFTs (summary keys side_channel_*); None: not computed.",
    )


class Scenario(FrozenModel):
    """One simulation: model, replicas, router, workload, SLOs and seed."""

    name: Name = Field(default="scenario", description="Short name of the scenario.")
    description: str = Field(default="", description="What the scenario shows.")
    seed: int = Field(
        default=0, ge=0, le=MAX_SEED, description="Seed of every random draw (same seed, same Result)."
    )
    model: ModelRef = Field(default="llama-3-8b", description=f"The model: {_MODEL_REF_HELP}.")
    replicas: list[ReplicaGroup] = Field(
        default_factory=lambda: [ReplicaGroup()],
        min_length=1,
        max_length=MAX_GROUPS,
        description="Replica groups of the cluster.",
    )
    router: RouterConfig = Field(
        default_factory=RouterConfig,
        description="Request routing (to prefill replicas when disaggregated; decode replicas are "
        "then chosen by decode_router).",
    )
    kv_transfer: KvTransferConfig = Field(
        default_factory=KvTransferConfig, description="KV link between prefill and decode replicas."
    )
    decode_router: Literal["least_loaded", "round_robin", "random"] = Field(
        default="least_loaded",
        description="Disaggregated serving: how a prefilled request picks its decode replica. "
        "least_loaded: the fewest requests running and waiting; round_robin: in turn, in "
        "declaration order (Dynamo's frontend default, --router-mode round-robin); random: "
        "uniformly, from the scenario's seed.",
    )
    admission: AdmissionConfig = Field(
        default_factory=AdmissionConfig, description="Which arrivals the cluster refuses (default: none)."
    )
    network: NetworkConfig = Field(
        default_factory=NetworkConfig, description="Dedicated or fair-shared links for KV transfers."
    )
    shared_kv_pool: SharedPoolConfig | None = Field(
        default=None, description="A cluster-wide KV store every replica reads over the network (None: none)."
    )
    workload: WorkloadConfig = Field(default_factory=SyntheticWorkload, description="Traffic.")
    slo: SloConfig = Field(default_factory=SloConfig, description="Latency targets for goodput.")
    sim: SimConfig = Field(default_factory=SimConfig, description="Simulator knobs.")
    analysis: AnalysisConfig = Field(
        default_factory=AnalysisConfig, description="Analyses added to the summary after the run."
    )

    @property
    def num_replicas(self) -> int:
        """Replicas at the start (autoscaled groups: their initial count)."""
        return sum(g.count for g in self.replicas)

    @model_validator(mode="after")
    def _resolve_engines(self) -> Scenario:
        """Every group's unset engine knobs at its backend's defaults for its GPU, TP degree and
        (quantized) model (`kvsim.backends.defaults.resolve_engine`). Names that do not resolve are left
        for `kvsim.scenario.checks` to report."""
        try:
            model: ModelSpec | None = resolve_model(self.model)
        except KvsimError:
            model = None
        groups = []
        for group in self.replicas:
            try:
                gpu: GpuSpec | None = resolve_gpu(group.gpu)
            except KvsimError:
                gpu = None
            served = served_model(model, group.engine.quantization) if model is not None else None
            engine = resolve_engine(
                group.engine, gpu=gpu, tp=group.tp, model=served, attention_dp=group.attention_dp
            )
            if engine is not group.engine:
                group = group.model_copy()
                object.__setattr__(group, "engine", engine)  # resolved defaults; fields_set unchanged
            groups.append(group)
        if any(g is not o for g, o in zip(groups, self.replicas, strict=True)):
            object.__setattr__(self, "replicas", groups)
        return self
