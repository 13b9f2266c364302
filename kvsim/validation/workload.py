"""A differential workload: engine knobs plus requests, and the token ids both sides use.

Stdlib only: the vLLM recorder imports this module under vLLM's own interpreter.

A request's prompt is a sequence of segments ``(content_id, num_tokens)`` as in
`kvsim.request`: equal content ids are equal tokens, token i of content c is "(c, i)".

    content_id >= 0   tokens drawn from a stream seeded by the id alone, so any two
                      requests with the same id share their first min(n, m) tokens,
                      and different ids collide on a whole block with probability
                      ~ (1/2045)^block_size
    content_id < 0    the first num_tokens tokens request ``-(content_id + 1)``
                      generated (a later turn re-sending an earlier answer)

vLLM's tokens for a re-sent output exist only once the engine has generated them (a
dummy model's outputs are not controllable), so a request whose prompt re-sends outputs
names its ``parent`` and arrives ``think_steps`` steps after the step its parent finished
in, on both sides: ``arrival = parent's finish step + 1 + think_steps``. The recorder
builds its prompt from the tokens the engine actually generated; kvsim reads the same
content ids.

Step clock: step k is the k-th engine iteration of the workload. Requests arriving at
step k are added before step k is scheduled; an engine with nothing to do jumps to the
next arrival.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

#: Vocabulary of the dummy model; token ids 0..2 (pad/bos/eos of Llama-style configs) are avoided.
VOCAB_SIZE = 2048
FIRST_TOKEN_ID = 3
POLICIES = ("fcfs", "priority")


@dataclass(frozen=True, slots=True)
class Knobs:
    """Engine knobs both sides are built with (vLLM's names).

    ``num_gpu_blocks`` counts every block of vLLM's pool, its null block included: vLLM
    hands out ``num_gpu_blocks - 1`` blocks. ``max_model_len`` 0 means the largest the
    pool allows, ``(num_gpu_blocks - 1) * block_size`` (capped by the token budget when
    chunked prefill is off, as vLLM requires).
    """

    block_size: int = 32
    num_gpu_blocks: int = 64
    max_num_batched_tokens: int = 256
    max_num_seqs: int = 8
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    enable_prefix_caching: bool = True
    scheduling_policy: str = "fcfs"
    max_model_len: int = 0

    @property
    def resolved_max_model_len(self) -> int:
        if self.max_model_len:
            return self.max_model_len
        limit = (self.num_gpu_blocks - 1) * self.block_size
        if not self.enable_chunked_prefill:
            limit = min(limit, self.max_num_batched_tokens)
        return limit

    def problems(self) -> list[str]:
        """Rules vLLM 0.32 enforces at start-up (empty when the knobs are valid)."""
        out = []
        if self.block_size < 1:
            out.append('"block_size" must be >= 1')
        if self.num_gpu_blocks < 2:
            out.append('"num_gpu_blocks" must be >= 2 (one is the null block)')
        if self.max_num_seqs < 1:
            out.append('"max_num_seqs" must be >= 1')
        if self.max_num_batched_tokens < self.max_num_seqs:
            out.append('"max_num_batched_tokens" must be >= max_num_seqs')
        if self.long_prefill_token_threshold < 0:
            out.append('"long_prefill_token_threshold" must be >= 0')
        if self.scheduling_policy not in POLICIES:
            out.append(f'"scheduling_policy" must be one of {POLICIES}')
        mml = self.resolved_max_model_len
        if mml < 2:
            out.append('"max_model_len" must be >= 2')
        if mml > (self.num_gpu_blocks - 1) * self.block_size:
            out.append('"max_model_len" must be <= (num_gpu_blocks - 1) * block_size (one request must fit)')
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < mml:
            out.append('"max_num_batched_tokens" must be >= max_model_len without chunked prefill')
        return out

    def to_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Knobs:
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown knobs {sorted(unknown)}")
        return cls(**d)


@dataclass(frozen=True, slots=True)
class DiffRequest:
    """One request of a differential workload (ids are small non-negative integers)."""

    id: int
    arrival_step: int
    prompt: tuple[tuple[int, int], ...]
    output_tokens: int
    priority: int = 0
    parent: int | None = None
    think_steps: int = 0
    salt: str | None = None

    @property
    def prompt_tokens(self) -> int:
        return sum(n for _, n in self.prompt)

    def to_dict(self) -> dict[str, object]:
        d: dict[str, object] = {
            "id": self.id,
            "arrival_step": self.arrival_step,
            "prompt": [list(s) for s in self.prompt],
            "output_tokens": self.output_tokens,
        }
        if self.priority:
            d["priority"] = self.priority
        if self.parent is not None:
            d["parent"] = self.parent
        if self.think_steps:
            d["think_steps"] = self.think_steps
        if self.salt is not None:
            d["salt"] = self.salt
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DiffRequest:
        prompt = tuple((int(c), int(n)) for c, n in d["prompt"])
        parent = d.get("parent")
        salt = d.get("salt")
        return cls(
            id=int(d["id"]),
            arrival_step=int(d.get("arrival_step", 0)),
            prompt=prompt,
            output_tokens=int(d["output_tokens"]),
            priority=int(d.get("priority", 0)),
            parent=None if parent is None else int(parent),
            think_steps=int(d.get("think_steps", 0)),
            salt=None if salt is None else str(salt),
        )


def output_content_id(request_id: int) -> int:
    """Content id of the tokens request ``request_id`` generates (kvsim's default)."""
    return -(request_id + 1)


@dataclass(frozen=True, slots=True)
class DiffWorkload:
    """Knobs and requests of one differential run; ``group`` names its catalogue family."""

    name: str
    knobs: Knobs
    requests: tuple[DiffRequest, ...]
    group: str = "custom"
    note: str = ""
    extra: Mapping[str, object] = field(default_factory=dict)

    def problems(self) -> list[str]:
        """Inconsistencies that would make the two sides disagree for a bad reason."""
        out = [f"knobs: {p}" for p in self.knobs.problems()]
        by_id: dict[int, DiffRequest] = {}
        for r in self.requests:
            if r.id in by_id:
                out.append(f"request {r.id}: duplicate id")
            by_id[r.id] = r
            if r.id < 0:
                out.append(f"request {r.id}: ids must be >= 0")
            if r.output_tokens < 1:
                out.append(f"request {r.id}: output_tokens must be >= 1")
            if not r.prompt or any(n < 1 for _, n in r.prompt):
                out.append(f"request {r.id}: prompt segments must hold >= 1 token each")
            if r.arrival_step < 0 or r.think_steps < 0:
                out.append(f"request {r.id}: arrival_step and think_steps must be >= 0")
        for r in self.requests:
            if r.parent is not None and r.parent not in by_id:
                out.append(f"request {r.id}: parent {r.parent} is not in the workload")
            ancestors: set[int] = set()
            p = r.parent
            while p is not None and p in by_id and p not in ancestors:
                ancestors.add(p)
                p = by_id[p].parent
            for cid, n in r.prompt:
                if cid >= 0:
                    continue
                src = -(cid + 1)
                if src not in ancestors:
                    out.append(f"request {r.id}: re-sends the output of {src}, which is not an ancestor")
                elif n > by_id[src].output_tokens:
                    out.append(f"request {r.id}: re-sends {n} tokens of {src}'s {by_id[src].output_tokens}")
        return out

    def to_dict(self) -> dict[str, object]:
        d: dict[str, object] = {
            "name": self.name,
            "group": self.group,
            "knobs": self.knobs.to_dict(),
            "requests": [r.to_dict() for r in self.requests],
        }
        if self.note:
            d["note"] = self.note
        if self.extra:
            d["extra"] = dict(self.extra)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DiffWorkload:
        return cls(
            name=str(d["name"]),
            group=str(d.get("group", "custom")),
            knobs=Knobs.from_dict(d["knobs"]),
            requests=tuple(DiffRequest.from_dict(r) for r in d["requests"]),
            note=str(d.get("note", "")),
            extra=dict(d.get("extra", {})),
        )


class TokenStreams:
    """Token ids of non-negative content ids: one pinned pseudo-random stream per id.

    ``random.Random(str)`` seeds through SHA-512, so the streams are the same in every
    process and Python version >= 3.2.
    """

    def __init__(self, vocab_size: int = VOCAB_SIZE) -> None:
        self.vocab_size = vocab_size
        self._streams: dict[int, tuple[random.Random, list[int]]] = {}

    def tokens(self, content_id: int, num_tokens: int) -> list[int]:
        """The first ``num_tokens`` tokens of content ``content_id`` (>= 0)."""
        if content_id < 0:
            raise ValueError("negative content ids are generated outputs, not streams")
        entry = self._streams.get(content_id)
        if entry is None:
            entry = (random.Random(f"kvsim-content-{content_id}"), [])
            self._streams[content_id] = entry
        rng, toks = entry
        if len(toks) < num_tokens:
            hi = self.vocab_size
            toks.extend(rng.randrange(FIRST_TOKEN_ID, hi) for _ in range(num_tokens - len(toks)))
        return toks[:num_tokens]


def prompt_token_ids(
    req: DiffRequest, streams: TokenStreams, outputs: Mapping[int, Sequence[int]]
) -> list[int]:
    """vLLM's prompt for ``req``: its segments' tokens, re-sent outputs from ``outputs``."""
    ids: list[int] = []
    for cid, n in req.prompt:
        if cid >= 0:
            ids.extend(streams.tokens(cid, n))
            continue
        src = -(cid + 1)
        generated = outputs.get(src)
        if generated is None or len(generated) < n:
            have = 0 if generated is None else len(generated)
            raise ValueError(f"request {req.id} re-sends {n} tokens of request {src}, which generated {have}")
        ids.extend(generated[:n])
    return ids


def group_by_knobs(workloads: Iterable[DiffWorkload]) -> dict[Knobs, list[DiffWorkload]]:
    """Workloads sharing engine knobs (one engine serves each group), in first-seen order."""
    groups: dict[Knobs, list[DiffWorkload]] = {}
    for wl in workloads:
        groups.setdefault(wl.knobs, []).append(wl)
    return groups
