"""The recorder: drives a real vLLM v1 engine step by step and records what it decides.

Runs under vLLM's own interpreter (it imports vllm and torch), never under kvsim's:

    .venv-vllm/bin/python kvsim/validation/vllm_engine.py --workloads W.json.gz --out F.json.gz

It reads differential workloads (`workload.py`), runs them through ``LLMEngine`` with
the engine core in this process, and writes a fixture file (`fixtures.py`). Workloads
with equal knobs share one engine: between two workloads the pool is reset to a fresh
engine's state (prefix cache dropped, free queue back in block-id order), which
``--fresh`` (one engine per workload) checks.

How a step is recorded (``EngineCore.step`` = schedule, execute, update_from_output):

    scheduler.schedule            wrapped: num_scheduled_tokens in order, free blocks,
                                  running / waiting ids right after scheduling
    scheduler._preempt_request    wrapped: preempted ids in preemption order
    kv_cache_manager.record_prefix_cache_stats
                                  wrapped: prefix-hit tokens at each admission (vLLM
                                  calls it once per admission that looked the cache up)
    scheduler.update_from_output  wrapped: new token ids and finished ids

Pinned engine settings are in `engine_settings` and written into every fixture file.
Imports only the stdlib and vllm; the sibling modules are loaded without kvsim's
``__init__`` (which needs kvsim's dependencies).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import sys
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __package__:
    from kvsim.validation import fixtures as fx
    from kvsim.validation import workload as wlmod
else:  # run as a script: load the siblings as package "kvsim_validation", not from sys.path
    _here = Path(__file__).resolve().parent
    if sys.path and Path(sys.path[0] or ".").resolve() == _here:
        sys.path.pop(0)  # our module names (workload, fixtures, ...) must not shadow anything
    _pkg = types.ModuleType("kvsim_validation")
    _pkg.__path__ = [str(_here)]
    sys.modules["kvsim_validation"] = _pkg
    fx = importlib.import_module("kvsim_validation.fixtures")
    wlmod = importlib.import_module("kvsim_validation.workload")

#: The dummy model: small enough for a CPU step of a few ms, vocab as in `workload.VOCAB_SIZE`.
MODEL_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": wlmod.VOCAB_SIZE,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}

#: Environment the engine needs: engine core in this process, a KV space large enough for
#: any pool here (num_gpu_blocks_override sizes the pool), quiet logs.
ENGINE_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_LOGGING_LEVEL": "WARNING",
}

#: Stop a workload after this many consecutive steps that schedule nothing.
MAX_IDLE_STEPS = 64
MAX_STEPS = 100_000


def engine_settings(eager: bool) -> dict[str, Any]:
    """Engine-level settings pinned for every run (besides the workload's knobs)."""
    return {
        "async_scheduling": False,  # a step is schedule -> execute -> update, no overlap
        "scheduler_reserve_full_isl": True,  # 0.32's default, pinned
        "watermark": 0.0,
        "long_prefill_token_threshold_adaptive": False,
        "max_num_active_seqs": None,
        "max_num_scheduled_tokens": None,
        "prefix_caching_hash_algo": "sha256",
        "speculative_config": None,  # num_lookahead_tokens = 0
        "kv_transfer_config": None,  # no connector: no async KV loads, no in-flight reservations
        "enforce_eager": eager,
        "dtype": "float32",
        "seed": 0,
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "disable_log_stats": True,
        # Per-request seeds fail on CPU with chunked prefill (the generator cannot rewind);
        # the engine's seeded global generator is enough: token values never change a
        # scheduling decision, only which blocks hash alike, and random outputs never do.
        "sampling": "temperature 1.0, no per-request seed, ignore_eos, max_tokens = output_tokens",
        "env": dict(ENGINE_ENV),
        "model": dict(MODEL_CONFIG),
    }


class Engine:
    """One vLLM LLMEngine built for a set of knobs, with the scheduler hooks installed."""

    def __init__(self, knobs: Any, *, eager: bool, model_dir: str) -> None:
        for k, v in ENGINE_ENV.items():
            os.environ.setdefault(k, v)
        from vllm import EngineArgs, LLMEngine

        self.knobs = knobs
        args = EngineArgs(
            model=model_dir,
            load_format="dummy",
            skip_tokenizer_init=True,
            dtype="float32",
            seed=0,
            enforce_eager=eager,
            disable_log_stats=True,
            block_size=knobs.block_size,
            num_gpu_blocks_override=knobs.num_gpu_blocks,
            max_model_len=knobs.resolved_max_model_len,
            max_num_batched_tokens=knobs.max_num_batched_tokens,
            max_num_seqs=knobs.max_num_seqs,
            enable_chunked_prefill=knobs.enable_chunked_prefill,
            long_prefill_token_threshold=knobs.long_prefill_token_threshold,
            long_prefill_token_threshold_adaptive=False,
            enable_prefix_caching=knobs.enable_prefix_caching,
            prefix_caching_hash_algo="sha256",
            scheduling_policy=knobs.scheduling_policy,
            async_scheduling=False,
            scheduler_reserve_full_isl=True,
            watermark=0.0,
        )
        self.llm = LLMEngine.from_engine_args(args)
        core = self.llm.engine_core.engine_core
        self.core = core
        self.sched = core.scheduler
        self.pool = self.sched.kv_cache_manager.block_pool
        self.observed = self._observed_config()
        self._check_config()
        self._cap: dict[str, Any] = {}
        self._id_of: dict[str, int] = {}  # vLLM's internal request id -> workload id
        self._install_hooks()

    # -- configuration actually in force ----------------------------------------------
    def _observed_config(self) -> dict[str, Any]:
        sc = self.sched.scheduler_config
        cc = self.sched.cache_config
        return {
            "num_gpu_blocks": self.pool.num_gpu_blocks,
            "block_size": self.sched.block_size,
            "hash_block_size": self.sched.hash_block_size,
            "max_model_len": self.sched.max_model_len,
            "max_num_batched_tokens": sc.max_num_batched_tokens,
            "max_num_scheduled_tokens": self.sched.max_num_scheduled_tokens,
            "max_num_seqs": sc.max_num_seqs,
            "max_num_active_reqs": self.sched.max_num_active_reqs,
            "enable_chunked_prefill": sc.enable_chunked_prefill,
            "long_prefill_token_threshold": sc.long_prefill_token_threshold,
            "long_prefill_token_threshold_adaptive": sc.long_prefill_token_threshold_adaptive,
            "enable_prefix_caching": cc.enable_prefix_caching,
            "prefix_caching_hash_algo": cc.prefix_caching_hash_algo,
            "policy": sc.policy,
            "async_scheduling": sc.async_scheduling,
            "scheduler_reserve_full_isl": sc.scheduler_reserve_full_isl,
            "watermark": sc.watermark,
            "num_lookahead_tokens": self.sched.num_lookahead_tokens,
            "num_spec_tokens": self.sched.num_spec_tokens,
            "scheduler_class": f"{type(self.sched).__module__}.{type(self.sched).__qualname__}",
            "kv_cache_groups": len(self.sched.kv_cache_config.kv_cache_groups),
            "connector": self.sched.connector is not None,
        }

    def _check_config(self) -> None:
        k, o = self.knobs, self.observed
        want = {
            "num_gpu_blocks": k.num_gpu_blocks,
            "block_size": k.block_size,
            "hash_block_size": k.block_size,
            "max_model_len": k.resolved_max_model_len,
            "max_num_batched_tokens": k.max_num_batched_tokens,
            "max_num_scheduled_tokens": k.max_num_batched_tokens,
            "max_num_seqs": k.max_num_seqs,
            "max_num_active_reqs": k.max_num_seqs,
            "enable_chunked_prefill": k.enable_chunked_prefill,
            "long_prefill_token_threshold": k.long_prefill_token_threshold,
            "enable_prefix_caching": k.enable_prefix_caching,
            "policy": k.scheduling_policy,
            "async_scheduling": False,
            "num_lookahead_tokens": 0,
            "num_spec_tokens": 0,
            "kv_cache_groups": 1,
            "connector": False,
        }
        bad = {key: (v, o[key]) for key, v in want.items() if o[key] != v}
        if bad:
            raise RuntimeError(f"vLLM did not take the knobs as given (wanted, got): {bad}")

    # -- hooks -----------------------------------------------------------------------
    def _install_hooks(self) -> None:
        sched, pool, cap, id_of = self.sched, self.pool, self._cap, self._id_of
        kvm = sched.kv_cache_manager

        def ids(reqs: Any) -> list[int]:
            return [id_of[r.request_id] for r in reqs]

        orig_schedule = sched.schedule

        def schedule(*a: Any, **kw: Any) -> Any:
            cap["preempted"] = []
            out = orig_schedule(*a, **kw)
            cap["sched"] = [[id_of[rid], n] for rid, n in out.num_scheduled_tokens.items()]
            cap["free"] = pool.get_num_free_blocks()
            cap["running"] = ids(sched.running)
            cap["waiting"] = ids(list(sched.kv_holding_waiting) + list(sched.waiting))
            return out

        orig_preempt = sched._preempt_request

        def preempt(request: Any, *a: Any, **kw: Any) -> Any:
            cap["preempted"].append(id_of[request.request_id])
            return orig_preempt(request, *a, **kw)

        orig_record = kvm.record_prefix_cache_stats

        def record_prefix_cache_stats(request: Any, num_hits: int) -> Any:
            cap.setdefault("hits", []).append((id_of[request.request_id], int(num_hits)))
            return orig_record(request, num_hits)

        orig_update = sched.update_from_output

        def update_from_output(*a: Any, **kw: Any) -> Any:
            outputs = orig_update(*a, **kw)
            new_tokens = cap.setdefault("new_tokens", [])
            finished = cap.setdefault("finished", [])
            for eco in outputs.values():
                for o in eco.outputs:
                    rid = id_of[o.request_id]
                    if o.new_token_ids:
                        new_tokens.append((rid, list(o.new_token_ids)))
                    if o.finish_reason is not None:
                        finished.append(rid)
            return outputs

        sched.schedule = schedule
        sched._preempt_request = preempt
        kvm.record_prefix_cache_stats = record_prefix_cache_stats
        sched.update_from_output = update_from_output

    # -- between workloads -------------------------------------------------------------
    def reset(self) -> None:
        """Bring the pool back to a fresh engine's state (every request must be done)."""
        from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue

        pool, sched = self.pool, self.sched
        if sched.running or sched.waiting or sched.kv_holding_waiting or sched.requests:
            raise RuntimeError("cannot reset an engine with live requests")
        if pool.get_num_free_blocks() != pool.num_gpu_blocks - 1:
            raise RuntimeError("blocks still held after every request finished")
        if not pool.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset the prefix cache")
        # A fresh pool's free queue holds blocks 1..N-1 in id order (block 0 is the null block).
        pool.free_block_queue = FreeKVCacheBlockQueue(pool.blocks[1:])
        for b in pool.blocks[1:]:
            assert b.ref_cnt == 0 and b.block_hash is None
        self._id_of.clear()

    # -- one workload ------------------------------------------------------------------
    def run(self, wl: Any, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
        """Run one workload to completion on the step clock; returns its record."""
        from vllm import SamplingParams
        from vllm.exceptions import VLLMClientError
        from vllm.inputs import TokensPrompt

        llm, cap, id_of = self.llm, self._cap, self._id_of
        streams = wlmod.TokenStreams()
        reqs = {r.id: r for r in wl.requests}
        children: dict[int, list[Any]] = {}
        for r in wl.requests:
            if r.parent is not None:
                children.setdefault(r.parent, []).append(r)
        records = {r.id: fx.new_request_record(r.id) for r in wl.requests}
        pending: dict[int, list[int]] = {}  # arrival step -> ids
        for r in wl.requests:
            if r.parent is None:
                pending.setdefault(r.arrival_step, []).append(r.id)
        outputs: dict[int, list[int]] = {}
        live: set[int] = set()
        steps: list[dict[str, Any]] = []
        internal: dict[int, str] = {}
        num_injected = 0
        step = 0
        idle = 0
        stalled = False
        while pending or live:
            if not live:
                step = max(step, min(pending))
            for rid in sorted(pending.pop(step, [])):
                r = reqs[rid]
                rec = records[rid]
                rec["arrival"] = step
                try:
                    prompt: dict[str, Any] = {"prompt_token_ids": wlmod.prompt_token_ids(r, streams, outputs)}
                    if r.salt is not None:
                        prompt["cache_salt"] = r.salt
                    params = SamplingParams(
                        max_tokens=r.output_tokens,
                        ignore_eos=True,
                        temperature=1.0,  # random tokens: distinct outputs never share a block hash
                        detokenize=False,
                    )
                    iid = llm.add_request(
                        f"{rid}",
                        TokensPrompt(**prompt),
                        params,
                        arrival_time=float(num_injected),
                        priority=r.priority,
                    )
                except (ValueError, VLLMClientError) as exc:  # vLLM's validation (prompt too long, ...)
                    rec["rejected"] = True
                    rec["reject_reason"] = str(exc).splitlines()[0][:200]
                    continue
                finally:
                    num_injected += 1
                id_of[iid] = rid
                internal[rid] = iid
                live.add(rid)
            if not live:
                continue
            cap.clear()
            llm.step()
            for rid, n in cap.get("hits", []):
                records[rid]["hits"].append(n)
            for rid in cap.get("preempted", []):
                records[rid]["preemptions"] += 1
            for rid, toks in cap.get("new_tokens", []):
                got = outputs.setdefault(rid, [])
                if not got:
                    records[rid]["first_token"] = step
                got.extend(toks)
                records[rid]["num_output"] = len(got)
            finished = cap.get("finished", [])
            for rid in finished:
                records[rid]["finish"] = step
                live.discard(rid)
                for child in children.get(rid, ()):
                    pending.setdefault(step + 1 + child.think_steps, []).append(child.id)
            steps.append(
                {
                    "step": step,
                    "sched": cap.get("sched", []),
                    "preempted": cap.get("preempted", []),
                    "finished": finished,
                    "free": cap.get("free", self.pool.get_num_free_blocks()),
                    "running": cap.get("running", []),
                    "waiting": cap.get("waiting", []),
                }
            )
            idle = idle + 1 if not cap.get("sched") else 0
            step += 1
            if idle >= MAX_IDLE_STEPS or len(steps) >= MAX_STEPS:
                stalled = True
                llm.abort_request([internal[rid] for rid in live])
                while llm.has_unfinished_requests() or self.sched.has_requests():
                    llm.step()
                live.clear()
                pending.clear()
        for rec in records.values():
            rec.pop("reject_reason", None)
        return {"steps": steps, "requests": records, "stalled": stalled}


def _write_model_dir() -> str:
    d = tempfile.mkdtemp(prefix="kvsim-vllm-model-")
    with open(os.path.join(d, "config.json"), "w", encoding="utf-8") as fh:
        json.dump(MODEL_CONFIG, fh)
    return d


def record_workloads(
    workloads: Sequence[Any],
    *,
    fresh: bool = False,
    eager: bool = False,
    log: Callable[[str], None] = print,
    on_record: Callable[[Any, dict[str, Any], dict[str, Any]], None] | None = None,
) -> tuple[list[tuple[Any, dict[str, Any]]], dict[str, Any]]:
    """Record every workload; returns (workload, record) pairs in input order and the
    engine description. ``on_record(workload, record, observed_config)`` runs after each."""
    for wl in workloads:
        problems = wl.problems()
        if problems:
            raise ValueError(f"workload {wl.name}: " + "; ".join(problems))
    import vllm

    model_dir = _write_model_dir()
    entries: list[tuple[Any, dict[str, Any]]] = []
    observed: list[dict[str, Any]] = []
    by_knobs = wlmod.group_by_knobs(workloads)
    for knobs, group in by_knobs.items():
        engine: Engine | None = None
        for wl in group:
            if engine is None or fresh:
                # Drop the previous engine before building the next: tearing an engine down
                # destroys vLLM's process-wide parallel groups, which the new one would use.
                engine = None
                gc.collect()
                t0 = time.perf_counter()
                engine = Engine(knobs, eager=eager, model_dir=model_dir)
                log(f"engine up in {time.perf_counter() - t0:.1f} s for {knobs}")
                if engine.observed not in observed:
                    observed.append(engine.observed)
            else:
                engine.reset()
            t0 = time.perf_counter()
            rec = engine.run(wl)
            wall = time.perf_counter() - t0
            rec["meta"] = {"wall_s": round(wall, 3), "num_steps": len(rec["steps"])}
            log(
                f"{wl.name}: {len(rec['steps'])} steps in {wall:.1f} s"
                + (" STALLED" if rec["stalled"] else "")
            )
            entries.append((wl, rec))
            if on_record is not None:
                on_record(wl, rec, engine.observed)
        engine = None
        gc.collect()
    order = {id(wl): i for i, wl in enumerate(workloads)}
    entries.sort(key=lambda e: order[id(e[0])])
    info = {
        "vllm_version": vllm.__version__,
        "settings": engine_settings(eager),
        "reused_engine_per_knobs": not fresh,
        "observed_configs": observed,
    }
    return entries, info


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", required=True, help="Differential workloads (.json or .json.gz).")
    out = ap.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", help="Fixture file to write (.json.gz).")
    out.add_argument("--out-dir", help="Write one fixture file per workload group: DIR/<group>.json.gz.")
    ap.add_argument("--fresh", action="store_true", help="A new engine for every workload (no reuse).")
    ap.add_argument("--eager", action="store_true", help="enforce_eager: fast start-up, slower steps.")
    ap.add_argument("--only", nargs="*", help="Record only these workload names.")
    args = ap.parse_args(argv)
    for k, v in ENGINE_ENV.items():
        os.environ.setdefault(k, v)
    workloads = fx.read_workloads(args.workloads)
    if args.only:
        workloads = [w for w in workloads if w.name in set(args.only)]

    def log(msg: str) -> None:
        print(f"[vllm-recorder] {msg}", file=sys.stderr, flush=True)

    import vllm

    def engine_info(observed: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "settings": engine_settings(args.eager),
            "reused_engine_per_knobs": not args.fresh,
            "observed_configs": observed,
        }

    # --out-dir: a group's file is written as soon as its last workload is recorded.
    order = {id(wl): i for i, wl in enumerate(workloads)}
    remaining: dict[str, int] = {}
    for wl in workloads:
        remaining[wl.group] = remaining.get(wl.group, 0) + 1
    done: dict[str, list[tuple[Any, dict[str, Any], dict[str, Any]]]] = {}

    def on_record(wl: Any, rec: dict[str, Any], observed: dict[str, Any]) -> None:
        if not args.out_dir:
            return
        done.setdefault(wl.group, []).append((wl, rec, observed))
        remaining[wl.group] -= 1
        if remaining[wl.group]:
            return
        group = sorted(done.pop(wl.group), key=lambda e: order[id(e[0])])
        configs: list[dict[str, Any]] = []
        for _, _, o in group:
            if o not in configs:
                configs.append(o)
        path = Path(args.out_dir) / f"{wl.group}.json.gz"
        fx.write_fixture_file(
            path, [(w, r) for w, r, _ in group], vllm_version=vllm.__version__, engine=engine_info(configs)
        )
        log(f"wrote {len(group)} records to {path}")

    entries, info = record_workloads(
        workloads, fresh=args.fresh, eager=args.eager, log=log, on_record=on_record
    )
    if args.out:
        fx.write_fixture_file(
            args.out, entries, vllm_version=info["vllm_version"], engine=engine_info(info["observed_configs"])
        )
        log(f"wrote {len(entries)} records to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
