"""Every deployment in aiconfigurator-core's silicon_sample.csv ran on real GPUs, so kvsim's
memory model must not refuse it: its model, GPU, parallelism, backend and precision, with the
backend's defaults for that version (docs/backends.md, "Memory: what the engines fit")."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kvsim.backends.defaults import BackendVersionError, table_version
from kvsim.errors import ScenarioError
from kvsim.model.hf_config import HfConfigError, load_hf_config
from kvsim.model.kv_sizing import weight_bytes
from kvsim.model.presets import UnknownPresetError, resolve_gpu, resolve_model
from kvsim.model.specs import ModelSpec
from kvsim.scenario.loading import load_scenario
from kvsim.scenario.resolved import resolve_plan

try:
    import aiconfigurator_core

    AIC: Path | None = Path(aiconfigurator_core.__file__).parent
except ImportError:
    AIC = None

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        AIC is None, reason="aiconfigurator-core is not installed (pip install kvsim[kernels])"
    ),
]

#: The silicon file's quantization modes as kvsim weight dtypes ("" is the checkpoint's bf16).
QUANT = {"fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4", "int4_wo": "int4", "": None}
#: Checkpoints whose config.json aiconfigurator ships under another name.
SAME_CONFIG = {"nvidia/DeepSeek-R1-NVFP4": "deepseek-ai/DeepSeek-R1", "zhipuai/GLM-5": "zai-org/GLM-5"}
#: The memory fraction a deployment may have been started with beyond its engine's default
#: (SGLang's --mem-fraction-static, vLLM's --gpu-memory-utilization), which the file does not record.
TUNED_FRACTION = 0.95


def _model(path: str) -> ModelSpec | str:
    try:
        return resolve_model(path)
    except UnknownPresetError:
        pass
    assert AIC is not None
    config = AIC / "model_configs" / (SAME_CONFIG.get(path, path).replace("/", "--") + "_config.json")
    try:
        return load_hf_config(config)
    except HfConfigError as exc:
        return f"not modelled: {exc}"


def _int(text: str) -> int:
    try:
        return max(int(float(text)), 1)
    except ValueError:
        return 1


def _version(backend: str, version: str) -> str | None:
    try:
        table_version(backend, version)  # type: ignore[arg-type]
        return version
    except BackendVersionError:
        return None  # a nightly or a pre-1.0 TensorRT-LLM: the newest table stands in


def deployments() -> Counter[tuple[Any, ...]]:
    """(model, GPU, backend, version, weights, experts, GPUs per worker, EP, isl + osl) -> rows."""
    assert AIC is not None
    out: Counter[tuple[Any, ...]] = Counter()
    with open(AIC / "systems" / "silicon_sample.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            prefixes = [""] if r["mode"] == "agg" else ["prefill_", "decode_"]
            for p in prefixes:  # a disaggregated row has a prefill and a decode worker
                tp, dp = _int(r[f"{p}tp_size"]), _int(r[f"{p}attention_dp_size"])
                moe_tp, ep = _int(r[f"{p}moe_tp_size"]), _int(r[f"{p}moe_ep_size"])
                gpus = max(tp * dp, moe_tp * ep)
                key = (
                    r["model_path"],
                    r["system"],
                    r["backend"],
                    _version(r["backend"], r["backend_version"]),
                    r["gemm_quant_mode"],
                    r["moe_quant_mode"],
                    gpus,
                    ep > 1,
                    int(r["isl"]) + int(r["osl"]),
                )
                out[key] += 1
    return out


def _scenario(
    model: ModelSpec, gpu: str, backend: str, version: str | None, gpus: int, ep: bool, need: int
) -> dict[str, Any]:
    engine: dict[str, Any] = {"backend": backend, "backend_version": version}
    if backend == "vllm":  # vLLM refuses a context it cannot hold: the benchmark set --max-model-len
        engine["max_model_len"] = min(need, model.max_model_len)
    group = {"gpu": gpu, "tp": gpus, "expert_parallel": ep and model.is_moe, "engine": engine}
    return {"model": model.model_dump(), "replicas": [group]}


def _memory_problems(err: ScenarioError) -> list[tuple[str, str]]:
    """Problems other than a parallel layout kvsim cannot express (attention data parallelism
    over a head count TP does not divide)."""
    return [p for p in err.problems if "must divide" not in p[1] and "expert parallelism" not in p[1]]


def test_no_deployment_that_ran_is_refused() -> None:
    outcome: Counter[str] = Counter()
    refused = []
    for (path, gpu, backend, version, gemm, moe, gpus, ep, need), rows in sorted(
        deployments().items(), key=str
    ):
        base = _model(path)
        if isinstance(base, str):
            outcome["model not modelled"] += rows
            continue
        update: dict[str, Any] = {"weight_dtype": QUANT[gemm] or base.weight_dtype}
        if base.is_moe:
            update["expert_weight_dtype"] = QUANT[moe] or base.expert_weight_dtype
        model = base.model_copy(update=update)
        if weight_bytes(model) / gpus > resolve_gpu(gpu).memory_bytes:
            outcome["layout not recorded"] += (
                rows  # e.g. a 671B model on "1" GPU: the row lacks its parallelism
            )
            continue
        data = _scenario(model, gpu, backend, version, gpus, ep, need)
        try:
            plan = resolve_plan(load_scenario(data))
        except ScenarioError as err:
            problems = _memory_problems(err)
            if not problems:
                outcome["layout not expressible"] += rows
                continue
            data["replicas"][0]["engine"]["gpu_memory_utilization"] = TUNED_FRACTION
            try:
                load_scenario(data)
                outcome["fits with a tuned memory fraction"] += rows
            except ScenarioError as again:
                if _memory_problems(again):
                    refused.append((path, gpu, backend, version, gpus, gemm, problems[0][1]))
                else:
                    outcome["fits with a tuned memory fraction"] += rows
            continue
        assert plan.groups[0].max_model_len >= min(need, model.max_model_len), (path, gpu, backend, gpus)
        outcome["fits with the backend's defaults"] += rows
    assert not refused, refused
    # What the file holds (worker rows: a disaggregated row counts its prefill and decode workers).
    assert outcome["fits with the backend's defaults"] >= 6100
    assert outcome["fits with a tuned memory fraction"] <= 10  # DeepSeek-R1/V3 FP8 on 4 x B200, SGLang
    assert set(outcome) <= {
        "fits with the backend's defaults",
        "fits with a tuned memory fraction",
        "layout not expressible",
        "layout not recorded",
        "model not modelled",
    }


def test_the_issue_case_qwen3_32b_bf16_on_one_h100_with_sglang() -> None:
    mine = [
        k
        for k in deployments()
        if k[:3] == ("Qwen/Qwen3-32B", "h100_sxm", "sglang") and k[4] == "" and k[6] == 1  # bf16, one GPU
    ]
    assert len(mine) == 6
    for path, gpu, backend, version, _, _, gpus, ep, need in mine:
        model = resolve_model(path)
        plan = resolve_plan(load_scenario(_scenario(model, gpu, backend, version, gpus, ep, need)))
        assert plan.groups[0].capacity.num_tokens > 20_000
        assert plan.groups[0].max_model_len >= need
