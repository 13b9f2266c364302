"""``kvsim plan``: the cheapest deployment that meets every SLO, with its launch command.

    kvsim plan scenarios/azure_conversation.yaml --slo ttft_p99_s=2 --slo tpot_p99_s=0.1 \\
        --gpus h100-sxm,h200,b200 --tp 1,2,4,8 --max-num-batched-tokens 2048,8192 --jobs 2

Prints one row per configuration (what the search concluded, its cheapest feasible
deployment with cost and SLO metrics), the cheapest with its margins, cost per million
tokens and energy, and the engine's launch command; ``--out DIR`` writes the plan folder
(plan.json, configurations.csv, runs.csv, pareto.html, cheapest.yaml, launch.sh). Exit 3
when no configuration meets the SLO. The search is `kvsim.planning.planner.plan_deployment`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import kvsim
from kvsim.cli.types import count, number, path_arg, text_arg
from kvsim.limits import DEFAULT_PLAN_RUNS, JOBS_PER_CPU, MAX_JOBS, MAX_PLAN_GPUS, MAX_PLAN_RUNS
from kvsim.outputs import MARKER_FILE, claim_folder, replace_file
from kvsim.planning.capacity import DEFAULT_MIN_SERVED, parse_slo
from kvsim.planning.planner import (
    Mode,
    PlanError,
    PlanPoint,
    PlanReport,
    PlanSpace,
    gpus_text,
    plan_deployment,
)
from kvsim.planning.pricing import load_prices
from kvsim.planning.sweep import DEFAULT_RAY_CONNECT_TIMEOUT_S, MAX_CONNECT_TIMEOUT_S
from kvsim.results.io import json_safe
from kvsim.units import MISSING, format_seconds, sig

#: Exit code when the search ran but no configuration meets the SLO.
EXIT_NO_ANSWER = 3
#: The kind named by the ``.kvsim`` marker of a plan folder, and the files kvsim writes there.
PLAN_KIND = "plan"
PLAN_FILES = ("plan.json", "configurations.csv", "runs.csv", "pareto.html", "cheapest.yaml", "launch.sh")


def _list(flag: str, text: str, parse: Any) -> tuple[Any, ...]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise PlanError(f"{flag}: give at least one value")
    out = []
    for item in items:
        try:
            out.append(parse(item))
        except ValueError as exc:
            raise PlanError(f"{flag}: {item!r}: {exc}") from None
    return tuple(out)


def _int_or_default(text: str) -> int | None:
    if text == "default":
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError("must be an integer or 'default'") from None


def _on_off(text: str) -> bool | None:
    table = {"on": True, "true": True, "off": False, "false": False, "default": None}
    if text.lower() not in table:
        raise ValueError("must be on, off or default")
    return table[text.lower()]


def _ratio(text: str) -> Mode:
    parts = text.split(":")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ValueError("must be P:D, e.g. 1:2 (prefill:decode replicas)")
    return (int(parts[0]), int(parts[1]))


def space_from_args(args: argparse.Namespace) -> PlanSpace:
    """The `PlanSpace` the options describe."""
    modes: tuple[Mode, ...] = ("agg",)
    if args.pd_ratios:
        modes = modes + _list("--pd-ratios", args.pd_ratios, _ratio)
    return PlanSpace(
        gpus=_list("--gpus", args.gpus, str),
        tps=_list("--tp", args.tp, _int_or_default),
        max_num_seqs=_list("--max-num-seqs", args.max_num_seqs, _int_or_default),
        max_num_batched_tokens=_list(
            "--max-num-batched-tokens", args.max_num_batched_tokens, _int_or_default
        ),
        kv_cache_dtypes=_list(
            "--kv-cache-dtype", args.kv_cache_dtype, lambda t: None if t == "default" else t
        ),
        prefix_caching=_list("--prefix-caching", args.prefix_caching, _on_off),
        routers=_list("--router", args.router, lambda t: None if t == "default" else t),
        modes=modes,
        backend=args.backend,
        cost_model=args.cost_model,
        max_gpus=args.max_gpus,
        budget_usd_per_hour=args.budget,
    )


# --------------------------------------------------------------------------- printing


def _cell(key: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if key == "usd_per_hour" or key.startswith("usd_per_m"):
        return f"{value:,.2f}"
    if key.startswith("energy_j") or key == "mean_power_w":
        return sig(float(value))
    if key.endswith("_s") and isinstance(value, int | float):
        return format_seconds(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


TITLES = {
    "max_num_seqs": "seqs",
    "max_num_batched_tokens": "batch tokens",
    "kv_cache_dtype": "kv dtype",
    "prefix_caching": "prefix cache",
    "usd_per_hour": "$/hour",
    "usd_per_m_input": "$/M in",
    "usd_per_m_cached_input": "$/M cached",
    "usd_per_m_output": "$/M out",
    "energy_j_per_output_token": "J/out token",
    "ttft_p99_s": "TTFT p99",
    "tpot_p99_s": "TPOT p99",
}
KNOB_COLUMNS = (
    "mode",
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_dtype",
    "prefix_caching",
    "router",
)


def format_configurations(report: PlanReport) -> str:
    """The configurations table as aligned text: the knobs the space varies, what was
    concluded, and each one's cheapest feasible deployment."""
    table = report.configurations_table()
    knobs = [
        k
        for k in KNOB_COLUMNS
        if table[k].astype(str).nunique() > 1 or set(table[k].astype(str)) != {"default"}
    ]
    knobs = [k for k in knobs if not (k == "mode" and set(table[k]) == {"aggregated"})]
    slo_keys = [b.key for b in report.slo]
    keys = ["gpu", "tp", *knobs, "status", "replicas", "gpus", "usd_per_hour", *slo_keys]
    keys += ["usd_per_m_input", "usd_per_m_cached_input", "usd_per_m_output", "energy_j_per_output_token"]
    keys = [k for k in keys if k in table.columns]
    head = [TITLES.get(k, k) for k in keys]
    rows = [[_cell(k, row[k]) for k in keys] for _, row in table.iterrows()]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    details = [(i, row) for i, row in table.iterrows() if row["status"] not in ("answer",)]
    shown: set[str] = set()
    for _, row in details:
        text = f"{row['status']}: {row['detail']}"
        if text not in shown:
            shown.add(text)
            sample = f"{row['gpu']} tp{row['tp']}"
            lines.append(f"  {sample} (and alike): {text}")
    return "\n".join(lines)


def format_cheapest(report: PlanReport) -> str:
    """The answer line, then the cheapest's cost, energy and launch commands."""
    lines = [report.answer_line()]
    p = report.cheapest
    if p is None:
        return "\n".join(lines)
    c = p.cost
    if c is not None:
        money = {
            k: _cell("usd_per_m", getattr(c, k))
            for k in ("usd_per_m_input", "usd_per_m_cached_input", "usd_per_m_output")
        }
        lines.append(
            f"  cost: {c.currency} {c.usd_per_hour:,.2f}/hour ({gpus_text(c.num_gpus)}, running iterations "
            f"{c.busy_share:.0%} of the time); {c.currency} per million tokens: input {money['usd_per_m_input']}, "
            f"cached input {money['usd_per_m_cached_input']}, output {money['usd_per_m_output']}"
        )
        energy = {
            k: _cell("energy_j", getattr(c, k))
            for k in ("energy_j_per_token", "energy_j_per_output_token", "mean_power_w")
        }
        lines.append(
            f"  energy: {energy['energy_j_per_token']} J per token, {energy['energy_j_per_output_token']} J per "
            f"output token ({energy['mean_power_w']} W per GPU on average; rough: docs/planning.md)"
        )
    lines.append(f"  prices: {report.prices.label}")
    lines.append("  launch:")
    for launch in report.launch(p):
        lines += [f"    {line}" for line in launch.text().splitlines()]
    return "\n".join(lines)


def summary_line(report: PlanReport) -> str:
    outcomes = [o.status for o in report.outcomes]
    pruned = outcomes.count("pruned")
    return (
        f"{len(outcomes)} configurations ({pruned} pruned before running), {report.num_runs} runs "
        f"({report.num_stopped} stopped early as overloaded), {report.wall_s:.1f} s"
    )


def _progress(point: PlanPoint) -> None:
    if point.point.run_index < 0:
        return
    if point.point.status != "ok":
        verdict = "failed"
    elif point.stopped:
        verdict = f"overloaded, stopped at t={point.point.summary.get('stopped_at_s', math.nan):,.0f} s"
    else:
        verdict = "meets the SLO" if point.feasible else "misses the SLO"
        verdict += f" (TTFT p99 {format_seconds(point.point.summary.get('ttft_p99_s'))})"
    print(
        f"run {point.point.run_index + 1}: {point.units} x [{point.config.label()}]: {verdict} "
        f"({point.point.wall_s:.1f} s)",
        file=sys.stderr,
    )


# --------------------------------------------------------------------------- writing


def write_plan(report: PlanReport, out: str | Path) -> Path:
    """Write the plan folder (a new, empty or kvsim-marked folder; files replaced atomically)."""
    from kvsim.analysis import plots  # plotly: only when a figure is written

    folder = claim_folder(out, PLAN_KIND, "--out", PlanError)
    files: dict[str, bytes] = {
        "plan.json": (json.dumps(json_safe(report.to_dict()), indent=2, allow_nan=False) + "\n").encode(),
        "configurations.csv": report.configurations_table().to_csv(index=False).encode(),
        "runs.csv": report.runs_table().to_csv(index=False).encode(),
    }
    figure = plots.plan_pareto_figure(
        report.runs_table(),
        [(b.key, b.limit, b.upper) for b in report.slo],
        currency=report.prices.currency,
        title=f"{report.source}: cost against the SLO metrics ({report.num_runs} runs)",
    )
    files["pareto.html"] = figure.to_html(include_plotlyjs=True, full_html=True).encode()
    if report.cheapest is not None:
        scenario = report.scenario(report.cheapest)
        header = f"# The cheapest deployment kvsim plan found ({report.answer_line()})\n"
        files["cheapest.yaml"] = (header + kvsim.dump_scenario(scenario)).encode()
        launch = ["#!/bin/sh", f"# {report.answer_line()}", f"# prices: {report.prices.label}"]
        for group in report.launch(report.cheapest):
            launch.append(group.text())
        files["launch.sh"] = ("\n".join(launch) + "\n").encode()
    for name, blob in files.items():
        replace_file(folder, name, blob)
    for name in PLAN_FILES:  # a previous plan's answer, when this one has none
        if name not in files and (folder / name).is_file() and (folder / MARKER_FILE).is_file():
            (folder / name).unlink()
    return folder


def _cmd_plan(args: argparse.Namespace) -> int:
    slo = parse_slo(",".join(args.slo)) if args.slo else None
    space = space_from_args(args)
    prices = load_prices(args.prices)
    if args.out is not None:  # refused before any run, as every command that writes
        claim_folder(args.out, PLAN_KIND, "--out", PlanError)
    report = plan_deployment(
        args.scenario,
        slo,
        space,
        prices=prices,
        search=args.search,
        overrides=args.overrides,
        jobs=args.jobs,
        executor=args.executor,
        address=args.address,
        connect_timeout_s=args.connect_timeout,
        early_stop=not args.no_early_stop,
        max_runs=args.max_runs,
        min_served=args.min_served,
        progress=None if args.quiet or args.json else _progress,
    )
    if args.out is not None:
        write_plan(report, args.out)
    if args.json:
        print(json.dumps(json_safe(report.to_dict()), indent=2, allow_nan=False))
    else:
        print(format_configurations(report))
        print()
        print(format_cheapest(report))
        print()
        print(summary_line(report) + (f"; plan written to {args.out}" if args.out else ""))
    for note in report.notes:
        print(f"kvsim: warning: {note}", file=sys.stderr)
    return 0 if report.cheapest is not None else EXIT_NO_ANSWER


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``plan`` to the parser."""
    p = sub.add_parser(
        "plan",
        help="The cheapest GPU type, TP degree, replica count and engine knobs meeting every SLO.",
        description="Search GPU types, TP degrees, replica counts, engine knobs, routers and aggregated "
        "against prefill/decode-disaggregated serving for the cheapest deployment of the scenario's workload "
        "that meets every --slo bound (not overloaded, --min-served of the requests served), each point a full "
        "run. Configurations that do not fit in memory are pruned; replica counts are bisected; a run certain "
        "to miss a TTFT/E2E bound while its queue diverges is stopped early and reported as overloaded. "
        "Prints every configuration, the cheapest with its margins, $ per million tokens and energy, and the "
        f"engine's launch command. Exit codes: 0 answer found, {EXIT_NO_ANSWER} none meets the SLO, 2 bad input.",
    )
    p.add_argument(
        "scenario", nargs="?", type=path_arg, help="Scenario file (default: the embedded default scenario)."
    )
    p.add_argument(
        "--slo",
        action="append",
        default=[],
        type=text_arg(10_000),
        metavar="KEY=LIMIT",
        help="A bound on a summary key (repeatable, or comma-separated): KEY=LIMIT or KEY<=LIMIT, KEY>=LIMIT, "
        "e.g. --slo ttft_p99_s=2 --slo tpot_p99_s=0.1. Default: the scenario's slo as ttft_p99_s and tpot_p99_s.",
    )
    space = p.add_argument_group(
        "the space searched (comma-separated lists; 'default': the backend's default)"
    )
    space.add_argument("--gpus", default="h100-sxm,h200,b200", type=text_arg(10_000),
                       help="GPU presets or aliases (default h100-sxm,h200,b200); each needs a price.")  # fmt: skip
    space.add_argument("--tp", default="1,2,4,8", type=text_arg(10_000), help="TP degrees (default 1,2,4,8).")
    space.add_argument("--max-num-seqs", default="default", type=text_arg(10_000), metavar="LIST",
                       help="max_num_seqs values (vLLM's --max-num-seqs), e.g. default,64.")  # fmt: skip
    space.add_argument("--max-num-batched-tokens", default="default", type=text_arg(10_000), metavar="LIST",
                       help="max_num_batched_tokens values, e.g. 2048,8192.")  # fmt: skip
    space.add_argument("--kv-cache-dtype", default="default", type=text_arg(10_000), metavar="LIST",
                       help="KV-cache dtypes, e.g. auto,fp8.")  # fmt: skip
    space.add_argument("--prefix-caching", default="default", type=text_arg(100), metavar="LIST",
                       help="on, off or default (the scenario's), e.g. on,off.")  # fmt: skip
    space.add_argument("--router", default="default", type=text_arg(10_000), metavar="LIST",
                       help="router kinds for more than one replica, e.g. least_loaded,prefix_aware.")  # fmt: skip
    space.add_argument("--pd-ratios", default="", type=text_arg(10_000), metavar="P:D,...",
                       help="also search prefill/decode disaggregation at these worker ratios, e.g. 1:1,1:2.")  # fmt: skip
    space.add_argument("--backend", choices=("vllm", "sglang", "trtllm"),
                       help="the serving engine (its defaults and launch command); default: the scenario's.")  # fmt: skip
    space.add_argument("--cost-model", default="roofline", choices=("roofline", "kernels"),
                       help="roofline (default, fast) or kernels (NVIDIA's measured kernel tables, the model "
                       "validated against real deployments: docs/validation.md).")  # fmt: skip
    space.add_argument("--max-gpus", type=count(1, MAX_PLAN_GPUS), default=64,
                       help="most GPUs of one deployment (default 64).")  # fmt: skip
    space.add_argument("--budget", type=number(0, 1e12, low_open=True), metavar="USD_PER_HOUR",
                       help="most a deployment may cost per hour, in the price table's currency.")  # fmt: skip
    p.add_argument("--prices", type=path_arg, metavar="FILE",
                   help="price table (YAML, docs/planning.md); default: kvsim/data/prices.yaml, example list "
                   "prices labelled with their source and date.")  # fmt: skip
    p.add_argument("--search", choices=("cheapest", "front"), default="cheapest",
                   help="cheapest (default): branch and bound, never running what costs more than the cheapest "
                   "found; front: every configuration's least replica count, for the whole Pareto front.")  # fmt: skip
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario field for every point (repeatable), as for kvsim run.")  # fmt: skip
    p.add_argument("--min-served", type=number(0, 1), default=DEFAULT_MIN_SERVED, metavar="SHARE",
                   help=f"least share of the requests a point must finish (default {DEFAULT_MIN_SERVED}).")  # fmt: skip
    p.add_argument("--max-runs", type=count(1, MAX_PLAN_RUNS), default=DEFAULT_PLAN_RUNS,
                   help=f"most runs (default {DEFAULT_PLAN_RUNS}); the search stops there and says so.")  # fmt: skip
    p.add_argument("--no-early-stop", action="store_true",
                   help="run every point to the end (slower; the same answer).")  # fmt: skip
    p.add_argument("--jobs", type=count(1, MAX_JOBS), default=min(os.cpu_count() or 1, 4),
                   help=f"runs at once (default: CPU count, at most 4; at most {JOBS_PER_CPU} x the CPU count, "
                   f"and {MAX_JOBS}).")  # fmt: skip
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local processes or Ray tasks, as kvsim sweep.",
    )
    p.add_argument("--address", type=text_arg(1000),
                   help="Ray cluster address, HOST:PORT or ray://HOST:PORT (--executor ray; default: start a "
                   "local Ray).")  # fmt: skip
    p.add_argument("--connect-timeout", type=number(0, MAX_CONNECT_TIMEOUT_S, low_open=True),
                   default=DEFAULT_RAY_CONNECT_TIMEOUT_S, metavar="S",
                   help=f"seconds to wait for the Ray cluster at --address (default {DEFAULT_RAY_CONNECT_TIMEOUT_S:g}).")  # fmt: skip
    p.add_argument("--out", type=path_arg, help="write the plan folder here (new, empty, or a plan folder).")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the whole plan as JSON.")
    out.add_argument("--quiet", action="store_true", help="no progress lines on stderr.")
    p.set_defaults(func=_cmd_plan)


__all__ = ["EXIT_NO_ANSWER", "PLAN_FILES", "PLAN_KIND", "format_cheapest", "format_configurations",
           "register", "space_from_args", "write_plan"]  # fmt: skip
