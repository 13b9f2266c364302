"""Beam search in the engine: the beams of a group share blocks, forks copy on write.

A beam group is the ``beam_width`` requests of one prompt (`RequestSpec.beam_group`); beam
0's spec carries the group's genealogy (`kvsim.workload.beams`). After the prefill every
beam holds the same prompt, so each beam but beam 0 becomes a fork of beam 0 when the
group's first token is out: the prompt's blocks are held once. After step s, each fork
``(s, child, parent)`` of the genealogy replaces the pruned child's blocks with the
parent's (`FullAttentionManager.fork`): the full ones shared, the partial last one copied.

vLLM v0 scheduled a group's beams together; kvsim schedules beams as separate requests,
so a fork needs both beams running at the same step with the same computed tokens
(lockstep). A fork whose beams fell out of lockstep (one preempted, or admitted a step
later) is skipped and counted; so are all of them on a KV manager that cannot fork
(sliding-window or hybrid models, contiguous reservation, no KV cache, speculation).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from kvsim.core.kv_manager import FullAttentionManager
from kvsim.core.request_state import Request, Status


@dataclass(slots=True)
class BeamStats:
    """Forks of one replica: made (blocks shared) and skipped (beams out of lockstep)."""

    num_forks: int = 0
    num_forks_skipped: int = 0

    def __iadd__(self, other: BeamStats) -> BeamStats:
        self.num_forks += other.num_forks
        self.num_forks_skipped += other.num_forks_skipped
        return self


class BeamGroups:
    """The beam groups of one replica and their pending forks."""

    def __init__(self, kv: FullAttentionManager) -> None:
        self.kv = kv
        self.members: dict[int, dict[int, Request]] = {}  # group -> beam index -> request
        self.pending: dict[int, deque[tuple[int, int, int]]] = {}
        self.prompt_shared: set[int] = set()
        self.stats = BeamStats()

    def __bool__(self) -> bool:
        return bool(self.members)

    def add(self, req: Request) -> None:
        spec = req.spec
        assert spec.beam_group is not None
        self.members.setdefault(spec.beam_group, {})[spec.beam_index] = req
        if spec.beam_index == 0:
            self.pending[spec.beam_group] = deque(spec.beam_forks)

    def remove(self, req: Request) -> None:
        """``req`` finished: forget it, and its group once every beam has."""
        group = req.spec.beam_group
        if group is None or group not in self.members:
            return
        members = self.members[group]
        members.pop(req.spec.beam_index, None)
        if not members:
            del self.members[group]
            self.pending.pop(group, None)
            self.prompt_shared.discard(group)

    def after_step(self, group: int) -> None:
        """A beam of ``group`` sampled a token: make the forks due at the group's step."""
        members = self.members.get(group)
        if not members:
            return
        running = [r for r in members.values() if r.status is Status.RUNNING]
        if not running:
            return
        step = max(r.num_output_tokens for r in running)
        first = members.get(0)
        if group not in self.prompt_shared and first is not None:
            self.prompt_shared.add(group)
            for index, beam in sorted(members.items()):
                if index:
                    self._fork(beam, first, first.num_output_tokens)
        forks = self.pending.get(group)
        while forks and forks[0][0] <= step:
            s, child, parent = forks.popleft()
            if s < step:
                self.stats.num_forks_skipped += 1  # its step went by out of lockstep
            else:
                self._fork(members.get(child), members.get(parent), s)

    def _fork(self, child: Request | None, parent: Request | None, step: int) -> None:
        ok = (
            child is not None
            and parent is not None
            and child is not parent
            and child.status is Status.RUNNING
            and parent.status is Status.RUNNING
            and child.num_output_tokens == parent.num_output_tokens == step
            and child.num_computed_tokens == parent.num_computed_tokens
            and bool(parent.blocks)
        )
        if ok and self.kv.fork(child, parent):  # type: ignore[arg-type]
            self.stats.num_forks += 1
        else:
            self.stats.num_forks_skipped += 1
