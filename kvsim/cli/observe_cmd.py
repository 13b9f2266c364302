"""``kvsim observe`` and ``kvsim compare``: measure a live server, and put it beside a simulation.

    kvsim observe SCENARIO --url http://127.0.0.1:8000/v1 --out runs/observed
        send the scenario's workload to an OpenAI-compatible server on the scenario's clock
        (streaming, exact output lengths, token-id prompts), scrape its /metrics, and write
        a result folder in kvsim's format (`kvsim.observe`)
    kvsim compare OBSERVED [SIMULATED] [--set KEY=VALUE ...] [--json]
        percentiles, throughput, per-request TTFT and the KV-usage / running / waiting series
        of an observation against a simulation: a result folder, or (none given) the
        observation's own scenario simulated now, with the overrides applied

Exit codes of ``observe``: 0 every request answered as asked; 1 the server could not be
reached, or some requests failed (the folder is written all the same and says which);
2 bad input; 130 interrupted by Ctrl-C (what was measured is written first).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import kvsim
from kvsim.cli.run_cmd import ProgressBar
from kvsim.cli.types import count, number, path_arg, text_arg
from kvsim.errors import KvsimError
from kvsim.limits import MAX_TIME_S
from kvsim.observe.compare import compare_results, format_comparison
from kvsim.observe.fit import format_steps_priced, steps_priced
from kvsim.observe.outcome import STATUSES
from kvsim.observe.record import is_observation
from kvsim.observe.runner import (
    MAX_URL_CHARS,
    ObserveError,
    ObserveOptions,
    ServerUnreachable,
    check_url,
    observe,
)
from kvsim.paths import printable
from kvsim.results.io import (
    DATA_FILES,
    check_out_dir,
    clean_stale,
    json_safe,
    load_result,
    save_result,
    summary_to_json,
)
from kvsim.results.report import format_summary
from kvsim.scenario.loading import load_scenario

#: Largest --extra-body accepted, characters.
MAX_EXTRA_BODY_CHARS = 65_536


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``observe`` and ``compare`` to the parser."""
    p = sub.add_parser(
        "observe",
        help="Send a scenario's workload to a live OpenAI-compatible server and record it as a result",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", metavar="SCENARIO", type=path_arg, help="The scenario: its workload, and the "
                   "deployment it describes (what calibrate and compare simulate).")  # fmt: skip
    p.add_argument("--url", required=True, type=text_arg(MAX_URL_CHARS),
                   help="The server's OpenAI API, e.g. http://127.0.0.1:8000/v1 (http or https only).")  # fmt: skip
    p.add_argument("--out", required=True, type=path_arg, help="Result folder to write (kvsim's five files).")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="Override a scenario field (repeatable), as for kvsim run.")  # fmt: skip
    p.add_argument("--model", type=text_arg(1024), help="The served model's name (default: the first "
                   "GET /models lists).")  # fmt: skip
    metrics = p.add_mutually_exclusive_group()
    metrics.add_argument("--metrics-url", type=text_arg(MAX_URL_CHARS),
                         help="The server's Prometheus metrics (default: /metrics at the --url's host).")  # fmt: skip
    metrics.add_argument("--no-metrics", action="store_true", help="Do not scrape the server's metrics.")
    p.add_argument("--scrape-interval-s", type=number(0.05, 3600), default=0.5,
                   help="Seconds between two scrapes of the metrics (default 0.5).")  # fmt: skip
    p.add_argument("--prompt-format", choices=("token_ids", "text"), default="token_ids",
                   help="token_ids: prompts as token ids, exact lengths and shared prefixes (vLLM, SGLang); "
                   "text: one word per token (servers refusing token ids).")  # fmt: skip
    p.add_argument("--no-extensions", dest="extensions", action="store_false",
                   help="Send only OpenAI's own fields: no ignore_eos / min_tokens (outputs may end early, "
                   "marked 'short'), no return_token_ids / continuous_usage_stats.")  # fmt: skip
    p.add_argument("--vocab-size", type=count(32, 2**31 - 1),
                   help="Token ids are drawn below this (default: the scenario model's vocab_size).")  # fmt: skip
    p.add_argument("--connect-timeout-s", type=number(0.01, MAX_TIME_S), default=10.0,
                   help="Seconds to wait for a connection (default 10).")  # fmt: skip
    p.add_argument("--read-timeout-s", type=number(0.01, MAX_TIME_S), default=120.0,
                   help="Longest silence within a response, seconds (default 120).")  # fmt: skip
    p.add_argument("--request-timeout-s", type=number(0.01, MAX_TIME_S), default=3600.0,
                   help="Longest a request may take in all, seconds (default 3600).")  # fmt: skip
    p.add_argument("--retries", type=count(0, 100), default=2,
                   help="Attempts after a refused connection or a busy status (429, 5xx) before a "
                   "request counts as failed (default 2); a stream that began is never re-sent.")  # fmt: skip
    p.add_argument("--retry-backoff-s", type=number(0, 60), default=0.5,
                   help="Seconds before the first retry, doubling after each (default 0.5).")  # fmt: skip
    p.add_argument("--max-in-flight", type=count(1, 100_000), default=1024,
                   help="Requests in flight at most; later ones wait and their lateness is recorded.")  # fmt: skip
    p.add_argument("--api-key-env", metavar="VAR", type=text_arg(256),
                   help="Name of an environment variable holding the API key (sent as a bearer token, "
                   "never written anywhere).")  # fmt: skip
    p.add_argument("--extra-body", metavar="JSON", type=text_arg(MAX_EXTRA_BODY_CHARS),
                   help='More fields for every request body, a JSON object (e.g. \'{"temperature": 0}\').')  # fmt: skip
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="Print the summary as JSON.")
    out.add_argument("--quiet", action="store_true", help="Print nothing but errors.")
    p.add_argument("--no-progress", action="store_true", help="Never draw the progress bar.")
    p.set_defaults(func=cmd_observe)

    c = sub.add_parser(
        "compare",
        help="An observation (kvsim observe) against a simulation: errors, per request, time series",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("observed", metavar="OBSERVED", type=path_arg, help="Result folder of kvsim observe.")
    c.add_argument("simulated", metavar="SIMULATED", type=path_arg, nargs="?",
                   help="Result folder of a simulation of the same requests (default: simulate the "
                   "observation's scenario now, with --set applied).")  # fmt: skip
    c.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="Without SIMULATED: override a field of the observation's scenario before "
                   "simulating it (e.g. --set replicas.0.cost_model='{profile: fit.json}').")  # fmt: skip
    c.add_argument("--save-simulation", metavar="DIR", type=path_arg,
                   help="Without SIMULATED: also write the simulation as a result folder.")  # fmt: skip
    c.add_argument("--json", action="store_true", help="Print the comparison as JSON.")
    c.set_defaults(func=cmd_compare)


# --------------------------------------------------------------------------- observe


def _options(args: argparse.Namespace) -> ObserveOptions:
    check_url(args.url, "--url")  # before the --out folder is looked at
    if args.metrics_url is not None:
        if not args.metrics_url:
            raise ObserveError("--metrics-url: empty (--no-metrics scrapes nothing)")
        check_url(args.metrics_url, "--metrics-url")
    for flag, value in (("--model", args.model), ("--api-key-env", args.api_key_env)):
        if value is not None and not value.strip():
            raise ObserveError(f"{flag}: empty")
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise ObserveError(
                f"--api-key-env {printable(args.api_key_env)}: no such environment variable (or empty)"
            )
    extra: dict[str, Any] = {}
    if args.extra_body:
        try:
            extra = json.loads(args.extra_body)
        except (ValueError, RecursionError) as exc:
            raise ObserveError(f"--extra-body: not JSON ({exc})") from None
        if not isinstance(extra, dict):
            raise ObserveError("--extra-body: must be a JSON object")
    return ObserveOptions(
        url=args.url,
        model=args.model,
        metrics_url="" if args.no_metrics else args.metrics_url,
        scrape_interval_s=args.scrape_interval_s,
        prompt_format=args.prompt_format,
        extensions=args.extensions,
        vocab_size=args.vocab_size,
        connect_timeout_s=args.connect_timeout_s,
        read_timeout_s=args.read_timeout_s,
        request_timeout_s=args.request_timeout_s,
        retries=args.retries,
        retry_backoff_s=args.retry_backoff_s,
        max_in_flight=args.max_in_flight,
        api_key=api_key,
        extra_body=extra,
    )


def _observed_lines(summary: dict[str, Any]) -> list[str]:
    """What the summary table does not say about an observation."""
    lines = [
        f"server: {summary.get('observed_url')} (model {summary.get('observed_model')}, "
        f"version {summary.get('observed_server_version') or 'unknown'}), "
        f"{summary.get('observed_num_scrapes', 0)} scrapes of its metrics"
    ]
    failed = {s: summary.get(f"observed_num_{s}", 0) for s in STATUSES if s != "ok"}
    failed = {s: n for s, n in failed.items() if n}
    if failed:
        lines.append("requests not answered as asked: " + ", ".join(f"{n} {s}" for s, n in failed.items()))
    if summary.get("observed_num_retries"):
        lines.append(f"retried attempts: {summary['observed_num_retries']}")
    return lines


def cmd_observe(args: argparse.Namespace) -> int:
    try:  # the observe extra, imported by the observation itself: checked before anything runs
        import httpx  # noqa: F401
        import prometheus_client  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the extra is part of every test install
        raise KvsimError(
            f"kvsim observe needs the observe extra ({exc}): pip install 'kvsim[observe]'"
        ) from None
    scenario = load_scenario(args.scenario, args.overrides)
    opts = _options(args)
    check_out_dir(args.out)  # before anything is sent
    for note in clean_stale(args.out):
        if not args.quiet:
            print(f"kvsim: note: {note}", file=sys.stderr)
    bar = None
    if not (args.quiet or args.no_progress) and sys.stderr.isatty():
        bar = ProgressBar(sys.stderr, f"observe {Path(args.scenario).name}", time_label="t")
    try:
        observation = observe(scenario, opts, base_dir=Path(args.scenario).resolve().parent, progress=bar)
    except ServerUnreachable as exc:
        print(f"kvsim: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if bar is not None:
            bar.close()
    result = observation.result
    try:
        save_result(result, args.out)
    except OSError as exc:
        print(f"kvsim: error: {args.out}: cannot write results: {exc}", file=sys.stderr)
        return 1
    summary = result.summary
    if not args.quiet:
        for note in observation.notes:
            print(f"kvsim: note: {note}", file=sys.stderr)
        print(f"kvsim: wrote {args.out}/ ({', '.join(DATA_FILES)})", file=sys.stderr)
    if args.json:
        print(summary_to_json(summary))
    elif not args.quiet:
        print(format_summary(summary))
        print()
        print("\n".join(_observed_lines(summary)))
    if observation.interrupted and "Ctrl-C" in " ".join(observation.notes):
        return 130
    return 1 if summary.get("observed_num_failed") or observation.interrupted else 0


# --------------------------------------------------------------------------- compare


def _simulate(observed: kvsim.Result, overrides: list[str], folder: Path) -> kvsim.Result:
    """The observation's scenario with ``overrides``, simulated (relative paths from its folder)."""
    return kvsim.run(observed.scenario, overrides=overrides, base_dir=folder)


def cmd_compare(args: argparse.Namespace) -> int:
    observed = load_result(args.observed)
    if not is_observation(observed.summary):
        print(
            f"kvsim: warning: {args.observed}: not an observation (no 'observed' in its summary); "
            "comparing two results as they are",
            file=sys.stderr,
        )
    if args.simulated is not None:
        if args.overrides or args.save_simulation:
            raise KvsimError(
                "--set and --save-simulation apply when kvsim compare simulates (no SIMULATED given)"
            )
        simulated = load_result(args.simulated)
        label = "simulated"
    else:
        if args.save_simulation:
            check_out_dir(args.save_simulation)
        simulated = _simulate(observed, args.overrides, Path(args.observed).resolve())
        label = "kvsim"
        if args.save_simulation:
            save_result(simulated, args.save_simulation)
            print(f"kvsim: wrote {args.save_simulation}/", file=sys.stderr)
    cmp = compare_results(observed, simulated)
    steps = steps_priced(observed, simulated.scenario, Path(args.observed).resolve())
    if args.json:
        print(json.dumps(json_safe({**cmp.as_dict(), "steps": steps}), indent=2, allow_nan=False))
    else:
        print(format_comparison(cmp, "observed", label))
        if steps is not None:
            print(format_steps_priced(steps))
    return 0
