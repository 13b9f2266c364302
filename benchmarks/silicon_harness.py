"""How each row of aiconfigurator-core's silicon_sample.csv was measured, as far as the sources say.

    python benchmarks/silicon_harness.py [--rows CSV] [--out benchmarks/results/silicon_harness.csv.gz]

(--rows defaults to the silicon_sample.csv of an installed aiconfigurator-core: kvsim's
kernels extra, or .venv-aic/bin/python.)

One output row per silicon row: the benchmark harness its ``silicon_data_source`` points to,
the client, the concurrency ``C`` (``silicon_concurrency``), the measured and warm-up request
counts, the random-length range ratio ``R`` and how the client reads it, and whether each
field is documented by the harness's source (``documented``) or an assumption
(``assumed``). docs/validation.md ("Real GPU deployments: how the measurements were taken")
gives the citations; the rules in ``harness_for_row`` follow it:

- ``db-dump ...`` rows and the ``source_file=2026-03-25.csv`` / ``2026-04-06.csv`` exports
  (InferenceX model names, its three ISL/OSL scenarios and concurrency sweeps) are
  InferenceX / InferenceMAX runs. Single node (agg): InferenceX's vendored
  ``utils/bench_serving/benchmark_serving.py`` from 2026-01-21 (commit d053ae24e), 10 C
  prompts after 2 C warm-ups, before that ``kimbochen/bench_serving`` with 10 C prompts
  and no warm-ups; multi node (disagg): srt-slurm's sa-bench from 2026-01-23 (commit
  a1b2d35b: a warm-up run of 2 C prompts, then 10 C), earlier harnesses unknown. R = 0.8
  in every InferenceX workflow, lengths uniform on [floor(R L), L] (the pre-2025-04 vLLM
  semantics these clients keep).
- ``source_file=.../aic-auto-gap-analysis/...`` and ``*-gap-analysis.csv`` rows: NVIDIA's
  gap analysis; nothing published says how. Assumed as aiconfigurator's own benchmark
  pipelines run a deployment (genai-perf / aiperf, ``--concurrency C``,
  ``--request-count 10 C``, ``--warmup-request-count 2 C``, ISL and OSL with standard
  deviation 0, ignore_eos): fixed lengths, R = 1.
- A gap-analysis row that is an InferenceX measurement copied (``copies``: the same model,
  GPU, engine, mode, ISL, OSL and clients, and the same mean TTFT and mean TPOT to the 0.01
  ms the gap files keep): every row of ``qwen3.5-397b-gap-analysis.csv`` and
  ``kimi-k2.5-gap-analysis.csv`` (123 of 123 in aiconfigurator-core 0.12.0) has such a twin
  in InferenceX's exports. It takes its twin's record, ``copy_of`` naming the twin, and
  `benchmarks/silicon.py` runs it as the twin: InferenceX's layout (23 of the copies lost
  the twin's attention DP in transcription), launch script and client.

Standard library only.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import importlib.util
import io
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

#: InferenceX commit d053ae24e (2026-01-21): its own copy of the client, --num-warmups 2 C.
INFERENCEX_WARMUPS_FROM = "2026-01-21"
#: srt-slurm commit a1b2d35b (2026-01-23): sa-bench warms up with 2 C prompts, measures 10 C.
SA_BENCH_10C_FROM = "2026-01-23"
#: The day each InferenceX multi-node runner started launching srt-slurm (its commit):
#: launch_<runner>.sh, first commit mentioning srt-slurm. Before, per-model Dynamo scripts.
SRT_SLURM_FROM = {
    "b300_sxm": "2026-01-27",  # dea7f48f7
    "b200_sxm": "2026-01-29",  # efe2f531c
    "h200_sxm": "2026-01-29",  # d7a6d4e70
    "gb200": "2026-01-30",  # 4e9a376bf
    "gb300": "2026-02-03",  # 3eb1b779c
    "h100_sxm": "2026-02-07",  # 32a484591
}

FIELDS = (
    "id",
    "harness",
    "client",
    "concurrency",
    "num_prompts",
    "num_warmups",
    "warmup",
    "random_range_ratio",
    "length_range",
    "request_rate",
    "measured",
    "basis",
    "copy_of",
)

#: The gap-analysis files keep mean TTFT and TPOT to 0.01 ms: a copy agrees with its twin's
#: full-precision values within half of that (plus float noise).
COPY_TOLERANCE_MS = 0.006


def source_fields(source: str) -> dict[str, str]:
    """``silicon_data_source`` as key=value pairs; bare parts (db-dump/..., images) under ``_N``."""
    out = {}
    for i, part in enumerate(p.strip() for p in source.split(";")):
        key, sep, value = part.partition("=")
        if sep:
            out[key.strip()] = value.strip()
        elif part:
            out[f"_{i}"] = part
    return out


def harness_for_row(row: dict[str, str]) -> dict[str, str]:
    """The harness settings of one silicon row (see the module docstring for the rules)."""
    src = source_fields(row.get("silicon_data_source", ""))
    measured = src.get("measured", "")[:10]
    conc_text = src.get("silicon_concurrency", "")
    c = int(conc_text) if conc_text.isdigit() else 0
    out = dict.fromkeys(FIELDS, "")
    out.update(id=row["id"], concurrency=conc_text, measured=measured, request_rate="inf")
    source_file = src.get("source_file", "")
    inferencex = src.get("_0", "").startswith("db-dump") or source_file in (
        "2026-03-25.csv",
        "2026-04-06.csv",
    )
    if inferencex:
        out.update(random_range_ratio="0.8", length_range="uniform integers [floor(R*L), L]")
        if row["mode"] == "agg":
            if measured and measured >= INFERENCEX_WARMUPS_FROM:
                out.update(
                    harness="inferencex-single-node",
                    client="InferenceX utils/bench_serving/benchmark_serving.py",
                    num_prompts=str(10 * c) if c else "",
                    num_warmups=str(2 * c) if c else "",
                    warmup="copies of the first prompt, C at a time, finished before the measured run",
                    basis="documented",
                )
            else:
                # The B200 docker runners sent 50 C prompts for DeepSeek-R1 (20 C at OSL 8192),
                # the slurm scripts 10 C: which ran a row is not recorded.
                deepseek_b200 = (
                    "DeepSeek-R1" in src.get("model", row["model_path"]) and row["system"] == "b200_sxm"
                )
                out.update(
                    harness="inferencemax-single-node",
                    client="kimbochen/bench_serving benchmark_serving.py (unpinned)",
                    num_prompts="" if deepseek_b200 or not c else str(10 * c),
                    num_warmups="0",
                    warmup="none",
                    basis=(
                        "ambiguous: 10 C or 50 C (20 C at OSL 8192) prompts by runner"
                        if deepseek_b200
                        else "documented"
                        if measured
                        else "assumed (no measured date)"
                    ),
                )
        elif measured and measured >= max(SA_BENCH_10C_FROM, SRT_SLURM_FROM.get(row["system"], "9999")):
            out.update(
                harness="inferencex-multi-node-srt-slurm",
                client="srt-slurm sa-bench benchmark_serving.py (chat template on)",
                num_prompts=str(10 * c) if c else "",
                num_warmups=str(2 * c) if c else "",
                warmup="a separate run of 2 C random prompts at 250 req/s, at most C in flight",
                basis="documented (R: sa-bench's default; a recipe may set another)",
            )
        else:
            out.update(
                harness="inferencex-multi-node-early", basis="unknown (multi-node harness of the time)"
            )
        return out
    out.update(
        harness="nvidia-gap-analysis",
        client="aiperf / genai-perf (assumed)",
        num_prompts=str(10 * c) if c else "",
        num_warmups=str(2 * c) if c else "",
        warmup="2 C requests at concurrency C before the measured ones (assumed)",
        random_range_ratio="1.0",
        length_range="fixed: ISL and OSL exactly (stddev 0; assumed)",
        basis="assumed: aiconfigurator's eval pipeline / generated bench_run.sh",
    )
    return out


def _copy_key(row: dict[str, str]) -> tuple[str, ...]:
    src = source_fields(row.get("silicon_data_source", ""))
    fields = ("model_path", "system", "backend", "mode", "isl", "osl")
    return (*(row.get(f, "") for f in fields), src.get("silicon_concurrency", ""))


def _measured_ms(row: dict[str, str]) -> tuple[float, float] | None:
    try:
        ttft, tpot = float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])
    except (KeyError, ValueError):
        return None
    return (ttft, tpot) if ttft == ttft and tpot == tpot else None  # not NaN


def copies(rows: Sequence[dict[str, str]], records: dict[str, dict[str, str]]) -> dict[str, str]:
    """{gap-analysis row id: the InferenceX row id it copies}. A copy has the same model, GPU,
    engine, mode, ISL, OSL and clients as its twin and the same mean TTFT and TPOT within
    `COPY_TOLERANCE_MS`; of several twins (the same run in both InferenceX exports), the
    first in file order. ``records``: each row's own record (`harness_for_row`)."""
    twins: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for row in rows:
        if records[row["id"]]["harness"].startswith("infer") and _measured_ms(row):
            twins.setdefault(_copy_key(row), []).append(row)
    out = {}
    for row in rows:
        mine = _measured_ms(row)
        if records[row["id"]]["harness"] != "nvidia-gap-analysis" or mine is None:
            continue
        for twin in twins.get(_copy_key(row), []):
            theirs = _measured_ms(twin)
            if theirs and all(abs(a - b) <= COPY_TOLERANCE_MS for a, b in zip(mine, theirs, strict=True)):
                out[row["id"]] = twin["id"]
                break
    return out


def harness_records(rows: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """Every row's record, in row order: its own (`harness_for_row`), or for a copy
    (`copies`) its twin's under its own id, ``copy_of`` the twin's."""
    records = {row["id"]: harness_for_row(row) for row in rows}
    copied = copies(rows, records)
    out = []
    for row in rows:
        record = records[row["id"]]
        if row["id"] in copied:
            twin = copied[row["id"]]
            record = {
                **records[twin],
                "id": row["id"],
                "copy_of": twin,
                "basis": f"copy of InferenceX row {twin} (the same mean TTFT and TPOT); "
                + records[twin]["basis"],
            }
        out.append(record)
    return out


def default_rows_path() -> Path:
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or spec.origin is None:
        raise SystemExit("--rows is needed: aiconfigurator-core is not installed here")
    return Path(spec.origin).parent / "systems" / "silicon_sample.csv"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--rows", type=Path, help="CSV in silicon_sample.csv's format (default: the installed one)"
    )
    ap.add_argument("--out", type=Path, help="write the per-row settings as CSV here (default: stdout)")
    args = ap.parse_args(argv)
    with (args.rows or default_rows_path()).open(newline="") as f:
        settings = harness_records(list(csv.DictReader(f)))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(settings)
    if args.out is None:
        sys.stdout.write(text.getvalue())
    elif args.out.suffix == ".gz":
        args.out.write_bytes(gzip.compress(text.getvalue().encode(), mtime=0))
    else:
        args.out.write_text(text.getvalue())
    counts = Counter((s["harness"], "copy" if s["copy_of"] else s["basis"].split(" ")[0]) for s in settings)
    for (harness, basis), n in sorted(counts.items()):
        print(f"{n:5d}  {harness}  ({basis})", file=sys.stderr)


if __name__ == "__main__":
    main()
