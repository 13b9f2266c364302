"""A benchmark client's requests: ``vllm bench serve --dataset-name random``, as vLLM 0.32.0 runs it.

    specs, client = generate_bench_serve(cfg, seed)

``specs`` are the requests (measured ones first, ids 0..N-1 in the order the client sends
them; then the warm-ups; then the ready check); ``client`` says how the client sends them,
which `kvsim.engine.sources.BenchClientSource` plays out against the engine: a closed loop
of at most ``max_concurrency`` requests in flight, requests made ready at
``ready_offsets_s`` after the measured run starts (the warm-ups' end).

Where each rule comes from (vLLM 0.32.0, ``vllm/benchmarks/``):

- lengths: ``datasets/utils.py`` ``get_sampling_params``: uniform integers in
  [floor(L' (1 - r)), ceil(L' (1 + r))], L' = the input length minus the tokenizer's special
  tokens, outputs at least 1, drawn from ``np.random.default_rng(seed)`` (``RandomDataset``),
  prompts first, then outputs. A prompt is ``random_prefix_len`` shared tokens plus its
  drawn length of tokens no other prompt shares (``RandomDataset.generate_token_sequence``:
  a random offset into the vocabulary per request). The legacy rule, [int(L r), L] from the
  global ``np.random`` seeded with the seed, is vLLM <= 0.8.3's ``sample_random_requests``
  (``benchmarks/benchmark_serving.py``; changed by vLLM PR #16126, April 2025).
- ready times: ``serve.py`` ``get_request``: gaps drawn from the global ``np.random``
  (seeded by ``main_async``) as gamma(shape = burstiness, scale = 1 / (rate x burstiness)),
  1 / rate each when burstiness is inf, accumulated, then scaled so that the last request is
  ready exactly num_prompts / rate after the start; all at once when the rate is inf.
- warm-ups and the ready check: ``serve.py`` ``benchmark``: copies of the first request
  (``test_input``), sent before the measured run and all waited for.

    prompt segments          content id
    [special tokens]         1            (num_special_tokens; the server's BOS)
    [random prefix]          0            (random_prefix_len, the same for every prompt)
    [own tokens]             2 + i        (request i; warm-ups repeat request 0's)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvsim.request import RequestSpec, Segment
from kvsim.workload.config import BenchServeWorkload

#: Content ids of the prompt's parts (see the module docstring).
PREFIX_CONTENT_ID = 0
SPECIAL_CONTENT_ID = 1
FIRST_OWN_CONTENT_ID = 2


@dataclass(frozen=True)
class BenchClient:
    """How a benchmark client sends a workload's requests.

    ``measured``: request ids of the measured run, in the order sent (vLLM's client sends in
    dataset order); ``ready_offsets_s``: when each becomes ready, seconds after the measured
    run starts; ``warmups``: warm-up ids, in order (their own closed loop, at the same
    concurrency, with no rate); ``ready_check``: the one request sent and waited for before
    the warm-ups (None: none). ``max_concurrency`` None: no limit.
    """

    measured: tuple[int, ...]
    ready_offsets_s: tuple[float, ...]
    warmups: tuple[int, ...] = ()
    ready_check: int | None = None
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        if len(self.measured) != len(self.ready_offsets_s):
            raise ValueError("one ready offset per measured request")
        if not self.measured:
            raise ValueError("a benchmark client needs at least one measured request")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")

    @property
    def unmeasured(self) -> tuple[int, ...]:
        """Requests excluded from every figure: the ready check and the warm-ups."""
        return (*(() if self.ready_check is None else (self.ready_check,)), *self.warmups)


def legacy_random_state(seed: int) -> np.random.RandomState:
    """numpy's global generator as ``np.random.seed(seed)`` leaves it (vLLM's client seeds it
    with --seed); seeds of 2^32 and more, which ``np.random.seed`` refuses, get an MT19937
    seeded through a SeedSequence instead."""
    if seed < 2**32:
        return np.random.RandomState(seed)
    return np.random.RandomState(np.random.MT19937(seed))


def draw_lengths(cfg: BenchServeWorkload, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The drawn prompt lengths (before the prefix and special tokens) and output lengths."""
    (in_low, in_high), (out_low, out_high) = cfg.input_range, cfg.output_range
    n = cfg.num_prompts
    if cfg.random_range_ratio_rule == "legacy":
        legacy = legacy_random_state(seed)
        inputs = legacy.randint(in_low, in_high + 1, size=n)
        outputs = legacy.randint(out_low, out_high + 1, size=n)
    else:
        rng = np.random.default_rng(seed)
        inputs = rng.integers(in_low, in_high + 1, size=n)
        outputs = rng.integers(out_low, out_high + 1, size=n)
    return inputs.astype(np.int64), outputs.astype(np.int64)


def ready_offsets(num_prompts: int, request_rate: float, burstiness: float, seed: int) -> np.ndarray:
    """When each measured request becomes ready, seconds after the start (``get_request``)."""
    if request_rate == float("inf"):
        return np.zeros(num_prompts)
    if burstiness == float("inf"):
        gaps = np.full(num_prompts, 1.0 / request_rate)
    else:
        theta = 1.0 / (request_rate * burstiness)
        gaps = legacy_random_state(seed).gamma(shape=burstiness, scale=theta, size=num_prompts)
    delays = np.cumsum(gaps)  # sequential sums, as vLLM's loop adds them
    if delays[-1] != 0:
        delays = delays * ((num_prompts / request_rate) / delays[-1])
    return np.asarray(delays, dtype=np.float64)


def generate_bench_serve(cfg: BenchServeWorkload, seed: int) -> tuple[list[RequestSpec], BenchClient]:
    """The client's requests (measured, then warm-ups, then the ready check) and how it sends them.

    ``seed`` is used when the workload names none (``cfg.seed``): the scenario's seed.
    """
    seed = cfg.seed if cfg.seed is not None else seed
    inputs, outputs = draw_lengths(cfg, seed)
    head: list[Segment] = []
    if cfg.num_special_tokens:
        head.append(Segment(SPECIAL_CONTENT_ID, cfg.num_special_tokens))
    if cfg.random_prefix_len:
        head.append(Segment(PREFIX_CONTENT_ID, cfg.random_prefix_len))
    prefix = tuple(head)
    n = cfg.num_prompts
    specs = [
        RequestSpec(
            request_id=i,
            arrival_s=0.0,  # sent when the client says so (arrival_s in the request table)
            prompt=(*prefix, Segment(FIRST_OWN_CONTENT_ID + i, int(own))) if own else prefix,
            output_tokens=int(out),
            tenant=cfg.tenant,
        )
        for i, (own, out) in enumerate(zip(inputs.tolist(), outputs.tolist(), strict=True))
    ]
    first = specs[0]
    copies = range(n, n + cfg.num_warmups + int(cfg.ready_check))
    specs += [
        RequestSpec(
            request_id=rid,
            arrival_s=0.0,
            prompt=first.prompt,
            output_tokens=first.output_tokens,
            tenant=cfg.tenant,
        )
        for rid in copies
    ]
    offsets = ready_offsets(n, cfg.request_rate_per_s, cfg.burstiness_shape, seed)
    client = BenchClient(
        measured=tuple(range(n)),
        ready_offsets_s=tuple(offsets.tolist()),
        warmups=tuple(range(n, n + cfg.num_warmups)),
        ready_check=n + cfg.num_warmups if cfg.ready_check else None,
        max_concurrency=cfg.max_concurrency,
    )
    return specs, client


__all__ = [
    "BenchClient",
    "draw_lengths",
    "generate_bench_serve",
    "legacy_random_state",
    "ready_offsets",
]
