"""What a mixture of experts' layer exchanges between GPUs, by parallel layout, from measured tables.

An instance of ``attention_dp`` = D ranks of ``tp`` GPUs each runs its MoE layers on all
N = tp x D GPUs (moe_tp x moe_ep = N). Per MoE layer the tokens reach their experts and
come back as follows (the ``kernels`` cost model, `kvsim.cost.kernels`):

    D = 1                  the tp GPUs hold the same tokens after attention; each computes its
                           expert shards (moe_tp) or whole experts (moe_ep) for all of them and
                           one all-reduce sums the results, as after a dense MLP (vLLM, SGLang
                           and TensorRT-LLM without attention DP). Nothing new is exchanged.
    D > 1, moe_tp = 1      expert parallelism over the instance: dispatch and combine all-to-alls
                           (`all_to_all_curve`). TensorRT-LLM's NVLinkOneSided kernels on
                           NVLink 5 systems (`nvlink_one_sided_curve`), else the engine's measured ``moe_a2a`` table
                           (DeepEP high-throughput and low-latency kernels; the faster at each
                           token count) where it has the layout (ep_size = N, hidden size, top-k,
                           experts), else NCCL's ``alltoall`` on N GPUs, each sending its tokens'
                           top-k copies: message = tokens x top-k x hidden elements.
    D > 1, moe_tp > 1      the ranks' tokens all-gathered before the experts and reduce-scattered
                           after (as vLLM's ``allgather_reducescatter`` all2all backend and
                           TensorRT-LLM's attention-DP path do): NCCL ``all_gather`` + ``reduce_scatter``
                           on the D ranks, message = the instance's tokens x hidden elements.

The tables are aiconfigurator-core 0.12.0's ``systems/data/<system>/comm/<backend>/<version>/
moe_a2a_perf.parquet`` (vLLM 0.24.0, TensorRT-LLM 1.3.0rc11: latency in microseconds, by
tokens per rank) and ``comm/nccl/<version>/nccl_perf.parquet`` (latency in ms by message
elements: the whole gathered buffer, as its all_gather / all_reduce rows at 8 GPUs show, an
all-gather costing about half an all-reduce of the same size). A GPU count past the largest
measured (NCCL: 8; the instance may span nodes) is priced at the largest, with a warning:
inter-node links are not priced apart. SGLang's DeepEP communication tables
(``wideep_deepep_*``: one node, no EP size) are not read: its expert-parallel all-to-all falls
back to NCCL's (its experts under DeepEP come from its wide-EP tables,
`kvsim.cost.kernels.wide_ep_moe_curves`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kvsim.cost.tables import MS, Curve, read_table
from kvsim.errors import ProfileError

if TYPE_CHECKING:
    from kvsim.cost.kernels import KernelSource

US = 1e-6  # the moe_a2a tables' unit, in seconds

#: The all-to-all wire dtype each engine's DeepEP kernels use, by expert precision
#: (aiconfigurator-core 0.12.0, sdk/operations/moe_comm.py communication_dtype_for: vLLM's
#: DeepEP moves "default"; TensorRT-LLM's high-throughput kernel moves bf16 for bf16 / fp8
#: experts, nvfp4 for nvfp4; its low-latency kernel the experts' bf16 / fp8).
_A2A_DTYPE = {"fp8": "fp8", "fp8_block": "fp8", "nvfp4": "nvfp4"}


def nccl_curve(source: KernelSource, op: str, num_gpus: int, warn: list[str]) -> Curve:
    """Latency (s) of NCCL's ``op`` (all_gather, reduce_scatter, alltoall, all_reduce) on
    ``num_gpus`` GPUs by message elements (16-bit), from the system's newest nccl table."""
    index = source.index
    versions = index.versions(source.system, "comm", "nccl")
    if not versions:
        raise ProfileError(f"no NCCL {op} was measured on {source.system} (no comm/nccl tables)")
    frame = read_table(index.folder(source.system, "comm", "nccl", versions[-1]) / "nccl_perf.parquet")
    rows = frame[frame["op_name"] == op]
    if "nccl_dtype" in rows.columns and (rows["nccl_dtype"] == "half").any():
        rows = rows[rows["nccl_dtype"] == "half"]
    if rows.empty:
        raise ProfileError(f"no NCCL {op} was measured on {source.system}")
    gpus = sorted(int(g) for g in rows["num_gpus"].unique())
    n = num_gpus if num_gpus in gpus else max((g for g in gpus if g <= num_gpus), default=gpus[0])
    if n != num_gpus:
        warn.append(f"NCCL {op}: {num_gpus} GPUs not measured on {source.system}; priced as {n}")
    med = rows[rows["num_gpus"] == n].groupby("message_size")["latency"].median()
    return Curve(med.index.to_numpy(float), med.to_numpy(float) * MS)


def _a2a_table_curve(
    source: KernelSource, *, ep: int, hidden: int, topk: int, num_experts: int, expert_dtype: str
) -> Curve | None:
    """Dispatch + combine (s) by tokens per rank from the engine's moe_a2a table, the faster
    kernel (high-throughput or low-latency) at each count; None where the layout is not measured."""
    versions = source.index.versions(source.system, "comm", source.backend)
    path = next(
        (
            p
            for v in reversed(versions)
            if (
                p := source.index.folder(source.system, "comm", source.backend, v) / "moe_a2a_perf.parquet"
            ).is_file()
        ),
        None,
    )
    if path is None:
        return None
    frame = read_table(path)
    rows = frame[
        (frame["ep_size"] == ep)
        & (frame["node_num"] == -(-ep // 8))
        & (frame["hidden_size"] == hidden)
        & (frame["topk"] == topk)
        & (frame["num_experts"] == num_experts)
    ]
    if rows.empty:
        return None
    wanted = _A2A_DTYPE.get(expert_dtype, "bfloat16")
    per_kernel: list[Curve] = []
    for _, kernel in rows.groupby("comm_backend"):
        dtypes = set(kernel["comm_dtype"].astype(str))
        dtype = next((d for d in (wanted, "default", "bfloat16") if d in dtypes), None)
        if dtype is None:
            continue
        sub = kernel[kernel["comm_dtype"] == dtype]
        by_phase = (
            sub.groupby(["phase", "num_tokens"])["latency"]
            .median()
            .groupby("num_tokens")
            .agg(["sum", "size"])
        )
        both = by_phase[by_phase["size"] == 2]["sum"]  # counts measured for dispatch and combine
        if not both.empty:
            per_kernel.append(Curve(both.index.to_numpy(float), both.to_numpy(float) * US))
    if not per_kernel:
        return None
    grid = np.unique(np.concatenate([c.sizes for c in per_kernel]))
    best = [min(c(float(x)) for c in per_kernel if x <= c.x_max) for x in grid]
    return Curve(grid, best)


def all_to_all_curve(
    source: KernelSource,
    *,
    ep: int,
    tp: int,
    hidden: int,
    topk: int,
    num_experts: int,
    expert_dtype: str,
    warn: list[str],
) -> Curve:
    """Dispatch + combine all-to-all latency (s) of one MoE layer by the rank's tokens."""
    if source.backend == "trtllm":
        one_sided = nvlink_one_sided_curve(
            source,
            ep=ep,
            hidden=hidden,
            topk=topk,
            num_experts=num_experts,
            expert_dtype=expert_dtype,
            warn=warn,
        )
        if one_sided is not None:
            return one_sided
    measured = _a2a_table_curve(
        source, ep=ep, hidden=hidden, topk=topk, num_experts=num_experts, expert_dtype=expert_dtype
    )
    if measured is not None:
        return measured
    nccl = nccl_curve(source, "alltoall", ep, warn)
    # Each GPU sends its share of the rank's tokens (1/tp), top-k copies of each, twice.
    elements_per_token = topk * hidden / tp
    return Curve(nccl.sizes / elements_per_token, 2 * nccl.at(nccl.sizes))


#: GPUs of one NVLink domain on the systems whose GPUs hang off NVLink 5 switches (1.8 TB/s
#: per GPU): an HGX B200 / B300 node's 8, a GB200 / GB300 NVL72 rack's 72 (NVIDIA's datasheets).
NVLINK5_DOMAIN_GPUS = {"b200_sxm": 8, "b300_sxm": 8, "gb200": 72, "gb300": 72}
#: The system whose TensorRT-LLM NVLinkOneSided all-to-all aiconfigurator-core 0.12.0 measured
#: (gb200/comm/trtllm/1.3.0rc10/trtllm_alltoall_perf.parquet, TensorRT-LLM 1.2.0rc6).
ONE_SIDED_TABLE_SYSTEM = "gb200"


def nvlink_one_sided_curve(
    source: KernelSource,
    *,
    ep: int,
    hidden: int,
    topk: int,
    num_experts: int,
    expert_dtype: str,
    warn: list[str],
) -> Curve | None:
    """TensorRT-LLM's attention-DP all-to-all (s) by the rank's tokens: its NVLinkOneSided
    dispatch + combine, where the layout was measured; else None.

    TensorRT-LLM's MoE picks its communication in this order (tensorrt_llm/_torch/modules/
    fused_moe/communication/communication_factory.py, CommunicationFactory.create_strategy,
    1.2-1.3): NVLinkOneSided, which needs every NVLink up (MnnvlMemory.supports_mnnvl), then
    NVLinkTwoSided, NCCL-EP, DeepEP, all-gather + reduce-scatter. Its one-sided kernels put
    the (post-quantization: nvfp4 / fp8 experts take nvfp4 / fp8 payloads) tokens straight into
    the peers' memory over NVLink: at 8,192 tokens per rank on 4 GB200s, 0.71 ms against DeepEP's
    4.1 ms. The table was measured on GB200 only; the other NVLink 5 systems
    (`NVLINK5_DOMAIN_GPUS`), whose GPUs reach each other through the same switches at the same
    1.8 TB/s, read it within one NVLink domain, with a warning. Hopper and a layout across
    domains keep DeepEP's tables (`_a2a_table_curve`) or NCCL's."""
    domain = NVLINK5_DOMAIN_GPUS.get(source.system)
    if domain is None or ep > domain:
        return None
    index = source.index
    found = next(
        (
            (name, path)
            for name in dict.fromkeys((source.system, ONE_SIDED_TABLE_SYSTEM))
            for v in reversed(index.versions(name, "comm", "trtllm"))
            if (path := index.folder(name, "comm", "trtllm", v) / "trtllm_alltoall_perf.parquet").is_file()
        ),
        None,
    )
    if found is None:
        return None
    measured_on, path = found
    frame = read_table(path)
    rows = frame[
        (frame["kernel_source"] == "NVLinkOneSided")
        & (frame["moe_ep_size"] == ep)
        & (frame["hidden_size"] == hidden)
        & (frame["topk"] == topk)
        & (frame["num_experts"] == num_experts)
        & (frame["moe_dtype"] == _A2A_DTYPE.get(expert_dtype, "bfloat16"))
    ]
    by_op = rows.groupby(["op_name", "num_tokens"])["latency"].median()
    if "alltoall_dispatch" not in by_op.index or "alltoall_combine" not in by_op.index:
        return None
    both = by_op["alltoall_dispatch"] + by_op["alltoall_combine"]
    both = both.dropna()
    if both.empty:
        return None
    if measured_on != source.system:
        warn.append(
            f"MoE all-to-all: TensorRT-LLM's NVLinkOneSided measured on {measured_on} only; "
            f"{source.system} reads it (the same NVLink 5 switches)"
        )
    return Curve(both.index.to_numpy(float), both.to_numpy(float) * MS)


def gather_scatter_curve(source: KernelSource, *, ranks: int, hidden: int, warn: list[str]) -> Curve:
    """All-gather + reduce-scatter latency (s) of one MoE layer by the tokens of one rank
    (message: those of all ``ranks``, ranks in lockstep with as many tokens each)."""
    gather = nccl_curve(source, "all_gather", ranks, warn)
    scatter = nccl_curve(source, "reduce_scatter", ranks, warn)
    grid = np.unique(np.concatenate([gather.sizes, scatter.sizes]))
    return Curve(grid / (hidden * ranks), gather.at(grid) + scatter.at(grid))
