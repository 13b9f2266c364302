"""NVIDIA's estimator as kvsim's peer: aiconfigurator 0.12.0 on measured deployments.

    make aic-peer                                            # .venv-aic, once (~2 min)
    nice -n 10 .venv/bin/python benchmarks/aiconfigurator_peer.py \\
        --out benchmarks/results/aiconfigurator_silicon.json.gz \\
        --summary benchmarks/results/aiconfigurator_silicon.md      # the whole file, ~10 min
    .venv/bin/python benchmarks/aiconfigurator_peer.py --rows my_rows.csv --out runs/aic.json
    .venv/bin/python benchmarks/aiconfigurator_peer.py \\
        --summarize benchmarks/results/aiconfigurator_silicon.json.gz        # tables only

The rows are any CSV in the format of aiconfigurator-core's ``systems/silicon_sample.csv``
(the default: the copy installed with the estimator). For each row the script writes

    {"id", "status" ("ok" | "unsupported: why"), "mean_ttft_ms", "mean_tpot_ms",
     "backend_version_used", "model_path_used"}

to a JSON list (gzip'd when the name ends in ``.gz``), in the order of the CSV: the
per-row format of ``benchmarks/silicon.py`` (kvsim's own predictions), plus the two
``*_used`` fields that say what the estimator was given.

The estimator and its dependencies (matplotlib, bokeh, ...) never enter kvsim's ``.venv``:
``make aic-peer`` installs them in ``.venv-aic`` from ``requirements/aic-peer.txt``. Run
under any other interpreter, the script re-executes itself with ``.venv-aic/bin/python``
(``--aic-python`` names another); ``--summarize`` needs only the standard library.

How a row is predicted: as the estimator's own accuracy tooling reproduces a silicon row
(``tools/accuracy_tracking/run_silicon.py`` and
``tools/accuracy_regression_testing/predict_silicon_sample.py`` in
github.com/ai-dynamo/aiconfigurator): one ``aiconfigurator.cli.api.cli_estimate`` call
(the SDK form of ``aiconfigurator cli estimate``) with the row's model, system, backend,
mode, isl, osl, GEMM and MoE quantization and, for ``agg``, ``batch_size`` (the
concurrency per attention-DP rank) and tp / pp / attention-DP / MoE-TP / MoE-EP sizes;
for ``disagg``, the prefill and decode sizes, batch sizes and worker counts. No search:
the row's settings only; everything else is the estimator's default (database mode
SILICON). Differences from that tooling, each forced by running offline or by 0.12.0:

- Backend version: the measured one when the estimator's database can be queried at it,
  else its default (the "V1 semantics" of ``run_silicon.py``). 0.12.0 answers only its
  queryable slots (``systems/query_versions.yaml``: trtllm 1.3.0rc20, vllm 0.24.0,
  sglang 0.5.14 on these GPUs) and rejects every other version with "looks like an
  old-style raw version query"; that rejection falls back like "Failed to load perf
  database" does. In practice every row of silicon_sample.csv is predicted from the
  default slot's tables (``backend_version_used``).
- Model config: the estimator reads the model's HF ``config.json`` from its bundled
  ``model_configs/`` or downloads it. Offline, six checkpoint names of the file that are
  not bundled are read from a bundled config of the same architecture (``MODEL_ALIASES``;
  the quantization comes from the row's explicit quant modes, as NVIDIA's own InferenceX
  adapter does, ``aiconfigurator/sdk/config_adapter/inferencex.py`` ``MODEL_PATHS``).
- Disagg rows without prefill/decode batch sizes and worker counts (1,328 of the file's
  1,602 disagg rows) are "unsupported", as the estimator's tool refuses them
  ("prefill_batch_size is required for disagg mode."); no defaults are guessed.
- The estimator's exceptions become ``"unsupported: <Error>: <message>"``.

Identical estimator arguments are computed once (the tooling caches the same way), and the
estimator's scans of its own data directory are cached (``cache_database_scans``; off with
``--no-scan-cache``: the same predictions, several times slower).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import importlib.util
import io
import json
import logging
import math
import os
import re
import statistics
import sys
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
AIC_PYTHON = ROOT / ".venv-aic" / "bin" / "python"
#: Set when the script re-executes itself, so a broken .venv-aic cannot loop.
REEXEC_ENV = "KVSIM_AIC_PEER_REEXEC"

PARALLEL_FIELDS = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
AGG_FIELDS = ("batch_size", *PARALLEL_FIELDS)
DISAGG_FIELDS = tuple(
    f"{stage}_{field}"
    for stage in ("prefill", "decode")
    for field in (*PARALLEL_FIELDS, "batch_size", "num_workers")
)
DISAGG_REQUIRED = ("prefill_batch_size", "prefill_num_workers", "decode_batch_size", "decode_num_workers")

#: Checkpoint names in silicon_sample.csv that the estimator does not bundle, read from a
#: bundled config of the same architecture (offline; online it would download them). The
#: rows carry their quantization explicitly (gemm_quant_mode / moe_quant_mode).
#: Llama-3.1 and GLM-5 as NVIDIA's InferenceX adapter maps them (aiconfigurator 0.12.0,
#: sdk/config_adapter/inferencex.py, MODEL_PATHS: llama70b -> Meta-Llama-3.1-70B,
#: glm5 fp8 -> zai-org/GLM-5-FP8, glm5 fp4 -> nvidia/GLM-5-NVFP4); the meta-llama
#: Meta-Llama-3.1-* repositories are the Llama-3.1-* ones under their earlier names.
MODEL_ALIASES: dict[tuple[str, str], str] = {
    ("meta-llama/Llama-3.1-70B", ""): "meta-llama/Meta-Llama-3.1-70B",
    ("meta-llama/Llama-3.1-8B-Instruct", ""): "meta-llama/Meta-Llama-3.1-8B",
    ("nvidia/Llama-3.1-8B-Instruct-FP8", ""): "meta-llama/Meta-Llama-3.1-8B",
    ("nvidia/Qwen3-32B-NVFP4", ""): "Qwen/Qwen3-32B",
    ("nvidia/DeepSeek-R1-NVFP4", ""): "deepseek-ai/DeepSeek-R1",
    ("zhipuai/GLM-5", "fp8"): "zai-org/GLM-5-FP8",
    ("zhipuai/GLM-5", "fp4"): "nvidia/GLM-5-NVFP4",
    ("zhipuai/GLM-5", ""): "zai-org/GLM-5",
}
#: Messages with which the estimator refuses a backend version it has no tables for.
VERSION_REFUSALS = ("Failed to load perf database", "looks like an old-style raw version query")

Row = dict[str, str]
Prediction = dict[str, Any]


# ----------------------------------------------------------------------------- prediction


def model_path_for(row: Row) -> str:
    """The model path handed to the estimator: the row's, or its bundled equivalent."""
    path = row["model_path"]
    return MODEL_ALIASES.get((path, row.get("precision", "")), MODEL_ALIASES.get((path, ""), path))


def estimate_args(row: Row) -> dict[str, Any]:
    """The row's settings as ``cli_estimate`` keyword arguments (empty fields left out)."""
    fields = AGG_FIELDS if row["mode"] == "agg" else DISAGG_FIELDS
    return dict(
        model_path=model_path_for(row),
        system_name=row["system"],
        mode=row["mode"],
        backend_name=row["backend"],
        backend_version=row.get("backend_version") or None,
        isl=int(row["isl"]),
        osl=int(row["osl"]),
        gemm_quant_mode=row.get("gemm_quant_mode") or None,
        moe_quant_mode=row.get("moe_quant_mode") or None,
        **{field: int(row[field]) for field in fields if row.get(field)},
    )


def unsupported_reason(row: Row) -> str | None:
    """Why the row cannot be handed to the estimator as it stands, or None."""
    if row.get("mode") not in ("agg", "disagg"):
        return f"mode {row.get('mode')!r} is neither agg nor disagg"
    for field in ("model_path", "system", "backend", "isl", "osl"):
        if not row.get(field):
            return f"the row has no {field}"
    if row["mode"] == "agg" and not row.get("batch_size"):
        return "the row has no batch_size"
    if row["mode"] == "disagg":
        missing = [field for field in DISAGG_REQUIRED if not row.get(field)]
        if missing:
            return f"the row has no {', '.join(missing)} (the estimator's disagg mode needs them)"
    return None


def _first_line(error: BaseException, limit: int = 200) -> str:
    """The message's first line, with this machine's install prefix cut from the paths in it."""
    text = str(error).strip().splitlines()
    line = text[0] if text else ""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is not None and spec.origin is not None:
        line = line.replace(str(Path(spec.origin).parent.parent) + os.sep, "")
    return line[:limit]


class Estimator:
    """``cli_estimate`` with the version fallback, a cache, and its chatter silenced."""

    def __init__(self) -> None:
        from aiconfigurator.cli.api import cli_estimate

        self._cli_estimate = cli_estimate
        self._cache: dict[tuple[tuple[str, Any], ...], Prediction | Exception] = {}
        self._refused_versions: set[tuple[str, str, str]] = set()
        self.num_calls = 0

    def _call(self, args: dict[str, Any]) -> Any:
        self.num_calls += 1
        with redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self._cli_estimate(**args)

    def _estimate(self, args: dict[str, Any]) -> Prediction:
        version = args["backend_version"]
        key = (args["system_name"], args["backend_name"], str(version))
        if version is not None and key in self._refused_versions:
            args = {**args, "backend_version": None}
        try:
            result = self._call(args)
        except ValueError as error:
            if args["backend_version"] is None or not any(m in str(error) for m in VERSION_REFUSALS):
                raise
            self._refused_versions.add(key)
            result = self._call({**args, "backend_version": None})
        return {
            "mean_ttft_ms": float(result.ttft),
            "mean_tpot_ms": float(result.tpot),
            "backend_version_used": str(result.backend_version),
        }

    def predict(self, row: Row) -> Prediction:
        """One row's prediction in the per-row format."""
        out: Prediction = {"id": row["id"], "status": "", "mean_ttft_ms": None, "mean_tpot_ms": None}
        reason = unsupported_reason(row)
        if reason is not None:
            out["status"] = f"unsupported: {reason}"
            return out
        args = estimate_args(row)
        out["model_path_used"] = args["model_path"]
        key = tuple(sorted(args.items()))
        if key not in self._cache:
            try:
                self._cache[key] = self._estimate(dict(args))
            except Exception as error:  # the estimator's refusals are data, not crashes
                self._cache[key] = error
        cached = self._cache[key]
        if isinstance(cached, Exception):
            out["status"] = f"unsupported: {type(cached).__name__}: {_first_line(cached)}"
            return out
        ttft, tpot = cached["mean_ttft_ms"], cached["mean_tpot_ms"]
        if not (math.isfinite(ttft) and math.isfinite(tpot) and ttft > 0 and tpot > 0):
            out["status"] = f"unsupported: the estimator returned TTFT {ttft} ms, TPOT {tpot} ms"
            return out
        out.update(cached, status="ok")
        return out


def cache_database_scans() -> None:
    """Read the estimator's installed data directory once, not on every call.

    Profiled in 0.12.0: 98% of a ``cli_estimate`` call is YAML parsing while it resolves
    the backend version, because ``perf_database.get_supported_databases`` re-reads every
    system's YAML and hundreds of ``collection_meta.yaml`` files each time (about 1 s of
    CPU per row). Both read installed files that do not change during a run, so their
    results are cached here, and callers get a deep copy: the predictions are the same.
    """
    import copy
    import functools

    from aiconfigurator_core.sdk import perf_database

    def cached(function: Callable[..., Any], key: Callable[..., Any]) -> Callable[..., Any]:
        results: dict[Any, Any] = {}

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            k = key(*args, **kwargs)
            if k not in results:
                results[k] = function(*args, **kwargs)
            return copy.deepcopy(results[k])

        return wrapper

    def paths_key(systems_paths: Any = None) -> Any:
        return (
            systems_paths if systems_paths is None or isinstance(systems_paths, str) else tuple(systems_paths)
        )

    perf_database.get_supported_databases = cached(perf_database.get_supported_databases, paths_key)
    perf_database._load_collection_meta_yaml = cached(
        perf_database._load_collection_meta_yaml, lambda path: path
    )


def quiet_estimator_logs() -> None:
    """The estimator logs every table it loads; keep its errors only."""
    logging.basicConfig(level=logging.ERROR)
    for name in ("aiconfigurator", "aiconfigurator_core"):
        logging.getLogger(name).setLevel(logging.ERROR)


def predict_rows(
    rows: Sequence[Row],
    progress: Callable[[int, int, float], None] | None = None,
    cache_scans: bool = True,
) -> list[Prediction]:
    """Every row through the estimator, in order."""
    quiet_estimator_logs()
    if cache_scans:
        cache_database_scans()
    estimator = Estimator()
    start_s = time.perf_counter()
    predictions = []
    for i, row in enumerate(rows, 1):
        predictions.append(estimator.predict(row))
        if progress is not None:
            progress(i, len(rows), time.perf_counter() - start_s)
    return predictions


# ----------------------------------------------------------------------------- files


def default_rows_path() -> Path:
    """silicon_sample.csv of the installed aiconfigurator-core."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or spec.origin is None:
        raise SystemExit("--rows is needed: aiconfigurator-core is not installed here (make aic-peer)")
    return Path(spec.origin).parent / "systems" / "silicon_sample.csv"


def read_rows(path: Path) -> list[Row]:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    missing = [r for r in rows if not r.get("id")]
    if missing:
        raise SystemExit(f"{path}: {len(missing)} rows have no id")
    return rows


def write_predictions(path: Path, predictions: list[Prediction]) -> None:
    text = "[\n" + ",\n".join(json.dumps(p, sort_keys=True) for p in predictions) + "\n]\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".gz":
        with gzip.GzipFile(tmp, "wb", mtime=0) as f:  # mtime 0: the same bytes for the same rows
            f.write(text.encode())
    else:
        tmp.write_text(text)
    tmp.replace(path)


def read_predictions(path: Path) -> list[Prediction]:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    predictions: list[Prediction] = json.loads(raw)
    return predictions


# ----------------------------------------------------------------------------- summary

#: Dense model families of the issue's comparison, by substring of the model path.
DENSE_FAMILIES = {"Llama-3.1-8B": "Llama-3.1-8B", "Llama-3.1-70B": "Llama-3.1-70B", "Qwen3-32B": "Qwen3-32B"}


def dense_family(model_path: str) -> str | None:
    for family, needle in DENSE_FAMILIES.items():
        if needle in model_path:
            return family
    return None


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile with linear interpolation (numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def error_stats(errors: Sequence[float]) -> dict[str, float]:
    """median / p90 of |error| and the bias, error = pred / meas - 1.

    The bias is the median signed error (the issue's figures are; "bias_mean" is the mean).
    """
    if not errors:
        return {}
    absolute = [abs(e) for e in errors]
    return {
        "median_abs": statistics.median(absolute),
        "p90_abs": percentile(absolute, 90),
        "bias_mean": statistics.fmean(errors),
        "bias_median": statistics.median(errors),
    }


def joined(rows: Iterable[Row], predictions: Iterable[Prediction]) -> list[tuple[Row, Prediction]]:
    by_id = {p["id"]: p for p in predictions}
    return [(row, by_id[row["id"]]) for row in rows if row["id"] in by_id]


def _errors(pairs: Iterable[tuple[Row, Prediction]], metric: str) -> list[float]:
    column = {"ttft": ("mean_ttft_ms", "silicon_ttft_ms"), "tpot": ("mean_tpot_ms", "silicon_tpot_ms")}[
        metric
    ]
    out = []
    for row, pred in pairs:
        if pred["status"] != "ok" or not row.get(column[1]):
            continue
        measured = float(row[column[1]])
        if measured > 0:
            out.append(pred[column[0]] / measured - 1)
    return out


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value * 100:+.0f}%".replace("+-", "-")


def _abs_pct(value: float | None) -> str:
    return "" if value is None else f"{value * 100:.0f}%"


def table(groups: dict[tuple[str, ...], list[tuple[Row, Prediction]]], header: Sequence[str]) -> list[str]:
    """A markdown table: one line per group, rows / ok and TTFT and TPOT error statistics."""
    lines = [
        "| " + " | ".join(header) + " | rows | ok | TTFT med abs | TTFT p90 abs | TTFT bias | "
        "TPOT med abs | TPOT p90 abs | TPOT bias |",
        "| " + " | ".join("---" for _ in header) + " | ---: | ---: |" + " ---: |" * 6,
    ]
    for key in sorted(groups):
        pairs = groups[key]
        ok = sum(p["status"] == "ok" for _, p in pairs)
        ttft, tpot = error_stats(_errors(pairs, "ttft")), error_stats(_errors(pairs, "tpot"))
        cells = [
            _abs_pct(ttft.get("median_abs")),
            _abs_pct(ttft.get("p90_abs")),
            _pct(ttft.get("bias_median")),
            _abs_pct(tpot.get("median_abs")),
            _abs_pct(tpot.get("p90_abs")),
            _pct(tpot.get("bias_median")),
        ]
        lines.append("| " + " | ".join(key) + f" | {len(pairs)} | {ok} | " + " | ".join(cells) + " |")
    return lines


def reason_category(status: str) -> str:
    """A status with the numbers and quoted names taken out, so that alike refusals count together."""
    if status == "ok":
        return status
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", status.removeprefix("unsupported: "))
    text = re.sub(r"(?<![A-Za-z])\d+(\.\d+)?", "N", text)
    return text.split(" at ")[0].split(" (tp=")[0].split(" with the given")[0].split(" for MoeKey")[0][:110]


def is_issue_dense_row(row: Row) -> bool:
    """The issue's 772 rows: dense, aggregated, H100/H200, less Qwen3-32B bf16 on one H100."""
    if (
        row["mode"] != "agg"
        or row["system"] not in ("h100_sxm", "h200_sxm")
        or dense_family(row["model_path"]) is None
    ):
        return False
    kvsim_refused = (
        row["model_path"] == "Qwen/Qwen3-32B" and not row["gemm_quant_mode"] and row["tp_size"] == "1"
    )
    return not (kvsim_refused and row["system"] == "h100_sxm")


def summary_markdown(rows: Sequence[Row], predictions: Sequence[Prediction], meta: dict[str, Any]) -> str:
    """The error tables of the estimator on the rows, as markdown."""
    pairs = joined(rows, predictions)
    out = ["# aiconfigurator 0.12.0 on silicon_sample.csv", ""]
    out += [f"- {key}: {value}" for key, value in meta.items()]
    out += [
        "",
        "error = predicted / measured - 1 over the rows the estimator predicts (ok); "
        "abs = |error|; bias = the median signed error.",
        "",
    ]
    reasons = Counter(reason_category(p["status"]) for _, p in pairs)
    out += ["## Coverage", "", "| status | rows |", "| --- | ---: |"]
    out += [f"| {reason} | {n} |" for reason, n in reasons.most_common()]

    out += ["", "## Dense aggregated rows (Llama-3.1-8B, Llama-3.1-70B, Qwen3-32B)", ""]
    dense = [(r, p) for r, p in pairs if r["mode"] == "agg" and dense_family(r["model_path"])]
    by_gpu: dict[tuple[str, ...], list[tuple[Row, Prediction]]] = defaultdict(list)
    for r, p in dense:
        by_gpu[("h200_sxm" if r["system"] == "h200_sxm" else "others (held out)",)].append((r, p))
        by_gpu[("all",)].append((r, p))
    out += table(by_gpu, ["GPU"])
    out += [""]
    by_family: dict[tuple[str, ...], list[tuple[Row, Prediction]]] = defaultdict(list)
    for r, p in dense:
        group = "h200_sxm" if r["system"] == "h200_sxm" else "others"
        by_family[(str(dense_family(r["model_path"])), group, r["system"], r["backend"])].append((r, p))
    out += table(by_family, ["family", "GPU group", "system", "backend"])

    issue = [(r, p) for r, p in pairs if is_issue_dense_row(r)]
    everything = [(r, p) for r, p in pairs if r["mode"] == "agg" and r["system"] in ("h100_sxm", "h200_sxm")]
    everything = [(r, p) for r, p in everything if dense_family(r["model_path"])]
    out += ["", "### The issue's rows: dense, aggregated, H100/H200", ""]
    out += table({("issue's 772 (no Qwen3-32B bf16 tp1 H100)",): issue, ("all 778",): everything}, ["set"])
    for name, subset in (("772", issue), ("778", everything)):
        for metric in ("ttft", "tpot"):
            stats = error_stats(_errors(subset, metric))
            if stats:
                out.append(
                    f"- {name}, {metric.upper()}: median signed error {_pct(stats['bias_median'])}, "
                    f"mean {_pct(stats['bias_mean'])}"
                )

    out += ["", "## Per (mode, model, system, backend)", ""]
    groups: dict[tuple[str, ...], list[tuple[Row, Prediction]]] = defaultdict(list)
    for r, p in pairs:
        groups[(r["mode"], r["model_path"], r["system"], r["backend"])].append((r, p))
    out += table(groups, ["mode", "model", "system", "backend"])
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- command line


def reexec_in_aic_venv(python: Path) -> None:
    """Run this script again under the estimator's interpreter (never returns)."""
    if os.environ.get(REEXEC_ENV):
        raise SystemExit(f"{python} cannot import aiconfigurator; re-create it with make aic-peer")
    if not python.exists():
        raise SystemExit(
            f"aiconfigurator is not importable here and {python} does not exist: run make aic-peer"
        )
    os.environ[REEXEC_ENV] = "1"
    os.execv(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]])


def _progress(i: int, n: int, elapsed_s: float) -> None:
    if i % 100 == 0 or i == n:
        print(f"{i}/{n} rows, {elapsed_s:.0f} s", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--rows", type=Path, help="CSV in silicon_sample.csv's format (default: the installed one)"
    )
    ap.add_argument("--out", type=Path, help="per-row predictions, JSON (.json.gz: gzip'd)")
    ap.add_argument(
        "--summarize", type=Path, metavar="JSON", help="only the error tables of an earlier --out"
    )
    ap.add_argument("--summary", type=Path, metavar="MD", help="also write the error tables to this file")
    ap.add_argument("--limit", type=int, help="the first N rows only")
    ap.add_argument(
        "--no-scan-cache",
        action="store_true",
        help="let the estimator re-read its data directory every call (slow)",
    )
    ap.add_argument("--aic-python", type=Path, default=AIC_PYTHON, help="the estimator's interpreter")
    args = ap.parse_args(argv)
    if (args.out is None) == (args.summarize is None):
        ap.error("give --out (predict) or --summarize (tables of an earlier run)")

    needs_estimator = args.out is not None and importlib.util.find_spec("aiconfigurator") is None
    needs_rows = args.rows is None and importlib.util.find_spec("aiconfigurator_core") is None
    if needs_estimator or needs_rows:
        reexec_in_aic_venv(args.aic_python)
    meta: dict[str, Any] = {}
    if args.out is not None:
        from importlib.metadata import version

        rows_path = args.rows or default_rows_path()
        rows = read_rows(rows_path)[: args.limit]
        start_s = time.perf_counter()
        predictions = predict_rows(rows, _progress, cache_scans=not args.no_scan_cache)
        elapsed_s = time.perf_counter() - start_s
        write_predictions(args.out, predictions)
        meta = {
            "estimator": f"aiconfigurator {version('aiconfigurator')}, aiconfigurator-core {version('aiconfigurator-core')}",
            "rows": f"{rows_path.name}, {len(rows)} rows",
            "predictions": str(args.out),
            "run time": f"{elapsed_s:.0f} s ({time.strftime('%Y-%m-%d', time.gmtime())})",
        }
    else:
        predictions = read_predictions(args.summarize)
        rows_path = args.rows or default_rows_path()
        rows = read_rows(rows_path)
        meta = {"rows": f"{rows_path.name}, {len(rows)} rows", "predictions": str(args.summarize)}
        if importlib.util.find_spec("aiconfigurator") is not None:
            from importlib.metadata import version

            meta = {"estimator": f"aiconfigurator {version('aiconfigurator')}", **meta}
    text = summary_markdown(rows, predictions, meta)
    print(text)
    if args.summary is not None:
        args.summary.write_text(text)


if __name__ == "__main__":
    main()
