"""benchmarks/srt_slurm_recipes.py: the SGLang flags of the srt-slurm recipes InferenceX's
multi-node rows ran; and benchmarks/silicon.py launching each side with them (per-rank knobs)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import load_benchmark

recipes_mod = load_benchmark("srt_slurm_recipes")
silicon = load_benchmark("silicon")

#: NVIDIA/srt-slurm 5063eb43, recipes/h200/8k1k/bs128-1p1d-dep.yaml (sglang_config, abridged).
H200_DEP = {
    "backend": {
        "sglang_config": {
            "prefill": {"tp-size": 8, "dp-size": 1, "ep-size": 1, "disable-radix-cache": True,
                        "max-running-requests": 16, "mem-fraction-static": 0.75, "max-prefill-tokens": 163840,
                        "chunked-prefill-size": 163840},
            "decode": {"tp-size": 8, "dp-size": 8, "ep-size": 8, "enable-dp-attention": True,
                       "mem-fraction-static": 0.88, "max-running-requests": 256, "cuda-graph-max-bs": 256},
        }
    }
}  # fmt: skip


def test_a_recipes_sides_are_read_with_sglangs_aliases_folded() -> None:
    lines = recipes_mod.recipe_lines("recipes/h200/8k1k/bs128-1p1d-dep.yaml", H200_DEP, "5063eb43" + "0" * 32)
    prefill, decode = lines

    def pick(line: dict[str, str], *keys: str) -> tuple[str, ...]:
        return tuple(line[k] for k in keys)

    assert pick(prefill, "side", "commit", "chunked_prefill_size") == ("prefill", "5063eb430000", "163840")
    assert pick(prefill, "max_running_requests", "kv_cache_dtype", "enable_dp_attention") == ("16", "", "")
    assert pick(decode, "dp_size", "enable_dp_attention", "cuda_graph_max_bs") == ("8", "true", "256")
    gb = {"backend": {"sglang_config": {"prefill": {"tensor-parallel-size": 4, "data-parallel-size": 1,
                                                    "kv-cache-dtype": "fp8_e4m3", "max-total-tokens": 8192}}}}  # fmt: skip
    prefill = recipes_mod.recipe_lines("r.yaml", gb, "c" * 40)[0]
    assert pick(prefill, "tp_size", "dp_size", "kv_cache_dtype", "max_total_tokens") == (
        "4",
        "1",
        "fp8_e4m3",
        "8192",
    )
    trt = {"backend": {"type": "trtllm", "trtllm_config": {"prefill": {"max_num_tokens": 8192}}}}
    assert recipes_mod.recipe_lines("t.yaml", trt, "c" * 40) == []


def test_only_whole_recipe_files_are_read() -> None:
    rows = [{"recipes": "recipes/h200/8k1k/bs8-1p6d.yaml recipes/b200-fp8/1k1k.yaml:override_mtp[0]"},
            {"recipes": ""}, {"recipes": "recipes/h200/8k1k/bs8-1p6d.yaml"}]  # fmt: skip
    assert recipes_mod.named_recipes(rows) == ["recipes/h200/8k1k/bs8-1p6d.yaml"]


def _table(monkeypatch: pytest.MonkeyPatch, docs: dict[str, dict[str, Any]]) -> None:
    lines = [line for name, doc in docs.items() for line in recipes_mod.recipe_lines(name, doc, "c" * 40)]
    table = {(line["recipe"], line["side"]): line for line in lines}
    monkeypatch.setattr(silicon, "srt_slurm_sglang", lambda: table)


def test_each_side_takes_its_recipes_flags_per_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    _table(monkeypatch, {"dep.yaml": H200_DEP})
    harness = {"recipes": "dep.yaml"}
    engine, cost = silicon.recipe_flags(harness, "prefill", 1)
    # 163,840-token chunks and prompt budget: whole 8k prompts, up to 16 of them a step; no
    # kv-cache-dtype: the checkpoint's 16 bits.
    assert engine == {"kv_cache_dtype": "auto", "gpu_memory_utilization": 0.75, "max_num_seqs": 16,
                      "max_num_batched_tokens": 163840}  # fmt: skip
    assert cost == {}
    engine, cost = silicon.recipe_flags(harness, "decode", 8)
    # 256 running requests over 8 attention-DP ranks: 32 a rank; CUDA graphs to 256 a rank.
    assert engine == {"kv_cache_dtype": "auto", "gpu_memory_utilization": 0.88, "max_num_seqs": 32}
    assert cost == {"cuda_graph_max_size": 256}
    # The side as kvsim runs it has another layout: the worker's figures carry (its 256
    # requests on one rank), a rank's (the CUDA-graph ceiling) would be another batch's.
    assert silicon.recipe_flags(harness, "decode", 1) == (
        {"kv_cache_dtype": "auto", "gpu_memory_utilization": 0.88, "max_num_seqs": 256},
        {},
    )
    assert silicon.recipe_flags({"recipes": "missing.yaml"}, "decode", 8) == ({}, {})
    assert silicon.recipe_flags({}, "prefill", 1) == ({}, {})


def test_the_chunk_is_split_over_attention_dp_ranks_and_capped_by_the_prompt_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    side = {"tp-size": 8, "dp-size": 8, "enable-dp-attention": True, "chunked-prefill-size": 262144,
            "max-prefill-tokens": 65536, "max-running-requests": 512, "kv-cache-dtype": "fp8_e4m3",
            "max-total-tokens": 524288, "scheduler-recv-interval": 10}  # fmt: skip
    unset = {"tp-size": 4, "dp-size": 1, "chunked-prefill-size": 24576}
    _table(monkeypatch, {"a.yaml": {"backend": {"sglang_config": {"prefill": side, "decode": side}}},
                         "b.yaml": {"backend": {"sglang_config": {"prefill": unset, "decode": unset}}}})  # fmt: skip
    engine, _ = silicon.recipe_flags({"recipes": "a.yaml"}, "prefill", 8)
    assert engine == {"kv_cache_dtype": "fp8", "max_num_seqs": 64, "max_total_tokens": 524288,
                      "scheduler_recv_interval": 10, "max_num_batched_tokens": 32768}  # fmt: skip
    # max-prefill-tokens unset: SGLang's 16,384 caps the 24,576-token chunk (two 8k prompts).
    engine, _ = silicon.recipe_flags({"recipes": "b.yaml"}, "prefill", 1)
    assert engine["max_num_batched_tokens"] == 16384
    assert "max_num_batched_tokens" not in silicon.recipe_flags({"recipes": "a.yaml"}, "decode", 8)[0]


def test_recipes_that_disagree_on_a_flag_leave_it_to_kvsims_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    one = {"tp-size": 8, "dp-size": 1, "max-running-requests": 16, "mem-fraction-static": 0.82,
           "chunked-prefill-size": 32768, "max-prefill-tokens": 32768}  # fmt: skip
    _table(monkeypatch, {"bs16.yaml": {"backend": {"sglang_config": {"prefill": one, "decode": {**one, "max-running-requests": 32}}}},
                         "bs8.yaml": {"backend": {"sglang_config": {"prefill": one, "decode": one}}}})  # fmt: skip
    harness = {"recipes": "bs16.yaml bs8.yaml"}
    assert silicon.recipe_flags(harness, "prefill", 1)[0]["max_num_seqs"] == 16
    assert "max_num_seqs" not in silicon.recipe_flags(harness, "decode", 1)[0]
    assert silicon.recipe_flags(harness, "decode", 1)[0]["gpu_memory_utilization"] == 0.82


def test_recipes_of_two_layouts_give_the_worker_figures_they_agree_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """InferenceX's search space holds the H200 1k/1k MTP points at 512-2,048 clients in two
    recipes, recipes/h200/1k1k/bs256-1p6d-dep-mtp.yaml and bs256-1p6d-tp-mtp.yaml (NVIDIA/srt-slurm
    5063eb43, abridged): which ran is not recorded, but both cap each decode worker at 128
    running requests, with 75% of memory static."""
    dep = {"prefill": {"tp-size": 8, "dp-size": 8, "enable-dp-attention": True, "max-running-requests": 64,
                       "mem-fraction-static": 0.82, "chunked-prefill-size": 65536, "max-prefill-tokens": 65536},
           "decode": {"tp-size": 8, "dp-size": 8, "enable-dp-attention": True, "max-running-requests": 128,
                      "mem-fraction-static": 0.75, "cuda-graph-max-bs": 128}}  # fmt: skip
    tp = {"prefill": {"tp-size": 8, "dp-size": 1, "max-running-requests": 512, "mem-fraction-static": 0.7,
                      "chunked-prefill-size": 163840, "max-prefill-tokens": 163840},
          "decode": {"tp-size": 8, "dp-size": 1, "max-running-requests": 128, "mem-fraction-static": 0.75,
                     "cuda-graph-max-bs": 128}}  # fmt: skip
    _table(
        monkeypatch,
        {"dep.yaml": {"backend": {"sglang_config": dep}}, "tp.yaml": {"backend": {"sglang_config": tp}}},
    )
    harness = {"recipes": "dep.yaml tp.yaml"}
    # The worker's 128 requests, on kvsim's tensor-parallel decode worker or over its 8 ranks.
    assert silicon.recipe_flags(harness, "decode", 1) == (
        {"kv_cache_dtype": "auto", "gpu_memory_utilization": 0.75, "max_num_seqs": 128},
        {},
    )
    assert silicon.recipe_flags(harness, "decode", 8)[0]["max_num_seqs"] == 16
    # The prefill sides agree on nothing but the dtype left unset.
    assert silicon.recipe_flags(harness, "prefill", 1) == ({"kv_cache_dtype": "auto"}, {})


def test_the_committed_table_holds_the_h200_recipe_as_written() -> None:
    """benchmarks/results/srt_slurm_sglang.csv.gz against recipes/h200/8k1k/bs128-1p1d-dep.yaml
    at NVIDIA/srt-slurm 5063eb43 (transcribed in H200_DEP above)."""
    table = silicon.srt_slurm_sglang()
    name = "recipes/h200/8k1k/bs128-1p1d-dep.yaml"
    prefill = table[(name, "prefill")]
    expected = recipes_mod.recipe_lines(name, H200_DEP, prefill["commit"] + "0" * 28)
    assert [table[(line["recipe"], line["side"])] for line in expected] == expected
    # Every Blackwell DeepSeek-R1 recipe caches fp8; no Hopper one sets a dtype.
    for (recipe, _), line in table.items():
        hopper = recipe.startswith(("recipes/h100/", "recipes/h200/"))
        assert line["kv_cache_dtype"] == ("" if hopper else "fp8_e4m3"), recipe


def test_silicon_launches_an_srt_slurm_sglang_row_with_its_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    _table(monkeypatch, {"dep.yaml": H200_DEP})
    row = {"id": "x", "mode": "disagg", "backend": "sglang", "backend_version": "0.5.8.post1",
           "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h200_sxm", "precision": "bf16",
           "isl": "1024", "osl": "8", "silicon_data_source": "silicon_concurrency=4",
           "prefill_num_workers": "1", "prefill_tp_size": "8", "decode_num_workers": "1", "decode_tp_size": "1",
           "decode_attention_dp_size": "8"}  # fmt: skip
    scenario = silicon.disagg_scenario_for(row, {"recipes": "dep.yaml"}, {})
    prefill, decode = scenario["replicas"]
    assert (prefill["engine"]["max_num_batched_tokens"], prefill["engine"]["max_num_seqs"]) == (163840, 16)
    assert (decode["engine"]["max_num_seqs"], decode["cost_model"]["cuda_graph_max_size"]) == (32, 256)
    plain = silicon.disagg_scenario_for(row, {}, {})
    assert plain["replicas"][1]["engine"]["max_num_seqs"] == 4  # the clients, as before
    assert "max_num_batched_tokens" not in plain["replicas"][0]["engine"]


def test_a_recipe_is_read_at_the_first_merge_that_has_it(tmp_path: Any) -> None:
    """Two commits of a tiny recipe repository: a recipe in both is read at the first (and
    reported when its flags changed), one only in the second is read there, one in neither
    is skipped."""
    import subprocess

    import yaml

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True,
                              text=True).stdout.strip()  # fmt: skip

    def write(name: str, chunk: int) -> None:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        side = {"tp-size": 8, "chunked-prefill-size": chunk}
        path.write_text(yaml.safe_dump({"backend": {"sglang_config": {"prefill": side, "decode": side}}}))

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    write("recipes/a.yaml", 8192)
    git("add", ".")
    git("commit", "-q", "-m", "first")
    first = git("rev-parse", "HEAD")
    write("recipes/a.yaml", 16384)
    write("recipes/b.yaml", 32768)
    git("add", ".")
    git("commit", "-q", "-m", "second")
    second = git("rev-parse", "HEAD")
    names = ["recipes/a.yaml", "recipes/b.yaml", "recipes/gone.yaml"]
    lines, differ = recipes_mod.read_recipes(tmp_path, names, (first, second))
    got = {(x["recipe"], x["side"]): (x["commit"], x["chunked_prefill_size"]) for x in lines}
    assert got == {
        ("recipes/a.yaml", "prefill"): (first[:12], "8192"),
        ("recipes/a.yaml", "decode"): (first[:12], "8192"),
        ("recipes/b.yaml", "prefill"): (second[:12], "32768"),
        ("recipes/b.yaml", "decode"): (second[:12], "32768"),
    }
    assert differ == ["recipes/a.yaml"]


def test_silicon_reads_the_recipes_unless_told_not_to() -> None:
    """The recipes are in the harness records by default (on the H200 rows, with the worker
    figures of two-layout recipes and SGLang's own MTP acceptance, they beat the launch kvsim
    assumed before: docs/validation.md, twenty-second pass); ``--no-srt-slurm-recipes`` leaves
    them out."""
    rid = "dsr1_h200_sglang_fp8_disagg_8192x1024_c64_cfg434"
    assert (
        silicon.harness_by_id(silicon.HARNESS)[rid]["recipes"] == "recipes/h200/8k1k/bs128-1p1d-dep-mtp.yaml"
    )
    assert "recipes" not in silicon.harness_by_id(silicon.HARNESS, recipes=False)[rid]
