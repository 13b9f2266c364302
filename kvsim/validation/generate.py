"""The catalogue of differential workloads recorded as test fixtures (pinned seeds, stdlib only).

Each family (``group``) targets one part of the engine; its workloads share a few knob
presets so that one vLLM engine serves many of them:

    pressure          FCFS under memory pressure: pools of 12-48 blocks, repeated preemption
    pressure_nocache  the same with prefix caching off (freed blocks reused LIFO in vLLM)
    chunked           small token budgets, long prompts: chunk after chunk
    long_prefill      long_prefill_token_threshold, including a request alone in the engine
    max_num_seqs      1-3 running requests at most
    shared_prefix     system prompts shared by many requests; duplicates, full-prompt hits
    multi_turn        sessions whose turns re-send the earlier turns and answers
    priority          scheduling_policy priority, preemption by priority
    no_chunk          enable_chunked_prefill off (with and without a threshold)
    limits            max_model_len edges: prompts at / over it, prompt + output over it
    mooncake          the first 300 requests of the Mooncake conversation trace, scaled
    handcrafted       small cases with hand-computed outcomes (eviction order, ...)

`catalogue()` is deterministic: the same list on every machine (``random.Random`` with
integer seeds). The Mooncake family needs the trace (``../shared/traces``); without it,
it is left out.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterator
from pathlib import Path

from .workload import DiffRequest, DiffWorkload, Knobs, output_content_id

DEFAULT_MOONCAKE = (
    Path(__file__).resolve().parents[3] / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
)
#: Mooncake replay: a 512-token hash block becomes 512 / MOONCAKE_SCALE tokens (one 32-token
#: KV block), output lengths shrink by the same factor, 1 s of trace time is 5 steps.
MOONCAKE_SCALE = 16
MOONCAKE_MS_PER_STEP = 200
MOONCAKE_REQUESTS = 300
#: Longest output of a synthetic request: decode steps dominate the recording time, and
#: memory pressure comes from prompts and concurrency.
MAX_OUTPUT = 64


class _Builder:
    """Allocates content ids and request ids for one workload."""

    def __init__(self, rng: random.Random, knobs: Knobs) -> None:
        self.rng = rng
        self.knobs = knobs
        self.next_content = 1
        self.requests: list[DiffRequest] = []

    def content(self) -> int:
        cid = self.next_content
        self.next_content += 1
        return cid

    def add(
        self,
        arrival: int,
        prompt: list[tuple[int, int]],
        output: int,
        *,
        priority: int = 0,
        parent: int | None = None,
        think: int = 0,
    ) -> DiffRequest:
        req = DiffRequest(
            id=len(self.requests),
            arrival_step=arrival,
            prompt=tuple(prompt),
            output_tokens=output,
            priority=priority,
            parent=parent,
            think_steps=think,
        )
        self.requests.append(req)
        return req

    def length(self, lo: int, hi: int) -> int:
        """A length in [lo, hi]; often a multiple of block_size or one off it (block edges)."""
        hi = max(lo, hi)
        bs = self.knobs.block_size
        u = self.rng.random()
        if u < 0.25 and hi >= bs:
            k = self.rng.randint(max(1, -(-lo // bs)), max(1, hi // bs))
            return min(max(k * bs, lo), hi)
        if u < 0.35 and hi > bs:
            k = self.rng.randint(1, max(1, hi // bs))
            return min(max(k * bs + self.rng.choice((-1, 1)), lo), hi)
        return self.rng.randint(lo, hi)

    def arrivals(self, n: int, mean_gap: float) -> list[int]:
        t, out = 0, []
        for _ in range(n):
            out.append(t)
            if self.rng.random() > 0.4:
                t += int(self.rng.expovariate(1.0 / mean_gap)) if mean_gap > 0 else 0
        return out

    def workload(self, name: str, group: str, note: str = "") -> DiffWorkload:
        return DiffWorkload(
            name=name, knobs=self.knobs, requests=tuple(self.requests), group=group, note=note
        )


def _fit(b: _Builder, prompt_len: int, output: int) -> tuple[int, int]:
    """Shrink (prompt, output) so that prompt + output <= max_model_len."""
    mml = b.knobs.resolved_max_model_len
    output = max(1, min(output, mml // 3, MAX_OUTPUT))
    prompt_len = max(1, min(prompt_len, mml - output))
    return prompt_len, output


# ----------------------------------------------------------------------------- families


def _random_requests(
    b: _Builder,
    n: int,
    *,
    prompt_frac: float,
    output_frac: float,
    mean_gap: float,
    shared_prob: float = 0.0,
    priorities: int = 0,
) -> None:
    """``n`` independent requests; some start with one of a few shared prefixes."""
    mml = b.knobs.resolved_max_model_len
    rng = b.rng
    shared = [(b.content(), b.length(8, max(8, int(mml * 0.25)))) for _ in range(rng.randint(1, 3))]
    for t in b.arrivals(n, mean_gap):
        p = b.length(4, max(4, int(mml * prompt_frac)))
        o = b.length(1, max(1, int(mml * output_frac)))
        p, o = _fit(b, p, o)
        prompt: list[tuple[int, int]] = []
        if shared_prob and rng.random() < shared_prob:
            cid, m = rng.choice(shared)
            m = min(m, p)
            prompt.append((cid, m))
            if p > m:
                prompt.append((b.content(), p - m))
        else:
            prompt.append((b.content(), p))
        b.add(t, prompt, o, priority=rng.randrange(priorities) if priorities else 0)


def _shared_prefix_requests(b: _Builder, n: int, mean_gap: float) -> None:
    """System prompts (zipf-like choice), optional shared few-shot block, unique user text;
    some requests repeat an earlier prompt exactly (a full-prompt hit)."""
    rng = b.rng
    mml = b.knobs.resolved_max_model_len
    systems = [(b.content(), b.length(16, max(16, int(mml * 0.4)))) for _ in range(rng.randint(1, 4))]
    fewshot = (b.content(), b.length(8, max(8, int(mml * 0.15))))
    weights = [1.0 / (k + 1) for k in range(len(systems))]
    for t in b.arrivals(n, mean_gap):
        if b.requests and rng.random() < 0.12:
            prev = rng.choice(b.requests)
            o = min(b.length(1, max(1, int(mml * 0.1))), mml - prev.prompt_tokens, MAX_OUTPUT)
            if o >= 1:
                b.add(t, list(prev.prompt), o)
            continue
        cid, m = rng.choices(systems, weights)[0]
        prompt = [(cid, m)]
        if rng.random() < 0.3:
            prompt.append(fewshot)
        user = b.length(1, max(1, int(mml * 0.2)))
        prompt.append((b.content(), user))
        total = sum(x for _, x in prompt)
        o = min(b.length(1, max(1, int(mml * 0.15))), MAX_OUTPUT)
        if total + o > mml:
            prompt = [(cid, min(m, mml // 2)), (b.content(), 1)]
            total = sum(x for _, x in prompt)
            o = max(1, min(o, mml - total))
        b.add(t, prompt, o)


def _sessions(b: _Builder, num_sessions: int, mean_gap: float, system_prob: float) -> None:
    """Multi-turn sessions: turn k+1 = turn k's prompt + its full answer + new user text."""
    rng = b.rng
    mml = b.knobs.resolved_max_model_len
    system = (b.content(), b.length(16, max(16, int(mml * 0.2))))
    for t in b.arrivals(num_sessions, mean_gap):
        turns = rng.randint(2, 4)
        prompt: list[tuple[int, int]] = [system] if rng.random() < system_prob else []
        prompt.append((b.content(), b.length(2, max(2, int(mml * 0.12)))))
        parent: DiffRequest | None = None
        for _ in range(turns):
            o = min(b.length(1, max(1, int(mml * 0.08))), MAX_OUTPUT)
            if sum(x for _, x in prompt) + o > mml:
                break
            req = b.add(
                t if parent is None else 0,
                list(prompt),
                o,
                parent=None if parent is None else parent.id,
                think=0 if parent is None else rng.choice((0, 0, 1, 2, 3)),
            )
            parent = req
            prompt = [
                *prompt,
                (output_content_id(req.id), o),
                (b.content(), b.length(1, max(1, int(mml * 0.06)))),
            ]


def _limit_requests(b: _Builder, n: int) -> None:
    """Requests around max_model_len: prompt + output over it (vLLM caps the output, kvsim
    rejects), prompt == max_model_len and prompt > max_model_len (vLLM rejects both), and
    ordinary requests between them."""
    rng = b.rng
    mml = b.knobs.resolved_max_model_len
    for t in b.arrivals(n, 2.0):
        kind = rng.random()
        if kind < 0.2:
            p = rng.randint(mml // 2, mml - 1)
            o = rng.randint(mml - p + 1, mml - p + 40)
        elif kind < 0.3:
            p, o = mml, rng.randint(1, 10)
        elif kind < 0.4:
            p, o = mml + rng.randint(1, 64), rng.randint(1, 10)
        elif kind < 0.5:
            p = rng.randint(1, 8)
            o = mml - p  # exactly at the limit
        else:
            p, o = _fit(b, b.length(4, mml // 2), b.length(1, mml // 4))
        b.add(t, [(b.content(), p)], o)


# ----------------------------------------------------------------------------- presets

_Family = tuple[str, list[Knobs], int, Callable[[_Builder], None]]


def _families() -> list[_Family]:
    def K(**kw: object) -> Knobs:
        return Knobs(**kw)  # type: ignore[arg-type]

    def pressure(b: _Builder) -> None:
        _random_requests(
            b, b.rng.randint(6, 20), prompt_frac=0.45, output_frac=0.35, mean_gap=1.5, shared_prob=0.3
        )

    def chunked(b: _Builder) -> None:
        _random_requests(
            b, b.rng.randint(4, 12), prompt_frac=0.3, output_frac=0.05, mean_gap=3.0, shared_prob=0.3
        )

    def long_prefill(b: _Builder) -> None:
        n = 1 if b.rng.random() < 0.2 else b.rng.randint(2, 10)
        _random_requests(b, n, prompt_frac=0.5, output_frac=0.1, mean_gap=2.0, shared_prob=0.2)

    def few_seqs(b: _Builder) -> None:
        _random_requests(
            b, b.rng.randint(3, 10), prompt_frac=0.4, output_frac=0.2, mean_gap=1.0, shared_prob=0.3
        )

    def shared(b: _Builder) -> None:
        _shared_prefix_requests(b, b.rng.randint(6, 24), mean_gap=1.5)

    def multi_turn(b: _Builder) -> None:
        _sessions(b, b.rng.randint(2, 6), mean_gap=3.0, system_prob=0.6)

    def priority(b: _Builder) -> None:
        _random_requests(
            b,
            b.rng.randint(6, 18),
            prompt_frac=0.4,
            output_frac=0.3,
            mean_gap=2.0,
            shared_prob=0.2,
            priorities=4,
        )

    def no_chunk(b: _Builder) -> None:
        _random_requests(
            b, b.rng.randint(4, 14), prompt_frac=0.6, output_frac=0.3, mean_gap=1.5, shared_prob=0.3
        )

    def limits(b: _Builder) -> None:
        _limit_requests(b, b.rng.randint(4, 10))

    return [
        (
            "pressure",
            [
                K(block_size=32, num_gpu_blocks=12, max_num_batched_tokens=128, max_num_seqs=4),
                K(block_size=32, num_gpu_blocks=24, max_num_batched_tokens=256, max_num_seqs=8),
                K(block_size=32, num_gpu_blocks=48, max_num_batched_tokens=512, max_num_seqs=16),
                K(block_size=64, num_gpu_blocks=16, max_num_batched_tokens=256, max_num_seqs=6),
            ],
            16,
            pressure,
        ),
        (
            "pressure_nocache",
            [
                K(
                    block_size=32,
                    num_gpu_blocks=12,
                    max_num_batched_tokens=128,
                    max_num_seqs=4,
                    enable_prefix_caching=False,
                ),
                K(
                    block_size=32,
                    num_gpu_blocks=24,
                    max_num_batched_tokens=256,
                    max_num_seqs=8,
                    enable_prefix_caching=False,
                ),
            ],
            15,
            pressure,
        ),
        (
            "chunked",
            [
                K(block_size=32, num_gpu_blocks=64, max_num_batched_tokens=64, max_num_seqs=4),
                K(block_size=32, num_gpu_blocks=40, max_num_batched_tokens=100, max_num_seqs=6),
            ],
            12,
            chunked,
        ),
        (
            "long_prefill",
            [
                K(
                    block_size=32,
                    num_gpu_blocks=64,
                    max_num_batched_tokens=256,
                    max_num_seqs=8,
                    long_prefill_token_threshold=48,
                ),
                K(
                    block_size=32,
                    num_gpu_blocks=32,
                    max_num_batched_tokens=192,
                    max_num_seqs=6,
                    long_prefill_token_threshold=100,
                ),
                K(
                    block_size=32,
                    num_gpu_blocks=24,
                    max_num_batched_tokens=128,
                    max_num_seqs=4,
                    long_prefill_token_threshold=17,
                ),
            ],
            8,
            long_prefill,
        ),
        (
            "max_num_seqs",
            [
                K(block_size=32, num_gpu_blocks=24, max_num_batched_tokens=128, max_num_seqs=1),
                K(block_size=32, num_gpu_blocks=24, max_num_batched_tokens=128, max_num_seqs=2),
                K(block_size=32, num_gpu_blocks=32, max_num_batched_tokens=96, max_num_seqs=3),
            ],
            8,
            few_seqs,
        ),
        (
            "shared_prefix",
            [
                K(block_size=32, num_gpu_blocks=48, max_num_batched_tokens=256, max_num_seqs=8),
                K(block_size=32, num_gpu_blocks=96, max_num_batched_tokens=128, max_num_seqs=16),
            ],
            15,
            shared,
        ),
        (
            "multi_turn",
            [
                K(block_size=32, num_gpu_blocks=32, max_num_batched_tokens=256, max_num_seqs=8),
                K(block_size=32, num_gpu_blocks=64, max_num_batched_tokens=256, max_num_seqs=8),
                K(
                    block_size=32,
                    num_gpu_blocks=32,
                    max_num_batched_tokens=256,
                    max_num_seqs=8,
                    enable_prefix_caching=False,
                ),
            ],
            12,
            multi_turn,
        ),
        (
            "priority",
            [
                K(
                    block_size=32,
                    num_gpu_blocks=16,
                    max_num_batched_tokens=128,
                    max_num_seqs=4,
                    scheduling_policy="priority",
                ),
                K(
                    block_size=32,
                    num_gpu_blocks=32,
                    max_num_batched_tokens=256,
                    max_num_seqs=8,
                    scheduling_policy="priority",
                ),
            ],
            15,
            priority,
        ),
        (
            "no_chunk",
            [
                K(
                    block_size=32,
                    num_gpu_blocks=24,
                    max_num_batched_tokens=256,
                    max_num_seqs=8,
                    enable_chunked_prefill=False,
                ),
                K(
                    block_size=32,
                    num_gpu_blocks=40,
                    max_num_batched_tokens=512,
                    max_num_seqs=8,
                    enable_chunked_prefill=False,
                ),
                K(
                    block_size=32,
                    num_gpu_blocks=24,
                    max_num_batched_tokens=256,
                    max_num_seqs=8,
                    enable_chunked_prefill=False,
                    long_prefill_token_threshold=64,
                ),
            ],
            9,
            no_chunk,
        ),
        (
            "limits",
            [
                K(
                    block_size=32,
                    num_gpu_blocks=12,
                    max_num_batched_tokens=128,
                    max_num_seqs=4,
                    max_model_len=300,
                )
            ],
            10,
            limits,
        ),
    ]


def _mooncake(path: Path) -> list[DiffWorkload]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rows.append(json.loads(line))
            if len(rows) == MOONCAKE_REQUESTS:
                break
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["timestamp"], i))
    t0 = rows[order[0]]["timestamp"]
    seg = 512 // MOONCAKE_SCALE
    reqs = []
    for rid, i in enumerate(order):
        row = rows[i]
        ids = row["hash_ids"]
        n = row["input_length"]
        last = n - 512 * (len(ids) - 1)  # kvsim.workload.traces.hashed_prompt, scaled
        prompt = [(h, seg) for h in ids[:-1]] + [(ids[-1], max(1, math.ceil(last / MOONCAKE_SCALE)))]
        out = max(1, math.ceil(row["output_length"] / MOONCAKE_SCALE))
        step = (row["timestamp"] - t0) // MOONCAKE_MS_PER_STEP
        reqs.append(DiffRequest(id=rid, arrival_step=int(step), prompt=tuple(prompt), output_tokens=out))
    note = (
        f"first {len(reqs)} requests of {path.name}; hash block 512 -> {seg} tokens, outputs / "
        f"{MOONCAKE_SCALE}, {MOONCAKE_MS_PER_STEP} ms of trace time per step"
    )
    presets = [
        ("mooncake-96", Knobs(block_size=32, num_gpu_blocks=96, max_num_batched_tokens=512, max_num_seqs=16)),
        (
            "mooncake-96-nocache",
            Knobs(
                block_size=32,
                num_gpu_blocks=96,
                max_num_batched_tokens=512,
                max_num_seqs=16,
                enable_prefix_caching=False,
            ),
        ),
        ("mooncake-64", Knobs(block_size=32, num_gpu_blocks=64, max_num_batched_tokens=256, max_num_seqs=8)),
    ]
    return [
        DiffWorkload(name=nm, knobs=k, requests=tuple(reqs), group="mooncake", note=note) for nm, k in presets
    ]


def handcrafted() -> list[DiffWorkload]:
    """Small cases whose outcome is worked out by hand (block_size 32, 11 usable blocks).

    ``evict-order``: A (96-token prompt = 3 full blocks, 1 output) finishes at step 0 and
    its 3 cached blocks join the tail of the free queue, A's last block first. B (256
    tokens, 8 blocks) at step 2 takes the 8 never-used blocks; C (64 tokens) at step 4
    must evict 2 of A's blocks: LRU, a request's tail first, evicts A's last two and keeps
    A's first. D (A's prompt again) at step 6 hits 32 tokens; a queue that frees a
    request's blocks head first would leave D nothing to hit: the records part at step 6.

    ``nohash-head``: A (320 tokens, 10 cached blocks) finishes at step 0; B (33 tokens) at
    step 2 evicts A's last block and frees one cached and one partial, unhashed block.
    vLLM puts the unhashed block at the head of the free queue (block_pool.free_blocks),
    so C (32 tokens) at step 4 reuses it and D (A's prompt) at step 6 hits 9 blocks; a
    queue that appends it at the tail makes C evict A's 9th block: 8 blocks hit.

    ``priority-self-preempt``: A (priority 9, 150 tokens) and B (priority 0, 180 tokens,
    step 1) fill the pool; at step 11 A's decode needs a block, A is the lowest priority
    running request and preempts itself. vLLM then stops scheduling running requests
    (scheduler.py: ``if new_blocks is None: break``): step 11 schedules nothing.

    ``nochunk-threshold``: chunked prefill off, long_prefill_token_threshold 64, two
    200-token prompts at step 0: vLLM caps each at 64 tokens *before* the no-chunking
    budget test, so both start at step 0.

    ``lone-threshold``: one 200-token prompt, threshold 48: vLLM ignores the threshold for
    a request alone in the engine and schedules all 200 tokens at step 0.

    ``reserve-full-prompt``: budget 128; B (200 tokens) at step 2 finds 4 free blocks. Its
    first chunk would fit, but vLLM 0.32 admits a request only if its whole prompt fits
    (scheduler_reserve_full_isl), so B waits until A finishes.

    ``mml-cap``: max_model_len 300, prompt 250 + 100 output tokens: vLLM runs it and stops
    it at 300 tokens (50 outputs), kvsim rejects it at arrival.
    """
    k = Knobs(block_size=32, num_gpu_blocks=12, max_num_batched_tokens=512, max_num_seqs=4)
    R = DiffRequest
    cases = [
        (
            "evict-order",
            k,
            (R(0, 0, ((1, 96),), 1), R(1, 2, ((2, 256),), 1), R(2, 4, ((3, 64),), 1), R(3, 6, ((1, 96),), 1)),
        ),
        (
            "nohash-head",
            k,
            (
                R(0, 0, ((1, 320),), 1),
                R(1, 2, ((2, 33),), 1),
                R(2, 4, ((3, 32),), 1),
                R(3, 6, ((1, 320),), 1),
            ),
        ),
        (
            "priority-self-preempt",
            Knobs(
                block_size=32,
                num_gpu_blocks=12,
                max_num_batched_tokens=512,
                max_num_seqs=4,
                scheduling_policy="priority",
            ),
            (R(0, 0, ((1, 150),), 30, priority=9), R(1, 1, ((2, 180),), 30, priority=0)),
        ),
        (
            "nochunk-threshold",
            Knobs(
                block_size=32,
                num_gpu_blocks=12,
                max_num_batched_tokens=256,
                max_num_seqs=8,
                enable_chunked_prefill=False,
                long_prefill_token_threshold=64,
            ),
            (R(0, 0, ((1, 200),), 5), R(1, 0, ((2, 200),), 5)),
        ),
        (
            "lone-threshold",
            Knobs(
                block_size=32,
                num_gpu_blocks=12,
                max_num_batched_tokens=256,
                max_num_seqs=8,
                long_prefill_token_threshold=48,
            ),
            (R(0, 0, ((1, 200),), 3),),
        ),
        (
            "reserve-full-prompt",
            Knobs(block_size=32, num_gpu_blocks=12, max_num_batched_tokens=128, max_num_seqs=4),
            (R(0, 0, ((1, 200),), 40), R(1, 2, ((2, 200),), 5)),
        ),
        (
            "mml-cap",
            Knobs(
                block_size=32,
                num_gpu_blocks=12,
                max_num_batched_tokens=128,
                max_num_seqs=4,
                max_model_len=300,
            ),
            (R(0, 0, ((1, 250),), 100), R(1, 3, ((2, 40),), 5)),
        ),
    ]
    return [DiffWorkload(name=n, group="handcrafted", knobs=kn, requests=rs) for n, kn, rs in cases]


def catalogue(mooncake_path: Path | None = DEFAULT_MOONCAKE) -> list[DiffWorkload]:
    """Every workload of the fixture catalogue, in recording order."""
    out: list[DiffWorkload] = []
    for group, presets, per_preset, fill in _families():
        for p_idx, knobs in enumerate(presets):
            for k in range(per_preset):
                seed = hash_seed(group, p_idx, k)
                b = _Builder(random.Random(seed), knobs)
                fill(b)
                wl = b.workload(f"{group}-{p_idx}-{k:02d}", group)
                problems = wl.problems()
                assert not problems, (wl.name, problems)
                out.append(wl)
    out.extend(handcrafted())
    if mooncake_path is not None and mooncake_path.is_file():
        out.extend(_mooncake(mooncake_path))
    return out


def hash_seed(*parts: object) -> int:
    """A stable integer seed from names and numbers (no reliance on Python's str hash)."""
    seed = 0
    for ch in "/".join(map(str, parts)).encode("utf-8"):
        seed = (seed * 131 + ch) % (2**61 - 1)
    return seed


def groups(workloads: list[DiffWorkload]) -> Iterator[tuple[str, list[DiffWorkload]]]:
    seen: dict[str, list[DiffWorkload]] = {}
    for wl in workloads:
        seen.setdefault(wl.group, []).append(wl)
    yield from seen.items()
