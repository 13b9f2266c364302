"""``kvsim spikes`` and ``kvsim exposure``: the dashboard's analyses of a run, on the command line.

    kvsim spikes scenarios/preemption_recompute.yaml --top 3
    kvsim spikes --set workload.num_requests=300 --itl-threshold 0.1
    kvsim exposure scenarios/prefix_cache_side_channel.yaml
    kvsim sharing scenarios/beam_search.yaml --widths 2,4,6

``spikes`` runs a scenario, finds the windows whose p99 TTFT or ITL exceed the thresholds
(the scenario's SLOs by default) and prints each spike's cause with the numbers behind it,
worst first, as the dashboard's Latency spikes page does. ``exposure`` prints how often
prompts a tenant sends for the first time hit the prefix cache (on blocks only another
tenant can have put there) and the TTFT of hits against misses: the timing side channel.
``sharing`` prints the memory beam search or parallel sampling saves by sharing blocks
(`kvsim.analysis.sharing`, the vLLM paper's Figure 15).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import kvsim
from kvsim import analysis
from kvsim.analysis import sharing
from kvsim.cli.types import count, number, path_arg, text_arg
from kvsim.engine.simulator import scenario_workload
from kvsim.errors import WorkLimitError
from kvsim.limits import MAX_SAMPLES, MAX_TIME_S, MAX_WIDTHS, MAX_WINDOWS
from kvsim.results.io import json_safe
from kvsim.units import format_seconds


def _run(args: argparse.Namespace) -> kvsim.Result:
    scenario = kvsim.load_scenario(args.scenario, args.overrides)
    base_dir = Path(args.scenario).resolve().parent if args.scenario else None
    return kvsim.run(scenario, base_dir=base_dir)


def _cmd_spikes(args: argparse.Namespace) -> int:
    res = _run(args)
    slo = res.scenario.slo
    ttft_thr = slo.ttft_s if args.ttft_threshold is None else args.ttft_threshold
    itl_thr = slo.tpot_s if args.itl_threshold is None else args.itl_threshold
    finish = res.requests["finish_s"]
    span = float(finish.max()) if finish.notna().any() else 0.0
    window = args.window if args.window is not None else analysis.nice_window(span)
    if span / window > MAX_WINDOWS:  # the work of the rolling statistics grows with the windows
        raise WorkLimitError(
            f"--window {window:g}: cuts the run's {span:,.3g} s into more than {MAX_WINDOWS:,} windows "
            f"(the most kvsim computes); use at least {span / MAX_WINDOWS:.3g} s"
        )
    spikes = analysis.run_spikes(res.requests, res.iterations, res.events, window_s=window,
                                 ttft_threshold_s=ttft_thr, itl_threshold_s=itl_thr)  # fmt: skip
    table = analysis.attribute_spikes(spikes, res.requests, res.iterations, res.events)
    worst = analysis.worst_spikes(table, ttft_threshold_s=ttft_thr, itl_threshold_s=itl_thr, n=args.top)
    if args.json:
        cols = [c for c in worst.columns if c != "over"]
        print(json.dumps(json_safe(worst[cols].to_dict("records")), indent=2, allow_nan=False))
        return 0
    print(
        f"{res.scenario.name}: {len(table)} spike(s) over TTFT {format_seconds(ttft_thr)} or ITL "
        f"{format_seconds(itl_thr)} in {format_seconds(window)} windows"
        + (f"; the {len(worst)} worst:" if len(table) else ".")
    )
    for text in worst["explanation"]:
        print(f"- {text}")
    return 0


def _cmd_exposure(args: argparse.Namespace) -> int:
    res = _run(args)
    base_dir = Path(args.scenario).resolve().parent if args.scenario else None
    specs = scenario_workload(res.scenario, base_dir=base_dir).requests
    summary = analysis.exposure_summary(analysis.cross_tenant_exposure(res.requests, specs))
    if args.json:
        print(json.dumps(json_safe(summary), indent=2, allow_nan=False))
        return 0
    print(
        f"{res.scenario.name}: {summary['first_uses']:,} prompts sent by a tenant for the first time; "
        f"{summary['first_use_hit_rate']:.0%} hit the prefix cache; TTFT p50 "
        f"{format_seconds(summary['ttft_p50_hit_s'])} on a hit, {format_seconds(summary['ttft_p50_miss_s'])} "
        "on a miss"
    )
    return 0


def _cmd_sharing(args: argparse.Namespace) -> int:
    scenario = kvsim.load_scenario(args.scenario, args.overrides)
    base_dir = Path(args.scenario).resolve().parent if args.scenario else None
    widths = _widths(args.widths)
    points = sharing.memory_saving(scenario, args.kind, widths, base_dir=base_dir)
    if args.json:
        print(json.dumps(json_safe([vars_of(p) for p in points]), indent=2, allow_nan=False))
        return 0
    label = "beam width" if args.kind == "beam" else "parallel samples"
    print(f"{scenario.name}: memory saved by sharing blocks ({args.kind}), 1 - block-seconds shared / alone")
    for p in points:
        note = "" if p.same_schedule else f"  (schedules differ: {p.num_preemptions} preemptions)"
        print(
            f"  {label} {p.width}: {p.saving:.1%} saved "
            f"({p.block_s_shared:,.0f} vs {p.block_s_alone:,.0f} block-s){note}"
        )
    return 0


def vars_of(point: sharing.SharingPoint) -> dict[str, object]:
    return {f: getattr(point, f) for f in point.__dataclass_fields__}


def _widths(text: str) -> list[int]:
    """``--widths``: at most `MAX_WIDTHS` integers from 1 to `MAX_SAMPLES`, comma-separated."""
    parts = [w.strip() for w in text.split(",")]
    try:
        if not all(parts) or len(parts) > MAX_WIDTHS:
            raise argparse.ArgumentTypeError(f"1 to {MAX_WIDTHS} integers separated by commas, e.g. 2,4,6")
        return [count(1, MAX_SAMPLES)(w) for w in parts]
    except argparse.ArgumentTypeError as exc:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise kvsim.ScenarioError("--widths", [("", f"{exc}; got {shown!r}")]) from None


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "scenario", nargs="?", type=path_arg, help="Scenario file (default: the embedded default scenario)."
    )
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="Override a scenario field (repeatable), as for kvsim run.")  # fmt: skip
    p.add_argument("--json", action="store_true", help="Print JSON instead of text.")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``spikes``, ``exposure`` and ``sharing`` to the parser."""
    p = sub.add_parser(
        "spikes",
        help="Run a scenario and explain its latency spikes (the dashboard's Latency spikes page).",
        description="Run a scenario, find the windows whose p99 TTFT or token-weighted p99 ITL exceed the "
        "thresholds (or a preempted request's gap does), and print each spike's cause with the numbers "
        "behind it, worst first: queueing, preemption, swap, eviction (only where evicted blocks were "
        "needed again), rejection, a prefill in the batch, bursts.",
    )
    _common(p)
    p.add_argument(
        "--window",
        type=number(0, MAX_TIME_S, low_open=True),
        metavar="S",
        help=f"Window length, s, > 0 (default: about 1/60 of the run; the run is cut into at most {MAX_WINDOWS:,}).",
    )
    p.add_argument(
        "--ttft-threshold",
        type=number(0, MAX_TIME_S),
        metavar="S",
        help="TTFT threshold, s (default: slo.ttft_s).",
    )
    p.add_argument(
        "--itl-threshold",
        type=number(0, MAX_TIME_S),
        metavar="S",
        help="ITL threshold, s (default: slo.tpot_s).",
    )
    p.add_argument("--top", type=count(1, 10_000), default=8, help="Spikes printed, worst first (default 8).")
    p.set_defaults(func=_cmd_spikes)
    e = sub.add_parser(
        "exposure",
        help="Run a scenario and measure the prefix cache's cross-tenant timing side channel.",
        description="Run a scenario and print how often a prompt prefix a tenant sends for the first time "
        "hits the prefix cache (only another tenant can have put it there) and the TTFT p50 of such hits "
        "against misses (kvsim.analysis.cross_tenant_exposure).",
    )
    _common(e)
    e.set_defaults(func=_cmd_exposure)
    h = sub.add_parser(
        "sharing",
        help="Memory saved by sharing blocks in beam search or parallel sampling (vLLM paper Fig. 15).",
        description="Run a scenario with and without block sharing for each width and print the memory "
        "saved, 1 - block-seconds held with sharing / without (kvsim.analysis.sharing): beam search (workload.beam_sharing true "
        "vs false) or parallel sampling (each prompt's samples sharing its blocks after the prefill vs not). Meaningful when neither run preempts "
        "(each line says when the schedules differ).",
    )
    _common(h)
    h.add_argument("--kind", choices=("beam", "parallel"), default="beam", help="What shares (default beam).")
    h.add_argument(
        "--widths",
        type=text_arg(10_000),
        default="2,4,6",
        help="Beam widths or sample counts, comma-separated (default 2,4,6).",
    )
    h.set_defaults(func=_cmd_sharing)
