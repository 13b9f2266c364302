"""kvsim requests and scenarios -> differential workloads.

`from_request_specs` is deterministic and keeps kvsim's content semantics:

- request ids become 0..N-1 in the order given;
- non-negative content ids are renumbered densely (1, 2, ...) in order of first use, so
  equal ids stay equal and different ids stay different;
- a segment re-sending the output of an included *ancestor* (a turn's parent, its
  parent, ...) becomes a reference to that request's generated tokens (content id
  ``-(new id + 1)``); any other content the engine could not reproduce (outputs of
  requests left out, or of requests that need not have finished) becomes ordinary
  content with a fresh id;
- follow-up turns keep their parent; their think time becomes ``ceil(think / step_s)``
  steps after the step the parent finished in; root arrivals ``ceil(arrival / step_s)``;
- ``scale`` > 1 divides every segment and output length (rounding up), to keep a
  replay of a production-sized workload short on a CPU engine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from kvsim.request import RequestSpec
from kvsim.scenario.schema import Scenario
from kvsim.validation.workload import DiffRequest, DiffWorkload, Knobs, output_content_id

#: Block size the CPU build of vLLM accepts by default (its attention needs multiples of 32).
CPU_BLOCK_SIZE = 32
DEFAULT_NUM_GPU_BLOCKS = 64


def from_request_specs(
    specs: Sequence[RequestSpec],
    knobs: Knobs,
    *,
    name: str,
    group: str = "scenario",
    step_s: float = 1.0,
    scale: int = 1,
    salt_by_tenant: bool = False,
) -> DiffWorkload:
    """The differential workload of ``specs`` (see the module docstring)."""
    if step_s <= 0:
        raise ValueError('"step_s" must be > 0')
    if scale < 1:
        raise ValueError('"scale" must be >= 1')
    new_id = {s.request_id: i for i, s in enumerate(specs)}
    by_old = {s.request_id: s for s in specs}
    out_owner = {s.output_segment.content_id: s.request_id for s in specs}
    content_map: dict[int, int] = {}  # kvsim content id -> dense non-negative id

    def fresh(old: int) -> int:
        cid = content_map.get(old)
        if cid is None:
            cid = len(content_map) + 1
            content_map[old] = cid
        return cid

    def scaled(n: int) -> int:
        return max(1, math.ceil(n / scale))

    tenants = {s.tenant for s in specs}
    out: list[DiffRequest] = []
    for s in specs:
        ancestors: set[int] = set()
        p = s.parent_id
        while p is not None and p in by_old and p not in ancestors:
            ancestors.add(p)
            p = by_old[p].parent_id
        prompt: list[tuple[int, int]] = []
        for seg in s.prompt:
            owner = out_owner.get(seg.content_id)
            if owner is not None and owner in ancestors and seg.num_tokens <= by_old[owner].output_tokens:
                prompt.append((output_content_id(new_id[owner]), scaled(seg.num_tokens)))
            else:
                prompt.append((fresh(seg.content_id), scaled(seg.num_tokens)))
        parent = new_id.get(s.parent_id) if s.parent_id is not None else None
        out.append(
            DiffRequest(
                id=new_id[s.request_id],
                arrival_step=0 if parent is not None else math.ceil(s.arrival_s / step_s - 1e-9),
                prompt=tuple(prompt),
                output_tokens=scaled(s.output_tokens),
                priority=s.priority,
                parent=parent,
                think_steps=math.ceil(s.think_time_s / step_s - 1e-9) if parent is not None else 0,
                salt=s.tenant if salt_by_tenant and len(tenants) > 1 else None,
            )
        )
    # A turn whose parent was left out arrives as a root at its own arrival time.
    for i, r in enumerate(out):
        if specs[i].parent_id is not None and r.parent is None:
            out[i] = replace(r, arrival_step=math.ceil(specs[i].arrival_s / step_s - 1e-9))
    return DiffWorkload(name=name, knobs=knobs, requests=tuple(out), group=group)


def scenario_knobs(scenario: Scenario, **overrides: Any) -> tuple[Knobs, list[str]]:
    """Knobs of the scenario's first replica group, a small pool by default; plus notes on
    what the harness leaves out (features vLLM v1 has no counterpart for)."""
    eng = scenario.replicas[0].engine
    notes: list[str] = []
    if scenario.num_replicas > 1:
        notes.append(f"{scenario.num_replicas} replicas: the requests are replayed on one engine")
    if eng.preemption_mode != "recompute":
        notes.append("preemption_mode swap: vLLM v1 preempts by recompute only; kvsim replays recompute")
    if eng.eviction_policy != "lru":
        notes.append("eviction_policy lfu: vLLM evicts LRU; kvsim replays LRU")
    if eng.cpu_offload_gib:
        notes.append("cpu_offload_gib ignored (no offload tier on either side)")
    if eng.kv_allocation != "paged":
        notes.append(f"kv_allocation {eng.kv_allocation} ignored (vLLM pages)")
    block_size = eng.block_size if eng.block_size % CPU_BLOCK_SIZE == 0 else CPU_BLOCK_SIZE
    if block_size != eng.block_size:
        notes.append(
            f"block_size {eng.block_size} -> {block_size} (vLLM's CPU attention needs multiples of 32)"
        )
    values: dict[str, Any] = {
        "block_size": block_size,
        "num_gpu_blocks": DEFAULT_NUM_GPU_BLOCKS,
        "max_num_batched_tokens": eng.max_num_batched_tokens,
        "max_num_seqs": eng.max_num_seqs,
        "enable_chunked_prefill": eng.enable_chunked_prefill,
        "long_prefill_token_threshold": eng.long_prefill_token_threshold,
        "enable_prefix_caching": eng.enable_prefix_caching,
        "scheduling_policy": eng.scheduling_policy,
        "max_model_len": 0,
    }
    values.update({k: v for k, v in overrides.items() if v is not None})
    knobs = Knobs(**values)
    if not values["max_model_len"]:
        limit = knobs.resolved_max_model_len
        model_limit = eng.max_model_len
        if model_limit and model_limit < limit:
            knobs = replace(knobs, max_model_len=model_limit)
    return knobs, notes
