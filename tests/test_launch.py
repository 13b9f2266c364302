"""`kvsim.backends.launch`: the engine's launch command for what a scenario simulated."""

from __future__ import annotations

import shlex

import kvsim
from kvsim.backends.launch import launch_commands, model_id


def test_vllm_flags_are_the_knobs_the_scenario_simulated() -> None:
    scenario = kvsim.load_scenario(
        "scenarios/azure_conversation.yaml",
        ["replicas.0.count=3", "replicas.0.tp=2", "router.kind=least_loaded",
         "replicas.0.engine.kv_cache_dtype=fp8", "replicas.0.engine.enable_prefix_caching=false",
         "replicas.0.engine.max_num_seqs=128", "replicas.0.engine.max_num_batched_tokens=2048"],
    )  # fmt: skip
    (launch,) = launch_commands(scenario)
    assert (launch.replicas, launch.gpus_per_replica, launch.role) == (3, 2, "both")
    assert shlex.split(launch.command) == [
        "vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--tensor-parallel-size", "2",
        "--max-num-seqs", "128", "--max-num-batched-tokens", "2048", "--kv-cache-dtype", "fp8",
        "--no-enable-prefix-caching", "--gpu-memory-utilization", "0.9", "--block-size", "16",
    ]  # fmt: skip
    assert launch.notes == ["behind a least_loaded router (router.kind in the scenario)"]
    assert launch.text().splitlines()[0] == "# replica: 3 replica(s) of 2 GPU(s), each:"


def test_sglang_and_trtllm_spell_the_same_knobs_their_way() -> None:
    base = ["replicas.0.engine.kv_cache_dtype=fp8", "replicas.0.engine.max_num_seqs=64"]
    sglang = launch_commands(
        kvsim.load_scenario("scenarios/azure_conversation.yaml", [*base, "replicas.0.engine.backend=sglang"])
    )[0]
    args = shlex.split(sglang.command)
    assert args[:5] == ["python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2.5-7B-Instruct"]
    assert args[args.index("--max-running-requests") + 1] == "64"
    assert args[args.index("--kv-cache-dtype") + 1] == "fp8_e4m3"
    assert "--disable-radix-cache" not in args  # prefix caching on
    trtllm = launch_commands(
        kvsim.load_scenario("scenarios/azure_conversation.yaml", [*base, "replicas.0.engine.backend=trtllm"])
    )[0]
    args = shlex.split(trtllm.command)
    assert args[:2] == ["trtllm-serve", "Qwen/Qwen2.5-7B-Instruct"]
    assert args[args.index("--max_batch_size") + 1] == "64"
    assert args[-2:] == ["--extra_llm_api_options", "extra_llm_api_options.yaml"]
    assert (
        "kv_cache_config:\n  dtype: fp8\n  enable_block_reuse: true\n  tokens_per_block: 32"
        in trtllm.config_file
    )


def test_disaggregated_groups_get_their_role() -> None:
    prefill, decode = launch_commands(kvsim.load_scenario("scenarios/disaggregated_prefill_decode.yaml"))
    assert (prefill.role, decode.role) == ("prefill", "decode")
    assert '--kv-transfer-config \'{"kv_connector":"NixlConnector","kv_role":"kv_both"}\'' in prefill.command
    assert "router that sends each prompt to a prefill replica" in decode.notes[-1]
    scenario = kvsim.load_scenario(
        "scenarios/disaggregated_prefill_decode.yaml",
        ["replicas.0.engine.backend=sglang", "replicas.1.engine.backend=sglang"],
    )
    assert launch_commands(scenario)[1].command.endswith("--disaggregation-mode decode")


def test_the_model_id_is_the_checkpoint_the_preset_cites() -> None:
    assert model_id(kvsim.load_scenario(None)) == "meta-llama/Meta-Llama-3-8B"
    assert (
        model_id(kvsim.load_scenario("scenarios/mooncake_conversation.yaml")) == "Qwen/Qwen2.5-7B-Instruct-1M"
    )
    assert model_id(kvsim.load_scenario(None, ["model=Qwen/Qwen3-8B-FP8"])) == "Qwen/Qwen3-8B-FP8"
