"""``kvsim bench-serve``: ``vllm bench serve`` against a simulated deployment.

    kvsim bench-serve --model llama-3-8b --gpu h200 --tp 1 --dataset-name random \\
        --random-input-len 1024 --random-output-len 1024 --random-range-ratio 0.8 \\
        --max-concurrency 64 --num-prompts 640 --num-warmups 128 --request-rate inf --ignore-eos

The client flags are vLLM 0.32.0's (``vllm/benchmarks/serve.py``, ``add_cli_args``; the
random dataset's from ``datasets/datasets.py``), with its defaults, and become a
``bench_serve`` workload (`kvsim.workload.config.BenchServeWorkload`); the deployment flags
become fields of replica group 0 of the base scenario (``--scenario``, default the embedded
one). The result block and the ``--save-result`` JSON are vLLM's (`kvsim.results.bench_report`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import kvsim
from kvsim.cli.fit_cmd import positive_int
from kvsim.cli.run_cmd import ProgressBar
from kvsim.cli.types import count, path_arg, text_arg
from kvsim.errors import KvsimError, ScenarioError
from kvsim.model.specs import KV_DTYPE_BYTES
from kvsim.results.bench_report import (
    DEFAULT_PERCENTILE_METRICS,
    PERCENTILE_METRICS,
    bench_metrics,
    bench_result_json,
)
from kvsim.results.bench_report import format_bench_block as format_block
from kvsim.results.io import json_safe
from kvsim.scenario.loading import apply_overrides, load_scenario, validate
from kvsim.workload.config import BenchServeWorkload

#: Engines the deployment may name (``engine.backend``) and weight precisions (``engine.quantization``).
BACKENDS = ("vllm", "sglang", "trtllm")
QUANTIZATIONS = ("bf16", "fp8", "fp8_block", "nvfp4", "mxfp4", "int4")

#: Deployment flags: argparse dest -> the scenario field they set.
DEPLOYMENT_FIELDS: dict[str, str] = {
    "model": "model",
    "gpu": "replicas.0.gpu",
    "tp": "replicas.0.tp",
    "backend": "replicas.0.engine.backend",
    "quantization": "replicas.0.engine.quantization",
    "kv_cache_dtype": "replicas.0.engine.kv_cache_dtype",
    "cost_model": "replicas.0.cost_model",
    "max_num_seqs": "replicas.0.engine.max_num_seqs",
    "max_num_batched_tokens": "replicas.0.engine.max_num_batched_tokens",
}
#: Client flags that are fields of the bench_serve workload under the same name.
WORKLOAD_FLAGS = (
    "num_prompts",
    "max_concurrency",
    "num_warmups",
    "request_rate",
    "burstiness",
    "random_input_len",
    "random_output_len",
    "random_range_ratio",
    "random_range_ratio_rule",
    "random_prefix_len",
    "num_special_tokens",
)


_non_negative_int = count(0)


def _rate(text: str) -> float | str:
    """A positive number or inf (vLLM's --request-rate and --burstiness)."""
    if text.strip().lower() in ("inf", "infinity", "+inf"):
        return "inf"
    value = float(text)
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a number > 0 or inf, got {text}")
    return value


def _range_ratio(text: str) -> float | dict[str, Any]:
    """A number, or vLLM 0.32's JSON form {"input": R, "output": R}."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f'a number or JSON like {{"input": 0.3, "output": 0.5}}, got {text}')
    return value


def _percentiles(text: str) -> list[float]:
    try:
        values = [float(p) for p in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated numbers in [0, 100], got {text}") from None
    if not values or any(not 0 <= p <= 100 for p in values):
        raise argparse.ArgumentTypeError(f"comma-separated numbers in [0, 100], got {text}")
    return values


def _metrics(text: str) -> list[str]:
    names = [m.strip() for m in text.split(",")]
    unknown = [m for m in names if m not in PERCENTILE_METRICS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown metric(s) {', '.join(unknown)}; choose from {', '.join(PERCENTILE_METRICS)}"
        )
    return names


def _key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"KEY=VALUE, got {text}")
    key, value = text.split("=", 1)
    return key.strip(), value.strip()


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``bench-serve`` to the parser."""
    p = sub.add_parser(
        "bench-serve",
        help="Simulate `vllm bench serve` (random dataset, closed loop, warm-ups) on a deployment.",
        description="Run vLLM's benchmark client (vLLM 0.32.0's `vllm bench serve --dataset-name "
        "random`, same flags and defaults) against a simulated deployment and print its result block; "
        "--save-result / --json give its result keys. Deployment flags set replica group 0 of the base "
        "scenario (--scenario, default the embedded one); --set changes anything else.",
    )
    dep = p.add_argument_group("deployment (the simulated server)")
    dep.add_argument(
        "--scenario",
        metavar="FILE",
        type=path_arg,
        help="Base scenario file (default: the embedded default).",
    )
    dep.add_argument("--model", type=text_arg(), help="Model preset (scenario field model).")
    dep.add_argument("--gpu", type=text_arg(), help="GPU preset of replica group 0.")
    dep.add_argument("--tp", type=positive_int, help="Tensor-parallel degree of replica group 0.")
    dep.add_argument(
        "--backend", choices=BACKENDS, help="Serving engine (engine.backend, with its default knobs)."
    )
    dep.add_argument("--quantization", choices=QUANTIZATIONS, help="Weight precision (engine.quantization).")
    dep.add_argument(
        "--kv-cache-dtype",
        choices=["auto", *KV_DTYPE_BYTES],
        help="KV-cache element type (engine.kv_cache_dtype).",
    )
    dep.add_argument(
        "--cost-model",
        metavar="KIND",
        type=text_arg(),
        help="Cost model kind of replica group 0: roofline, or another registered kind (e.g. kernels); "
        "its other fields by --set replicas.0.cost_model.FIELD=VALUE.",
    )
    dep.add_argument("--max-num-seqs", type=positive_int, help="engine.max_num_seqs of replica group 0.")
    dep.add_argument(
        "--max-num-batched-tokens",
        type=positive_int,
        help="engine.max_num_batched_tokens of replica group 0.",
    )
    dep.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override any scenario field by dotted path, after the flags (repeatable).",
    )
    dep.add_argument(
        "--force",
        action="store_true",
        help="Run even if the work estimate exceeds sim.max_requests / max_memory_gib.",
    )

    cli = p.add_argument_group(
        "client (vllm bench serve's flags; unset: the base scenario's, then vLLM's defaults)"
    )
    cli.add_argument("--dataset-name", choices=["random"], default="random", help="Only random (default).")
    cli.add_argument("--num-prompts", type=positive_int, help="Measured requests (vLLM default 1000).")
    cli.add_argument(
        "--max-concurrency", type=positive_int, help="Most requests in flight (default: no limit)."
    )
    cli.add_argument("--num-warmups", type=_non_negative_int, help="Warm-up requests (default 0).")
    cli.add_argument(
        "--ready-check-timeout-sec",
        type=_non_negative_int,
        help="> 0: one request of the first prompt before the warm-ups, waited for (default 0: none).",
    )
    cli.add_argument("--request-rate", type=_rate, help="Requests per second, or inf (default inf).")
    cli.add_argument("--burstiness", type=_rate, help="Gamma shape of the gaps (default 1: Poisson).")
    cli.add_argument("--random-input-len", type=_non_negative_int, help="Base prompt length (default 1024).")
    cli.add_argument("--random-output-len", type=positive_int, help="Base output length (default 128).")
    cli.add_argument(
        "--random-range-ratio",
        type=_range_ratio,
        help='Length spread: a number, or {"input": R, "output": R} (default 0).',
    )
    cli.add_argument(
        "--random-range-ratio-rule",
        choices=["symmetric", "legacy"],
        help="kvsim: symmetric (vLLM >= 0.8.4, default) or legacy ([int(L r), L]: vLLM <= 0.8.3, SGLang).",
    )
    cli.add_argument("--random-prefix-len", type=_non_negative_int, help="Shared prefix tokens (default 0).")
    cli.add_argument("--input-len", type=_non_negative_int, help="Same as --random-input-len (vLLM's alias).")
    cli.add_argument("--output-len", type=positive_int, help="Same as --random-output-len (vLLM's alias).")
    cli.add_argument(
        "--num-special-tokens",
        type=_non_negative_int,
        help="kvsim: tokens the server's tokenizer adds to each prompt (1 for Llama 3's BOS; default 0).",
    )
    cli.add_argument(
        "--ignore-eos", action="store_true", help="Accepted: kvsim's outputs always run to their length."
    )
    cli.add_argument("--seed", type=_non_negative_int, help="Seed of lengths and gaps (vLLM default 0).")

    out = p.add_argument_group("results")
    out.add_argument(
        "--percentile-metrics",
        type=_metrics,
        default=list(DEFAULT_PERCENTILE_METRICS),
        help=f"Metrics to report (default {','.join(DEFAULT_PERCENTILE_METRICS)}; any of "
        f"{','.join(PERCENTILE_METRICS)}).",
    )
    out.add_argument(
        "--metric-percentiles", type=_percentiles, default=[99.0], help="Percentiles to report (default 99)."
    )
    out.add_argument("--save-result", action="store_true", help="Write the result JSON (vLLM's keys).")
    out.add_argument(
        "--result-dir", metavar="DIR", type=path_arg, help="Folder of the result JSON (default: here)."
    )
    out.add_argument(
        "--result-filename",
        metavar="FILE",
        type=path_arg,
        help="Name of the result JSON (default {label}-{rate}qps[-concurrency{C}]-{model}-{date}.json).",
    )
    out.add_argument("--label", type=text_arg(), help="Label of the result (default: the backend).")
    out.add_argument(
        "--metadata", nargs="*", type=_key_value, metavar="KEY=VALUE", help="Keys added to the JSON."
    )
    out.add_argument("--json", action="store_true", help="Print the result JSON instead of the block.")
    out.add_argument("--no-progress", action="store_true", help="Never draw the progress bar.")
    p.set_defaults(func=run)


def _flag_of(path: str, rule: str) -> str:
    """The command-line flag behind a scenario field path ('' if none)."""
    for dest, field in DEPLOYMENT_FIELDS.items():
        if path == field or path.startswith(field + "."):
            return "--" + dest.replace("_", "-")
    path = path.replace("workload.bench_serve", "workload", 1)  # the variant's tag
    if path == "workload":  # a rule across fields names its first field
        path = "workload." + rule.removeprefix("Value error, ").split(" ", 1)[0]
    if path.startswith("workload."):
        name = path.split(".")[1]
        if name == "ready_check":
            return "--ready-check-timeout-sec"
        if name in (*WORKLOAD_FLAGS, "seed", "ignore_eos"):
            return "--" + name.replace("_", "-")
    return ""


def _translate(exc: ScenarioError) -> KvsimError:
    """A scenario error whose fields came from flags, told in flags: '--num-prompts (workload.num_prompts): ...'."""
    lines = ["bench-serve: invalid deployment or client"]
    for path, rule in exc.problems:
        flag = _flag_of(path, rule)
        where = f"{flag} ({path})" if flag else (path or "<root>")
        lines.append(f"  {where}: {rule.removeprefix('Value error, ')}")
    return KvsimError("\n".join(lines))


def build_scenario(args: argparse.Namespace) -> tuple[kvsim.Scenario, Path | None]:
    """The base scenario with the client as its workload and the deployment flags applied."""
    base_dir = Path(args.scenario).resolve().parent if args.scenario else None
    base = load_scenario(args.scenario)
    data = base.model_dump(mode="json")
    workload: dict[str, Any] = (
        base.workload.model_dump(mode="json") if isinstance(base.workload, BenchServeWorkload) else {}
    )
    workload["kind"] = "bench_serve"
    if args.input_len is not None:
        workload["random_input_len"] = args.input_len
    if args.output_len is not None:
        workload["random_output_len"] = args.output_len
    for name in WORKLOAD_FLAGS:
        value = getattr(args, name)
        if value is not None:
            workload[name] = value
    if args.ready_check_timeout_sec is not None:
        workload["ready_check"] = args.ready_check_timeout_sec > 0
    if args.seed is not None:  # one seed for the run, the client's draws included
        data["seed"] = args.seed
        workload["seed"] = None
    data["workload"] = workload
    deployment: dict[str, Any] = {}
    for dest, field in DEPLOYMENT_FIELDS.items():
        value = getattr(args, dest)
        if value is None:
            continue
        if dest == "cost_model":
            current = data["replicas"][0]["cost_model"]
            if isinstance(current, dict) and current.get("kind") == value:
                continue  # the base's own cost model of that kind, its fields kept
            value = {"kind": value}
        deployment[field] = value
    try:
        data = apply_overrides(data, deployment)
        data = apply_overrides(data, args.overrides)
        scenario = validate(data, "bench-serve", base_dir)
    except ScenarioError as exc:
        if exc.source == "--set":
            raise
        raise _translate(exc) from None
    return scenario, base_dir


def _result_path(
    args: argparse.Namespace, metrics: dict[str, Any], backend: str, model_id: str, date: str
) -> Path:
    """vLLM's ``compute_result_filename``."""
    label = args.label or backend
    concurrency = (
        f"-concurrency{metrics['max_concurrency']}" if metrics.get("max_concurrency") is not None else ""
    )
    name = f"{label}-{metrics['request_rate']}qps{concurrency}-{model_id.split('/')[-1]}-{date}.json"
    if args.result_filename:
        name = args.result_filename
    return Path(args.result_dir) / name if args.result_dir else Path(name)


def _write_result(path: Path, payload: dict[str, Any]) -> None:
    """Write the result JSON atomically; a file already there is replaced only if it is a
    benchmark result itself (a mistaken name must not overwrite anything else)."""
    if path.exists():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = None
        if not (isinstance(old, dict) and "completed" in old and "duration" in old):
            raise KvsimError(
                f"--result-filename: {path} exists and is not a benchmark result; not replacing it"
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run(args: argparse.Namespace) -> int:
    scenario, base_dir = build_scenario(args)
    bar = None
    if not (args.no_progress or args.json) and sys.stderr.isatty():
        bar = ProgressBar(sys.stderr, "bench-serve")
    try:
        result = kvsim.run(scenario, base_dir=base_dir, progress=bar, force=args.force)
    finally:
        if bar is not None:
            bar.close()
    metrics = bench_metrics(
        result, percentile_metrics=args.percentile_metrics, percentiles=args.metric_percentiles
    )
    workload = scenario.workload
    assert isinstance(workload, BenchServeWorkload)
    engine = scenario.replicas[0].engine
    backend = str(getattr(engine, "backend", None) or args.backend or "vllm")
    model_id = scenario.model if isinstance(scenario.model, str) else scenario.model.name
    date = datetime.now().strftime("%Y%m%d-%H%M%S")
    payload = bench_result_json(
        metrics,
        date=date,
        backend=backend,
        model_id=model_id,
        num_prompts=workload.num_prompts,
        burstiness=workload.burstiness_shape,
        label=args.label,
        metadata=dict(args.metadata or []),
    )
    if args.json:
        print(json.dumps(json_safe(payload), indent=2, allow_nan=False))
    else:
        print(format_block(metrics, args.metric_percentiles))
    if args.save_result:
        path = _result_path(args, metrics, backend, model_id, date)
        try:
            _write_result(path, payload)
        except OSError as exc:
            print(f"kvsim: error: {path}: cannot write the result: {exc}", file=sys.stderr)
            return 1
        print(f"kvsim: wrote {path}", file=sys.stderr)
    return 0
