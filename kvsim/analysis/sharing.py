"""Memory saved by sharing KV blocks, as the vLLM paper measures it (Kwon et al., SOSP 2023,
section 6.3, Figure 15): blocks saved by sharing over the blocks needed without it.

Each point runs the same requests twice, with and without sharing, prefix caching off in
both (so that every block shared is shared by the group): beam search
(``workload.beam_width``) against ``workload.beam_sharing: false``; parallel sampling
(``workload.parallel_samples``) with each prompt's samples made a group that shares the
prompt's blocks after the prefill and copies its partial last block on write (vLLM v0's
parallel sampling, the paper's setting; `kvsim.core.beam_search` with no genealogy)
against samples that share nothing. The saving is one minus the ratio of the
block-seconds the two runs held (the sum over iterations of blocks in use x duration); it
is the memory effect alone when both runs keep the same schedule (no preemption), which
each point reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvsim.engine.simulator import run, scenario_workload
from kvsim.errors import WorkLimitError
from kvsim.limits import MAX_WIDTHS
from kvsim.request import RequestSpec
from kvsim.results.result import Result
from kvsim.scenario.loading import load_scenario
from kvsim.scenario.schema import Scenario


@dataclass(frozen=True, slots=True)
class SharingPoint:
    """One width: the saving and whether both runs had the same schedule."""

    kind: str  # "beam" or "parallel"
    width: int
    saving: float
    block_s_shared: float  # blocks in use x seconds, over the run's iterations
    block_s_alone: float
    num_preemptions: int  # both runs together
    same_schedule: bool  # equal TTFT p50 and no preemption: the saving is memory only


def memory_saving(
    scenario: Scenario | Mapping[str, Any],
    kind: str,
    widths: Sequence[int],
    *,
    overrides: Mapping[str, Any] | None = None,
    base_dir: Path | None = None,
) -> list[SharingPoint]:
    """The saving of beam search (``kind="beam"``) or parallel sampling (``"parallel"``) per width."""
    if kind not in ("beam", "parallel"):
        raise ValueError(f'"kind" must be beam or parallel, got {kind!r}')
    if len(widths) > MAX_WIDTHS:  # two full runs each
        raise WorkLimitError(f"{len(widths):,} widths; at most {MAX_WIDTHS:,}")
    points = []
    for w in widths:
        sets: dict[str, Any] = dict(overrides or {}) | {"replicas.0.engine.enable_prefix_caching": False}
        if kind == "beam":
            sets |= {"workload.beam_width": w, "workload.parallel_samples": 1}
            shared = run(scenario, overrides=sets | {"workload.beam_sharing": True}, base_dir=base_dir)
            alone = run(scenario, overrides=sets | {"workload.beam_sharing": False}, base_dir=base_dir)
        else:
            sets |= {"workload.parallel_samples": w, "workload.beam_width": 1}
            resolved = load_scenario(scenario, sets)
            requests = scenario_workload(resolved, base_dir=base_dir).requests
            alone = run(resolved, requests=requests, base_dir=base_dir)
            shared = run(resolved, requests=sample_groups(requests), base_dir=base_dir)
        held_shared, held_alone = _block_seconds(shared), _block_seconds(alone)
        preempted = int(shared.summary["num_preemptions"]) + int(alone.summary["num_preemptions"])
        points.append(
            SharingPoint(
                kind=kind,
                width=w,
                saving=1.0 - held_shared / held_alone if held_alone else 0.0,
                block_s_shared=held_shared,
                block_s_alone=held_alone,
                num_preemptions=preempted,
                same_schedule=preempted == 0 and shared.summary["ttft_p50_s"] == alone.summary["ttft_p50_s"],
            )
        )
    return points


def sample_groups(requests: Sequence[RequestSpec]) -> list[RequestSpec]:
    """The requests with each prompt's parallel samples (consecutive requests with the same
    prompt and arrival) made one group that shares the prompt's blocks after the prefill."""
    out: list[RequestSpec] = []
    first: RequestSpec | None = None
    index = 0
    for r in requests:
        if first is not None and r.prompt == first.prompt and r.arrival_s == first.arrival_s:
            index += 1
        else:
            first, index = r, 0
        out.append(replace(r, beam_group=first.request_id, beam_index=index, beam_forks=()))
    return out


def _block_seconds(result: Result) -> float:
    it = result.iterations
    blocks = it["kv_blocks_used"].to_numpy(dtype=float)
    return float((blocks * it["duration_s"].to_numpy(dtype=float)).sum())
