"""Beam search genealogies: which beam is pruned and which one it is replaced by, step by step.

Beam search keeps ``width`` sequences; after each step the best ``width`` continuations
survive, so a weak beam dies and a strong one forks (vLLM paper, Kwon et al. SOSP 2023,
section 4.4 and Figure 9). kvsim draws the genealogy up front, from the workload's seed:
after step s (the s-th generated token), each beam but beam 0 (the best, never pruned) is
pruned with probability ``prune_probability`` and replaced by a fork of a beam that
survived the step, chosen uniformly:

    step   1        2        3        4
    beam0  a ------ a ------ a ------ a        forks: (2, 2, 0): after step 2 beam 2 is
    beam1  b ------ b ------ b ---+   b'        pruned and forks from beam 0;
    beam2  c ------ a'-------a'   +-- b''       (3, 2, 1): after step 3 from beam 1
                                                 (its table: beam 1's blocks, shared)

The engine shares every block beams have in common and copies a partial last block on
write (`kvsim.core.kv_manager`); the less often beams are pruned, the longer they diverge.
"""

from __future__ import annotations

import numpy as np

#: (step, pruned beam, parent beam): after the step-th output token, ``pruned`` becomes a fork of ``parent``.
BeamFork = tuple[int, int, int]


def beam_forks(
    width: int, num_tokens: int, prune_probability: float, rng: np.random.Generator
) -> tuple[BeamFork, ...]:
    """The forks of one beam search producing ``num_tokens`` tokens per beam."""
    if width < 2 or num_tokens < 2 or prune_probability <= 0:
        return ()
    steps = num_tokens - 1  # forks after tokens 1 .. num_tokens - 1
    pruned = rng.random((steps, width)) < prune_probability
    pruned[:, 0] = False
    picks = rng.random((steps, width))
    forks: list[BeamFork] = []
    for s in range(steps):
        row = pruned[s]
        if not row.any():
            continue
        survivors = np.flatnonzero(~row)
        for child in np.flatnonzero(row):
            parent = int(survivors[int(picks[s, child] * len(survivors))])
            forks.append((s + 1, int(child), parent))
    return tuple(forks)
