"""Does a model fit? One tensor-parallel shard's memory against weights, activations and KV.

    budget = GPU memory x gpu_memory_utilization
    fits   = weights / tp + activation reserve + batch x KV of one sequence at the context <= budget

in vLLM's block arithmetic (`kvsim.model.kv_sizing`): the KV pool is what is left after weights
and the activation reserve, cut into blocks, and a sequence of n tokens holds
`blocks_per_sequence(model, n)` of them (sliding windows and layer groups applied).
Besides yes or no, `check_fit` says what dominates memory and the two limits a user
trades against each other: the longest context ``batch_size`` sequences can each hold,
and the most sequences of ``context_tokens`` tokens. `fit_variants` repeats it with KV
and weight quantization; `max_model_len_problem` is vLLM's start-up check (one request
of max_model_len tokens must fit the pool, or the engine refuses to start).

    llama-3-8b (bf16) on an rtx-4090, sequences of 8,192 tokens (1 GiB of KV each):
      budget 21.60 GiB - weights 14.96 - activation reserve 2.03 = 4.62 GiB of KV
      4 sequences need 4.00 GiB: fits; the largest batch is 4, with fp8 KV 9
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kvsim.model.kv_sizing import GIB, KvCapacity, blocks_per_sequence, kv_capacity
from kvsim.model.specs import GpuSpec, ModelSpec, WeightDtype


@dataclass(frozen=True)
class FitCheck:
    """The answer for one model, GPU, TP degree, dtype, context and batch (per TP shard)."""

    model: str
    gpu: str
    tp: int
    weight_dtype: str
    kv_cache_dtype: str
    context_tokens: int
    batch_size: int
    max_model_len: int
    capacity: KvCapacity
    blocks_per_sequence: int
    kv_bytes_needed: float
    max_context_tokens: int
    max_batch_size: int

    @property
    def weights_fit(self) -> bool:
        return self.capacity.weight_bytes_per_shard <= self.capacity.budget_bytes

    @property
    def fits(self) -> bool:
        need = self.batch_size * self.blocks_per_sequence
        return self.weights_fit and self.capacity.num_blocks >= max(need, 1)

    @property
    def dominant(self) -> str:
        """What takes most of the memory the request set needs: weights, activations or kv."""
        cap = self.capacity
        parts = {
            "weights": cap.weight_bytes_per_shard,
            "activations": cap.activation_reserve_bytes,
            "kv": self.kv_bytes_needed,
        }
        return max(parts, key=lambda k: parts[k])

    def reason(self) -> str:
        """One sentence: why it fits or not, with the numbers."""
        cap = self.capacity
        if not self.weights_fit:
            return (
                f"weights need {_gib(cap.weight_bytes_per_shard)} per GPU, more than the "
                f"{_gib(cap.budget_bytes)} budget"
            )
        left = max(cap.kv_bytes_per_shard, 0.0)
        verdict = "fits" if self.fits else "does not fit"
        beyond = (
            f"; beyond the model's max_model_len {self.max_model_len:,}"
            if self.context_tokens > self.max_model_len
            else ""
        )
        return (
            f"{verdict}: {self.batch_size} x {self.context_tokens:,} tokens need "
            f"{_gib(self.kv_bytes_needed)} of KV per GPU, {_gib(left)} are left after "
            f"{_gib(cap.weight_bytes_per_shard)} of weights"
            + (
                f", {_gib(cap.linear_state_pool_bytes_per_shard)} of linear-attention request states"
                if cap.linear_state_pool_bytes_per_shard
                else ""
            )
            + f" and {_gib(cap.activation_reserve_bytes)} of activation reserve (dominant: {self.dominant}{beyond})"
        )

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "capacity"}
        out.update(
            fits=self.fits,
            weights_fit=self.weights_fit,
            dominant=self.dominant,
            reason=self.reason(),
            budget_bytes=self.capacity.budget_bytes,
            weight_bytes_per_shard=self.capacity.weight_bytes_per_shard,
            activation_reserve_bytes=self.capacity.activation_reserve_bytes,
            kv_bytes_per_shard=self.capacity.kv_bytes_per_shard,
            num_blocks=self.capacity.num_blocks,
            bytes_per_block_per_shard=self.capacity.bytes_per_block_per_shard,
        )
        return out


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB:,.2f} GiB"


def max_context_tokens(model: ModelSpec, num_blocks: int, block_size: int, batch_size: int = 1) -> int:
    """Longest context (<= the model's max_model_len) ``batch_size`` sequences can each hold."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if batch_size * blocks_per_sequence(model, model.max_model_len, block_size) <= num_blocks:
        return model.max_model_len
    lo, hi = 0, model.max_model_len  # lo fits, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if batch_size * blocks_per_sequence(model, mid, block_size) <= num_blocks:
            lo = mid
        else:
            hi = mid
    return lo


def max_batch_size(model: ModelSpec, num_blocks: int, block_size: int, context_tokens: int) -> int:
    """Most sequences of ``context_tokens`` tokens the pool holds at once."""
    per_seq = blocks_per_sequence(model, context_tokens, block_size)
    return num_blocks // per_seq if per_seq else 0


def check_fit(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    context_tokens: int,
    batch_size: int = 1,
    tp: int = 1,
    kv_cache_dtype: str = "auto",
    block_size: int = 16,
    gpu_memory_utilization: float = 0.9,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    activation_reserve_bytes: float | None = None,
    backend: str = "vllm",
) -> FitCheck:
    """Whether ``batch_size`` sequences of ``context_tokens`` tokens fit, and the limits
    (``backend``: whose memory rule, `kvsim.model.kv_sizing.kv_capacity`)."""
    if context_tokens < 1 or batch_size < 1:
        raise ValueError("context_tokens and batch_size must be >= 1")
    cap = kv_capacity(
        model,
        gpu,
        tp=tp,
        kv_cache_dtype=kv_cache_dtype,
        block_size=block_size,
        gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        activation_reserve_bytes=activation_reserve_bytes,
        backend=backend,
    )
    per_seq = blocks_per_sequence(model, context_tokens, block_size)
    blocks = cap.num_blocks if cap.weight_bytes_per_shard <= cap.budget_bytes else 0
    return FitCheck(
        model=model.name,
        gpu=gpu.name,
        tp=tp,
        weight_dtype=model.weight_dtype,
        kv_cache_dtype=kv_cache_dtype,
        context_tokens=context_tokens,
        batch_size=batch_size,
        max_model_len=model.max_model_len,
        capacity=cap,
        blocks_per_sequence=per_seq,
        kv_bytes_needed=batch_size * per_seq * cap.bytes_per_block_per_shard,
        max_context_tokens=max_context_tokens(model, blocks, block_size, batch_size),
        max_batch_size=max_batch_size(model, blocks, block_size, context_tokens),
    )


def with_weight_dtype(model: ModelSpec, weight_dtype: WeightDtype) -> ModelSpec:
    """``model`` with every weight (experts included) quantized to ``weight_dtype``."""
    return model.model_copy(
        update={"weight_dtype": weight_dtype, "expert_weight_dtype": None, "module_weight_dtypes": {}}
    )


def served_model(model: ModelSpec, quantization: WeightDtype | None) -> ModelSpec:
    """The model as a deployment serves it: ``engine.quantization`` (vLLM's --quantization) sets
    every weight's precision; None keeps the model's own. The plan, the scenario checks and the
    backend defaults all take the model of a replica group from here."""
    uniform = model.expert_weight_dtype is None and not model.module_weight_dtypes
    if quantization is None or (quantization == model.weight_dtype and uniform):
        return model
    return with_weight_dtype(model, quantization)


def fit_variants(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    kv_cache_dtypes: tuple[str, ...] = ("auto", "fp8"),
    weight_dtypes: tuple[WeightDtype | None, ...] = (None, "fp8", "int4"),
    **kwargs: Any,
) -> list[FitCheck]:
    """`check_fit` for every weight dtype (None: the model's own) and KV dtype, in that order."""
    out = []
    for wd in weight_dtypes:
        spec = model if wd is None else with_weight_dtype(model, wd)
        for kd in kv_cache_dtypes:
            out.append(check_fit(spec, gpu, kv_cache_dtype=kd, **kwargs))
    return out


def max_model_len_problem(
    model: ModelSpec, capacity: KvCapacity, max_model_len: int, max_num_batched_tokens: int
) -> str | None:
    """vLLM's start-up check: one request of ``max_model_len`` tokens must fit the pool.

    Under a sliding window the request must also hold a whole chunk of
    ``max_num_batched_tokens`` beside the window (vLLM 0.32's ``max_memory_usage_bytes``).
    Returns the complaint, with the numbers and the longest length that would fit, or None.
    """
    bs = capacity.block_size
    chunk = min(max_num_batched_tokens, max_model_len)
    need = blocks_per_sequence(model, max_model_len, bs, chunk_tokens=chunk)
    if need <= capacity.num_blocks:
        return None
    per_block = capacity.bytes_per_block_per_shard
    lo, hi = 0, max_model_len  # the longest length that fits, by bisection: lo fits, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if blocks_per_sequence(model, mid, bs, chunk_tokens=min(chunk, mid)) <= capacity.num_blocks:
            lo = mid
        else:
            hi = mid
    longest = lo
    return (
        f"one request of max_model_len {max_model_len:,} tokens needs {need:,} KV blocks "
        f"({_gib(need * per_block)} per GPU) but the pool holds {capacity.num_blocks:,} "
        f"({_gib(capacity.num_blocks * per_block)}); at most {longest:,} tokens fit: lower "
        "max_model_len, or raise gpu_memory_utilization, tp or use kv_cache_dtype fp8 "
        "(vLLM refuses to start the same way)"
    )
