"""``kvsim verify-vllm``: the same requests through a real vLLM engine and kvsim, step for step.

    kvsim verify-vllm scenarios/chunked_prefill.yaml --requests 40 --num-gpu-blocks 24
    kvsim verify-vllm --fixtures                   # kvsim vs the recorded fixtures, no vLLM
    kvsim verify-vllm --fixtures --groups pressure --verbose
    kvsim verify-vllm --record-fixtures tests/fixtures/vllm   # re-record the catalogue

A scenario's workload (its first ``--requests`` requests) becomes a differential workload
(`kvsim.validation.convert`) with the scenario's engine knobs on a small pool; vLLM runs it
in its own interpreter (``--vllm-python``, else $KVSIM_VLLM_PYTHON, else .venv-vllm/ of
the repository; `make vllm-deps` creates it), kvsim's core replays it, and the two step
records are compared. Exit code 0 when every workload is identical, 1 when one differs
or vLLM fails, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

from kvsim.cli.types import count, number, path_arg
from kvsim.engine.simulator import scenario_workload
from kvsim.errors import KvsimError, ScenarioError
from kvsim.limits import MAX_TIME_S, MAX_TOKENS
from kvsim.outputs import check_file_target, check_target, write_file
from kvsim.scenario.loading import load_scenario
from kvsim.validation import compare, convert, fixtures, generate, kvsim_side
from kvsim.validation.workload import DiffWorkload

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FIXTURES = REPO_ROOT / "tests" / "fixtures" / "vllm"
RECORDER = Path(__file__).resolve().parents[1] / "validation" / "vllm_engine.py"
VLLM_PYTHON_ENV = "KVSIM_VLLM_PYTHON"


class VerifyError(KvsimError):
    """Bad input to verify-vllm (exit 2)."""


def vllm_python(explicit: str | None = None) -> Path | None:
    """The interpreter that has vLLM: --vllm-python, $KVSIM_VLLM_PYTHON, or .venv-vllm/."""
    for candidate in (
        explicit,
        os.environ.get(VLLM_PYTHON_ENV),
        str(REPO_ROOT / ".venv-vllm" / "bin" / "python"),
    ):
        if candidate:
            p = Path(candidate)
            if p.exists():
                return p
            if candidate is explicit:
                raise VerifyError(f"--vllm-python {candidate}: no such file")
    return None


def run_recorder(
    python: Path,
    workloads: list[DiffWorkload],
    out: Path,
    *,
    fresh: bool = False,
    eager: bool = False,
    out_dir: bool = False,
    quiet: bool = False,
) -> None:
    """Record ``workloads`` with the real engine (a subprocess of ``python``)."""
    with tempfile.TemporaryDirectory(prefix="kvsim-verify-") as tmp:
        wpath = Path(tmp) / "workloads.json.gz"
        fixtures.write_workloads(wpath, workloads)
        cmd = [
            str(python),
            str(RECORDER),
            "--workloads",
            str(wpath),
            "--out-dir" if out_dir else "--out",
            str(out),
        ]
        if fresh:
            cmd.append("--fresh")
        if eager:
            cmd.append("--eager")
        proc = subprocess.run(
            cmd,
            stdout=subprocess.PIPE if quiet else None,
            stderr=subprocess.STDOUT if quiet else None,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            tail = (proc.stdout or "")[-4000:] if quiet else ""
            raise RuntimeError(
                f"the vLLM recorder failed (exit {proc.returncode}){': ' + tail if tail else ''}"
            )


def compare_fixture(fx: fixtures.Fixture, *, reserve_null_block: bool = True) -> compare.Comparison:
    rec = kvsim_side.replay(fx.workload, reserve_null_block=reserve_null_block)
    return compare.compare_records(fx.workload.name, fx.record, rec, group=fx.workload.group)


def _report(comparisons: list[compare.Comparison], args: argparse.Namespace, header: str = "") -> int:
    t = compare.totals(comparisons)
    if args.json:
        print(
            json.dumps(
                {
                    "totals": t,
                    "workloads": [
                        {"name": c.name, "group": c.group, "identical": c.identical, "reason": c.reason()}
                        for c in comparisons
                    ],
                },
                indent=2,
            )
        )
    else:
        if header:
            print(header)
        differing = [c for c in comparisons if not c.identical]
        shown = differing if args.verbose else differing[:3]
        for c in shown:
            print(compare.format_divergence(c))
            print()
        if len(differing) > len(shown):
            print(f"... {len(differing) - len(shown)} more differing workloads (--verbose shows all)\n")
        print(compare.format_totals(t))
    return 0 if t["workloads_identical"] == t["workloads"] else 1


def _cmd_fixtures(args: argparse.Namespace) -> int:
    directory = Path(args.fixtures)
    if not directory.is_dir():
        raise VerifyError(f"--fixtures {directory}: no such folder")
    fxs = []
    for path in sorted(directory.glob("*.json.gz")):
        try:
            fxs.extend(fixtures.read_fixture_file(path))
        except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError, zlib.error) as exc:
            raise VerifyError(f"{path}: not a readable fixture file: {type(exc).__name__}: {exc}") from None
    if args.groups:
        fxs = [f for f in fxs if f.workload.group in set(args.groups)]
    if not fxs:
        raise VerifyError(f"{directory}: no fixtures" + (f" in groups {args.groups}" if args.groups else ""))
    versions = sorted({f.vllm_version for f in fxs})
    comps = [compare_fixture(f, reserve_null_block=not args.no_null_block) for f in fxs]
    return _report(comps, args, header=f"kvsim vs vLLM {', '.join(versions)} fixtures in {directory}\n")


def _cmd_record(args: argparse.Namespace) -> int:
    python = vllm_python(args.vllm_python)
    if python is None:
        raise VerifyError(
            f"no vLLM interpreter: pass --vllm-python, set ${VLLM_PYTHON_ENV} or run make vllm-deps"
        )
    wls = generate.catalogue()
    if args.groups:
        wls = [w for w in wls if w.group in set(args.groups)]
    # The recorder writes DIR/<group>.json.gz: each must be new or a fixture file kvsim wrote.
    check_target(args.record_fixtures, "--record-fixtures", VerifyError)
    for group in sorted({w.group for w in wls}):
        check_file_target(
            Path(args.record_fixtures) / f"{group}.json.gz", "--record-fixtures", fixtures.FORMAT
        )
    print(f"recording {len(wls)} workloads with {python} into {args.record_fixtures}", file=sys.stderr)
    run_recorder(python, wls, Path(args.record_fixtures), fresh=args.fresh, eager=args.eager, out_dir=True)
    return 0


def _scenario_workloads(args: argparse.Namespace) -> list[DiffWorkload]:

    sources: list[str | None] = list(args.scenarios) or [None]
    out = []
    for source in sources:
        try:
            scenario = load_scenario(source, args.overrides)
        except ScenarioError as exc:
            raise VerifyError(str(exc)) from None
        base_dir = Path(source).resolve().parent if source is not None else None
        specs = scenario_workload(scenario, base_dir=base_dir).requests
        specs = sorted(specs, key=lambda s: (s.arrival_s, s.request_id))[: args.requests]
        knobs, notes = convert.scenario_knobs(
            scenario,
            block_size=args.block_size,
            num_gpu_blocks=args.num_gpu_blocks,
            max_num_batched_tokens=args.max_num_batched_tokens,
            max_num_seqs=args.max_num_seqs,
            max_model_len=args.max_model_len,
            long_prefill_token_threshold=args.long_prefill_token_threshold,
        )
        problems = knobs.problems()
        if problems:
            raise VerifyError(f"{source or scenario.name}: " + "; ".join(problems))
        for note in notes:
            print(f"kvsim: note: {source or scenario.name}: {note}", file=sys.stderr)
        name = Path(source).stem if source is not None else scenario.name
        wl = convert.from_request_specs(
            specs,
            knobs,
            name=name,
            step_s=args.step_s,
            scale=args.scale,
            salt_by_tenant=scenario.replicas[0].engine.cache_isolation == "tenant",
        )
        problems = wl.problems()
        if problems:
            raise VerifyError(f"{name}: " + "; ".join(problems[:5]))
        out.append(wl)
    return out


def _cmd_scenarios(args: argparse.Namespace) -> int:
    python = vllm_python(args.vllm_python)
    if python is None:
        raise VerifyError(
            f"no vLLM interpreter: pass --vllm-python, set ${VLLM_PYTHON_ENV} or run make vllm-deps "
            "(or compare against the recorded fixtures with --fixtures)"
        )
    if args.save_records:
        check_file_target(args.save_records, "--save-records", fixtures.FORMAT)  # before vLLM runs
    wls = _scenario_workloads(args)
    with tempfile.TemporaryDirectory(prefix="kvsim-verify-") as tmp:
        out = Path(tmp) / "records.json.gz"
        try:
            run_recorder(python, wls, out, fresh=args.fresh, eager=args.eager, quiet=not args.verbose)
        except RuntimeError as exc:
            print(f"kvsim: error: {exc}", file=sys.stderr)
            return 1
        fxs = fixtures.read_fixture_file(out)
        if args.save_records:
            write_file(args.save_records, out.read_bytes(), "--save-records", fixtures.FORMAT)
    comps = [compare_fixture(f, reserve_null_block=not args.no_null_block) for f in fxs]
    return _report(comps, args, header=f"kvsim vs vLLM {fxs[0].vllm_version} (live)\n" if fxs else "")


def cmd_verify(args: argparse.Namespace) -> int:
    if args.fixtures is not None:
        return _cmd_fixtures(args)
    if args.record_fixtures is not None:
        return _cmd_record(args)
    return _cmd_scenarios(args)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "verify-vllm",
        help="Replay a workload through a real vLLM engine and kvsim and compare them step for step.",
        description=(__doc__ or "").split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "scenarios", nargs="*", metavar="SCENARIO.yaml", help="Scenario files (default: embedded)."
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a scenario field by dotted path (as kvsim run).",
    )
    p.add_argument(
        "--requests", type=count(1, 100_000), default=50, help="Replay the first N requests (default 50)."
    )
    p.add_argument(
        "--num-gpu-blocks",
        type=count(2, 10_000_000),
        help="vLLM pool size, null block included (default 64).",
    )
    p.add_argument(
        "--block-size",
        type=count(1, 65_536),
        help="Tokens per block (default: the scenario's if a multiple of 32, else 32).",
    )
    p.add_argument(
        "--max-num-batched-tokens", type=count(1, MAX_TOKENS), help="Token budget (default: the scenario's)."
    )
    p.add_argument(
        "--max-num-seqs", type=count(1, 1_000_000), help="Most running requests (default: the scenario's)."
    )
    p.add_argument(
        "--max-model-len", type=count(1, MAX_TOKENS), help="Longest request (default: what the pool holds)."
    )
    p.add_argument(
        "--long-prefill-token-threshold",
        type=count(0, MAX_TOKENS),
        help="Per-request prefill cap (default: the scenario's).",
    )
    p.add_argument(
        "--scale",
        type=count(1, MAX_TOKENS),
        default=1,
        help="Divide every prompt segment and output length by K.",
    )
    p.add_argument(
        "--step-s",
        type=number(0, MAX_TIME_S, low_open=True),
        default=1.0,
        help="Seconds of arrival time per engine step (default 1).",
    )
    p.add_argument(
        "--vllm-python",
        type=path_arg,
        help=f"Python interpreter with vLLM (default ${VLLM_PYTHON_ENV} or .venv-vllm/).",
    )
    p.add_argument(
        "--fixtures",
        nargs="?",
        const=str(DEFAULT_FIXTURES),
        type=path_arg,
        metavar="DIR",
        help=f"Compare kvsim against recorded fixtures instead of running vLLM (default {DEFAULT_FIXTURES}).",
    )
    p.add_argument(
        "--record-fixtures",
        metavar="DIR",
        type=path_arg,
        help="Record the fixture catalogue with the real engine into DIR (replacing only fixture files "
        "kvsim wrote there).",
    )
    p.add_argument(
        "--groups", nargs="+", help="With --fixtures / --record-fixtures: only these workload groups."
    )
    p.add_argument(
        "--no-null-block", action="store_true", help="Give kvsim all num_gpu_blocks (no null block)."
    )
    p.add_argument("--fresh", action="store_true", help="A new vLLM engine for every workload.")
    p.add_argument("--eager", action="store_true", help="vLLM enforce_eager (fast start-up, slower steps).")
    p.add_argument(
        "--save-records",
        metavar="FILE",
        type=path_arg,
        help="Keep vLLM's records (a fixture file; an existing file is replaced only if it is one).",
    )
    p.add_argument("--json", action="store_true", help="Print totals and per-workload outcomes as JSON.")
    p.add_argument("--verbose", action="store_true", help="Report every differing workload; show vLLM's log.")
    p.set_defaults(func=cmd_verify)
