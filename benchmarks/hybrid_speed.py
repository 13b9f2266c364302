"""How much slower a sliding-window or hybrid model simulates than a dense model of the same size.

    python benchmarks/hybrid_speed.py [--rounds 3] [--concurrency 64] [--prompts 640]

Issue 22 item 5: a hybrid model should run within 1.5x the time of a dense model of the
same size and traffic. The models are gpt-oss-120b (18 sliding-window layers of 128 tokens
and 18 full-attention layers, MoE) and two clones of it with the MoE fields removed and
weights kept at MXFP4 (so the weights and the KV capacity stay gpt-oss's): one with every
layer full attention (the dense baseline), one with every layer sliding-window. The traffic
is `vllm bench serve`'s random dataset (1,024 / 1,024 tokens, range ratio 0.8) from C
clients on one H200, the roofline cost model: every variant runs the same iterations.

Each round runs every variant once in a fresh process (``kvsim run --json``), the order
alternating by round; it prints the CPU seconds (user + sys, import included) and the
in-process simulation time (`kvsim.run` alone), their medians over the rounds, and each
variant's ratio to the dense clone. Timings on a shared machine are noisy: compare ratios
measured in the same sitting.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_TIMER = """
import json, sys, time
import kvsim
scenario = json.load(open(sys.argv[1]))
start = time.process_time()
result = kvsim.run(scenario)
print(json.dumps({"sim_s": time.process_time() - start, "iterations": len(result.iterations),
                  "finished": int(result.summary["num_finished"])}))
"""


def variants(concurrency: int, prompts: int) -> dict[str, dict[str, Any]]:
    """The three scenarios: gpt-oss-120b, its all-sliding-window and its dense clones."""
    from kvsim.model.presets import MODEL_PRESETS

    oss = MODEL_PRESETS["gpt-oss-120b"].model_dump()
    no_moe = {
        "num_experts": None, "num_experts_per_token": None, "expert_weight_dtype": None,
        "num_active_params": None, "weight_dtype": "mxfp4",
    }  # fmt: skip
    models = {
        "gpt-oss-120b (hybrid)": "gpt-oss-120b",
        "all sliding-window clone": {**oss, **no_moe, "name": "oss-swa", "num_sliding_window_layers": None},
        "dense clone": {**oss, **no_moe, "name": "oss-dense", "sliding_window": None,
                        "num_sliding_window_layers": None},
    }  # fmt: skip
    workload = {
        "kind": "bench_serve", "max_concurrency": concurrency, "num_prompts": prompts,
        "num_warmups": 2 * concurrency, "random_input_len": 1024, "random_output_len": 1024,
        "random_range_ratio": 0.8,
    }  # fmt: skip
    return {
        name: {"name": "hybrid-speed", "model": model, "replicas": [{"gpu": "h200", "tp": 1}],
               "workload": workload, "seed": 0}
        for name, model in models.items()
    }  # fmt: skip


def run_once(path: Path) -> tuple[float, dict[str, Any]]:
    """(CPU seconds of the child, its printed figures) of one fresh-process run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", _TIMER, str(path)], env=env, check=True, capture_output=True, text=True
    ).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=640)
    args = parser.parse_args(argv)
    scenarios = variants(args.concurrency, args.prompts)
    cpu: dict[str, list[float]] = {name: [] for name in scenarios}
    sim: dict[str, list[float]] = {name: [] for name in scenarios}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for i, (name, scenario) in enumerate(scenarios.items()):
            paths[name] = Path(tmp) / f"{i}.json"
            paths[name].write_text(json.dumps(scenario))
        for r in range(args.rounds):
            order = list(scenarios) if r % 2 == 0 else list(reversed(scenarios))
            for name in order:
                seconds, figures = run_once(paths[name])
                cpu[name].append(seconds)
                sim[name].append(figures["sim_s"])
                print(f"round {r + 1}  {name:26} cpu {seconds:6.2f} s  simulation {figures['sim_s']:6.2f} s  "
                      f"{figures['iterations']} iterations, {figures['finished']} finished")  # fmt: skip
    base_cpu, base_sim = statistics.median(cpu["dense clone"]), statistics.median(sim["dense clone"])
    print(
        "\n| model | CPU s (median) | x dense | simulation s (median) | x dense |\n| --- | ---: | ---: | ---: | ---: |"
    )
    for name in scenarios:
        c, s = statistics.median(cpu[name]), statistics.median(sim[name])
        print(f"| {name} | {c:.2f} | {c / base_cpu:.2f} | {s:.2f} | {s / base_sim:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
