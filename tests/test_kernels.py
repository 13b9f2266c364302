"""The ``kernels`` cost model on tiny hand-written tables, and on NVIDIA's when installed.

The hand-written tables hold multilinear functions of their grid coordinates, which
piecewise-linear interpolation reproduces exactly: every expected value below is computed
by hand from the same formula, on and between grid points, and beyond the grid where the
model must scale in proportion.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

import kvsim
from kvsim.cost.base import Batch
from kvsim.cost.config import KernelCostConfig
from kvsim.cost.kernels import (
    KernelCostModel,
    graph_capture,
    graph_padded,
    mla_kernel_scales,
    moe_curve,
    mxfp4_moe_activation,
)
from kvsim.cost.tables import Curve, Grid, package_tables_root, version_key
from kvsim.errors import ProfileError
from kvsim.model.presets import resolve_gpu
from kvsim.model.specs import ModelSpec

# A 2-layer model whose every GEMM shape lies on the tables' grid at tp 1 and tp 2.
TINY = ModelSpec(
    name="tiny",
    num_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=128,
    vocab_size=256,
    num_params=1e6,
    max_model_len=4096,
)


def gemm_ms(m: float, n: float, k: float) -> float:
    return 0.002 + 1e-9 * m * n * k


def decode_ms(batch: float, step: float, heads: float) -> float:
    return 0.004 + 1e-8 * batch * step * heads


def prefill_ms(batch: float, isl: float, heads: float) -> float:
    return 0.005 + 1e-8 * batch * isl * isl * heads / 64


def allreduce_ms(size: float) -> float:
    return 0.003 + 1e-7 * size


M_GRID = [1, 2, 4, 8, 16, 64, 256]
N_GRID = [16, 32, 64, 96, 128, 192, 256]
K_GRID = [16, 32, 64, 128]


def write_tables(root: Path, system: str = "toy_sxm", backend: str = "vllm", version: str = "1.0.0") -> Path:
    def put(op: str, name: str, rows: list[dict[str, object]]) -> None:
        folder = root / system / op / backend / version
        folder.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_parquet(folder / f"{name}.parquet")

    put(
        "gemm",
        "gemm_perf",
        [
            {
                "kernel_source": "k",
                "gemm_dtype": "bfloat16",
                "m": m,
                "n": n,
                "k": k,
                "latency": gemm_ms(m, n, k),
            }
            for m, n, k in itertools.product(M_GRID, N_GRID, K_GRID)
        ],
    )
    attention = {"num_key_value_heads": 1, "head_dim": 16, "kv_cache_dtype": "bfloat16", "window_size": 0}
    put(
        "attention",
        "generation_attention_perf",
        [
            {**attention, "num_heads": h, "batch_size": b, "isl": 1, "step": s, "latency": decode_ms(b, s, h)}
            for h, b, s in itertools.product([1, 2, 4], [1, 2, 4, 8], [1, 15, 63, 255])
        ],
    )
    put(
        "attention",
        "context_attention_perf",
        [
            {
                **attention,
                "num_heads": h,
                "batch_size": b,
                "isl": n,
                "step": 0,
                "latency": prefill_ms(b, n, h),
            }
            for h, b, n in itertools.product([1, 2, 4], [1, 2], [1, 16, 64, 256])
        ],
    )
    put(
        "comm",
        "custom_allreduce_perf",
        [
            {"num_gpus": 2, "message_size": s, "backend": variant, "latency": allreduce_ms(s) * factor}
            for s in [128, 1024, 8192, 65536]
            for variant, factor in ((f"{backend}_graph", 1.0), (f"{backend}_eager", 2.0))
        ],
    )
    return root


@pytest.fixture
def tables(tmp_path: Path) -> Path:
    return write_tables(tmp_path / "tables")


def model_on(tables: Path, tp: int = 2, **config: object) -> KernelCostModel:
    gpu = resolve_gpu("h100-sxm")
    cfg = KernelCostConfig(tables=str(tables), system="toy_sxm", **config)  # type: ignore[arg-type]
    spec = TINY.model_copy(update={"num_kv_heads": tp})  # one KV head per GPU
    return KernelCostModel(spec, gpu, cfg, tp=tp, max_num_seqs=8)


def test_curves_are_exact_on_points_linear_between_held_below_and_proportional_above() -> None:
    c = Curve([10, 20, 40], [1.0, 3.0, 4.0])
    assert [c(10), c(20), c(40)] == [1.0, 3.0, 4.0]
    assert c(15) == 2.0 and c(30) == 3.5
    assert c(1) == 1.0  # a kernel is not faster than its smallest measurement
    assert c(80) == 8.0  # twice the largest size, twice the time
    xs = np.array([1, 10, 15, 20, 30, 40, 80], dtype=float)
    assert list(c.at(xs)) == [c(x) for x in xs]


def test_grids_fill_unmeasured_cells_from_their_column_then_their_row() -> None:
    nan = float("nan")
    g = Grid([1, 2, 4], [10, 20], np.array([[1.0, 2.0], [2.0, 4.0], [nan, nan]]))
    # Batch 4 was never measured: proportional to batch 2's, as a memory-bound kernel.
    assert g(4, 10) == 4.0 and g(4, 20) == 8.0
    assert g(3, 15) == 4.5  # halfway between batch 2 (3.0 at y 15) and batch 4 (6.0)
    # One point in plain floats (an iteration's hot path) is the numpy path's, bit for bit.
    ys = np.array([1, 10, 12.5, 15, 20, 33.3, 80], dtype=float)
    for x in (0.5, 1, 1.7, 2, 3, 4, 9.25):
        assert list(g.at(x, ys)) == [g(x, y) for y in ys]


def test_gemms_are_the_tables_on_the_grid_and_between_it(tables: Path) -> None:
    km = model_on(tables)
    qkv, o, gate_up, down = km._gemms
    # tp 2: 2 query heads + 2 x 1 KV head of 16 -> n = 64, k = 64; o: n 64, k 32;
    # gate/up: n = 2 x 64 = 128, k = 64; down: n = 64, k = 64.
    for m in M_GRID:
        assert qkv(m) == pytest.approx(gemm_ms(m, 64, 64) * 1e-3, rel=1e-12)
        assert o(m) == pytest.approx(gemm_ms(m, 64, 32) * 1e-3, rel=1e-12)
        assert gate_up(m) == pytest.approx(gemm_ms(m, 128, 64) * 1e-3, rel=1e-12)
        assert down(m) == pytest.approx(gemm_ms(m, 64, 64) * 1e-3, rel=1e-12)
    assert qkv(40) == pytest.approx(gemm_ms(40, 64, 64) * 1e-3, rel=1e-12)  # between m = 16 and 64
    assert qkv(512) == pytest.approx(gemm_ms(256, 64, 64) * 1e-3 * 2, rel=1e-12)  # past the grid
    assert km.warnings == []


def test_shapes_between_and_beyond_the_measured_n_and_k(tables: Path, tmp_path: Path) -> None:
    wide = TINY.model_copy(update={"hidden_size": 80, "intermediate_size": 320, "num_kv_heads": 1})
    cfg = KernelCostConfig(tables=str(tables), system="toy_sxm")
    km = KernelCostModel(wide, resolve_gpu("h100-sxm"), cfg, tp=1)
    # gate/up: n = 640 > 256 (scaled), k = 80 between 64 and 128 (interpolated, exact here).
    assert km._gemms[2](8) == pytest.approx(gemm_ms(8, 256, 80) * 640 / 256 * 1e-3, rel=1e-12)
    assert any("gate/up GEMM: n=640 outside the measured 16..256" in w for w in km.warnings)


def test_decode_and_prefill_attention_come_from_their_tables(tables: Path) -> None:
    km = model_on(tables)  # 2 query heads, 1 KV head per GPU
    assert km._decode(4, 63) == pytest.approx(decode_ms(4, 63, 2) * 1e-3, rel=1e-12)
    assert km._decode(3, 39) == pytest.approx(decode_ms(3, 39, 2) * 1e-3, rel=1e-12)
    assert km._prefill(64) == pytest.approx(prefill_ms(1, 64, 2) * 1e-3, rel=1e-12)
    # A chunk of 16 after 48 cached: its share of the 64-token prompt's pairs, beyond the launch.
    share = (16 * 48 + 16 * 17 / 2) / (64 * 65 / 2)
    floor = prefill_ms(1, 1, 2) * 1e-3
    assert km._chunk_extra_s(16, 48) == pytest.approx(
        (prefill_ms(1, 64, 2) * 1e-3 - floor) * share, rel=1e-12
    )


def test_a_decode_step_by_hand(tables: Path) -> None:
    km = model_on(tables, per_iteration_overhead_s=1e-4, per_layer_overhead_s=2e-6, elementwise_kernel_s=3e-6)
    b, ctx = 3, 3 * 40  # three requests of 40 tokens: the tables' step 39
    m = graph_padded(b, km.max_graph_tokens)
    assert m == 4  # vLLM pads a captured step of 3 tokens to its graph of 4
    layer = (
        (gemm_ms(m, 64, 64) + gemm_ms(m, 64, 32) + gemm_ms(m, 128, 64) + gemm_ms(m, 64, 64)) * 1e-3
        + m * km._elementwise_bytes_per_token / km._hbm_rate
        + 5 * 3e-6
        + 2 * allreduce_ms(m * 64) * 1e-3  # graph variant; message in elements
        + 2e-6
    )
    lm_head = gemm_ms(b, 128, 64) * 1e-3  # vocab 256 / tp 2 columns
    attention = decode_ms(b, 39, 2) * 1e-3
    expected = 2 * layer + lm_head + 2 * attention + 1e-4
    got = km.step_time_s(Batch(num_decode_seqs=b, decode_context_tokens=ctx))
    assert got == pytest.approx(expected, rel=1e-12)


def test_q_and_k_norms_over_all_heads_add_a_tiny_all_reduce_per_layer(tables: Path) -> None:
    """MiniMax-M2's per-layer q/k RMSNorms span every GPU's heads: at tp 2 each layer all-reduces
    their sums of squares, two values a token in one all-reduce (the table at 2 m elements,
    held at its smallest message, 128), on top of its two all-reduces of the hidden state; at
    tp 1 nothing."""
    gpu, cfg = resolve_gpu("h100-sxm"), KernelCostConfig(tables=str(tables), system="toy_sxm")
    plain = TINY.model_copy(update={"num_kv_heads": 2})
    normed = plain.model_copy(update={"qk_norm_across_heads": True})
    for m in (4, 8):
        base = KernelCostModel(plain, gpu, cfg, tp=2, max_num_seqs=8)._token_terms_s(m)
        more = KernelCostModel(normed, gpu, cfg, tp=2, max_num_seqs=8)._token_terms_s(m)
        assert more - base == pytest.approx(2 * allreduce_ms(128) * 1e-3, rel=1e-9)  # 2 layers x one
    one_gpu = [spec.model_copy(update={"num_kv_heads": 1}) for spec in (plain, normed)]  # one KV head a GPU
    single = [KernelCostModel(spec, gpu, cfg, tp=1, max_num_seqs=8)._token_terms_s(8) for spec in one_gpu]
    assert single[0] == single[1]


def test_sglang_decode_batches_run_in_its_cuda_graphs(tmp_path: Path) -> None:
    """SGLang captures decode batches up to cuda_graph_max_bs (its default for the GPU's
    memory and TP: 256 on an 80 GB H100 at tp 2, 512 at tp 4 or above 160 GiB) and no more
    than it runs at once, at its own capture sizes (1, 2, 4, 8, then multiples of 8 to 256,
    of 16 above); a captured step takes the graph all-reduce (1x the table), an eager one
    the eager variant (2x)."""
    h100, b200 = resolve_gpu("h100-sxm"), resolve_gpu("b200")
    assert graph_capture("sglang", "h100_sxm", h100, 2, 1024)[0] == 256
    assert graph_capture("sglang", "h100_sxm", h100, 4, 1024)[0] == 512
    assert graph_capture("sglang", "b200_sxm", b200, 1, 1024)[0] == 512
    assert graph_capture("sglang", "h100_sxm", h100, 2, 48)[0] == 48
    assert graph_capture("trtllm", "h100_sxm", h100, 2, 48)[0] == 0
    assert graph_capture("vllm", "h100_sxm", h100, 2, 48)[0] == 96
    tables = write_tables(tmp_path / "sglang", backend="sglang")
    cfg = KernelCostConfig(
        tables=str(tables), system="toy_sxm", per_layer_overhead_s=0.0, elementwise_kernel_s=0.0
    )
    km = KernelCostModel(TINY, h100, cfg, tp=2, backend="sglang", max_num_seqs=8)
    assert km.max_graph_tokens == 8
    assert [graph_padded(n, 8, km._graph_sizes) for n in (3, 5, 8, 9)] == [4, 8, 8, 9]
    assert graph_padded(12, 16, km._graph_sizes) == 16
    assert graph_padded(257, 512, km._graph_sizes) == 272  # multiples of 16 above 256

    def allreduces(m: int, factor: float) -> float:  # two per layer, two layers
        return 2 * 2 * factor * allreduce_ms(m * 64) * 1e-3

    # Everything but the all-reduces is the same GEMM sum at m tokens: take it out by hand.
    gemms = lambda m: 2 * sum(curve(m) for curve in km._gemms)  # noqa: E731
    elementwise = lambda m: 2 * m * km._elementwise_bytes_per_token / km._hbm_rate  # noqa: E731
    assert km._token_terms_s(8) == pytest.approx(gemms(8) + elementwise(8) + allreduces(8, 1.0), rel=1e-12)
    assert km._token_terms_s(9) == pytest.approx(gemms(9) + elementwise(9) + allreduces(9, 2.0), rel=1e-12)


def test_vllm_default_capture_follows_its_release_gpu_and_model() -> None:
    """vLLM's capture ceiling left unset: min(2 x max_num_seqs, 512) on every GPU up to 0.27
    (and kvsim's legacy vLLM, no backend_version); 1,024 on data-center Blackwell from 0.28.0
    (vllm-project/vllm#49390); gpt-oss 1,024 whatever its batch limit or GPU (its
    GptOssForCausalLMConfig); a launch's own ceiling always wins."""
    h100, b200 = resolve_gpu("h100-sxm"), resolve_gpu("b200")
    capture = lambda system, gpu, seqs, version, name="m", largest=None: graph_capture(  # noqa: E731
        "vllm", system, gpu, 1, seqs, largest, version=version, model_name=name
    )[0]
    assert capture("b200_sxm", b200, 1024, None) == 512  # legacy: vLLM 0.8.5-0.19
    assert capture("b200_sxm", b200, 1024, "0.19.0") == 512
    assert capture("b200_sxm", b200, 1024, "0.27.0") == 512
    assert capture("b200_sxm", b200, 1024, "0.28.0") == 1024
    assert capture("gb300", b200, 1024, "0.32.0") == 1024
    assert capture("h100_sxm", h100, 1024, "0.32.0") == 512  # Hopper keeps 512
    assert capture("b200_sxm", b200, 128, "0.32.0") == 256  # 2 x max_num_seqs below the ceiling
    assert capture("h100_sxm", h100, 8, "0.19.0", "gpt-oss-120b") == 1024
    assert capture("h100_sxm", h100, 8, None, "openai/gpt-oss-20b") == 1024
    assert capture("b200_sxm", b200, 1024, "0.19.0", "gpt-oss-120b", largest=2048) == 2048


def test_large_steps_run_eager_and_are_not_padded(tables: Path) -> None:
    km = model_on(tables)  # max_num_seqs 8: graphs up to 16 tokens
    assert km.max_graph_tokens == 16
    assert graph_padded(17, km.max_graph_tokens) == 17
    with_graph = km._token_terms_s(16)
    eager = km._token_terms_s(17)
    ar_graph, ar_eager = km._allreduce
    assert ar_graph(16 * 64) == pytest.approx(allreduce_ms(16 * 64) * 1e-3, rel=1e-12)
    assert ar_eager(17 * 64) == pytest.approx(2 * allreduce_ms(17 * 64) * 1e-3, rel=1e-12)
    assert eager > with_graph


def test_decode_runs_equal_steps_bit_for_bit(tables: Path) -> None:
    km = model_on(tables)
    rng = np.random.default_rng(5)
    for b in (1, 3, 8, 40):
        ctx = rng.integers(b, b * 3000, size=50).astype(np.float64)
        run = km.decode_steps_s(b, ctx)
        steps = [km.step_time_s(Batch(num_decode_seqs=b, decode_context_tokens=int(c))) for c in ctx]
        assert list(run) == steps


def test_mixed_steps_pay_one_attention_launch(tables: Path) -> None:
    km = model_on(tables)
    mixed = km.step_time_s(Batch(prefill_chunks=[(16, 0)], num_decode_seqs=2, decode_context_tokens=60))
    tokens = km._token_terms_s(18) + km._lm_head_s(3)
    attention = km._decode(2, 29) + km._chunk_extra_s(16, 0)
    assert mixed == pytest.approx(tokens + 2 * attention + km.overheads.per_iteration_overhead_s, rel=1e-12)


def test_what_cannot_be_priced_is_refused_by_name(tables: Path, tmp_path: Path) -> None:
    gpu = resolve_gpu("h100-sxm")
    with pytest.raises(ProfileError, match="does not exist"):
        KernelCostModel(TINY, gpu, KernelCostConfig(tables=str(tmp_path / "none"), system="toy_sxm"))
    with pytest.raises(ProfileError, match="no kernel tables for system 'h100_sxm'"):
        KernelCostModel(TINY, gpu, KernelCostConfig(tables=str(tables)))
    with pytest.raises(
        ProfileError,
        match=r"no fp8 GEMM was measured on this system \(measured: (.+)\); engine.quantization values priced from this system's tables: bf16",
    ):
        KernelCostModel(TINY.model_copy(update={"weight_dtype": "fp8"}), gpu, _cfg(tables))
    with pytest.raises(ProfileError, match="fp8 KV cache"):
        KernelCostModel(TINY, gpu, _cfg(tables), kv_cache_dtype="fp8")
    with pytest.raises(ProfileError, match=r"version '9\.9' \(measured: 1\.0\.0\)"):
        KernelCostModel(TINY, gpu, _cfg(tables, version="9.9"))


def _cfg(tables: Path, **kw: object) -> KernelCostConfig:
    return KernelCostConfig(tables=str(tables), system="toy_sxm", **kw)  # type: ignore[arg-type]


def test_engine_versions_sort_as_releases() -> None:
    versions = ["1.3.0", "0.5.14", "1.3.0rc20", "0.5.6.post2", "1.3.0rc5", "0.5.6"]
    assert sorted(versions, key=version_key) == [
        "0.5.6",
        "0.5.6.post2",
        "0.5.14",
        "1.3.0rc5",
        "1.3.0rc20",
        "1.3.0",
    ]


def tiny_scenario(tables: Path) -> dict[str, object]:
    return {
        "model": TINY.model_dump(),
        "replicas": [
            {
                "gpu": "h100-sxm",
                "tp": 2,
                "cost_model": {"kind": "kernels", "tables": str(tables), "system": "toy_sxm"},
                "engine": {"max_num_seqs": 8, "max_num_batched_tokens": 64, "num_gpu_blocks_override": 400},
            }
        ],
        "workload": {
            "kind": "synthetic",
            "num_requests": 60,
            "arrival": {"kind": "poisson", "rate_per_s": 200},
            "prompt_tokens": {"kind": "uniform", "min_tokens": 8, "max_tokens": 200},
            "output_tokens": {"kind": "uniform", "min_tokens": 1, "max_tokens": 300},
        },
    }


def test_fast_forward_equals_stepping_with_the_kernel_model(tables: Path) -> None:
    scenario = tiny_scenario(tables)
    fast = kvsim.run(scenario)
    slow = kvsim.run({**scenario, "sim": {"fast_forward": False}})
    assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    assert_frame_equal(fast.iterations, slow.iterations, check_exact=True)
    assert len(fast.iterations) > 300


# --------------------------------------------------------------------------- NVIDIA's tables

needs_tables = pytest.mark.skipif(
    package_tables_root() is None, reason="aiconfigurator-core is not installed (pip install -e '.[kernels]')"
)


@needs_tables
def test_nvidia_tables_price_llama_70b_fp8_on_h200_as_measured() -> None:
    # Llama-3-70B shapes, fp8 weights, tp 8 on an H200 with vLLM's kernels: the figures
    # of docs/cost-model.md. A decode step of 8 requests at 2,000 tokens of context.
    model = kvsim.model.presets.resolve_model("llama-3-70b").model_copy(update={"weight_dtype": "fp8"})
    km = KernelCostModel(model, resolve_gpu("h200"), KernelCostConfig(), tp=8)
    assert km.source.system == "h200_sxm" and km.source.backend == "vllm"
    assert km.warnings == []
    step = km.step_time_s(Batch(num_decode_seqs=8, decode_context_tokens=8 * 2000))
    assert 0.005 < step < 0.012


# --------------------------------------------------------------------------- MoE and MLA (issue 22)

# A 2-layer mixture of experts: layer 0 dense, layer 1 four experts of width 64, top-2
# plus one shared expert. At tp 2 every GEMM lies on (or between) the toy grid.
TINY_MOE = TINY.model_copy(
    update={
        "num_kv_heads": 2,
        "intermediate_size": 64,
        "num_experts": 4,
        "num_experts_per_token": 2,
        "num_shared_experts": 1,
        "num_dense_layers": 1,
    }
)
# DeepSeek-V3's MLA layer (the one the module tables measure), 4 heads, 2 layers, dense.
TINY_MLA = TINY.model_copy(
    update={
        "hidden_size": 7168,
        "num_kv_heads": 4,
        "head_dim": 128,
        "intermediate_size": 64,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "q_lora_rank": 1536,
    }
)


def moe_ms(tokens: float, inter: float, moe_tp: float) -> float:
    return 0.01 + 1e-6 * tokens * inter / moe_tp


def mla_decode_ms(batch: float, step: float, heads: float) -> float:
    return 0.02 + 1e-7 * batch * step * heads


def mla_prefill_ms(batch: float, isl: float, heads: float) -> float:
    return 0.03 + 1e-8 * batch * isl * isl * heads


def write_moe_mla_tables(root: Path, backend: str = "vllm", module: bool = True) -> Path:
    """The dense toy tables, GEMMs up to n, k = 7168, and ``moe`` and ``mla`` tables."""
    write_tables(root, backend=backend)
    folder = root / "toy_sxm" / "gemm" / backend / "1.0.0"
    pd.DataFrame(
        [
            {
                "kernel_source": "k",
                "gemm_dtype": "bfloat16",
                "m": m,
                "n": n,
                "k": k,
                "latency": gemm_ms(m, n, k),
            }
            for m, n, k in itertools.product(
                M_GRID, [*N_GRID, 768, 1024, 2112, 7168], [*K_GRID, 512, 1536, 7168]
            )
        ]
    ).to_parquet(folder / "gemm_perf.parquet")
    moe_rows = []
    for dtype, kernel, slower in (
        ("bfloat16", "triton", 1.0),
        ("bfloat16", "slow_kernel", 1.5),  # a second kernel, slower everywhere: never chosen
        ("w4a16_mxfp4", "marlin", 0.5),
    ):
        for dist, skew in (("power_law_1.01", 1.0), ("balanced", 10.0)):  # power law is read
            for tp, inter, m in itertools.product([1, 2], [64, 128, 256], M_GRID):
                moe_rows.append(
                    {
                        "kernel_source": kernel,
                        "moe_dtype": dtype,
                        "num_tokens": m,
                        "hidden_size": 64,
                        "inter_size": inter,
                        "topk": 2,
                        "num_experts": 4,
                        "moe_tp_size": tp,
                        "moe_ep_size": 1,
                        "distribution": dist,
                        "latency": moe_ms(m, inter, tp) * slower * skew,
                    }
                )
    moe_folder = root / "toy_sxm" / "moe" / backend / "1.0.0"
    moe_folder.mkdir(parents=True)
    pd.DataFrame(moe_rows).to_parquet(moe_folder / "moe_perf.parquet")
    mla_folder = root / "toy_sxm" / "mla" / backend / "1.0.0"
    mla_folder.mkdir(parents=True)
    common = {"kernel_source": "FLASH_ATTN_MLA", "kv_cache_dtype": "bfloat16", "gemm_type": "bfloat16"}
    if module:
        pd.DataFrame(
            [
                {
                    **common,
                    "num_heads": h,
                    "batch_size": b,
                    "isl": 1,
                    "step": s,
                    "latency": mla_decode_ms(b, s, h),
                }
                for h, b, s in itertools.product([1, 2, 4], [1, 2, 4, 8], [1, 15, 63, 255])
            ]
        ).to_parquet(mla_folder / "mla_generation_module_perf.parquet")
        pd.DataFrame(
            [
                {
                    **common,
                    "num_heads": h,
                    "batch_size": b,
                    "isl": n,
                    "step": 0,
                    "latency": mla_prefill_ms(b, n, h),
                }
                for h, b, n in itertools.product([1, 2, 4], [1, 2], [1, 16, 64, 256])
            ]
        ).to_parquet(mla_folder / "mla_context_module_perf.parquet")
    else:  # SGLang's granular tables: the attention kernel alone, and the absorbed BMMs
        kernel = {"kernel_source": "flash_attention", "kv_cache_dtype": "bfloat16"}
        pd.DataFrame(
            [{**kernel, "num_heads": h, "batch_size": b, "isl": 1, "step": s, "latency": mla_decode_ms(b, s, h)}
             for h, b, s in itertools.product([1, 2, 4], [1, 2, 4, 8], [1, 15, 63, 255])]
        ).to_parquet(mla_folder / "generation_mla_perf.parquet")  # fmt: skip
        pd.DataFrame(
            [{**kernel, "num_heads": h, "batch_size": b, "isl": n, "step": 0, "latency": mla_prefill_ms(b, n, h)}
             for h, b, n in itertools.product([1, 2, 4], [1, 2], [1, 16, 64, 256])]
        ).to_parquet(mla_folder / "context_mla_perf.parquet")  # fmt: skip
        bmm_folder = root / "toy_sxm" / "mla_bmm" / backend / "1.0.0"
        bmm_folder.mkdir(parents=True)
        pd.DataFrame(
            [{"kernel_source": "torch_bmm", "op_name": op, "bmm_dtype": "bfloat16", "num_tokens": t,
              "num_heads": h, "latency": bmm_ms(t, h, op)}
             for op, t, h in itertools.product(["mla_gen_pre", "mla_gen_post"], M_GRID, [1, 2, 4])]
        ).to_parquet(bmm_folder / "mla_bmm_perf.parquet")  # fmt: skip
    return root


def bmm_ms(tokens: float, heads: float, op: str) -> float:
    return (0.001 if op == "mla_gen_pre" else 0.0015) + 1e-6 * tokens * heads


@pytest.fixture
def moe_tables(tmp_path: Path) -> Path:
    return write_moe_mla_tables(tmp_path / "moe_tables")


def test_moe_experts_come_from_the_moe_table(moe_tables: Path) -> None:
    km = KernelCostModel(TINY_MOE, resolve_gpu("h100-sxm"), _cfg(moe_tables), tp=2, max_num_seqs=8)
    assert km._moe is not None
    # The table's row for this layer: hidden 64, top-2 of 4, width 64 (whole), moe_tp 2;
    # the power-law rows, the faster of two kernels.
    for m in M_GRID:
        assert km._moe(m) == pytest.approx(moe_ms(m, 64, 2) * 1e-3, rel=1e-12)
    assert km._moe(40) == pytest.approx(moe_ms(40, 64, 2) * 1e-3, rel=1e-12)  # between 16 and 64
    assert km._moe(512) == pytest.approx(moe_ms(256, 64, 2) * 1e-3 * 2, rel=1e-12)  # past the grid
    # The dense layer at the active width (top-2 + 1 shared) x 64 / tp 2 = 96:
    _qkv, _o, gate_up, down = km._gemms
    assert gate_up(8) == pytest.approx(gemm_ms(8, 192, 64) * 1e-3, rel=1e-12)
    assert down(8) == pytest.approx(gemm_ms(8, 64, 96) * 1e-3, rel=1e-12)
    # The MoE layer: attention GEMMs, the router (4 experts: held at the grid's n = 16), the
    # shared expert (gate/up n 2 x 32, down k 32).
    _, _, router, shared_up, shared_down = km._moe_layer_gemms
    assert router(8) == pytest.approx(gemm_ms(8, 16, 64) * 1e-3, rel=1e-12)
    assert shared_up(8) == pytest.approx(gemm_ms(8, 64, 64) * 1e-3, rel=1e-12)
    assert shared_down(8) == pytest.approx(gemm_ms(8, 64, 32) * 1e-3, rel=1e-12)
    assert km.warnings == ["router GEMM: n=4 outside the measured 16..7168"]


def test_moe_expert_widths_interpolate_and_scale_with_a_warning(moe_tables: Path) -> None:
    frame = pd.read_parquet(moe_tables / "toy_sxm" / "moe" / "vllm" / "1.0.0" / "moe_perf.parquet")
    warn: list[str] = []
    args = {"hidden": 64, "topk": 2, "num_experts": 4, "moe_tp": 1, "moe_ep": 1, "what": "MoE", "warn": warn}
    between = moe_curve(frame, "w4a16_mxfp4", inter=96, **args)  # type: ignore[arg-type]
    assert between(16) == pytest.approx(moe_ms(16, 96, 1) * 0.5e-3, rel=1e-12)  # exact: linear in width
    assert warn == []
    wide = moe_curve(frame, "bfloat16", inter=512, **args)  # type: ignore[arg-type]
    assert wide(16) == pytest.approx(moe_ms(16, 256, 1) * 1e-3 * 2, rel=1e-12)  # twice the widest
    assert warn == ["MoE: expert width 512 outside the measured 64..256"]


def test_an_unmeasured_moe_tp_is_priced_as_each_gpus_share_of_the_width(moe_tables: Path) -> None:
    """inter_size is the width before the moe_tp split, so moe_tp 4 (measured: 1 and 2) is
    priced as a quarter of moe_tp 1's time at the full width (each GPU's share) plus three
    quarters of the kernel's fixed time: the least the table measured for this MoE (one
    token, width 64, moe_tp 2, the power-law rows' faster kernel: 0.01 + 1e-6 x 64 / 2 ms)."""
    frame = pd.read_parquet(moe_tables / "toy_sxm" / "moe" / "vllm" / "1.0.0" / "moe_perf.parquet")
    warn: list[str] = []
    curve = moe_curve(frame, "bfloat16", hidden=64, inter=128, topk=2, num_experts=4, moe_tp=4, moe_ep=1,
                      what="MoE experts", warn=warn)  # fmt: skip
    floor_ms = 0.01 + 1e-6 * 64 / 2
    for m in (1, 16, 40, 256):
        expected = moe_ms(m, 128, 1) / 4 + 0.75 * floor_ms  # linear in m: exact between grid points
        assert curve(m) == pytest.approx(expected * 1e-3, rel=1e-12)
    assert warn == [
        "MoE experts: moe_tp 4 x moe_ep 1 not measured; priced as 1/4 of moe_tp 1 x moe_ep 1 "
        "(each GPU's share of the expert width) plus 0.75 x the kernel's fixed 10.0 us"
    ]
    measured = moe_curve(frame, "bfloat16", hidden=64, inter=128, topk=2, num_experts=4, moe_tp=2, moe_ep=1,
                         what="MoE experts", warn=warn)  # fmt: skip
    assert measured(16) == pytest.approx(moe_ms(16, 128, 2) * 1e-3, rel=1e-12)  # its own rows when measured
    assert len(warn) == 1


def test_a_moe_decode_step_by_hand(moe_tables: Path) -> None:
    cfg = _cfg(
        moe_tables, per_iteration_overhead_s=1e-4, per_layer_overhead_s=2e-6, elementwise_kernel_s=3e-6
    )
    km = KernelCostModel(TINY_MOE, resolve_gpu("h100-sxm"), cfg, tp=2, max_num_seqs=8)
    b, ctx = 3, 3 * 40
    m = 4  # padded to vLLM's graph of 4
    hbm = km._hbm_rate
    qkv_o = gemm_ms(m, 64, 64) + gemm_ms(m, 64, 32)  # 2 q heads + 2 x 1 KV head of 16; o
    norms_rope_kv = 2 * 4 * 64 * 2 + 2 * 3 * 16 * 2 + 2 * 1 * 16 * (2 + 2)
    allreduce = 2 * allreduce_ms(m * 64) * 1e-3
    dense = (
        (qkv_o + gemm_ms(m, 192, 64) + gemm_ms(m, 64, 96)) * 1e-3
        + m * (norms_rope_kv + 3 * 96 * 2) / hbm  # SiLU x mul over the active width 96
        + 5 * 3e-6
        + allreduce
        + 2e-6
    )
    moe = (
        (qkv_o + gemm_ms(m, 16, 64) + gemm_ms(m, 64, 64) + gemm_ms(m, 64, 32) + moe_ms(m, 64, 2)) * 1e-3
        + m * (norms_rope_kv + 3 * 32 * 2) / hbm  # the shared expert's SiLU x mul only
        + 5 * 3e-6
        + allreduce
        + 2e-6
    )
    expected = dense + moe + gemm_ms(b, 128, 64) * 1e-3 + 2 * decode_ms(b, 39, 2) * 1e-3 + 1e-4
    got = km.step_time_s(Batch(num_decode_seqs=b, decode_context_tokens=ctx))
    assert got == pytest.approx(expected, rel=1e-12)
    # Without the shared expert: no shared GEMMs, no SiLU kernel in the MoE layer.
    bare = KernelCostModel(
        TINY_MOE.model_copy(update={"num_shared_experts": 0}),
        resolve_gpu("h100-sxm"),
        cfg,
        tp=2,
        max_num_seqs=8,
    )
    dense_bare = dense - (gemm_ms(m, 192, 64) + gemm_ms(m, 64, 96)) * 1e-3 - m * 3 * 96 * 2 / hbm
    dense_bare += (gemm_ms(m, 128, 64) + gemm_ms(m, 64, 64)) * 1e-3 + m * 3 * 64 * 2 / hbm  # width 2 x 32
    moe_bare = moe - (gemm_ms(m, 64, 64) + gemm_ms(m, 64, 32)) * 1e-3 - m * 3 * 32 * 2 / hbm - 3e-6
    got_bare = bare.step_time_s(Batch(num_decode_seqs=b, decode_context_tokens=ctx))
    expected_bare = dense_bare + moe_bare + gemm_ms(b, 128, 64) * 1e-3 + 2 * decode_ms(b, 39, 2) * 1e-3 + 1e-4
    assert got_bare == pytest.approx(expected_bare, rel=1e-12)


def test_a_step_with_a_prompt_takes_at_least_the_eager_host_time_of_its_moe_layers(moe_tables: Path) -> None:
    # TINY_MOE has one MoE layer (and one dense): a step with a prompt chunk takes at least
    # 1 x 50 ms; a decode step and a prefill longer than that keep their kernels' time.
    base = KernelCostModel(
        TINY_MOE, resolve_gpu("h100-sxm"), _cfg(moe_tables, eager_moe_layer_host_s=0.0), tp=2, max_num_seqs=8
    )
    eager = KernelCostModel(
        TINY_MOE, resolve_gpu("h100-sxm"), _cfg(moe_tables, eager_moe_layer_host_s=0.05), tp=2, max_num_seqs=8
    )
    assert eager._num_moe_layers == 1
    mixed = Batch(prefill_chunks=[(16, 0)], num_decode_seqs=2, decode_context_tokens=60)
    assert base.step_time_s(mixed) < 0.05
    assert eager.step_time_s(mixed) == 0.05
    decode = Batch(num_decode_seqs=2, decode_context_tokens=60)
    assert eager.step_time_s(decode) == base.step_time_s(decode)
    slow = KernelCostModel(
        TINY_MOE, resolve_gpu("h100-sxm"), _cfg(moe_tables, eager_moe_layer_host_s=1e-6), tp=2, max_num_seqs=8
    )
    assert slow.step_time_s(mixed) == base.step_time_s(mixed)  # the kernels take longer than the host


def test_vllm_pays_the_eager_host_time_only_beyond_its_cuda_graphs(tmp_path: Path) -> None:
    # vLLM captures steps up to min(2 x max_num_seqs, 512) = 16 tokens here (a prompt's
    # step runs piecewise graphs): 12 prompt + 2 decode tokens keep their kernels' time, 16 +
    # 2 pay the floor. SGLang before 0.5.10 runs any step with a prompt without graphs: 12 + 2
    # pays it (its piecewise prompt graphs: the next test).
    def model(backend: str, tables: Path) -> tuple[KernelCostModel, KernelCostModel]:
        def km(**kw: object) -> KernelCostModel:
            cfg = _cfg(tables, backend=backend, **kw)
            version = "0.5.9" if backend == "sglang" else None
            return KernelCostModel(
                TINY_MOE, resolve_gpu("h100-sxm"), cfg, tp=2, max_num_seqs=8, backend_version=version
            )

        return km(), km(eager_moe_layer_host_s=0.05)

    small = Batch(prefill_chunks=[(12, 0)], num_decode_seqs=2, decode_context_tokens=60)
    large = Batch(prefill_chunks=[(16, 0)], num_decode_seqs=2, decode_context_tokens=60)
    base, eager = model("vllm", write_moe_mla_tables(tmp_path / "vllm"))
    assert eager.max_graph_tokens == 16
    assert eager.step_time_s(small) == base.step_time_s(small) < 0.05
    assert eager.step_time_s(large) == 0.05
    _, sglang = model("sglang", write_moe_mla_tables(tmp_path / "sglang", backend="sglang"))
    assert sglang.step_time_s(small) == 0.05


def test_sglang_replays_prompt_steps_within_its_piecewise_graphs_from_0_5_10(tmp_path: Path) -> None:
    # SGLang 0.5.10 replays a step with a prompt of up to its chunk size (MLA: 2,048 tokens)
    # from piecewise CUDA graphs: no eager floor. Here the chunk is 32 tokens: 12 + 2 and 30 +
    # 2 tokens keep their kernels' time, 40 + 2 pay the floor. Off before 0.5.10, with
    # attention DP, speculative decoding, on a disaggregated worker, or when the launch says 0.
    tables = write_moe_mla_tables(tmp_path / "sglang", backend="sglang")
    gpu = resolve_gpu("h100-sxm")

    def km(
        version: str | None = "0.5.10", *, spec: bool = False, pd: bool = False, **kw: object
    ) -> KernelCostModel:
        cfg = _cfg(tables, backend="sglang", eager_moe_layer_host_s=0.05, **kw)
        return KernelCostModel(
            TINY_MOE, gpu, cfg, tp=2, max_num_seqs=8, backend_version=version, max_num_batched_tokens=32,
            speculative=spec, disaggregated=pd,
        )  # fmt: skip

    base = KernelCostModel(
        TINY_MOE, gpu, _cfg(tables, backend="sglang", eager_moe_layer_host_s=0.0), tp=2, max_num_seqs=8
    )
    small = Batch(prefill_chunks=[(12, 0)], num_decode_seqs=2, decode_context_tokens=60)
    full = Batch(prefill_chunks=[(30, 0)], num_decode_seqs=2, decode_context_tokens=60)
    large = Batch(prefill_chunks=[(40, 0)], num_decode_seqs=2, decode_context_tokens=60)
    graphs = km()
    assert graphs._prompt_graph_tokens == 32
    assert graphs.step_time_s(small) == base.step_time_s(small) < 0.05
    assert graphs.step_time_s(full) == base.step_time_s(full) < 0.05
    assert graphs.step_time_s(large) == 0.05
    assert km(None)._prompt_graph_tokens == 32  # no release named: the newest tabulated (0.5.10)
    for off in (km("0.5.9"), km(piecewise_cuda_graph_max_tokens=0), km(spec=True), km(pd=True)):
        assert off._prompt_graph_tokens == 0 and off.step_time_s(small) == 0.05
    # A launch's own ceiling (--piecewise-cuda-graph-max-tokens 16): 12 + 2 within it, 30 + 2 not.
    capped = km(piecewise_cuda_graph_max_tokens=16)
    assert capped.step_time_s(small) < 0.05 and capped.step_time_s(full) == 0.05
    # Decode steps are unchanged (SGLang's decode graphs, no floor), and the knob is SGLang's only.
    decode = Batch(num_decode_seqs=2, decode_context_tokens=60)
    assert graphs.step_time_s(decode) == base.step_time_s(decode)
    vllm_tables = write_moe_mla_tables(tmp_path / "vllm")
    with pytest.raises(ProfileError, match="piecewise_cuda_graph_max_tokens is SGLang's"):
        KernelCostModel(TINY_MOE, gpu, _cfg(vllm_tables, piecewise_cuda_graph_max_tokens=64), tp=2)


def test_sglang_mla_models_replay_prompt_graphs_up_to_2048_tokens() -> None:
    from kvsim.backends.defaults import sglang_piecewise_max_tokens

    assert sglang_piecewise_max_tokens("0.5.10.post1", mla=True, chunk=32768) == 2048
    assert sglang_piecewise_max_tokens("0.5.10.post1", mla=False, chunk=32768) == 32768
    assert sglang_piecewise_max_tokens("0.5.9", mla=False, chunk=32768) == 0
    assert sglang_piecewise_max_tokens(None, mla=False, chunk=8192) == 8192
    assert sglang_piecewise_max_tokens("0.5.10", mla=False, chunk=8192, attention_dp=2) == 0


def test_a_launch_flags_cuda_graph_ceiling_decides_which_vllm_steps_run_eagerly(tmp_path: Path) -> None:
    # --max-cudagraph-capture-size 24 (on vLLM's grid: 1, 2, 4, 8, 16, 24): 16 prompt + 2
    # decode tokens now replay a graph (padded to 24) and keep their kernels' time; 24 + 2
    # tokens are beyond it and pay the floor. A ceiling off the grid truncates to the grid's
    # last size (vLLM's warning), 30 -> 24.
    tables = write_moe_mla_tables(tmp_path / "vllm")

    def km(**kw: object) -> KernelCostModel:
        cfg = _cfg(tables, backend="vllm", **kw)
        return KernelCostModel(TINY_MOE, resolve_gpu("h100-sxm"), cfg, tp=2, max_num_seqs=8)

    base, eager = km(cuda_graph_max_size=24), km(cuda_graph_max_size=24, eager_moe_layer_host_s=0.05)
    assert eager.max_graph_tokens == 24 and km(cuda_graph_max_size=30).max_graph_tokens == 24
    assert base._eager_floor_s == 1.25e-3  # vLLM's fitted host time, x TINY_MOE's one MoE layer
    within = Batch(prefill_chunks=[(16, 0)], num_decode_seqs=2, decode_context_tokens=60)
    beyond = Batch(prefill_chunks=[(24, 0)], num_decode_seqs=2, decode_context_tokens=60)
    assert eager.step_time_s(within) == base.step_time_s(within) < 0.05
    assert eager.step_time_s(beyond) == 0.05
    # 18 tokens run at the 24-token graph's size: as 22 tokens do.
    assert base._token_terms_s(18) == base._token_terms_s(22) == base._token_terms_s(24)
    h100 = resolve_gpu("h100-sxm")
    largest, sizes = graph_capture("vllm", "h100_sxm", h100, 2, 48, 2048)
    assert largest == 2048 and sizes[-3:] == [2016, 2032, 2048]
    assert graph_capture("sglang", "h100_sxm", h100, 2, 1024, 128)[0] == 128  # --cuda-graph-max-bs
    assert graph_capture("sglang", "h100_sxm", h100, 2, 48, 128)[0] == 48  # no more than it runs


def test_mxfp4_experts_read_their_own_rows(moe_tables: Path) -> None:
    spec = TINY_MOE.model_copy(update={"expert_weight_dtype": "mxfp4"})
    km = KernelCostModel(spec, resolve_gpu("h100-sxm"), _cfg(moe_tables), tp=2, max_num_seqs=8)
    assert km._moe is not None
    assert km._moe(64) == pytest.approx(moe_ms(64, 64, 2) * 0.5e-3, rel=1e-12)


def test_an_mla_decode_step_by_hand(moe_tables: Path) -> None:
    cfg = _cfg(
        moe_tables, per_iteration_overhead_s=1e-4, per_layer_overhead_s=2e-6, elementwise_kernel_s=3e-6
    )
    km = KernelCostModel(TINY_MLA, resolve_gpu("h100-sxm"), cfg, tp=2, max_num_seqs=8)
    b, ctx, m = 3, 3 * 40, 4
    # The module (projections, RoPE, KV write, attention, o_proj) is the whole attention
    # block: no QKV / O GEMMs; elementwise: the two add + RMSNorm and SiLU x mul (3 kernels).
    layer = (
        (gemm_ms(m, 64, 7168) + gemm_ms(m, 7168, 32)) * 1e-3
        + m * (2 * 4 * 7168 * 2 + 3 * 32 * 2) / km._hbm_rate
        + 3 * 3e-6
        + 2 * allreduce_ms(m * 7168) * 1e-3
        + 2e-6
    )
    attention = mla_decode_ms(b, 39, 2) * 1e-3  # 2 heads per GPU, between batch 2 and 4
    expected = 2 * layer + gemm_ms(b, 128, 7168) * 1e-3 + 2 * attention + 1e-4
    got = km.step_time_s(Batch(num_decode_seqs=b, decode_context_tokens=ctx))
    assert got == pytest.approx(expected, rel=1e-12)
    # A prefill chunk: its share of the whole prompt's module time beyond the launch.
    assert km._prefill(64) == pytest.approx(mla_prefill_ms(1, 64, 2) * 1e-3, rel=1e-12)
    share = (16 * 48 + 16 * 17 / 2) / (64 * 65 / 2)
    floor = mla_prefill_ms(1, 1, 2) * 1e-3
    assert km._chunk_extra_s(16, 48) == pytest.approx(
        (mla_prefill_ms(1, 64, 2) * 1e-3 - floor) * share, rel=1e-12
    )


def test_moe_and_mla_that_cannot_be_priced_are_refused_by_name(
    moe_tables: Path, tables: Path, tmp_path: Path
) -> None:
    gpu = resolve_gpu("h100-sxm")
    cfg = _cfg(moe_tables)
    with pytest.raises(ProfileError, match="no moe tables for toy_sxm / vllm"):
        KernelCostModel(TINY_MOE, gpu, _cfg(tables), tp=2)
    with pytest.raises(
        ProfileError,
        match=r"no fp8 MoE was measured on this system \(measured: bfloat16, w4a16_mxfp4\); "
        r"engine.quantization values priced from this system's tables: bf16, mxfp4$",
    ):
        KernelCostModel(TINY_MOE.model_copy(update={"expert_weight_dtype": "fp8"}), gpu, cfg, tp=2)
    with pytest.raises(ProfileError, match="no bfloat16 MoE measured for hidden 64, top-4 of 4 experts"):
        KernelCostModel(TINY_MOE.model_copy(update={"num_experts_per_token": 4}), gpu, cfg, tp=2)
    frame = pd.read_parquet(moe_tables / "toy_sxm" / "moe" / "vllm" / "1.0.0" / "moe_perf.parquet")
    with pytest.raises(
        ProfileError, match=r"moe_tp 2 x moe_ep 2 not measured .*\(measured tp x ep: 1x1, 2x1\)"
    ):
        moe_curve(frame, "bfloat16", hidden=64, inter=128, topk=2, num_experts=4, moe_tp=2, moe_ep=2,
                  what="MoE experts", warn=[])  # fmt: skip
    with pytest.raises(ProfileError, match=r"hidden_size 64 \(measured 7168\)"):
        KernelCostModel(TINY.model_copy(update={"kv_lora_rank": 512, "qk_rope_head_dim": 64}), gpu, cfg, tp=2)
    with pytest.raises(ProfileError, match=r"8 query heads per GPU not measured \(measured: 1, 2, 4\)"):
        KernelCostModel(TINY_MLA.model_copy(update={"num_attention_heads": 16}), gpu, cfg, tp=2)
    with pytest.raises(ProfileError, match=r"no MLA module measured with a fp8 KV cache"):
        KernelCostModel(TINY_MLA, gpu, cfg, tp=2, kv_cache_dtype="fp8")
    granular = write_moe_mla_tables(tmp_path / "granular", backend="sglang", module=False)
    (granular / "toy_sxm" / "mla" / "sglang" / "1.0.0" / "generation_mla_perf.parquet").unlink()
    with pytest.raises(ProfileError, match=r"MLA on sglang: neither module tables .* nor granular ones"):
        KernelCostModel(TINY_MLA, gpu, _cfg(granular), tp=2, backend="sglang")


def _granular_mla_decode_s(
    km: KernelCostModel,
    b: int,
    step: int,
    nope: int = 128,
    v: int = 128,
    bmm_pre: float = 1.0,
    bmm_post: float = 1.0,
) -> float:
    """A decode step of TINY_MLA's 2 layers of 4 heads (tp 1, SGLang's toy granular tables,
    the overheads the granular tests set) by hand: the projections at the heads' widths
    (q/kv down n q_lora 1536 + kv_lora 512 + rope 64, q_b n 4 x (nope + 64), o_proj k 4 x v),
    the MLP, the elementwise bytes and kernels, the attention kernel and the absorbed BMMs
    (times their scales), the LM head and the per-iteration overhead."""
    layer = (
        (
            gemm_ms(b, 2112, 7168)  # q/kv down-projection
            + gemm_ms(b, 4 * (nope + 64), 1536)  # q_b
            + gemm_ms(b, 7168, 4 * v)  # o_proj
            + gemm_ms(b, 128, 7168)  # gate/up
            + gemm_ms(b, 7168, 64)  # down
        )
        * 1e-3
        + b * (2 * 4 * 7168 * 2 + 3 * 64 * 2) / km._hbm_rate
        + 3 * 3e-6
        + 2e-6
    )
    pre, post = bmm_ms(b, 4, "mla_gen_pre"), bmm_ms(b, 4, "mla_gen_post")
    attention = (mla_decode_ms(b, step, 4) + bmm_pre * pre + bmm_post * post) * 1e-3
    return 2 * layer + gemm_ms(b, 256, 7168) * 1e-3 + 2 * attention + 1e-4


def test_a_granular_mla_decode_step_by_hand(tmp_path: Path) -> None:
    """SGLang has no MLA module tables: the projections are GEMMs, the attention kernel and
    the absorbed BMMs come from their own tables (tp 1: 4 heads, no all-reduce; a decode
    batch of 4 is one of SGLang's CUDA-graph sizes, so no padding)."""
    tables = write_moe_mla_tables(tmp_path / "granular", backend="sglang", module=False)
    cfg = _cfg(tables, per_iteration_overhead_s=1e-4, per_layer_overhead_s=2e-6, elementwise_kernel_s=3e-6)
    km = KernelCostModel(TINY_MLA, resolve_gpu("h100-sxm"), cfg, tp=1, backend="sglang", max_num_seqs=8)
    b, ctx = 4, 4 * 40
    got = km.step_time_s(Batch(num_decode_seqs=b, decode_context_tokens=ctx))
    assert got == pytest.approx(_granular_mla_decode_s(km, b, 39), rel=1e-12)
    assert km.warnings == []
    # A prefill chunk: its pair share of the kernel, and kv_b expanding its 16 latents.
    share = (16 * 48 + 16 * 17 / 2) / (64 * 65 / 2)
    kernel = (mla_prefill_ms(1, 64, 4) - mla_prefill_ms(1, 1, 4)) * 1e-3 * share
    assert km._chunk_extra_s(16, 48) == pytest.approx(kernel + gemm_ms(16, 4 * 256, 512) * 1e-3, rel=1e-12)
    run = km.decode_steps_s(b, np.array([ctx, 2 * ctx], dtype=np.float64))
    assert run[0] == got


def test_an_mla_of_another_shape_is_priced_granularly_by_hand(tmp_path: Path) -> None:
    """GLM-5's head widths (192-wide nope and 256-wide value heads; DeepSeek-V3's 128 and 128)
    on SGLang's granular tables: the projections at its own shapes, the attention kernels
    DeepSeek-V3's scaled by their work per head -- the decode kernel over the same latent x 1,
    the k BMM (nope -> latent) x 192 / 128, the v BMM (latent -> value) x 256 / 128, a
    prompt's kernel x (192 + 64 + 256) / (128 + 64 + 128) = 1.6. The module tables, which
    measure DeepSeek-V3's whole layer, refuse it by name."""
    other = TINY_MLA.model_copy(update={"qk_nope_head_dim": 192, "head_dim": 256})
    assert mla_kernel_scales(other) == {"decode": 1.0, "prefill": 1.6, "bmm_pre": 1.5, "bmm_post": 2.0}
    assert set(mla_kernel_scales(TINY_MLA).values()) == {1.0}
    tables = write_moe_mla_tables(tmp_path / "granular", backend="sglang", module=False)
    cfg = _cfg(tables, per_iteration_overhead_s=1e-4, per_layer_overhead_s=2e-6, elementwise_kernel_s=3e-6)
    km = KernelCostModel(other, resolve_gpu("h100-sxm"), cfg, tp=1, backend="sglang", max_num_seqs=8)
    b, ctx = 4, 4 * 40
    got = km.step_time_s(Batch(num_decode_seqs=b, decode_context_tokens=ctx))
    expected = _granular_mla_decode_s(km, b, 39, nope=192, v=256, bmm_pre=1.5, bmm_post=2.0)
    assert got == pytest.approx(expected, rel=1e-12)
    assert [w for w in km.warnings if w.startswith("MLA:")] == [
        "MLA: tiny's layer differs from DeepSeek-V3's (head_dim 256 (measured 128), qk_nope_head_dim 192 "
        "(measured 128)): its projections from the GEMM tables at its shapes, its attention kernels "
        "from DeepSeek-V3's scaled by their work per head (kvsim.cost.kernels.mla_kernel_scales)"
    ]
    # A prefill chunk: 1.6 x its pair share of the kernel, and kv_b expanding its 16 latents
    # into 4 heads x (192 + 256).
    share = (16 * 48 + 16 * 17 / 2) / (64 * 65 / 2)
    kernel = 1.6 * (mla_prefill_ms(1, 64, 4) - mla_prefill_ms(1, 1, 4)) * 1e-3 * share
    assert km._chunk_extra_s(16, 48) == pytest.approx(kernel + gemm_ms(16, 4 * 448, 512) * 1e-3, rel=1e-12)
    with pytest.raises(
        ProfileError, match=r"vllm has no granular MLA tables; this one differs: head_dim 256"
    ):
        KernelCostModel(other, resolve_gpu("h100-sxm"), _cfg(write_moe_mla_tables(tmp_path / "module")), tp=1)


def dsa_decode_ms(batch: float, step: float, heads: float) -> float:
    return 0.05 + 1e-6 * batch * step * heads


def write_dsa_tables(root: Path, model: str = "org/Tiny-FP8", gemm_type: str = "bfloat16") -> Path:
    """SGLang's toy granular MLA tables plus DSA module tables for ``model``: decode linear in
    batch and step (and one length, 128, measured at batch 1 only, 100x too slow); a prompt
    through dense MHA (0.5 ms, up to 64 tokens) or the indexer and sparse kernel (0.6 ms + 1 us
    a token), at batch 1."""
    tables = write_moe_mla_tables(root, backend="sglang", module=False)
    folder = tables / "toy_sxm" / "sparse_attention" / "sglang" / "1.0.0"
    folder.mkdir(parents=True)
    common = {"model": model, "gemm_type": gemm_type, "kv_cache_dtype": "bfloat16", "isl": 1}
    gen = [
        {
            **common,
            "kernel_source": "indexer",
            "num_heads": h,
            "batch_size": b,
            "step": st,
            "latency": dsa_decode_ms(b, st, h),
        }
        for h, b, st in itertools.product([1, 2, 4], [1, 2, 4, 8], [1, 64, 256])
    ] + [{**common, "kernel_source": "indexer", "num_heads": 4, "batch_size": 1, "step": 128, "latency": 9.0}]
    pd.DataFrame(gen).to_parquet(folder / "dsa_generation_module_perf.parquet")
    ctx = [
        {
            **common,
            "kernel_source": kernel,
            "num_heads": h,
            "batch_size": 1,
            "isl": n,
            "step": 0,
            "latency": latency,
        }
        for h, n in itertools.product([1, 2, 4], [1, 16, 64, 256])
        for kernel, latency in (("dense_mha", 0.5 if n <= 64 else None), ("sparse", 0.6 + 1e-3 * n))
        if latency is not None
    ]
    pd.DataFrame(ctx).to_parquet(folder / "dsa_context_module_perf.parquet")
    return tables


def test_a_sparse_attention_layer_is_priced_from_its_dsa_module_by_hand(tmp_path: Path) -> None:
    """DeepSeek sparse attention (GLM-5) from the engine's DSA module tables where they measure
    the model (its family name: ``org/Tiny-FP8`` is ``tiny``): the whole attention block, so
    no projection GEMMs and no BMMs; a decode at the module's (batch, step) -- without the
    lengths measured at batch 1 only --; a prompt at the fastest kernel measured at its length
    (dense MHA up to 64 tokens, the sparse kernel beyond). SGLang, tp 1, 4 heads, batch 4."""
    dsa = TINY_MLA.model_copy(update={"index_topk": 64})
    tables = write_dsa_tables(tmp_path / "dsa")
    cfg = _cfg(tables, per_iteration_overhead_s=1e-4, per_layer_overhead_s=2e-6, elementwise_kernel_s=3e-6)
    km = KernelCostModel(dsa, resolve_gpu("h100-sxm"), cfg, tp=1, backend="sglang", max_num_seqs=8)
    assert km.warnings == [] and km._mla_bmm is None and km._mla_kv_b is None
    b, ctx = 4, 4 * 100  # step 99: between 64 and 256 (128 left out)
    layer = (
        (gemm_ms(b, 128, 7168) + gemm_ms(b, 7168, 64)) * 1e-3  # gate/up, down
        + b * (2 * 4 * 7168 * 2 + 3 * 64 * 2) / km._hbm_rate
        + 3 * 3e-6
        + 2e-6
    )
    expected = 2 * layer + gemm_ms(b, 256, 7168) * 1e-3 + 2 * dsa_decode_ms(b, 99, 4) * 1e-3 + 1e-4
    got = km.step_time_s(Batch(num_decode_seqs=b, decode_context_tokens=ctx))
    assert got == pytest.approx(expected, rel=1e-12)
    assert km._prefill(16) == pytest.approx(0.5e-3, rel=1e-12)  # dense MHA: 0.5 < 0.616
    assert km._prefill(256) == pytest.approx((0.6 + 0.256) * 1e-3, rel=1e-12)

    # Tables without the model, or without its projections' precision: said, and handled.
    def on(name: str, **kw: str) -> KernelCostModel:
        tables = write_dsa_tables(tmp_path / name, **kw)
        return KernelCostModel(dsa, resolve_gpu("h100-sxm"), _cfg(tables), tp=1, backend="sglang")

    other = on("other", model="org/Else")
    assert other.warnings == [
        "DSA: the sparse_attention tables do not measure tiny (measured: else); its sparse attention "
        "priced as dense MLA"
    ]
    assert other._mla_bmm is not None  # the granular dense MLA
    fp8 = on("fp8", gemm_type="fp8_block")
    assert fp8.warnings == [
        "DSA: tiny's module measured with fp8_block projections, not bfloat16; priced at fp8_block"
    ]
    assert fp8._prefill(256) == km._prefill(256)


def _with_fp8_rows(root: Path, backend: str) -> Path:
    """``root``'s tables plus fp8 GEMMs at half the bf16 latency and, where there are MLA
    module tables, fp8-projection modules at 0.8 x."""
    gemm = root / "toy_sxm" / "gemm" / backend / "1.0.0" / "gemm_perf.parquet"
    frame = pd.read_parquet(gemm)
    fp8 = frame.assign(gemm_dtype="fp8", latency=frame["latency"] * 0.5)
    pd.concat([frame, fp8], ignore_index=True).to_parquet(gemm)
    for name in ("mla_generation_module_perf", "mla_context_module_perf"):
        path = root / "toy_sxm" / "mla" / backend / "1.0.0" / f"{name}.parquet"
        if path.is_file():
            frame = pd.read_parquet(path)
            pd.concat([frame, frame.assign(gemm_type="fp8", latency=frame["latency"] * 0.8)]).to_parquet(path)
    return root


def test_each_part_is_priced_at_its_own_precision(tmp_path: Path) -> None:
    """``module_weight_dtypes``: a checkpoint whose MLA projections differ in precision
    (nvidia/DeepSeek-V3.1-NVFP4: bf16 q/kv, nvfp4 o_proj; here fp8 o_proj) is priced by the
    granular tables where the engine has them (TensorRT-LLM), its o_proj GEMM at fp8 (half
    the toy bf16 latency); a uniform one by the module; an engine with module tables only
    (vLLM) prices the module at o_proj's precision, with a warning. A MoE's shared experts
    and dense layers take their own precision too."""
    gpu, b = resolve_gpu("h100-sxm"), 4
    decode = Batch(num_decode_seqs=b, decode_context_tokens=b * 40)
    mixed = TINY_MLA.model_copy(update={"module_weight_dtypes": {"attention_o": "fp8"}})

    def km(spec: ModelSpec, tables: Path, backend: str = "trtllm", tp: int = 1) -> KernelCostModel:
        cfg = _cfg(tables, backend=backend, per_iteration_overhead_s=1e-4, per_layer_overhead_s=2e-6,
                   elementwise_kernel_s=3e-6)  # fmt: skip
        return KernelCostModel(spec, gpu, cfg, tp=tp, backend=backend, max_num_seqs=8)

    granular = _with_fp8_rows(
        write_moe_mla_tables(tmp_path / "granular", backend="trtllm", module=False), "trtllm"
    )
    both = _with_fp8_rows(write_moe_mla_tables(tmp_path / "both", backend="trtllm", module=False), "trtllm")
    module_only = _with_fp8_rows(write_moe_mla_tables(tmp_path / "module", backend="trtllm"), "trtllm")
    for name in ("mla_generation_module_perf", "mla_context_module_perf"):
        shutil.copy(module_only / "toy_sxm" / "mla" / "trtllm" / "1.0.0" / f"{name}.parquet",
                    both / "toy_sxm" / "mla" / "trtllm" / "1.0.0" / f"{name}.parquet")  # fmt: skip
    by_gemms = km(TINY_MLA, granular).step_time_s(decode)
    o_proj_saved = 2 * 0.5 * gemm_ms(b, 7168, 4 * 128) * 1e-3  # two layers' o_proj at half
    got = km(mixed, both)
    assert got._mla_bmm is not None and got.warnings == []
    assert got.step_time_s(decode) == pytest.approx(by_gemms - o_proj_saved, rel=1e-12)
    assert km(TINY_MLA, both).step_time_s(decode) == km(TINY_MLA, module_only).step_time_s(decode)
    assert km(TINY_MLA, both)._mla_bmm is None  # uniform: the module
    # Module tables only: the module at o_proj's precision, as if every projection had it.
    vllm_like = km(mixed, module_only)
    assert vllm_like.warnings == [
        "MLA: bfloat16 q/kv and fp8 o projections; trtllm's module tables have one precision for all, "
        "priced at o_proj's (fp8)"
    ]
    all_fp8 = TINY_MLA.model_copy(
        update={"module_weight_dtypes": {"attention_qkv": "fp8", "attention_o": "fp8"}}
    )
    assert vllm_like.step_time_s(decode) == km(all_fp8, module_only).step_time_s(decode)
    assert vllm_like.step_time_s(decode) < km(TINY_MLA, module_only).step_time_s(decode)
    # A MoE at tp 2 (widths 32 per GPU): its shared expert's GEMMs (gate/up n 64, down k 32) at
    # fp8 cost half; its dense layer's (active width 32 x 3: gate/up n 192, down k 96) too.
    moe = _with_fp8_rows(write_moe_mla_tables(tmp_path / "moe", backend="vllm"), "vllm")
    plain = km(TINY_MOE, moe, "vllm", tp=2).step_time_s(decode)
    shared = TINY_MOE.model_copy(update={"module_weight_dtypes": {"shared_experts": "fp8"}})
    saved = 0.5 * (gemm_ms(b, 64, 64) + gemm_ms(b, 64, 32)) * 1e-3
    assert km(shared, moe, "vllm", tp=2).step_time_s(decode) == pytest.approx(plain - saved, rel=1e-12)
    dense = TINY_MOE.model_copy(update={"module_weight_dtypes": {"dense_mlp": "fp8"}})
    saved = 0.5 * (gemm_ms(b, 192, 64) + gemm_ms(b, 64, 96)) * 1e-3
    assert km(dense, moe, "vllm", tp=2).step_time_s(decode) == pytest.approx(plain - saved, rel=1e-12)


def test_fast_forward_equals_stepping_for_moe_and_mla(moe_tables: Path) -> None:
    for spec in (TINY_MOE, TINY_MLA):
        scenario = tiny_scenario(moe_tables) | {"model": spec.model_dump()}
        fast = kvsim.run(scenario)
        slow = kvsim.run({**scenario, "sim": {"fast_forward": False}})
        assert_frame_equal(fast.requests, slow.requests, check_exact=True)
        assert_frame_equal(fast.iterations, slow.iterations, check_exact=True)
        assert len(fast.iterations) > 300


@needs_tables
def test_nvidia_tables_price_frontier_moe_models_on_h200() -> None:
    # gpt-oss-120b (MXFP4 experts, tp 1), DeepSeek-V3 (fp8 block, MLA module, tp 8), a
    # decode step of 8 requests at 2,000 tokens: vLLM 0.24.0's moe / mla tables on h200_sxm.
    for name, tp, low, high in (("gpt-oss-120b", 1, 0.004, 0.02), ("deepseek-v3", 8, 0.01, 0.05)):
        model = kvsim.model.presets.resolve_model(name)
        km = KernelCostModel(model, resolve_gpu("h200"), KernelCostConfig(), tp=tp)
        step = km.step_time_s(Batch(num_decode_seqs=8, decode_context_tokens=8 * 2000))
        assert low < step < high, (name, step)


def test_a_newer_moe_table_without_the_dtype_falls_back_to_the_newest_with_it(moe_tables: Path) -> None:
    # Version 2.0.0 re-measured fp8 experts only (as TensorRT-LLM 1.3.0rc23 on h200_sxm).
    folder = moe_tables / "toy_sxm" / "moe" / "vllm" / "2.0.0"
    folder.mkdir(parents=True)
    frame = pd.read_parquet(moe_tables / "toy_sxm" / "moe" / "vllm" / "1.0.0" / "moe_perf.parquet")
    bf16 = frame[frame["moe_dtype"] == "bfloat16"]
    bf16.assign(moe_dtype="fp8", latency=bf16["latency"] * 3).to_parquet(folder / "moe_perf.parquet")
    km = KernelCostModel(TINY_MOE, resolve_gpu("h100-sxm"), _cfg(moe_tables), tp=2, max_num_seqs=8)
    assert km._moe is not None and km._moe(16) == pytest.approx(moe_ms(16, 64, 2) * 1e-3, rel=1e-12)
    assert (
        "MoE experts: no bfloat16 at this shape in vllm 2.0.0's moe table; read from 1.0.0's" in km.warnings
    )
    fp8 = TINY_MOE.model_copy(update={"expert_weight_dtype": "fp8"})
    km8 = KernelCostModel(fp8, resolve_gpu("h100-sxm"), _cfg(moe_tables), tp=2, max_num_seqs=8)
    assert km8._moe is not None and km8._moe(16) == pytest.approx(moe_ms(16, 64, 2) * 3e-3, rel=1e-12)


def test_a_version_folder_without_a_moe_table_falls_back(moe_tables: Path) -> None:
    # Version 2.0.0 has moe tables of another kind only (SGLang 0.5.16's wide-EP ones).
    folder = moe_tables / "toy_sxm" / "moe" / "vllm" / "2.0.0"
    folder.mkdir(parents=True)
    pd.DataFrame([{"latency": 1.0, "num_tokens": 1}]).to_parquet(folder / "wideep_moe_perf.parquet")
    km = KernelCostModel(TINY_MOE, resolve_gpu("h100-sxm"), _cfg(moe_tables), tp=2, max_num_seqs=8)
    assert km._moe is not None and km._moe(16) == pytest.approx(moe_ms(16, 64, 2) * 1e-3, rel=1e-12)
    assert (
        "MoE experts: no bfloat16 at this shape in vllm 2.0.0's moe table; read from 1.0.0's" in km.warnings
    )


def write_mxfp4_tables(root: Path) -> Path:
    """The MoE toy tables of three engines on a Hopper-like toy_sxm and on b200_sxm (a copy):
    MXFP4 experts with 16-bit activations at 0.5x the bf16 rows (``w4a16_mxfp4``) and, for
    SGLang and TensorRT-LLM only, with MXFP8 activations at 0.2x (``w4a8_mxfp4_mxfp8``)."""
    for backend in ("vllm", "sglang", "trtllm"):
        write_moe_mla_tables(root, backend=backend)
        if backend != "vllm":
            path = root / "toy_sxm" / "moe" / backend / "1.0.0" / "moe_perf.parquet"
            frame = pd.read_parquet(path)
            bf16 = frame[frame["moe_dtype"] == "bfloat16"]
            w4a8 = bf16.assign(moe_dtype="w4a8_mxfp4_mxfp8", latency=bf16["latency"] * 0.2)
            pd.concat([frame, w4a8]).to_parquet(path)
    shutil.copytree(root / "toy_sxm", root / "b200_sxm")
    return root


MXFP4_TINY = TINY_MOE.model_copy(update={"expert_weight_dtype": "mxfp4", "num_kv_heads": 1})  # tp 1


def mxfp4_moe_ms(
    tables: Path, backend: str, system: str, tokens: int = 16, **kw: object
) -> tuple[float, list[str]]:
    """One MoE layer's routed experts (ms) at ``tokens`` on tp 1, and the model's warnings."""
    cfg = KernelCostConfig(tables=str(tables), system=system, **kw)  # type: ignore[arg-type]
    km = KernelCostModel(MXFP4_TINY, resolve_gpu("h100-sxm"), cfg, tp=1, backend=backend, max_num_seqs=8)
    assert km._moe is not None
    return km._moe(tokens) * 1e3, km.warnings


def test_mxfp4_experts_take_the_activation_precision_each_engine_runs(tmp_path: Path) -> None:
    root = write_mxfp4_tables(tmp_path / "t")
    bf16_act, mxfp8_act = moe_ms(16, 64, 1) * 0.5, moe_ms(16, 64, 1) * 0.2  # width 64, moe_tp 1
    # Hopper (toy_sxm): 16-bit activations on every engine.
    for backend in ("vllm", "sglang", "trtllm"):
        assert mxfp4_moe_ms(root, backend, "toy_sxm")[0] == pytest.approx(bf16_act, rel=1e-12), backend
    # Blackwell: TensorRT-LLM and SGLang quantize the activations to MXFP8, vLLM does not by default.
    assert mxfp4_moe_ms(root, "trtllm", "b200_sxm")[0] == pytest.approx(mxfp8_act, rel=1e-12)
    assert mxfp4_moe_ms(root, "sglang", "b200_sxm")[0] == pytest.approx(mxfp8_act, rel=1e-12)
    assert mxfp4_moe_ms(root, "vllm", "b200_sxm")[0] == pytest.approx(bf16_act, rel=1e-12)
    # Forced either way (vLLM with VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1; SGLang's bf16 precision).
    got, warnings = mxfp4_moe_ms(
        root, "vllm", "b200_sxm", mxfp4_moe_activation="mxfp8", moe_tables_backend="sglang"
    )
    assert got == pytest.approx(mxfp8_act, rel=1e-12)
    assert "MoE experts: priced from sglang's moe table (cost_model.moe_tables_backend)" in warnings
    forced = mxfp4_moe_ms(root, "sglang", "b200_sxm", mxfp4_moe_activation="bf16")[0]
    assert forced == pytest.approx(bf16_act, rel=1e-12)
    assert mxfp4_moe_activation("trtllm", "rtx_pro_6000_server") == "mxfp8"  # sm120 >= 100
    assert mxfp4_moe_activation("sglang", "rtx_pro_6000_server") == "bf16"


def test_mxfp4_x_mxfp8_experts_a_table_lacks_are_refused_by_name(tmp_path: Path) -> None:
    root = write_mxfp4_tables(tmp_path / "t")
    with pytest.raises(
        ProfileError,
        match=r"vllm's moe tables on b200_sxm: no w4a8_mxfp4_mxfp8 MoE was measured on this system "
        r"\(measured: bfloat16, w4a16_mxfp4\); engine.quantization values priced from this system's "
        r"tables: bf16, mxfp4 \(MXFP4 experts: cost_model.mxfp4_moe_activation",
    ):
        mxfp4_moe_ms(root, "vllm", "b200_sxm", mxfp4_moe_activation="mxfp8")


def test_a_newer_moe_table_with_the_dtype_at_other_shapes_only_falls_back(tmp_path: Path) -> None:
    # TensorRT-LLM 1.3.0rc23 on b200_sxm: MXFP4 x MXFP8 experts at two other models' shapes only.
    root = write_mxfp4_tables(tmp_path / "t")
    folder = root / "b200_sxm" / "moe" / "trtllm" / "2.0.0"
    folder.mkdir(parents=True)
    frame = pd.read_parquet(root / "b200_sxm" / "moe" / "trtllm" / "1.0.0" / "moe_perf.parquet")
    other = frame[frame["moe_dtype"] == "w4a8_mxfp4_mxfp8"].assign(hidden_size=128)
    other.to_parquet(folder / "moe_perf.parquet")
    got, warnings = mxfp4_moe_ms(root, "trtllm", "b200_sxm")
    assert got == pytest.approx(moe_ms(16, 64, 1) * 0.2, rel=1e-12)
    assert (
        "MoE experts: no w4a8_mxfp4_mxfp8 at this shape in trtllm 2.0.0's moe table; read from 1.0.0's"
        in warnings
    )


def _add_fp8_block_rows(root: Path, backend: str, factor: float) -> None:
    path = root / "toy_sxm" / "gemm" / backend / "1.0.0" / "gemm_perf.parquet"
    frame = pd.read_parquet(path)
    block = frame.assign(gemm_dtype="fp8_block", kernel_source="block", latency=frame["latency"] * factor)
    pd.concat([frame, block]).to_parquet(path)


def test_vllm_block_fp8_gemms_take_sglangs_rows_of_the_same_kernel(tmp_path: Path) -> None:
    # vLLM's fp8_block rows 10x the bf16 ones (host time in them), SGLang's 0.5x (or none).
    spec = TINY.model_copy(update={"weight_dtype": "fp8_block", "num_kv_heads": 2})

    def qkv_ms(sglang_rows: bool, **kw: object) -> tuple[float, list[str]]:
        root = tmp_path / f"t{sglang_rows}{len(kw)}"
        write_tables(root, backend="vllm")
        write_tables(root, backend="sglang")
        _add_fp8_block_rows(root, "vllm", 10.0)
        if sglang_rows:
            _add_fp8_block_rows(root, "sglang", 0.5)
        km = KernelCostModel(spec, resolve_gpu("h100-sxm"), _cfg(root, **kw), tp=2, max_num_seqs=8)
        return km._gemms[0](16) * 1e3, km.warnings  # QKV: n (2 + 2) x 16 = 64, k 64

    got, warnings = qkv_ms(True)
    assert got == pytest.approx(gemm_ms(16, 64, 64) * 0.5, rel=1e-12)
    assert "fp8_block GEMMs: priced from sglang's gemm table (cost_model.fp8_block_gemm_backend)" in warnings
    got, warnings = qkv_ms(False)  # SGLang's table lacks them: vLLM's own, with a warning
    assert got == pytest.approx(gemm_ms(16, 64, 64) * 10.0, rel=1e-12)
    assert "fp8_block GEMMs: no sglang table with them on toy_sxm; vllm's own" in warnings
    assert qkv_ms(True, fp8_block_gemm_backend="vllm")[0] == pytest.approx(
        gemm_ms(16, 64, 64) * 10.0, rel=1e-12
    )


def test_a_verify_step_by_hand(moe_tables: Path, tmp_path: Path) -> None:
    """A speculative verify pass of q tokens after c is decode attention over the request's KV,
    read once for its q queries (one row of a GQA kernel; MLA: q x h heads, as FlashMLA folds
    them, where the tables measure that many, else q rows of h heads), its q tokens through
    every GEMM and the LM head."""
    cfg = _cfg(
        moe_tables, per_iteration_overhead_s=1e-4, per_layer_overhead_s=2e-6, elementwise_kernel_s=3e-6
    )
    gqa = KernelCostModel(TINY_MOE, resolve_gpu("h100-sxm"), cfg, tp=2, max_num_seqs=8)
    verify = Batch(prefill_chunks=[(3, 37), (3, 57)], num_verify_chunks=2)
    # 2 rows at contexts 38 and 58: the table's step 96 / 2 - 1 = 47, in each of 2 layers.
    expected = gqa._token_terms_s(6) + gemm_ms(6, 128, 64) * 1e-3 + 2 * decode_ms(2, 47, 2) * 1e-3 + 1e-4
    assert gqa.step_time_s(verify) == pytest.approx(expected, rel=1e-12)
    # Beside decodes: each priced as its own.
    mixed = Batch(prefill_chunks=[(3, 37)], num_verify_chunks=1, num_decode_seqs=1, decode_context_tokens=20)
    attention = decode_ms(1, 19, 2) + decode_ms(1, 37, 2)
    expected = gqa._token_terms_s(4) + gemm_ms(4, 128, 64) * 1e-3 + 2 * attention * 1e-3 + 1e-4
    assert gqa.step_time_s(mixed) == pytest.approx(expected, rel=1e-12)
    mla = KernelCostModel(TINY_MLA, resolve_gpu("h100-sxm"), cfg, tp=2, max_num_seqs=8)
    # 2 heads per GPU, q = 2: the 4-head module table at 2 rows, step 47.
    two = Batch(prefill_chunks=[(2, 37), (2, 57)], num_verify_chunks=2)
    expected = (
        mla._token_terms_s(4) + gemm_ms(4, 128, 7168) * 1e-3 + 2 * mla_decode_ms(2, 47, 4) * 1e-3 + 1e-4
    )
    assert mla.step_time_s(two) == pytest.approx(expected, rel=1e-12)
    # q = 3: 6 heads are not measured: 6 rows of 2 heads, step (3 x 38 + 3 x 58) / 6 - 1 = 47.
    expected = (
        mla._token_terms_s(6) + gemm_ms(6, 128, 7168) * 1e-3 + 2 * mla_decode_ms(6, 47, 2) * 1e-3 + 1e-4
    )
    assert mla.step_time_s(verify) == pytest.approx(expected, rel=1e-12)
    # (The toy latency grows with batch x heads, so both readings agree here: which table each
    # used is the model's record of the head counts it looked up.)
    assert mla._folded[4] is not None and mla._folded[6] is None
    # SGLang's granular tables: the kernel folded the same way, the absorbed BMMs at every token.
    granular = write_moe_mla_tables(tmp_path / "granular", backend="sglang", module=False)
    sg = KernelCostModel(
        TINY_MLA, resolve_gpu("h100-sxm"), _cfg(granular, backend="sglang"), tp=2, max_num_seqs=8
    )
    assert sg._mla_bmm is not None
    pre, post = sg._mla_bmm
    assert sg._verify_attention_s([(2, 37), (2, 57)]) == pytest.approx(
        mla_decode_ms(2, 47, 4) * 1e-3 + pre(4) + post(4), rel=1e-12
    )


def test_verify_steps_replay_cuda_graphs_without_the_eager_floor(tmp_path: Path) -> None:
    tables = write_moe_mla_tables(tmp_path / "sglang", backend="sglang")
    km = KernelCostModel(
        TINY_MOE, resolve_gpu("h100-sxm"), _cfg(tables, backend="sglang", eager_moe_layer_host_s=0.05), tp=2,
        max_num_seqs=8, speculative=True,  # SGLang 0.5.10 runs no piecewise prompt graphs with it
    )  # fmt: skip
    verify = Batch(prefill_chunks=[(3, 37), (3, 57)], num_verify_chunks=2)
    assert km.step_time_s(verify) < 0.05
    with_prompt = Batch(prefill_chunks=[(8, 0), (3, 37), (3, 57)], num_verify_chunks=2)
    assert km.step_time_s(with_prompt) == 0.05


def _two_kernel_moe_frame() -> pd.DataFrame:
    """A moe table with two w4a16_mxfp4 kernels: "triton" at hidden 64, width 64, top-2 of 8
    experts and at hidden 128, width 64, top-4 of 32; "marlin", slower, at the second only."""
    rows = []
    for tokens in (1, 16, 64, 256):
        rows.append(("vllm_gptoss_triton", 64, 64, 2, 8, tokens, 0.005 + 1e-5 * tokens))
        rows.append(("vllm_gptoss_triton", 128, 64, 4, 32, tokens, 0.006 + 2e-5 * tokens))
        rows.append(("vllm_marlin_marlinexperts", 128, 64, 4, 32, tokens, 0.01 + 1e-4 * tokens))
    frame = pd.DataFrame(rows, columns=["kernel_source", "hidden_size", "inter_size", "topk", "num_experts",
                                        "num_tokens", "latency"])  # fmt: skip
    frame["moe_dtype"], frame["moe_tp_size"], frame["moe_ep_size"] = "w4a16_mxfp4", 1, 1
    frame["distribution"] = "balanced"
    return frame


def test_a_moe_kernel_measured_at_another_shape_is_carried_at_equal_tokens_per_expert() -> None:
    """The Marlin rows of the toy table carried to the first shape by hand: 8 tokens of the
    model (top-2 of 8: 2 per expert) read the Marlin shape at 16 tokens (top-4 of 32: 2 per
    expert), x (64 x 64 x 8) / (128 x 64 x 32) = 1/8 for the experts' weights; and no faster
    than the fastest kernel measured at the model's shape, where the table has one."""
    frame = _two_kernel_moe_frame()
    warn: list[str] = []
    args = {"hidden": 64, "inter": 64, "topk": 2, "num_experts": 8, "moe_tp": 1, "moe_ep": 1, "what": "MoE",
            "warn": warn, "distribution": "balanced"}  # fmt: skip
    fastest = moe_curve(frame, "w4a16_mxfp4", **args)  # type: ignore[arg-type]
    assert fastest(16) == pytest.approx((0.005 + 1e-5 * 16) * 1e-3, rel=1e-12)  # its own shape's kernel
    assert warn == []
    alone = frame[~((frame["hidden_size"] == 64) & frame["kernel_source"].str.contains("triton"))]
    carried = moe_curve(alone, "w4a16_mxfp4", kernel="marlin", **args)  # type: ignore[arg-type]
    for tokens in (0.5, 8, 20, 128):  # the Marlin grid (1..256 tokens) at half the tokens
        assert carried(tokens) == pytest.approx((0.01 + 1e-4 * 2 * tokens) / 8 * 1e-3, rel=1e-12)
    assert carried(256) == pytest.approx((0.01 + 1e-4 * 256) / 8 * 2e-3, rel=1e-12)  # proportional past it
    assert warn == [
        "MoE: the marlin kernel was measured at hidden 128, width 64, top-4 of 32 experts only; carried "
        "to hidden 64, width 64, top-2 of 8 at equal tokens per expert, x 0.125 for the experts' weights"
    ]
    # With the triton rows at the model's shape: below ~250 tokens the carried Marlin is the
    # faster, so the triton kernel's time stands; past its grid the carried one, the slower.
    bounded = moe_curve(frame, "w4a16_mxfp4", kernel="marlin", **args)  # type: ignore[arg-type]
    for tokens in (1, 16, 64):
        assert bounded(tokens) == pytest.approx((0.005 + 1e-5 * tokens) * 1e-3, rel=1e-12)
    assert bounded(512) == pytest.approx(carried(512), rel=1e-12)
    assert warn[-1].endswith(
        "the experts' weights, and no faster than the fastest kernel measured at this shape"
    )
    # Where it was measured, a named kernel is read as measured, though another is faster there.
    own = moe_curve(frame, "w4a16_mxfp4", hidden=128, inter=64, topk=4, num_experts=32, moe_tp=1, moe_ep=1,
                    what="MoE", warn=warn, distribution="balanced", kernel="marlin")  # fmt: skip
    assert own(16) == pytest.approx((0.01 + 1e-4 * 16) * 1e-3, rel=1e-12)
    assert len(warn) == 2
    with pytest.raises(ProfileError, match=r"MoE: no w4a16_mxfp4 MoE kernel 'cutlass' was measured \(measured: "
                       r"vllm_gptoss_triton, vllm_marlin_marlinexperts\)"):  # fmt: skip
        moe_curve(frame, "w4a16_mxfp4", kernel="cutlass", **args)  # type: ignore[arg-type]


def test_moe_kernel_names_one_word_of_a_kernel_source() -> None:
    assert KernelCostConfig(moe_kernel="marlin").moe_kernel == "marlin"
    for bad in ("", "Marlin", "marlin moe", "x" * 65, "../marlin"):
        with pytest.raises(ValueError, match="moe_kernel"):
            KernelCostConfig(moe_kernel=bad)
