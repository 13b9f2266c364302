"""What a request is before it reaches the engine: arrival, prompt content, output length.

Prompts carry no real text. A prompt is a sequence of *segments*, each a run of tokens
with a content id: two requests whose prompts start with the same segments share those
tokens, hence their KV blocks. A shared system prompt is one segment reused by many
requests; a Mooncake trace's 512-token ``hash_ids`` are one segment each.

    request A: [sys:1000][user-a:300]               -> 81 full 16-token blocks + 4 tokens
    request B: [sys:1000][user-b:120]               -> shares blocks 0..61 (992 tokens) with A
    token i of a segment with content id c is "(c, i)": equal ids mean equal tokens.

Workload content ids are non-negative. A request's generated tokens form one more
segment, by default with the content id ``-(request_id + 1)``, so that a later turn of a
conversation can re-send them as part of its prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

#: TensorRT-LLM's default retention priority (0 lowest .. 100 highest; KvCacheRetentionConfig).
DEFAULT_RETENTION_PRIORITY = 35


@dataclass(frozen=True, slots=True)
class Retention:
    """What happens to a request's cached KV once it finishes (after TensorRT-LLM's
    ``KvCacheRetentionConfig``).

    ``default`` keeps its blocks cached in the free queue (vLLM); ``none`` frees the blocks
    it computed uncached, to be reused first (a classifier's one-off history); ``priority``
    keeps them cached at ``priority`` (0..100, default 35): among free cached blocks the
    lowest priority is evicted first, until ``duration_s`` after they were freed, when they
    fall back to the default priority (None: never).
    """

    kind: str = "default"
    priority: int = DEFAULT_RETENTION_PRIORITY
    duration_s: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("default", "none", "priority"):
            raise ValueError(f"retention kind must be default, none or priority, got {self.kind!r}")
        if not 0 <= self.priority <= 100:
            raise ValueError(f"retention priority must be in [0, 100], got {self.priority}")
        if self.duration_s is not None and not (self.duration_s > 0 and self.duration_s != float("inf")):
            raise ValueError(f"retention duration_s must be > 0 and finite, got {self.duration_s}")

    @classmethod
    def parse(cls, text: str) -> Retention:
        """``none``, ``default``, ``priority:P`` or ``priority:P:DURATION_S`` (a trace column)."""
        parts = text.strip().split(":")
        kind = parts[0].lower()
        try:
            if kind == "priority" and len(parts) in (2, 3):
                duration = float(parts[2]) if len(parts) == 3 else None
                return cls("priority", int(parts[1]), duration)
        except ValueError:
            pass
        if kind in ("none", "default") and len(parts) == 1:
            return cls(kind)
        raise ValueError(f"retention {text!r}: expected none, default, priority:P or priority:P:DURATION_S")


DEFAULT_RETENTION = Retention()


class Segment(NamedTuple):
    """A run of ``num_tokens`` tokens whose content is identified by ``content_id``."""

    content_id: int
    num_tokens: int


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request as a workload produces it (immutable; the engine keeps its own state)."""

    request_id: int
    arrival_s: float
    prompt: tuple[Segment, ...]
    output_tokens: int
    tenant: str = "default"
    priority: int = 0
    output_content_id: int | None = None
    parent_id: int | None = None
    think_time_s: float = 0.0
    retention: Retention = DEFAULT_RETENTION
    #: Beam search: the request id of the group's beam 0 (None: not a beam), this beam's index,
    #: and on beam 0 the group's forks (step, pruned beam, parent beam; `kvsim.workload.beams`).
    beam_group: int | None = None
    beam_index: int = 0
    beam_forks: tuple[tuple[int, int, int], ...] = ()
    session_id: int | None = (
        None  # conversation id for session-affine routing (None: the parent chain's root)
    )

    def __post_init__(self) -> None:
        if self.output_tokens < 1:
            raise ValueError(f"request {self.request_id}: output_tokens must be >= 1")
        if not self.prompt or any(s.num_tokens < 1 for s in self.prompt):
            raise ValueError(f"request {self.request_id}: prompt segments must hold >= 1 token each")
        if any(not -(2**60) < s.content_id < 2**60 for s in self.prompt):
            raise ValueError(f"request {self.request_id}: content ids must lie in (-2**60, 2**60)")
        if self.arrival_s < 0:
            raise ValueError(f"request {self.request_id}: arrival_s must be >= 0")

    @property
    def prompt_tokens(self) -> int:
        return sum(s.num_tokens for s in self.prompt)

    @property
    def output_segment(self) -> Segment:
        cid = self.output_content_id if self.output_content_id is not None else -(self.request_id + 1)
        return Segment(cid, self.output_tokens)
