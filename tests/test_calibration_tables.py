"""``kvsim calibrate --tables`` on CPU with tiny grids: the torch harness writes aiconfigurator's
tables (same columns, types, units, layout), its paged decode kernel computes what
gather-then-attend computes, and its grids are aiconfigurator's (the same code runs on CUDA
at full size; GPU-only kernels are checked there against the same reference)."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from calibration.table_grids import (
    CPU,
    FULL,
    FULL_GEMM_M,
    FULL_MOE_SHAPES,
    FULL_MOE_TOKENS,
    SMALL,
    TableGrids,
    for_model,
)
from kvsim.cli import main
from kvsim.cost.profile import model_shape
from kvsim.cost.table_layout import META_FILE, TABLE_SCHEMAS, version_dir
from kvsim.model.presets import MODEL_PRESETS

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from calibration.shapes import ModelShape  # noqa: E402
from calibration.tables import (  # noqa: E402
    ALL_TABLES,
    ContiguousDecode,
    FlexPagedDecode,
    gather_then_attend,
    make_paged_kv,
    measure_tables,
    torch_version,
)

PACKAGED = {
    "gemm_perf": "gemm/vllm/0.24.0/gemm_perf.parquet",
    "context_attention_perf": "attention/vllm/0.24.0/context_attention_perf.parquet",
    "generation_attention_perf": "attention/vllm/0.24.0/generation_attention_perf.parquet",
    "custom_allreduce_perf": "comm/vllm/0.24.0/custom_allreduce_perf.parquet",
    "moe_perf": "moe/vllm/0.24.0/moe_perf.parquet",
}


def packaged_dir() -> Path:
    core = pytest.importorskip(
        "aiconfigurator_core", reason="aiconfigurator-core (the kernels extra) is absent"
    )
    return Path(core.__file__).parent / "systems" / "data" / "h200_sxm"


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One CLI run of the CPU grid into a fresh folder (what a user without a GPU gets)."""
    root = tmp_path_factory.mktemp("tables")
    assert main(["calibrate", "--tables", str(root), "--device", "cpu"]) == 0
    return root, torch_version()


@pytest.mark.parametrize("table", ALL_TABLES)
def test_cpu_tables_have_aiconfigurators_columns_and_types(cpu_run: tuple[Path, str], table: str) -> None:
    root, version = cpu_run
    from kvsim.cost.table_layout import TABLE_OPS

    path = version_dir(root, "cpu", TABLE_OPS[table], version) / f"{table}.parquet"
    written = pq.read_table(path)
    packaged = pq.read_schema(packaged_dir() / PACKAGED[table])
    assert written.schema.equals(packaged.remove_metadata())
    rows = written.to_pylist()
    assert rows and all(r["framework"] == "torch" and r["version"] == version for r in rows)
    assert all(isinstance(r["latency"], float) and 0 < r["latency"] < 60_000 for r in rows)  # ms


def test_cpu_tables_cover_the_grid(cpu_run: tuple[Path, str]) -> None:
    root, version = cpu_run
    gemm = pq.read_table(version_dir(root, "cpu", "gemm", version) / "gemm_perf.parquet").to_pylist()
    assert sorted((r["gemm_dtype"], r["m"], r["n"], r["k"]) for r in gemm) == sorted(
        (d, m, n, k) for d in ("bfloat16", "fp8") for m in CPU.gemm_m for n, k in CPU.gemm_nk
    )
    assert {r["kernel_source"] for r in gemm} == {"torch.nn.functional.linear", "torch._scaled_mm"}
    attention = version_dir(root, "cpu", "attention", version)
    ctx = pq.read_table(attention / "context_attention_perf.parquet").to_pylist()
    assert sorted((r["batch_size"], r["isl"]) for r in ctx) == [(1, 16), (1, 32), (2, 16), (2, 32)]
    assert {(r["step"], r["window_size"], r["kv_cache_dtype"], r["beam_width"]) for r in ctx} == {
        (0, 0, "bfloat16", 1)
    }
    gen = pq.read_table(attention / "generation_attention_perf.parquet").to_pylist()
    assert sorted((r["kv_cache_dtype"], r["batch_size"], r["step"]) for r in gen) == sorted(
        (kv, b, s) for kv in ("bfloat16", "fp8") for b in (1, 3) for s in (7, 31)
    )
    assert {(r["isl"], r["num_heads"], r["num_key_value_heads"], r["head_dim"]) for r in gen} == {
        (1, 4, 2, 16)
    }
    assert {r["kernel_source"] for r in gen} == {"torch_flex_attention_paged_eager_page16"}
    moe = pq.read_table(version_dir(root, "cpu", "moe", version) / "moe_perf.parquet").to_pylist()
    assert sorted(
        (r["moe_tp_size"], r["moe_ep_size"], r["distribution"], r["num_tokens"]) for r in moe
    ) == sorted(
        (tp, ep, d, t) for tp, ep in CPU.moe_layouts for d in CPU.moe_distributions for t in CPU.moe_tokens
    )
    assert {
        (r["hidden_size"], r["inter_size"], r["topk"], r["num_experts"], r["moe_dtype"]) for r in moe
    } == {(64, 32, 2, 8, "bfloat16")}
    assert {r["kernel_source"] for r in moe} == {"torch._grouped_mm"}


def test_cpu_meta_names_the_harness_and_the_reasons(cpu_run: tuple[Path, str]) -> None:
    root, version = cpu_run
    meta = yaml.safe_load((version_dir(root, "cpu", "attention", version) / META_FILE).read_text())
    assert meta["runtime"] == {"framework": "torch", "version": version}
    harness = meta["harness"]
    assert harness["name"] == "kvsim-calibration" and harness["torch"] == torch.__version__
    assert harness["device_type"] == "cpu" and harness["grid"] == "cpu" and harness["system"] == "cpu"
    assert harness["collected_at"].endswith("Z") and harness["command"].startswith("kvsim calibrate --tables")
    ctx = meta["tables"]["context_attention_perf"]
    assert ctx["status"] == "partial" and ctx["rows"] == 4
    assert ctx["skipped"][0]["cases"] == 4 and "fp8" in ctx["skipped"][0]["reason"]
    assert meta["tables"]["generation_attention_perf"]["status"] == "complete"
    comm = yaml.safe_load((version_dir(root, "cpu", "comm", version) / META_FILE).read_text())
    assert "one gloo process" in comm["tables"]["custom_allreduce_perf"]["notes"][0]


def test_cpu_run_again_replaces_its_own_tables(cpu_run: tuple[Path, str]) -> None:
    root, _ = cpu_run
    assert (
        main(["calibrate", "--tables", str(root), "--device", "cpu", "--only", "custom_allreduce_perf"]) == 0
    )
    assert sorted(p.name for p in (root / "cpu").iterdir()) == ["attention", "comm", "gemm", "moe"]
    assert not [p for p in root.rglob(".*kvsim-*")]  # no temporary or parked folder left


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (4, 2), (8, 1)])
def test_paged_decode_equals_gather_then_attend(kv: str, heads: int, kv_heads: int) -> None:
    """The fused kernel's answer (flex_attention over the block table, eager here) is the
    reference's: lengths of 1 token, a partial last page, exact page multiples."""
    gen = torch.Generator().manual_seed(0)
    dtype = torch.float8_e4m3fn if kv == "fp8" else torch.bfloat16
    page, hd = 8, 16
    k_pool = torch.randn(40, page, kv_heads, hd, generator=gen).to(dtype)
    v_pool = torch.randn(40, page, kv_heads, hd, generator=gen).to(dtype)
    lens = [1, 7, 8, 9, 24, 61]
    paged = make_paged_kv(k_pool, v_pool, lens, gen)
    pages = [int(p) for i, n in enumerate(lens) for p in paged.block_table[i, : math.ceil(n / page)]]
    assert len(pages) == len(set(pages))  # no page is shared
    q = torch.randn(len(lens), heads, hd, generator=gen).to(torch.bfloat16)
    out = FlexPagedDecode(paged, compiled=False)(q)
    ref = gather_then_attend(q, paged)
    assert out.shape == (len(lens), heads, hd)
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
    # the reference itself: request 0 attends to one token, so it returns that token's V
    torch.testing.assert_close(
        ref[0], v_pool[paged.block_table[0, 0].long(), 0].float().repeat_interleave(heads // kv_heads, 0)
    )


@pytest.mark.parametrize("lens", [[1, 7, 8, 9, 24, 61], [24, 24, 24]])
@pytest.mark.parametrize(("heads", "kv_heads"), [(4, 4), (8, 2)])
def test_contiguous_decode_equals_gather_then_attend(lens: list[int], heads: int, kv_heads: int) -> None:
    """The stand-in for a paged kernel (SDPA over each request's K/V copied out of its pages)
    computes the reference's answer: unequal lengths padded and masked, equal ones unmasked."""
    gen = torch.Generator().manual_seed(1)
    page, hd = 8, 16
    k_pool = torch.randn(40, page, kv_heads, hd, generator=gen).to(torch.bfloat16)
    v_pool = torch.randn(40, page, kv_heads, hd, generator=gen).to(torch.bfloat16)
    paged = make_paged_kv(k_pool, v_pool, lens, gen)
    q = torch.randn(len(lens), heads, hd, generator=gen).to(torch.bfloat16)
    kernel = ContiguousDecode(paged)
    assert (kernel.mask is None) == (len(set(lens)) == 1)
    assert kernel.k.shape == (len(lens), kv_heads, max(lens), hd)
    torch.testing.assert_close(kernel(q).float(), gather_then_attend(q, paged), atol=2e-2, rtol=2e-2)
    with pytest.raises(TypeError, match="SDPA takes no"):
        ContiguousDecode(make_paged_kv(k_pool.to(torch.float8_e4m3fn), v_pool, lens, gen))


def test_small_decode_points_rotate_over_copies_beyond_the_l2_cache() -> None:
    """A point whose K/V fits in the L2 cache is timed over up to 8 copies of its batch, each on
    its own pages, as each layer of a forward pass reads its own cache from memory."""
    from dataclasses import replace

    from calibration.tables import _Tables

    grids = replace(CPU, l2_flush_bytes=1 << 16, kv_dtypes=["bf16"])
    run = _Tables(torch.device("cpu"), grids, lambda _m: None, cuda_graphs=False)
    assert run._decode_variants(1, 7, 2, 16, "bf16") == 8  # 896 bytes of K/V
    assert run._decode_variants(3, 31, 2, 16, "bf16") == 6  # 11,904 bytes
    tables, _ = measure_tables(
        grids, device="cpu", tables=("generation_attention_perf",), progress=lambda _m: None
    )
    assert len(tables["generation_attention_perf"].rows) == 4


def test_a_pool_too_small_is_refused() -> None:
    pool = torch.zeros(2, 4, 1, 8)
    with pytest.raises(ValueError, match="holds 2 pages, the batch needs 3"):
        make_paged_kv(pool, pool, [8, 1], torch.Generator())


def test_grids_are_aiconfigurators() -> None:
    assert len(FULL_GEMM_M) == 74
    features = {n for n, _ in FULL.gemm_nk}
    assert len(features) == 22 and len(FULL.gemm_nk) == 22 * 22 - 1
    for axis in (
        "gemm_m",
        "context_batch_sizes",
        "context_isl",
        "generation_batch_sizes",
        "generation_steps",
    ):
        assert set(getattr(SMALL, axis)) <= set(getattr(FULL, axis)), axis
    assert {n for n, _ in SMALL.gemm_nk} <= features and set(SMALL.attention_heads) <= set(
        FULL.attention_heads
    )
    # the collector's limits on batch x length
    assert (16, 4096) in SMALL.context_points(32, 32) and (16, 8192) not in SMALL.context_points(32, 32)
    assert (16, 8192) in SMALL.context_points(32, 8) and (256, 16383) not in SMALL.generation_points(32, 128)


def test_grids_match_the_packaged_tables() -> None:
    import pandas as pd

    data = packaged_dir()
    gemm = pd.read_parquet(data / PACKAGED["gemm_perf"], columns=["m", "n"])
    assert sorted(gemm["m"].unique()) == FULL_GEMM_M
    gemm = pd.read_parquet(data / PACKAGED["gemm_perf"], columns=["m", "n", "k"])
    assert sorted(gemm["n"].unique()) == sorted({n for n, _ in FULL.gemm_nk})
    assert sorted(gemm["k"].unique()) == sorted({k for _, k in FULL.gemm_nk})
    gen = pd.read_parquet(data / PACKAGED["generation_attention_perf"], columns=["batch_size", "step"])
    assert sorted(gen["batch_size"].unique()) == FULL.generation_batch_sizes
    assert sorted(gen["step"].unique()) == FULL.generation_steps
    ctx = pd.read_parquet(data / PACKAGED["context_attention_perf"], columns=["batch_size", "isl"])
    assert sorted(ctx["isl"].unique()) == FULL.context_isl
    assert sorted(ctx["batch_size"].unique()) == FULL.context_batch_sizes
    moe = pd.read_parquet(data / PACKAGED["moe_perf"])
    bf16 = moe[moe["moe_dtype"] == "bfloat16"]
    assert sorted(bf16["num_tokens"].unique()) == FULL_MOE_TOKENS
    shapes = bf16.groupby(["hidden_size", "inter_size", "topk", "num_experts"]).size().index
    assert sorted(shapes) == FULL_MOE_SHAPES
    assert sorted(bf16["distribution"].unique()) == sorted(FULL.moe_distributions)
    layouts = set(zip(bf16["moe_tp_size"], bf16["moe_ep_size"], strict=True))
    assert {(tp, ep) for (_, tp, ep) in FULL.moe_cases()} == layouts
    assert set(SMALL.moe_shapes) <= set(FULL_MOE_SHAPES) and set(SMALL.moe_tokens) <= set(FULL_MOE_TOKENS)


def test_for_model_measures_that_models_shapes() -> None:
    llama = MODEL_PRESETS["llama-3-8b"]
    grids = for_model(SMALL, ModelShape(**model_shape(llama)), 2)
    assert grids.gemm_nk == [(3072, 4096), (4096, 2048), (4096, 7168), (14336, 4096), (64128, 4096)]
    assert grids.attention_heads == [(16, 4, 128)] and grids.gemm_m == SMALL.gemm_m


def test_cli_tables_for_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "tiny.yaml"
    spec.write_text(
        yaml.safe_dump(
            dict(
                name="tiny",
                num_layers=2,
                hidden_size=64,
                num_attention_heads=4,
                num_kv_heads=2,
                head_dim=16,
                intermediate_size=128,
                vocab_size=256,
                num_params=1e6,
                max_model_len=1024,
            )
        )
    )
    argv = ["calibrate", "--tables", str(tmp_path / "t"), "--device", "cpu", "--system", "my_gpu"]
    assert main([*argv, "--model", str(spec), "--only", "gemm_perf"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split()[:3] == ["gemm_perf", "complete", "24"]  # 2 dtypes x 3 m x 4 shapes
    rows = pq.read_table(version_dir(tmp_path / "t", "my_gpu", "gemm", torch_version()) / "gemm_perf.parquet")
    assert sorted({(n, k) for n, k in zip(rows["n"].to_pylist(), rows["k"].to_pylist(), strict=True)}) == [
        (64, 64),
        (64, 128),
        (128, 64),
        (256, 64),
    ]
    assert sorted(p.name for p in (tmp_path / "t" / "my_gpu").iterdir()) == ["gemm"]


def test_cli_tables_refuses_profile_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["calibrate", "--tables", str(tmp_path / "t"), "--device", "cpu"]
    assert main([*base, "--out", str(tmp_path / "p.json")]) == 2
    assert "give one of them" in capsys.readouterr().err
    assert main([*base, "--quick"]) == 2
    assert "--full-grid" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


def test_measure_tables_refuses_unknown_tables() -> None:
    with pytest.raises(ValueError, match="unknown tables"):
        measure_tables(CPU, device="cpu", tables=("mla_context_module_perf",))
    assert set(TABLE_SCHEMAS) == set(ALL_TABLES)
    assert isinstance(CPU, TableGrids)


@pytest.mark.slow
def test_allreduce_over_two_gloo_processes() -> None:
    """The multi-process path NCCL takes on GPUs, run with gloo on the CPU (about 20 s: two
    processes each import torch)."""
    from calibration.allreduce import measure_allreduce

    times = measure_allreduce(2, [256, 4096], dtype=torch.bfloat16, warmup=1, repeats=2, backend="gloo")
    assert len(times) == 2 and all(0 < t < 10 for t in times)
