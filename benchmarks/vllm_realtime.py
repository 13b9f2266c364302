"""Drive a real vLLM v1 engine in real time and record every step's wall time and batch.

Runs under vLLM's own interpreter (stdlib + vllm only; it never imports kvsim):

    .venv-vllm/bin/python benchmarks/vllm_realtime.py --plan PLAN.json --out RECORD.json

`benchmarks/vllm_latency.py` writes the plan and reads the record. The plan holds the
dummy model's ``config.json``, the engine knobs, a warm-up request list and the runs to
measure in order (each a request list: id, arrival_s, prompt_token_ids, output_tokens).
One engine serves every run; between runs the prefix cache is reset.

The loop (one thread, the engine core in this process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``):

    while requests remain:
        nothing running and the next arrival in the future: sleep until it
        add every request whose arrival time (on the wall clock) has passed
        llm.step()                       schedule -> execute -> update -> outputs

A request's first token is at the end of the step that produced it, its finish at the
end of the step that produced its last token; latencies count from its arrival time.
vLLM's CPU platform turns async scheduling off (vllm/platforms/cpu.py: "async
scheduling is not required on CPU"); the record carries the value the scheduler took.

Per step the record holds: start and end (seconds from the run's start), the time spent
in the model (execute_model + sample_tokens), the CPU time this thread got, whether
the loop went straight on to the next step, and per scheduled request
``[id, num_scheduled_tokens, num_computed_tokens_before, num_tokens, num_output_tokens]``
(from the scheduler's state right after ``schedule``). The load average is sampled at
most once a second.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import tempfile
import time
import zlib
from collections.abc import Sequence
from typing import Any

#: The record's first field: what proves an existing record is one this script wrote.
RECORD_FORMAT = "kvsim-vllm-realtime-record/1"

#: Engine core in this process, quiet logs. The KV pool is sized by num_gpu_blocks_override.
ENGINE_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "2",
    "VLLM_LOGGING_LEVEL": "WARNING",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}


def _loadavg() -> float:
    return os.getloadavg()[0]


def _cpu_pressure() -> float | None:
    """``some avg10`` of /proc/pressure/cpu: % of the last 10 s some task waited for a CPU."""
    try:
        with open("/proc/pressure/cpu", encoding="ascii") as fh:
            first = fh.readline().split()
        return float(dict(kv.split("=") for kv in first[1:])["avg10"])
    except (OSError, KeyError, ValueError):
        return None


class RealtimeEngine:
    """One LLMEngine with hooks that record each step's batch and timing."""

    def __init__(self, plan: dict[str, Any]) -> None:
        for k, v in ENGINE_ENV.items():
            os.environ.setdefault(k, v)
        import torch
        from vllm import EngineArgs, LLMEngine

        model_dir = tempfile.mkdtemp(prefix="kvsim-vllm-latency-model-")
        with open(os.path.join(model_dir, "config.json"), "w", encoding="utf-8") as fh:
            json.dump(plan["model"], fh)
        k = plan["knobs"]
        t0 = time.perf_counter()
        self.llm = LLMEngine.from_engine_args(
            EngineArgs(
                model=model_dir,
                load_format="dummy",
                skip_tokenizer_init=True,
                dtype=plan.get("dtype", "float32"),
                seed=0,
                enforce_eager=True,
                disable_log_stats=True,
                block_size=k["block_size"],
                num_gpu_blocks_override=k["num_gpu_blocks"],
                max_model_len=k["max_model_len"],
                max_num_batched_tokens=k["max_num_batched_tokens"],
                max_num_seqs=k["max_num_seqs"],
                enable_chunked_prefill=k["enable_chunked_prefill"],
                long_prefill_token_threshold=k["long_prefill_token_threshold"],
                enable_prefix_caching=k["enable_prefix_caching"],
                scheduling_policy="fcfs",
            )
        )
        self.startup_s = time.perf_counter() - t0
        core = self.llm.engine_core.engine_core
        self.core, self.sched = core, core.scheduler
        sc = self.sched.scheduler_config
        self.observed = {
            "vllm_async_scheduling": sc.async_scheduling,
            "executor": type(core.model_executor).__name__,
            "num_gpu_blocks": self.sched.kv_cache_manager.block_pool.num_gpu_blocks,
            "block_size": self.sched.block_size,
            "max_model_len": self.sched.max_model_len,
            "max_num_batched_tokens": sc.max_num_batched_tokens,
            "max_num_seqs": sc.max_num_seqs,
            "enable_chunked_prefill": sc.enable_chunked_prefill,
            "enable_prefix_caching": self.sched.cache_config.enable_prefix_caching,
            "torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "startup_s": round(self.startup_s, 2),
        }
        self._cap: dict[str, Any] = {}
        self._id_of: dict[str, int] = {}
        self._install_hooks()

    def _install_hooks(self) -> None:
        sched, cap, id_of = self.sched, self._cap, self._id_of
        executor = self.core.model_executor
        orig_schedule = sched.schedule

        def schedule(*a: Any, **kw: Any) -> Any:
            out = orig_schedule(*a, **kw)
            rows = []
            for rid, n in out.num_scheduled_tokens.items():
                r = sched.requests[rid]
                # num_computed_tokens was advanced by n inside schedule (_update_after_schedule).
                rows.append(
                    [
                        id_of[rid],
                        int(n),
                        int(r.num_computed_tokens - n),
                        int(r.num_tokens),
                        int(r.num_output_tokens),
                    ]
                )
            cap["batch"] = rows
            cap["preempted"] = len(out.preempted_req_ids or ())
            return out

        def timed(fn: Any) -> Any:
            def wrapper(*a: Any, **kw: Any) -> Any:
                t = time.perf_counter()
                try:
                    return fn(*a, **kw)
                finally:
                    cap["model_s"] = cap.get("model_s", 0.0) + time.perf_counter() - t

            return wrapper

        orig_update = sched.update_from_output

        def update_from_output(*a: Any, **kw: Any) -> Any:
            outputs = orig_update(*a, **kw)
            new_tokens, finished = cap.setdefault("new_tokens", []), cap.setdefault("finished", [])
            for eco in outputs.values():
                for o in eco.outputs:
                    rid = id_of[o.request_id]
                    if o.new_token_ids:
                        new_tokens.append((rid, len(o.new_token_ids)))
                    if o.finish_reason is not None:
                        finished.append(rid)
            return outputs

        sched.schedule = schedule
        executor.execute_model = timed(executor.execute_model)
        executor.sample_tokens = timed(executor.sample_tokens)
        sched.update_from_output = update_from_output

    def reset(self) -> None:
        sched = self.sched
        if sched.running or sched.waiting or sched.requests:
            raise RuntimeError("cannot reset an engine with live requests")
        while sched.has_requests():  # finished ids not yet passed on to the worker
            self.llm.step()
        if not self.sched.kv_cache_manager.block_pool.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset the prefix cache")
        self._id_of.clear()

    def run(self, requests: Sequence[dict[str, Any]], name: str) -> dict[str, Any]:
        """Serve ``requests`` in real time; returns the run's record."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        llm, cap, id_of = self.llm, self._cap, self._id_of
        todo = sorted(requests, key=lambda r: (r["arrival_s"], r["id"]))
        recs: dict[int, dict[str, Any]] = {
            r["id"]: {"arrival_s": r["arrival_s"], "first_token_s": None, "finish_s": None, "num_output": 0}
            for r in todo
        }
        steps: list[dict[str, Any]] = []
        load: list[tuple[float, float]] = []
        live: set[int] = set()
        i, n = 0, len(todo)
        load_before, psi_before = _loadavg(), _cpu_pressure()
        clock = time.perf_counter
        start = clock()
        next_load = 0.0
        while i < n or live:
            now = clock() - start
            if now >= next_load:
                load.append((round(now, 3), _loadavg()))
                next_load = now + 1.0
            if not live and todo[i]["arrival_s"] > now:
                time.sleep(todo[i]["arrival_s"] - now)
                if steps:
                    steps[-1]["then_idle"] = True
                continue
            while i < n and todo[i]["arrival_s"] <= now:
                r = todo[i]
                params = SamplingParams(
                    max_tokens=r["output_tokens"], ignore_eos=True, temperature=0.0, detokenize=False
                )
                iid = llm.add_request(
                    f"{name}-{r['id']}", TokensPrompt(prompt_token_ids=r["prompt_token_ids"]), params
                )
                id_of[iid] = r["id"]
                live.add(r["id"])
                i += 1
            cap.clear()
            cpu0, t0 = time.thread_time(), clock()
            llm.step()
            t1, cpu1 = clock(), time.thread_time()
            end = t1 - start
            for rid, k in cap.get("new_tokens", []):
                rec = recs[rid]
                if rec["first_token_s"] is None:
                    rec["first_token_s"] = end
                rec["num_output"] += k
            for rid in cap.get("finished", []):
                recs[rid]["finish_s"] = end
                live.discard(rid)
            if cap.get("batch"):
                steps.append(
                    {
                        "start_s": t0 - start,
                        "end_s": end,
                        "model_s": cap.get("model_s", 0.0),
                        "cpu_s": cpu1 - cpu0,
                        "batch": cap["batch"],
                        "preempted": cap.get("preempted", 0),
                        "then_idle": False,
                    }
                )
        wall = clock() - start
        return {
            "name": name,
            "wall_s": wall,
            "loadavg_before": load_before,
            "loadavg_after": _loadavg(),
            "cpu_pressure_before": psi_before,
            "cpu_pressure_after": _cpu_pressure(),
            "loadavg": load,
            "steps": steps,
            "requests": {str(k): v for k, v in recs.items()},
        }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", required=True, help="plan JSON (benchmarks/vllm_latency.py writes it)")
    ap.add_argument("--out", required=True, help="record to write (.json or .json.gz)")
    args = ap.parse_args(argv)
    with open(args.plan, encoding="utf-8") as fh:
        plan = json.load(fh)

    def log(msg: str) -> None:
        print(f"[vllm-realtime] {msg}", file=sys.stderr, flush=True)

    import vllm

    engine = RealtimeEngine(plan)
    log(f"engine up in {engine.startup_s:.1f} s: {engine.observed}")
    if plan.get("warmup"):
        t = time.perf_counter()
        engine.run(plan["warmup"], "warmup")
        engine.reset()
        log(f"warm-up done in {time.perf_counter() - t:.1f} s")
    runs = []
    for run in plan["runs"]:
        rec = engine.run(run["requests"], run["name"])
        rec["rep"] = run.get("rep", 0)
        rec["workload"] = run.get("workload", run["name"])
        engine.reset()
        runs.append(rec)
        log(
            f"{run['name']}: {len(rec['steps'])} steps in {rec['wall_s']:.1f} s, "
            f"load {rec['loadavg_before']:.2f} -> {rec['loadavg_after']:.2f}"
        )
    out = {
        "format": RECORD_FORMAT,  # first: what proves an existing record is one this script wrote
        "vllm_version": vllm.__version__,
        "engine": engine.observed,
        "env": {k: os.environ.get(k) for k in (*ENGINE_ENV, "OMP_NUM_THREADS", "OMP_PROC_BIND")},
        "nproc": os.cpu_count(),
        "runs": runs,
    }
    write_record(args.out, out)
    log(f"wrote {args.out}")
    return 0


def _record_format(path: str) -> str | None:
    """The format an existing record declares in its first field (gzip'd or not), or None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
        if head.startswith(b"\x1f\x8b"):
            head = zlib.decompressobj(wbits=31).decompress(head, 4096)
    except (OSError, zlib.error):
        return None
    match = re.match(rb'\s*\{\s*"format"\s*:\s*"([^"]{1,100})"', head)
    return match.group(1).decode("utf-8", "replace") if match else None


def write_record(path: str, record: dict[str, Any]) -> None:
    """Write the record atomically, replacing an existing file only if it is a record this
    script wrote (the rule of kvsim/outputs.py, stdlib only: this runs under vLLM's Python)."""
    if os.path.lexists(path) and (
        os.path.islink(path) or not os.path.isfile(path) or _record_format(path) != RECORD_FORMAT
    ):
        raise SystemExit(f"vllm_realtime: --out {path}: not replaced: it is not a record this script wrote")
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(
        folder, f".{os.path.basename(path)[:200]}.kvsim-tmp-{os.getpid()}-{os.urandom(4).hex()}"
    )
    opener: Any = gzip.open if path.endswith(".gz") else open
    try:
        with opener(tmp, "xt", encoding="utf-8") as fh:
            json.dump(record, fh)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


if __name__ == "__main__":
    sys.exit(main())
