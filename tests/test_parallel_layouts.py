"""Parallel layouts of a mixture of experts: tp, attention_dp, moe_tp, moe_ep (issue 22 item 2).

Step times are computed by hand on tiny hand-made tables (those of test_kernels, plus expert
rows at other layouts, an NCCL table and a DeepEP all-to-all table, each a linear function of
its grid coordinates so that interpolation is exact): what the all-to-all or the all-gather /
reduce-scatter costs, which expert rows (layout, token count, load distribution) price the
slowest rank, and how an instance of attention-DP ranks becomes replicas with its KV pools.
"""

from __future__ import annotations

import itertools
import shlex
from pathlib import Path

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal
from test_kernels import TINY_MOE, _cfg, decode_ms, gemm_ms, moe_ms, write_moe_mla_tables

import kvsim
from kvsim.backends.launch import launch_commands
from kvsim.cost.base import Batch
from kvsim.cost.kernels import KernelCostModel, graph_padded
from kvsim.cost.roofline import RooflineCostModel
from kvsim.model.kv_sizing import GIB, kv_capacity, weight_bytes, weight_bytes_per_gpu
from kvsim.model.moe import (
    expected_distinct_experts,
    expert_params_per_layer,
    non_expert_layer_params,
    routed_expert_params,
    shared_expert_params,
)
from kvsim.model.presets import resolve_gpu, resolve_model
from kvsim.model.specs import WEIGHT_DTYPE_BYTES
from kvsim.planning.pricing import PriceTable, price_usage, usage_of
from kvsim.request import RequestSpec, Segment
from kvsim.scenario.loading import load_scenario
from kvsim.scenario.resolved import resolve_group

H100 = resolve_gpu("h100-sxm")
#: The load skew of each measured distribution in the expert-parallel rows below: the
#: busier the hottest experts, the slower the rank holding them.
SKEW = {"balanced": 1.0, "power_law_1.01": 1.25, "power_law_1.2": 1.5}


def ep_ms(tokens: float, inter: float, moe_ep: float) -> float:
    return 0.01 + 1e-6 * tokens * inter / moe_ep


def gather_ms(size: float) -> float:
    return 0.001 + 1e-7 * size


def scatter_ms(size: float) -> float:
    return 0.0015 + 1e-7 * size


def alltoall_ms(size: float) -> float:
    return 0.002 + 2e-7 * size


def ll_us(tokens: float, phase: str) -> float:  # DeepEP low latency: cheap start, steep
    return (20.0 if phase == "dispatch" else 25.0) + 1.0 * tokens


def ht_us(tokens: float, phase: str) -> float:  # DeepEP high throughput: dear start, flat
    return (60.0 if phase == "dispatch" else 70.0) + 0.1 * tokens


def write_layout_tables(root: Path, backend: str = "vllm") -> Path:
    write_moe_mla_tables(root, backend=backend)
    moe_path = root / "toy_sxm" / "moe" / backend / "1.0.0" / "moe_perf.parquet"
    base = {
        "kernel_source": "triton",
        "moe_dtype": "bfloat16",
        "hidden_size": 64,
        "topk": 2,
        "num_experts": 4,
    }
    extra = [
        {**base, "num_tokens": m, "inter_size": inter, "moe_tp_size": 1, "moe_ep_size": ep,
         "distribution": dist, "latency": ep_ms(m, inter, ep) * SKEW[dist]}
        for ep, dist, inter, m in itertools.product(
            [2, 4, 8], SKEW, [64, 128, 256], [1, 2, 4, 8, 16, 64, 256, 1024]
        )
    ]  # fmt: skip
    pd.concat([pd.read_parquet(moe_path), pd.DataFrame(extra)]).to_parquet(moe_path)
    nccl = root / "toy_sxm" / "comm" / "nccl" / "2.0"
    nccl.mkdir(parents=True)
    pd.DataFrame(
        [
            {"op_name": op, "nccl_dtype": "half", "num_gpus": n, "message_size": s, "latency": f(s) * n / 2}
            for op, f in (
                ("all_gather", gather_ms),
                ("reduce_scatter", scatter_ms),
                ("alltoall", alltoall_ms),
            )
            for n in (2, 4)
            for s in (64, 512, 4096, 32768, 262144)
        ]
    ).to_parquet(nccl / "nccl_perf.parquet")
    a2a = [
        {"comm_backend": kernel, "phase": phase, "comm_dtype": "default", "ep_size": 2, "node_num": 1,
         "hidden_size": 64, "topk": 2, "num_experts": 4, "num_tokens": t, "sms": 20, "latency": f(t, phase)}
        for kernel, f, tokens in (("deepep_ll", ll_us, [1, 2, 4, 8, 16, 64, 256]),
                                  ("deepep_ht", ht_us, [16, 64, 256, 1024, 4096]))
        for phase in ("dispatch", "combine")
        for t in tokens
    ]  # fmt: skip
    (root / "toy_sxm" / "comm" / backend / "1.0.0").mkdir(parents=True, exist_ok=True)
    pd.DataFrame(a2a).to_parquet(root / "toy_sxm" / "comm" / backend / "1.0.0" / "moe_a2a_perf.parquet")
    return root


@pytest.fixture
def tables(tmp_path: Path) -> Path:
    return write_layout_tables(tmp_path / "tables")


def _model(tables: Path, tp: int, **layout: int) -> KernelCostModel:
    cfg = _cfg(tables, per_iteration_overhead_s=1e-4, per_layer_overhead_s=2e-6, elementwise_kernel_s=3e-6)
    spec = TINY_MOE.model_copy(update={"num_kv_heads": tp})  # one KV head per GPU, as measured
    return KernelCostModel(spec, H100, cfg, tp=tp, max_num_seqs=8, **layout)


def _decode(b: int) -> Batch:
    return Batch(num_decode_seqs=b, decode_context_tokens=b * 40)


def test_expert_parallel_ranks_exchange_tokens_by_all_to_all(tables: Path) -> None:
    """tp 1 x attention_dp 2, experts split moe_ep 2: against the same rank without attention
    DP, the one MoE layer differs by (i) its experts, timed on both ranks' tokens (2 x 4) on
    the expert-parallel rows of the default power-law load, and (ii) DeepEP's dispatch and
    combine for the rank's 4 tokens, the low-latency kernel (faster at this size)."""
    alone = _model(tables, tp=1)
    dp = _model(tables, tp=1, attention_dp=2, moe_ep=2)
    assert (dp.moe_tp, dp.moe_ep) == (1, 2)
    b = m = 4  # padded to the graph of 4
    experts = (ep_ms(2 * m, 64, 2) * SKEW["power_law_1.01"] - moe_ms(m, 64, 1)) * 1e-3
    all_to_all = (ll_us(m, "dispatch") + ll_us(m, "combine")) * 1e-6  # 53 us; high-throughput: 133.2
    assert all_to_all == pytest.approx(53e-6)
    got = dp.step_time_s(_decode(b)) - alone.step_time_s(_decode(b))
    assert got == pytest.approx(experts + all_to_all, rel=1e-9)
    # At 64 tokens a rank the high-throughput kernel is the faster (142.8 us against 173 us).
    assert dp._moe_comm is not None
    assert dp._moe_comm(64) == pytest.approx((ht_us(64, "dispatch") + ht_us(64, "combine")) * 1e-6)
    assert dp._moe_comm(1024) == pytest.approx(2 * 0.1 * 1024e-6 + 130e-6)  # past the low-latency grid


def test_an_expert_parallel_rank_s_decode_step_by_hand(tables: Path) -> None:
    """The whole step of one rank (tp 1) of an instance of 2 ranks with moe_ep 2: 3 decodes
    at 40 tokens each, padded to the graph of 4; layer 0 dense, layer 1 MoE."""
    km = _model(tables, tp=1, attention_dp=2, moe_ep=2)
    b, m, hbm = 3, 4, km._hbm_rate
    qkv_o = gemm_ms(m, (4 + 2) * 16, 64) + gemm_ms(m, 64, 64)  # 4 q heads + 2 x 1 KV head of 16
    norms_rope_kv = 2 * 4 * 64 * 2 + 2 * 5 * 16 * 2 + 2 * 1 * 16 * (2 + 2)
    dense = (
        (qkv_o + gemm_ms(m, 2 * 192, 64) + gemm_ms(m, 64, 192)) * 1e-3  # active width 3 x 64
        + m * (norms_rope_kv + 3 * 192 * 2) / hbm
        + 5 * 3e-6
        + 2e-6  # tp 1: no all-reduce
    )
    experts = ep_ms(2 * m, 64, 2) * SKEW["power_law_1.01"]  # both ranks' 8 tokens, busiest rank
    all_to_all = (ll_us(m, "dispatch") + ll_us(m, "combine")) * 1e-6
    moe = (
        (qkv_o + gemm_ms(m, 16, 64) + gemm_ms(m, 128, 64) + gemm_ms(m, 64, 64) + experts) * 1e-3
        + m * (norms_rope_kv + 3 * 64 * 2) / hbm  # the shared expert's SiLU x mul
        + 5 * 3e-6
        + all_to_all
        + 2e-6
    )
    expected = dense + moe + gemm_ms(b, 256, 64) * 1e-3 + 2 * decode_ms(b, 39, 4) * 1e-3 + 1e-4
    assert km.step_time_s(Batch(num_decode_seqs=b, decode_context_tokens=b * 40)) == pytest.approx(
        expected, rel=1e-12
    )


def test_fast_forward_equals_stepping_with_attention_dp(tables: Path) -> None:
    spec = TINY_MOE.model_copy(update={"num_kv_heads": 1})
    cost = {"kind": "kernels", "tables": str(tables), "system": "toy_sxm"}
    engine = {"max_num_seqs": 8, "max_num_batched_tokens": 64, "num_gpu_blocks_override": 400}
    scenario = {
        "model": spec.model_dump(),
        "replicas": [
            {"gpu": "h100-sxm", "tp": 1, "attention_dp": 2, "moe_ep": 2, "cost_model": cost, "engine": engine}
        ],
        "workload": {
            "kind": "synthetic",
            "num_requests": 60,
            "arrival": {"kind": "poisson", "rate_per_s": 200},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 8, "max_tokens": 200},
            "output_tokens": {"kind": "uniform", "min_tokens": 1, "max_tokens": 300},
        },
    }
    fast = kvsim.run(scenario)
    slow = kvsim.run({**scenario, "sim": {"fast_forward": False}})
    assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    assert_frame_equal(fast.iterations, slow.iterations, check_exact=True)
    assert set(fast.iterations["replica_id"]) == {"replica-0", "replica-1"}


def test_the_slowest_rank_sets_the_step_through_the_load_knob(tables: Path) -> None:
    """Each expert-parallel row times the rank the routing loads most: a more skewed load
    (expert_load) makes only the expert kernel slower, by the rows' ratio."""
    steps = {}
    for load in SKEW:
        cfg = _cfg(tables, per_iteration_overhead_s=1e-4, expert_load=load)
        spec = TINY_MOE.model_copy(update={"num_kv_heads": 1})
        km = KernelCostModel(spec, H100, cfg, tp=1, attention_dp=2, moe_ep=2, max_num_seqs=8)
        steps[load] = km.step_time_s(_decode(4))
    kernel = ep_ms(8, 64, 2) * 1e-3
    assert steps["power_law_1.2"] - steps["balanced"] == pytest.approx(0.5 * kernel, rel=1e-9)
    assert steps["power_law_1.01"] - steps["balanced"] == pytest.approx(0.25 * kernel, rel=1e-9)


def test_split_experts_under_attention_dp_gather_and_scatter(tables: Path) -> None:
    """tp 1 x attention_dp 2, every expert split moe_tp 2: the ranks' tokens are all-gathered
    before the experts and reduce-scattered after, on the 2 ranks (NCCL, message = both
    ranks' tokens x hidden 64 elements); the experts' rows are moe_tp 2 at 2 x 4 tokens."""
    alone = _model(tables, tp=1)
    dp = _model(tables, tp=1, attention_dp=2, moe_tp=2)
    assert (dp.moe_tp, dp.moe_ep) == (2, 1)
    m, size = 4, 2 * 4 * 64
    exchange = (gather_ms(size) + scatter_ms(size)) * 1e-3
    experts = (moe_ms(2 * m, 64, 2) - moe_ms(m, 64, 1)) * 1e-3
    got = dp.step_time_s(_decode(4)) - alone.step_time_s(_decode(4))
    assert got == pytest.approx(experts + exchange, rel=1e-9)


def test_expert_parallelism_without_attention_dp_keeps_the_all_reduce(tables: Path) -> None:
    """tp 2, moe_ep 2, no attention DP: both GPUs hold the same tokens, each runs its experts
    on all of them and the all-reduce sums them, as with moe_tp; only the expert rows change."""
    tp = _model(tables, tp=2)
    ep = _model(tables, tp=2, moe_ep=2)
    assert ep._moe_comm is None
    m = 4
    got = ep.step_time_s(_decode(4)) - tp.step_time_s(_decode(4))
    assert got == pytest.approx(
        (ep_ms(m, 64, 2) * SKEW["power_law_1.01"] - moe_ms(m, 64, 2)) * 1e-3, rel=1e-9
    )
    # The default layout is today's, bit for bit.
    same = _model(tables, tp=2, attention_dp=1, moe_tp=2, moe_ep=1)
    assert same.step_time_s(_decode(4)) == tp.step_time_s(_decode(4))


def test_an_unmeasured_all_to_all_falls_back_to_nccl(tables: Path) -> None:
    """moe_ep 4 (tp 2 x attention_dp 2): the DeepEP table has ep 2 only, so NCCL's alltoall on
    4 GPUs prices dispatch and combine, each GPU sending its half of the rank's tokens top-2
    times: message = 4 / 2 x 2 x 64 elements, twice."""
    km = _model(tables, tp=2, attention_dp=2, moe_ep=4)
    assert km._moe_comm is not None
    size = 4 / 2 * 2 * 64
    assert km._moe_comm(4) == pytest.approx(2 * alltoall_ms(size) * 4 / 2 * 1e-3, rel=1e-12)
    assert km.warnings == ["router GEMM: n=4 outside the measured 16..7168"]
    eight = _model(tables, tp=2, attention_dp=4, moe_ep=8)  # 8 GPUs: NCCL measured up to 4
    assert "NCCL alltoall: 8 GPUs not measured on toy_sxm; priced as 4" in eight.warnings


def one_sided_ms(tokens: float, op: str) -> float:  # NVLinkOneSided: flat and cheap
    return (0.015 if op == "alltoall_dispatch" else 0.017) + 1e-5 * tokens


def test_tensorrt_llm_attention_dp_exchanges_by_its_nvlink_one_sided_all_to_all(tmp_path: Path) -> None:
    """TensorRT-LLM picks NVLinkOneSided before DeepEP or NCCL where every NVLink is up: its
    dispatch + combine (trtllm_alltoall_perf, measured on GB200) price the exchange, at the
    experts' payload (nvfp4 experts move nvfp4); an HGX B200 reads GB200's table within its 8
    NVLink-connected GPUs, with a warning; Hopper, a layout across HGX nodes, another engine
    or a layout the table lacks keep DeepEP's table or NCCL's."""
    from kvsim.cost.kernels import KernelSource
    from kvsim.cost.moe_comm import all_to_all_curve
    from kvsim.cost.tables import TableIndex

    rows = [
        {"kernel_source": kernel, "op_name": op, "moe_dtype": dtype, "num_tokens": t, "hidden_size": 64,
         "topk": 2, "num_experts": 4, "moe_ep_size": ep, "distribution": "balanced",
         "latency": one_sided_ms(t, op) * (1.0 if kernel == "NVLinkOneSided" else 3.0) * (0.5 if dtype == "nvfp4" else 1.0)}
        for kernel in ("NVLinkOneSided", "NVLinkTwoSided")
        for op in ("alltoall_dispatch", "alltoall_combine")
        for dtype in ("bfloat16", "nvfp4")
        for ep in (2, 4, 16)
        for t in (1, 16, 256, 4096)
    ]  # fmt: skip
    folder = tmp_path / "gb200" / "comm" / "trtllm" / "1.0.0"
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(folder / "trtllm_alltoall_perf.parquet")
    index = TableIndex.scan(tmp_path)

    def curve(
        system: str, ep: int, dtype: str = "bfloat16", backend: str = "trtllm"
    ) -> tuple[float, list[str]]:
        warn: list[str] = []
        try:
            got = all_to_all_curve(KernelSource(index, system, backend, None), ep=ep, tp=1, hidden=64, topk=2,
                                   num_experts=4, expert_dtype=dtype, warn=warn)  # fmt: skip
        except Exception as err:  # no NCCL table here: the fallback was taken
            return float("nan"), [type(err).__name__]
        return got(256), warn

    expected = (one_sided_ms(256, "alltoall_dispatch") + one_sided_ms(256, "alltoall_combine")) * 1e-3
    assert curve("gb200", 4) == (pytest.approx(expected, rel=1e-12), [])
    assert curve("gb200", 4, "nvfp4")[0] == pytest.approx(expected / 2, rel=1e-12)
    assert curve("gb200", 16)[0] == pytest.approx(expected, rel=1e-12)  # one NVL72 domain
    value, warn = curve("b200_sxm", 4)
    assert value == pytest.approx(expected, rel=1e-12)
    assert warn == ["MoE all-to-all: TensorRT-LLM's NVLinkOneSided measured on gb200 only; b200_sxm reads it "
                    "(the same NVLink 5 switches)"]  # fmt: skip
    for system, ep, backend in (("b200_sxm", 16, "trtllm"), ("h200_sxm", 4, "trtllm"), ("gb200", 8, "trtllm"),
                                ("gb200", 4, "vllm")):  # fmt: skip
        assert curve(system, ep, backend=backend)[1] == ["ProfileError"], (system, ep, backend)


def test_layouts_are_checked_with_the_field_named() -> None:
    base = {"model": "mixtral-8x7b"}
    load_scenario({**base, "replicas": [{"tp": 2, "attention_dp": 2, "moe_ep": 4}]})
    with pytest.raises(
        Exception, match=r"moe_tp x moe_ep = 2 x 4 = 8 must equal tp x attention_dp = 2 x 2 = 4"
    ):
        load_scenario({**base, "replicas": [{"tp": 2, "attention_dp": 2, "moe_tp": 2, "moe_ep": 4}]})
    with pytest.raises(Exception, match="moe_ep=3 does not divide tp x attention_dp"):
        load_scenario({**base, "replicas": [{"tp": 2, "attention_dp": 2, "moe_ep": 3}]})
    with pytest.raises(Exception, match="expert_parallel means moe_ep = tp x attention_dp = 4"):
        load_scenario({**base, "replicas": [{"tp": 4, "expert_parallel": True, "moe_tp": 2}]})
    with pytest.raises(Exception, match=r"replicas\.0\.moe_ep.*not a multiple of moe_ep=16"):
        load_scenario({**base, "replicas": [{"tp": 4, "attention_dp": 4, "moe_ep": 16}]})
    with pytest.raises(Exception, match=r"replicas\.0\.moe_ep.*llama-3-8b is not a mixture of experts"):
        load_scenario({"model": "llama-3-8b", "replicas": [{"attention_dp": 2, "moe_ep": 2}]})
    with pytest.raises(Exception, match=r"replicas\.0\.autoscale.*attention_dp > 1"):
        load_scenario(
            {
                **base,
                "replicas": [
                    {
                        "tp": 2,
                        "attention_dp": 2,
                        "autoscale": {
                            "min_count": 1,
                            "max_count": 2,
                            "scale_up_above": 4,
                            "scale_down_below": 1,
                        },
                    }
                ],
            }
        )
    with pytest.raises(Exception, match="count x attention_dp = 65536 x 2 ranks exceeds"):
        load_scenario({**base, "replicas": [{"count": 65536, "attention_dp": 2}]})
    # A dense model's data-parallel ranks are plain replicas.
    load_scenario({"model": "llama-3-8b", "replicas": [{"attention_dp": 2}]})


def test_attention_dp_ranks_are_replicas_with_the_experts_split_over_the_instance() -> None:
    model = resolve_model("mixtral-8x7b")
    scenario = load_scenario(
        {
            "model": "mixtral-8x7b",
            "replicas": [{"gpu": "h100-sxm", "tp": 2, "attention_dp": 2, "count": 3, "moe_ep": 4}],
        }
    )
    group = scenario.replicas[0]
    plan = resolve_group(model, group)
    assert len(plan.replica_names) == 6 and plan.initial_count == 6  # 3 instances x 2 ranks
    # Per GPU: the non-expert weights over the rank's tp 2, the routed experts over all 4 GPUs.
    experts = routed_expert_params(model) * WEIGHT_DTYPE_BYTES[model.weight_dtype]
    per_gpu = (weight_bytes(model) - experts) / 2 + experts / 4
    assert weight_bytes_per_gpu(model, 2, 2) == pytest.approx(per_gpu, rel=1e-12)
    assert plan.capacity.weight_bytes_per_shard == pytest.approx(per_gpu, rel=1e-12)
    one_rank = kv_capacity(model, H100, tp=2, max_num_seqs=group.engine.max_num_seqs,
                           max_num_batched_tokens=group.engine.max_num_batched_tokens)  # fmt: skip
    freed = (weight_bytes(model) / 2 - per_gpu) / plan.capacity.bytes_per_block_per_shard
    assert plan.capacity.num_blocks - one_rank.num_blocks == pytest.approx(freed, abs=1)
    assert per_gpu < weight_bytes(model) / 2 - 10 * GIB  # 4-way experts free >10 GiB a GPU


def test_max_total_tokens_caps_each_ranks_pool() -> None:
    """SGLang's --max-total-tokens is per rank (each attention-DP rank its own pool)."""
    model = resolve_model("mixtral-8x7b")
    data = {
        "model": "mixtral-8x7b",
        "replicas": [{"gpu": "h100-sxm", "tp": 2, "attention_dp": 2, "moe_ep": 4}],
    }
    free = resolve_group(model, load_scenario(data).replicas[0]).kv.num_blocks
    data["replicas"][0]["engine"] = {"backend": "sglang", "block_size": 16, "max_total_tokens": 4096}
    plan = resolve_group(model, load_scenario(data).replicas[0])
    assert free > 1000 and plan.kv.num_blocks == 4096 // 16 == 256 and len(plan.replica_names) == 2
    assert plan.max_model_len == 4096  # SGLang starts and caps the request length at its pool
    with pytest.raises(Exception, match="at most 4,112 tokens fit"):  # vLLM would refuse to start
        load_scenario({**data, "replicas": [{**data["replicas"][0], "engine": {"max_total_tokens": 4096}}]})


def test_an_instance_of_ranks_runs_and_counts_its_gpus() -> None:
    scenario = {
        "seed": 1,
        "model": "mixtral-8x7b",
        "replicas": [{"gpu": "h100-sxm", "tp": 2, "attention_dp": 2, "moe_ep": 4}],
        "workload": {"num_requests": 40, "arrival": {"kind": "poisson", "rate_per_s": 8.0}},
    }
    result = kvsim.run(scenario)
    assert set(result.requests["replica_id"]) == {"replica-0", "replica-1"}  # round robin over the ranks
    s = result.summary
    assert s["gpu_hours"] * 3600 == pytest.approx(2 * 2 * s["sim_time_s"], rel=1e-9)  # 2 ranks x tp 2


def test_the_roofline_prices_the_same_layouts() -> None:
    """Mixtral (32 MoE layers, hidden 4096, top-2 of 8, 16-bit) on one rank of tp 2 in an
    instance of 2 ranks (4 GPUs), 2 decoding tokens a rank: the rank's attention
    all-reduce per layer, then dispatch + combine all-to-alls (moe_ep 4) or all-gather +
    reduce-scatter over the 2 ranks (moe_tp 4); experts read for both ranks' tokens, 1/4 each."""
    mixtral = resolve_model("mixtral-8x7b")
    n = 2  # few enough that both ranks' tokens activate more experts than one rank's
    batch = Batch(num_decode_seqs=n, decode_context_tokens=n * 500)
    h, act, k = 4096, 2.0, 2
    attention = 32 * 2.0 * (2 - 1) / 2 * h * act
    ep = RooflineCostModel(mixtral, H100, tp=2, attention_dp=2, moe_ep=4).terms(batch)
    assert ep.num_allreduces == 32 + 2 * 32
    assert ep.allreduce_bus_bytes == pytest.approx(
        n * (attention + 2 * 32 * k * h * act * 3 / 4 / 2), rel=1e-12
    )
    split = RooflineCostModel(mixtral, H100, tp=2, attention_dp=2, moe_ep=1).terms(batch)
    assert split.allreduce_bus_bytes == pytest.approx(n * (attention + 2 * 32 * (2 - 1) * h * act), rel=1e-12)
    wbytes = WEIGHT_DTYPE_BYTES[mixtral.weight_dtype]
    dense = (
        (non_expert_layer_params(mixtral) + shared_expert_params(mixtral) + h * mixtral.vocab_size)
        * wbytes
        / 2
    )
    experts = expected_distinct_experts(8, 2, 2 * n) * 32 * expert_params_per_layer(mixtral) * wbytes / 4
    assert ep.weight_bytes == pytest.approx(dense + experts, rel=1e-12)
    # FLOPs per token do not change: twice the tokens over twice the GPUs.
    assert ep.linear_flops == RooflineCostModel(mixtral, H100, tp=2).terms(batch).linear_flops
    with pytest.raises(ValueError, match="mixture-of-experts"):
        RooflineCostModel(resolve_model("llama-3-8b"), H100, attention_dp=2, moe_ep=2)


def test_launch_commands_spell_the_layout() -> None:
    """One instance of attention_dp ranks is one engine launch on tp x attention_dp GPUs."""
    base = {"model": "mixtral-8x7b", "workload": {"num_requests": 1}}
    group = {"count": 2, "tp": 1, "attention_dp": 4, "moe_ep": 4}
    vllm, sglang, trtllm = (
        launch_commands(load_scenario({**base, "replicas": [{**group, "engine": {"backend": b}}]}))[0]
        for b in ("vllm", "sglang", "trtllm")
    )
    assert (vllm.replicas, vllm.gpus_per_replica) == (2, 4)
    args = shlex.split(vllm.command)
    assert args[3:8] == [
        "--tensor-parallel-size",
        "1",
        "--data-parallel-size",
        "4",
        "--enable-expert-parallel",
    ]
    args = shlex.split(sglang.command)
    assert args[5:12] == ["--tp", "4", "--dp", "4", "--enable-dp-attention", "--ep-size", "4"]
    args = shlex.split(trtllm.command)
    assert args[2:4] == ["--tp_size", "4"] and args[args.index("--ep_size") + 1] == "4"
    assert trtllm.config_file.startswith("enable_attention_dp: true\n")


def test_an_instance_is_priced_for_all_its_gpus() -> None:
    """Two requests on one instance of 2 ranks x tp 2 at 0.1 s a step: 4 GPUs for the whole
    span, busy time counted per rank x tp 2 (round robin: one request on each rank)."""
    specs = [RequestSpec(0, 0.0, (Segment(7, 96),), 3), RequestSpec(1, 10.0, (Segment(8, 96),), 2)]
    result = kvsim.run(
        {"model": "mixtral-8x7b", "replicas": [{"gpu": "h100-sxm", "tp": 2, "attention_dp": 2, "moe_ep": 4,
                                                "cost_model": {"kind": "constant", "step_time_s": 0.1}}]},
        requests=specs,
    )  # fmt: skip
    (g,) = usage_of(result).groups
    assert (g.tp, g.replicas) == (2, 2)
    assert g.gpu_seconds == pytest.approx(4 * 10.2)
    assert g.busy_prefill_gpu_s + g.busy_decode_gpu_s == pytest.approx((2 + 3) * 0.1 * 2)
    prices = PriceTable.model_validate({"label": "t", "gpus": {"h100-sxm": {"usd_per_gpu_hour": 3.6}}})
    assert price_usage(usage_of(result), prices).usd_per_hour == pytest.approx(4 * 3.6)


# -- SGLang's wide expert parallelism: DeepEP's expert kernels ---------------------------------


def wide_gen_ms(tokens: float) -> float:  # DeepEP low latency + grouped GEMM: cheap, flat
    return 0.004 + 2e-6 * tokens


def wide_ctx_ms(tokens: float) -> float:  # DeepEP normal + grouped GEMM: dearer start
    return 0.03 + 3e-6 * tokens


def write_wide_ep_tables(root: Path, dtype: str = "bfloat16") -> Path:
    """SGLang's toy tables (`write_layout_tables`) plus its wide-EP expert tables at moe_ep 2,
    uniform routing and the power law (SKEW's 1.25 x)."""
    write_layout_tables(root, backend="sglang")
    folder = root / "toy_sxm" / "moe" / "sglang" / "1.0.0"
    skew = {"uniform": 1.0, "power_law_1.01": SKEW["power_law_1.01"]}
    shape = {"kernel_source": "deepepmoe", "moe_dtype": dtype, "hidden_size": 64, "inter_size": 64, "topk": 2,
             "num_experts": 4, "moe_tp_size": 1, "moe_ep_size": 2}  # fmt: skip
    for kind, f, grid in (
        ("generation", wide_gen_ms, [2, 4, 8, 16, 64]),
        ("context", wide_ctx_ms, [16, 64, 256]),
    ):
        rows = [
            {**shape, "num_tokens": t, "distribution": d, "latency": f(t) * k}
            for d, k in skew.items()
            for t in grid
        ]
        pd.DataFrame(rows).to_parquet(folder / f"wideep_{kind}_moe_perf.parquet")
    return root


def _sglang(
    tables: Path, tp: int = 1, attention_dp: int = 2, moe_ep: int = 2, **kw: object
) -> KernelCostModel:
    cfg = _cfg(tables, per_iteration_overhead_s=1e-4, eager_moe_layer_host_s=0.0, **kw)
    spec = TINY_MOE.model_copy(update={"num_kv_heads": tp})
    return KernelCostModel(
        spec, H100, cfg, tp=tp, max_num_seqs=8, backend="sglang", attention_dp=attention_dp, moe_ep=moe_ep
    )


def test_sglang_wide_ep_experts_come_from_its_deepep_tables(tmp_path: Path) -> None:
    """SGLang with attention DP 2 and whole experts (moe_ep 2) runs DeepEP: one MoE layer's
    experts are timed on the instance's tokens by its wide-EP tables, the low-latency kernel
    for a decode step and the normal one for a step with a prompt, in place of ``moe_perf``'s
    rows at the same layout; everything else in the step is the same."""
    wide = _sglang(write_wide_ep_tables(tmp_path / "wide"))
    plain = _sglang(write_layout_tables(tmp_path / "plain", backend="sglang"))
    skew = SKEW["power_law_1.01"]  # the default load
    m = 4  # 4 decodes, both ranks' 8 tokens
    got = wide.step_time_s(_decode(m)) - plain.step_time_s(_decode(m))
    assert got == pytest.approx((wide_gen_ms(2 * m) - ep_ms(2 * m, 64, 2)) * skew * 1e-3, rel=1e-9)
    assert not any("wide-EP" in w for w in wide.warnings)
    assert any(
        "wide-EP tables lack" in w for w in _sglang(write_layout_tables(tmp_path / "p2", "sglang")).warnings
    )
    prompt = Batch(prefill_chunks=[(40, 0)])
    t = graph_padded(40, wide.max_graph_tokens, wide._graph_sizes) * 2
    got = wide.step_time_s(prompt) - plain.step_time_s(prompt)
    assert got == pytest.approx((wide_ctx_ms(t) - ep_ms(t, 64, 2)) * skew * 1e-3, rel=1e-9)


def test_sglang_wide_ep_reads_the_load_and_says_what_it_could_not_read(tmp_path: Path) -> None:
    """The expert_load knob picks the wide-EP rows' routing (balanced = their ``uniform``);
    experts of a dtype the tables lack are priced at the one they hold, with a warning; a
    layout they lack (moe_ep 4) keeps ``moe_perf``'s rows, with a warning."""
    root = write_wide_ep_tables(tmp_path / "wide")
    power, balanced = _sglang(root), _sglang(root, expert_load="balanced")
    got = power.step_time_s(_decode(4)) - balanced.step_time_s(_decode(4))
    assert got == pytest.approx(wide_gen_ms(8) * (SKEW["power_law_1.01"] - 1) * 1e-3, rel=1e-9)
    fp8 = _sglang(write_wide_ep_tables(tmp_path / "fp8", dtype="fp8_block"))
    assert fp8.step_time_s(_decode(4)) == pytest.approx(power.step_time_s(_decode(4)), rel=1e-12)
    assert any("measured fp8_block experts, not bfloat16" in w for w in fp8.warnings)
    four = _sglang(root, attention_dp=4, moe_ep=4)
    assert any("lack moe_ep 4" in w for w in four.warnings)
    # SGLang without attention DP (tp 2, moe_ep 2) does not run DeepEP: it never reads them.
    plain = write_layout_tables(tmp_path / "plain", backend="sglang")
    tp2 = _sglang(root, tp=2, attention_dp=1, moe_ep=2)
    assert tp2.step_time_s(_decode(4)) == _sglang(plain, tp=2, attention_dp=1, moe_ep=2).step_time_s(
        _decode(4)
    )
