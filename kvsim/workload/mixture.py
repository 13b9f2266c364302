"""Mixture workloads: components drawn apart, merged by arrival, renumbered.

    component 0 (chat):        r0 t=0.4   r1 t=1.2 ...     content ids as drawn
    component 1 (classifier):  r0 t=0.1   r1 t=0.9 ...     content ids shifted by 2**40
    merged:                    0:(1,r0) 1:(0,r0) 2:(1,r1) 3:(0,r1) ...

Content ids of component k move by k x 2**40 (away from zero, both signs), so no two
components share a prefix; output segments keep their original (shifted) id, so a
follow-up turn still re-sends its parent's output. ``parent_id`` follows the renumbering.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from kvsim.request import RequestSpec, Segment
from kvsim.workload.config import MixtureWorkload, SyntheticWorkload
from kvsim.workload.synthetic import generate_synthetic
from kvsim.workload.traces import replay_trace

#: Content-id distance between components (ids stay inside (-2**60, 2**60) for 2**20 of them).
COMPONENT_ID_STRIDE = 1 << 40


def _shift(content_id: int, k: int) -> int:
    return content_id + k * COMPONENT_ID_STRIDE if content_id >= 0 else content_id - k * COMPONENT_ID_STRIDE


def generate_mixture(
    cfg: MixtureWorkload, rng: np.random.Generator, *, base_dir: Path | None = None
) -> list[RequestSpec]:
    """All requests of the components, merged by arrival (ties: component, then request id)."""
    tagged: list[tuple[float, int, int, RequestSpec]] = []
    for k, (component, child) in enumerate(zip(cfg.components, rng.spawn(len(cfg.components)), strict=True)):
        if isinstance(component, SyntheticWorkload):
            specs = generate_synthetic(component, child, base_dir=base_dir)
        else:
            specs, _ = replay_trace(component, base_dir=base_dir)
        for spec in specs:
            tagged.append((spec.arrival_s, k, spec.request_id, spec))
    tagged.sort(key=lambda t: t[:3])
    new_id = {(k, rid): i for i, (_, k, rid, _) in enumerate(tagged)}
    out = []
    for i, (_, k, _, spec) in enumerate(tagged):
        prompt = tuple(Segment(_shift(s.content_id, k), s.num_tokens) for s in spec.prompt)
        parent = None if spec.parent_id is None else new_id[(k, spec.parent_id)]
        out.append(
            replace(
                spec,
                request_id=i,
                prompt=prompt,
                output_content_id=_shift(spec.output_segment.content_id, k),
                parent_id=parent,
            )
        )
    return out
