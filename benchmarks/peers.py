"""kvsim against the fastest peer, BLIS (Go), on the same request lists: wall time, memory.

    python benchmarks/peers.py                 # every case below, interleaved pairs
    python benchmarks/peers.py --quick         # 10k only, 3 pairs
    python benchmarks/peers.py --cases 10k,100k --pairs 5

Each case feeds both simulators the same requests (Azure 2023 conversation lengths, Poisson
6.45 req/s per replica, round-robin; benchmarks/simulate.py draws them) with the same
engine: Llama-2-7B on an A100-80GB, 7,433 usable KV blocks of 16 tokens, max_num_seqs 256,
max_num_batched_tokens 4,096. kvsim runs as a whole process (imports, the run, writing the
result folder: what a user waits for); BLIS replays a TraceV2 file (header YAML + CSV)
written from the same list, with ``--cache-signal-delay 0`` (its fastest setting, same
results for round-robin). The pairs alternate which simulator goes first; the report gives
the median wall time of each and the median of the per-pair ratios kvsim / BLIS, peak RSS
of each process, and the load average when the run started.

BLIS is the build in ../shared/peers/blis (inference-sim/inference-sim, Apache-2.0); a case
without it reports kvsim alone. Timings on shared machines are noisy: compare ratios
measured in one run, never absolute seconds across machines.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
BLIS_DIR = HERE.parent.parent / "shared" / "peers" / "blis"
RATE_PER_REPLICA = 6.45
SEED = 0
#: Usable blocks of every replica; kvsim's pool also holds vLLM's null block.
USABLE_BLOCKS = 7433

#: name -> (requests, replicas, run BLIS too)
CASES: dict[str, tuple[int, int, bool]] = {
    "10k": (10_000, 1, True),
    "100k": (100_000, 1, True),
    "8x100k": (100_000, 8, True),
    "64x100k": (100_000, 64, True),
    "64x1M": (1_000_000, 64, False),
}

TRACE_COLUMNS = [
    "request_id",
    "client_id",
    "tenant_id",
    "slo_class",
    "session_id",
    "round_index",
    "prefix_group",
    "prefix_length",
    "streaming",
    "input_tokens",
    "output_tokens",
    "text_tokens",
    "image_tokens",
    "audio_tokens",
    "video_tokens",
    "reason_ratio",
    "model",
    "deadline_us",
    "server_input_tokens",
    "arrival_time_us",
    "send_time_us",
    "first_chunk_time_us",
    "last_chunk_time_us",
    "num_chunks",
    "status",
    "error_message",
    "finish_reason",
]


@dataclass
class Measurement:
    wall_s: float
    peak_rss_bytes: int
    line: str


def measure_rss(cmd: list[str], cwd: Path | None = None) -> Measurement:
    """As `measure`, with the peak RSS of this one child (not of every child so far)."""
    # Output goes to files, not pipes: waiting on the child while a pipe it writes to is
    # full would hang both (BLIS prints a line per request at 100k).
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out_f, stderr=err_f, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    code = os.waitstatus_to_exitcode(status)
    if code:
        raise RuntimeError(f"{cmd[0]} failed ({code}): {err[-2000:]}")
    return Measurement(wall, usage.ru_maxrss * 1024, out.strip().splitlines()[-1] if out.strip() else "")


def write_trace(n: int, replicas: int, folder: Path) -> tuple[Path, Path]:
    """The requests of simulate.py as a BLIS TraceV2 file pair (microsecond timestamps)."""
    sys.path.insert(0, str(HERE))
    from simulate import azure_lengths  # the same draws kvsim's process makes

    prompt, output, gaps = azure_lengths(n, SEED)
    header = folder / "trace.yaml"
    data = folder / "trace.csv"
    header.write_text(
        "trace_version: 3\ntime_unit: microseconds\nmode: generated\nwarm_up_requests: 0\n"
        f"workload_seed: {SEED}\n"
    )
    rate = RATE_PER_REPLICA * replicas
    t = 0.0
    with data.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(TRACE_COLUMNS)
        for i in range(n):
            t += float(gaps[i]) / rate
            us = round(t * 1e6)
            row = dict.fromkeys(TRACE_COLUMNS, "")
            row.update(
                request_id=i, client_id="bench", round_index=0, prefix_length=0, streaming="false",
                input_tokens=int(prompt[i]), output_tokens=int(output[i]), text_tokens=0, image_tokens=0,
                audio_tokens=0, video_tokens=0, reason_ratio=0, deadline_us=0, server_input_tokens=0,
                arrival_time_us=us, send_time_us=us, first_chunk_time_us=0, last_chunk_time_us=0,
                num_chunks=0, status="ok",
            )  # fmt: skip
            w.writerow([row[c] for c in TRACE_COLUMNS])
    return header, data


def kvsim_cmd(n: int, replicas: int, out: Path) -> list[str]:
    return [
        sys.executable, str(HERE / "simulate.py"), "--requests", str(n), "--replicas", str(replicas),
        "--blocks", str(USABLE_BLOCKS + 1), "--out", str(out),
    ]  # fmt: skip


def blis_cmd(header: Path, data: Path, replicas: int) -> list[str]:
    return [
        str(BLIS_DIR / "blis"), "replay", "--trace-header", str(header), "--trace-data", str(data),
        "--model", "meta-llama/llama-2-7b-hf", "--hardware", "A100-80", "--tp", "1",
        "--total-kv-blocks", str(USABLE_BLOCKS), "--block-size-in-tokens", "16",
        "--max-num-seqs", "256", "--max-num-batched-tokens", "4096",
        "--num-instances", str(replicas), "--routing-policy", "round-robin",
        "--cache-signal-delay", "0", "--horizon", str(10**15),
    ]  # fmt: skip


def precompile() -> None:
    """Write kvsim's bytecode before timing it, as a regular (non-editable) install does.

    An editable install under ``PYTHONDONTWRITEBYTECODE=1`` (set on these machines) would
    otherwise compile every kvsim module from source in every process (0.1-0.2 s at 10k):
    a cost of how the checkout is installed, not of the simulator.
    """
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(HERE.parent / "kvsim"), str(HERE)], check=True
    )


def run_case(name: str, pairs: int) -> dict[str, object]:
    n, replicas, with_blis = CASES[name]
    with_blis = with_blis and (BLIS_DIR / "blis").is_file()
    kv: list[Measurement] = []
    bl: list[Measurement] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        header, data = write_trace(n, replicas, folder) if with_blis else (folder, folder)
        for i in range(pairs):
            order = ("kvsim", "blis") if i % 2 == 0 else ("blis", "kvsim")
            for who in order:
                if who == "kvsim":
                    kv.append(measure_rss(kvsim_cmd(n, replicas, folder / f"out{i}")))
                elif with_blis:
                    bl.append(measure_rss(blis_cmd(header, data, replicas), cwd=BLIS_DIR))
            ratio = f", kvsim/BLIS {kv[-1].wall_s / bl[-1].wall_s:.3f}" if with_blis else ""
            print(f"  {name} pair {i + 1}: kvsim {kv[-1].wall_s:.2f} s{ratio}  [{kv[-1].line}]", flush=True)
    row: dict[str, object] = {
        "case": name,
        "kvsim_s": statistics.median(m.wall_s for m in kv),
        "kvsim_rss_kib_per_request": statistics.median(m.peak_rss_bytes for m in kv) / 1024 / n,
    }
    if with_blis:
        row["blis_s"] = statistics.median(m.wall_s for m in bl)
        row["ratio"] = statistics.median(a.wall_s / b.wall_s for a, b in zip(kv, bl, strict=True))
        row["blis_rss_kib_per_request"] = statistics.median(m.peak_rss_bytes for m in bl) / 1024 / n
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated from {', '.join(CASES)}")
    ap.add_argument("--pairs", type=int, default=3, help="interleaved runs of each simulator per case")
    ap.add_argument("--quick", action="store_true", help="only 10k, 3 pairs")
    args = ap.parse_args()
    cases = ["10k"] if args.quick else [c for c in args.cases.split(",") if c]
    unknown = set(cases) - set(CASES)
    if unknown:
        ap.error(f"unknown cases {sorted(unknown)}")
    precompile()
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs)")
    if not (BLIS_DIR / "blis").is_file():
        print(f"BLIS not found at {BLIS_DIR}: kvsim alone")
    rows = []
    for name in cases:
        pairs = 1 if name == "64x1M" else args.pairs
        rows.append(run_case(name, pairs))
    print("\ncase      kvsim (s)  BLIS (s)  kvsim/BLIS  kvsim KiB/req  BLIS KiB/req")
    for r in rows:
        blis = f"{r['blis_s']:9.2f}  {r['ratio']:10.3f}" if "blis_s" in r else f"{'-':>9}  {'-':>10}"
        bkib = f"{r['blis_rss_kib_per_request']:12.1f}" if "blis_s" in r else f"{'-':>12}"
        print(f"{r['case']:8s} {r['kvsim_s']:10.2f} {blis} {r['kvsim_rss_kib_per_request']:14.2f} {bkib}")
    by = {r["case"]: r for r in rows}
    if "10k" in by and "100k" in by:
        print(f"kvsim 100k / 10k: {float(by['100k']['kvsim_s']) / float(by['10k']['kvsim_s']):.2f}x")


if __name__ == "__main__":
    main()
