"""The harness's MoE layer (`calibration.moe`): the synthetic routings aiconfigurator's tables
are measured under, exactly, and torch's expert kernels against a token-by-token reference;
then ``kvsim calibrate --tables`` for a MoE model on CPU, read back by the kernels cost model
as ``backend: torch``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from kvsim.cli import main
from kvsim.cost.base import Batch
from kvsim.cost.config import KernelCostConfig
from kvsim.cost.kernels import FITTED, KernelCostModel
from kvsim.cost.table_layout import version_dir
from kvsim.errors import ProfileError
from kvsim.model.presets import MODEL_PRESETS, resolve_gpu
from kvsim.model.specs import ModelSpec

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from calibration.moe import (  # noqa: E402
    TorchMoE,
    assign,
    expert_counts,
    reference_moe,
    routing,
    slowest_rank,
)
from calibration.shapes import ModelShape  # noqa: E402
from calibration.table_grids import SMALL, for_model  # noqa: E402
from calibration.tables import torch_version  # noqa: E402
from kvsim.cost.profile import model_shape  # noqa: E402


def test_balanced_counts_are_even_with_the_remainder_first() -> None:
    rng = np.random.default_rng(0)
    assert expert_counts(5, 8, 2, "balanced", rng).tolist() == [2, 2, 1, 1, 1, 1, 1, 1]
    assert expert_counts(64, 8, 2, "balanced", rng).tolist() == [16] * 8


@pytest.mark.parametrize("tokens", [1, 3, 16, 100, 4096])
@pytest.mark.parametrize(("experts", "topk"), [(8, 2), (128, 8), (512, 10)])
@pytest.mark.parametrize("distribution", ["balanced", "power_law_1.01", "power_law_1.2"])
def test_counts_sum_to_the_pairs_and_never_exceed_the_tokens(
    tokens: int, experts: int, topk: int, distribution: str
) -> None:
    counts = expert_counts(tokens, experts, topk, distribution, np.random.default_rng(7))
    assert len(counts) == experts and counts.sum() == tokens * topk
    assert counts.min() >= 0 and counts.max() <= tokens
    ids = assign(counts, tokens, topk)
    assert ids.shape == (tokens, topk)
    assert all(len(set(row)) == topk for row in ids.tolist())  # no expert twice for one token
    assert np.bincount(ids.ravel(), minlength=experts).tolist() == counts.tolist()


def test_no_expert_gets_more_pairs_than_there_are_tokens() -> None:
    # top-2 of 2: every token picks both, whatever the power law draws
    for seed in range(20):
        assert expert_counts(5, 2, 2, "power_law_1.01", np.random.default_rng(seed)).tolist() == [5, 5]


def test_power_law_loads_few_experts_heavily() -> None:
    # 4,096 tokens, top-8 of 128: balanced gives every expert 256 pairs; the power law's
    # busiest expert carries several times that, and the busiest eighth most of the pairs.
    counts = np.sort(expert_counts(4096, 128, 8, "power_law_1.01", np.random.default_rng(3)))[::-1]
    assert counts[0] > 3 * 256
    assert counts[:16].sum() > 0.5 * counts.sum()


def test_assign_fills_slots_column_by_column_busiest_first() -> None:
    # experts 0..3 with 1, 3, 2, 2 pairs over 4 tokens, top-2: the pair list is
    # 1 1 1 2 2 3 3 0 (busiest first, ties by id), token t gets pairs t and 4 + t.
    ids = assign(np.array([1, 3, 2, 2]), 4, 2)
    assert ids.tolist() == [[1, 2], [1, 3], [1, 3], [2, 0]]
    with pytest.raises(ValueError, match="sum to num_tokens x topk"):
        assign(np.array([5, 3, 0, 0]), 4, 2)  # expert 0 twice for some token


def test_slowest_rank_holds_the_most_pairs() -> None:
    assert slowest_rank(np.array([1, 1, 5, 0, 2, 2, 0, 0]), 4) == 1  # ranks hold 2, 5, 4, 0
    assert slowest_rank(np.array([3, 1]), 1) == 0
    with pytest.raises(ValueError, match="do not split over moe_ep 3"):
        slowest_rank(np.ones(8), 3)


def test_routing_is_seeded_and_the_local_block_is_the_busiest() -> None:
    a = routing(64, 16, 4, "power_law_1.01", moe_ep=4)
    b = routing(64, 16, 4, "power_law_1.01", moe_ep=4)
    assert all(np.array_equal(x, y) for x, y in zip(a[:2], b[:2], strict=True)) and a[2] == b[2]
    ids, weights, first = a
    per_rank = np.bincount(ids.ravel(), minlength=16).reshape(4, 4).sum(axis=1)
    assert first == 4 * int(np.argmax(per_rank)) and first % 4 == 0
    assert np.allclose(weights.sum(axis=1), 1.0)


@pytest.mark.parametrize("bad", ["uniform", "power_law_x", "power_law_1", "power_law_-2", "power_law_nan"])
def test_unknown_distributions_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="'balanced' or 'power_law_<alpha>'"):
        expert_counts(4, 8, 2, bad, np.random.default_rng(0))


@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize(("experts", "ep", "distribution"), [(8, 1, "balanced"), (16, 4, "power_law_1.01")])
def test_torch_moe_computes_the_reference(grouped: bool, experts: int, ep: int, distribution: str) -> None:
    gen = torch.Generator().manual_seed(0)
    hidden, width, local = 64, 32, experts // ep
    w13 = (torch.randn(local, 2 * width, hidden, generator=gen) / 8).to(torch.bfloat16)
    w2 = (torch.randn(local, hidden, width, generator=gen) / 8).to(torch.bfloat16)
    x = torch.randn(24, hidden, generator=gen).to(torch.bfloat16)
    ids, weights, first = routing(24, experts, 2, distribution, moe_ep=ep)
    moe = TorchMoE(w13, w2, grouped)
    assert moe.kernel_source == ("torch._grouped_mm" if grouped else "torch.loop")
    got = moe.prepare(ids, weights, first, torch.device("cpu"))(x).float()
    want = reference_moe(x, w13, w2, ids, weights, first)
    assert float((got - want).norm() / want.norm()) < 1e-2
    if ep > 1:  # tokens none of whose experts are local get nothing
        foreign = [t for t in range(24) if not any(first <= e < first + local for e in ids[t])]
        assert foreign and got[foreign].abs().max() == 0


def test_for_model_measures_a_moe_models_experts() -> None:
    qwen = MODEL_PRESETS["qwen3-30b-a3b"]
    fields = {**model_shape(qwen), "dtype": "bf16", "num_experts": 128, "experts_per_token": 8}
    grids = for_model(SMALL, ModelShape(**fields), 2)
    assert grids.moe_shapes == [(2048, 768, 8, 128)] and grids.moe_layouts == [(1, 1), (2, 1), (1, 2)]
    assert grids.moe_tokens == SMALL.moe_tokens
    assert (128, 2048) in grids.gemm_nk  # the router: 2,048 in, one logit per expert out
    dense = for_model(SMALL, ModelShape(**{**model_shape(MODEL_PRESETS["llama-3-8b"]), "dtype": "bf16"}), 1)
    assert dense.moe_cases() == []
    with pytest.raises(ValueError, match="both 0"):
        ModelShape(**{**fields, "experts_per_token": 0})


TINY_MOE = dict(
    name="tiny-moe",
    num_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=32,
    vocab_size=256,
    num_params=1e6,
    max_model_len=1024,
    num_experts=8,
    num_experts_per_token=2,
)


def test_moe_tables_measured_on_cpu_price_the_kernels_model(tmp_path: Path) -> None:
    spec = tmp_path / "tiny-moe.yaml"
    spec.write_text(yaml.safe_dump(TINY_MOE))
    root = tmp_path / "t"
    argv = [
        "calibrate",
        "--tables",
        str(root),
        "--device",
        "cpu",
        "--system",
        "toy_sxm",
        "--model",
        str(spec),
    ]
    tables = ("gemm_perf", "context_attention_perf", "generation_attention_perf", "moe_perf")
    assert main([*argv, *(a for t in tables for a in ("--only", t))]) == 0
    moe = pq.read_table(version_dir(root, "toy_sxm", "moe", torch_version()) / "moe_perf.parquet").to_pandas()
    assert set(zip(moe["hidden_size"], moe["inter_size"], moe["topk"], moe["num_experts"], strict=True)) == {
        (64, 32, 2, 8)
    }
    assert set(moe["kernel_source"]) == {"torch._grouped_mm"} and set(moe["moe_tp_size"]) == {1}

    model = ModelSpec(**TINY_MOE)
    config = KernelCostConfig(tables=str(root), system="toy_sxm", backend="torch")
    km = KernelCostModel(model, resolve_gpu("h100-sxm"), config, backend="vllm")
    assert km.source.backend == "torch" and km.engine == "vllm"
    assert km.overheads == FITTED["vllm"]  # the engine's overheads, not the harness's
    measured = moe[moe["distribution"] == "power_law_1.01"].set_index("num_tokens")["latency"]
    assert km._moe is not None
    for tokens, ms in measured.items():
        assert km._moe(tokens) == pytest.approx(ms * 1e-3, rel=1e-12)
    assert km.step_time_s(Batch(prefill_chunks=[(16, 0)], num_decode_seqs=2, decode_context_tokens=40)) > 0

    with pytest.raises(ProfileError, match=r"give cost_model\.tables"):
        KernelCostModel(model, resolve_gpu("h100-sxm"), KernelCostConfig(backend="torch", system="toy_sxm"))


def test_mla_models_are_refused_for_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["calibrate", "--tables", str(tmp_path / "t"), "--device", "cpu", "--model", "deepseek-v3"]
    assert main(argv) == 2
    assert "uses MLA" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()
