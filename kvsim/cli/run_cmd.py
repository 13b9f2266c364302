"""``kvsim run``, ``kvsim validate`` and ``kvsim schema``: simulate and check scenario files.

    kvsim run                                   # the embedded default scenario
    kvsim run a.yaml b.yaml --out runs/ab       # runs/ab/a/, runs/ab/b/
    kvsim run a.yaml --out runs/a --set workload.num_requests=50 --json
    kvsim validate a.yaml --set replicas.0.tp=2
    kvsim schema > scenario.schema.json

``run`` prints the summary table (or ``--json``) on stdout and a progress bar on stderr
when stderr is a terminal and the run lasts more than a second. Results are written by
`kvsim.results.io.save_result`, atomically.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import kvsim
from kvsim.cli.types import path_arg
from kvsim.errors import KvsimError, ScenarioError
from kvsim.results.io import DATA_FILES, check_out_dir, clean_stale, json_safe, save_result, summary_to_json
from kvsim.results.report import format_summary
from kvsim.scenario.estimate import check_work, estimate_work
from kvsim.scenario.loading import DEFAULT_SCENARIO, load_scenario, scenario_json_schema
from kvsim.scenario.resolved import resolve_plan
from kvsim.workload import workload_file_problems

#: Wall time a run must last before its progress bar appears, seconds.
PROGRESS_DELAY_S = 1.0
#: Least wall time between two redraws of the progress bar, seconds.
PROGRESS_INTERVAL_S = 0.1
_BAR_CELLS = 30


class ProgressBar:
    """A one-line carriage-return progress bar, drawn only once ``delay_s`` have passed.

    Called as ``bar(sim_time_s, num_finished, num_requests)``, the signature of
    `kvsim.run`'s ``progress`` hook (``time_label`` names the first number: simulated time by
    default). The line is cut to the terminal's width (``columns``, default: measured).
    `close` wipes the line if anything was drawn.
    """

    def __init__(
        self,
        stream: TextIO,
        label: str,
        *,
        delay_s: float = PROGRESS_DELAY_S,
        interval_s: float = PROGRESS_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        columns: int | None = None,
        time_label: str = "sim",
    ) -> None:
        self.stream = stream
        self.label = label
        self.delay_s = delay_s
        self.interval_s = interval_s
        self.clock = clock
        self.columns = columns
        self.time_label = time_label
        self.start = clock()
        self.last_draw: float | None = None
        self.line_len = 0

    def render(self, sim_time_s: float, num_finished: int, num_requests: int, elapsed_s: float) -> str:
        """The bar's text for one state (no carriage return)."""
        frac = min(max(num_finished / num_requests, 0.0), 1.0) if num_requests > 0 else 0.0
        filled = int(frac * _BAR_CELLS)
        bar = "#" * filled + "." * (_BAR_CELLS - filled)
        return (
            f"{self.label} [{bar}] {num_finished:,}/{num_requests:,} requests"
            f"  {self.time_label} {sim_time_s:,.1f} s  wall {elapsed_s:.1f} s"
        )

    def __call__(self, sim_time_s: float, num_finished: int, num_requests: int) -> None:
        now = self.clock()
        if now - self.start < self.delay_s:
            return
        if self.last_draw is not None and now - self.last_draw < self.interval_s:
            return
        self.last_draw = now
        text = self.render(sim_time_s, num_finished, num_requests, now - self.start)
        columns = self.columns or shutil.get_terminal_size((100, 24)).columns
        text = text[: max(columns - 1, 20)]  # a wrapped line could not be overwritten by \r
        pad = " " * max(self.line_len - len(text), 0)
        self.stream.write(f"\r{text}{pad}")
        self.stream.flush()
        self.line_len = len(text)

    def close(self) -> None:
        """Erase the bar so that what follows starts on a clean line."""
        if self.line_len:
            self.stream.write("\r" + " " * self.line_len + "\r")
            self.stream.flush()
            self.line_len = 0


def _describe(scenario: kvsim.Scenario) -> str:
    model = scenario.model if isinstance(scenario.model, str) else scenario.model.name
    n = scenario.num_replicas
    return f"{n} replica{'' if n == 1 else 's'}, model {model}, workload {scenario.workload.kind}"


def _output_dirs(sources: Sequence[str | None], out: str | None) -> list[Path | None]:
    """Where each run writes: ``out`` itself for one run, ``out/<file stem>`` for several."""
    if out is None:
        return [None] * len(sources)
    if len(sources) == 1:
        return [Path(out)]
    stems: dict[str, str] = {}
    for source in sources:
        stem = Path(str(source)).stem
        if stem in stems:
            raise KvsimError(
                f"--out: {stems[stem]} and {source} would both write to {Path(out) / stem}; "
                "rename one of them or run them separately"
            )
        stems[stem] = str(source)
    return [Path(out) / Path(str(source)).stem for source in sources]


def _run_one(
    source: str | None, overrides: list[str], out_dir: Path | None, args: argparse.Namespace
) -> tuple[int, dict[str, Any] | None]:
    """Load, simulate and save one scenario; report failures on stderr. Returns (exit code, summary)."""
    label = source if source is not None else f"<embedded {DEFAULT_SCENARIO}>"
    try:
        scenario = load_scenario(source, overrides)
    except ScenarioError as exc:
        print(f"kvsim: error: {exc}", file=sys.stderr)
        return 2, None
    except KvsimError as exc:  # e.g. a cost profile that cannot be read
        print(f"kvsim: error: {label}: {exc}", file=sys.stderr)
        return 2, None

    bar = None
    if not (args.quiet or args.no_progress) and sys.stderr.isatty():
        bar = ProgressBar(sys.stderr, Path(label).name if source is not None else scenario.name)
    try:
        # Relative paths inside a scenario file (traces) resolve against the file's folder.
        base_dir = Path(source).resolve().parent if source is not None else None
        result = kvsim.run(scenario, base_dir=base_dir, progress=bar, force=args.force)
    except ScenarioError as exc:  # refused by the work estimate: name the file, not the object
        print(f"kvsim: error: {ScenarioError(label, exc.problems)}", file=sys.stderr)
        return 2, None
    except KvsimError as exc:
        print(f"kvsim: error: {label}: {exc}", file=sys.stderr)
        return 2, None
    except Exception as exc:  # a crash inside the engine: report it, let other files run
        print(f"kvsim: error: {label}: simulation failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        traceback.print_exc(file=sys.stderr)
        return 1, None
    finally:
        if bar is not None:
            bar.close()

    if out_dir is not None:
        try:
            save_result(result, out_dir)
        except KvsimError as exc:
            print(f"kvsim: error: {exc}", file=sys.stderr)
            return 2, result.summary
        except OSError as exc:
            print(f"kvsim: error: {out_dir}: cannot write results: {exc}", file=sys.stderr)
            return 1, result.summary
        if not args.quiet:
            print(f"kvsim: wrote {out_dir}/ ({', '.join(DATA_FILES)})", file=sys.stderr)
    return 0, result.summary


def _prepare_out_dirs(out_dirs: Sequence[Path | None], quiet: bool) -> None:
    """Before anything runs: refuse a folder that may not receive a result (`ResultDirError`,
    exit 2), clean what killed runs left beside each folder (with a note), and check again."""
    for out_dir in out_dirs:
        if out_dir is None:
            continue
        check_out_dir(out_dir)
        for note in clean_stale(out_dir):
            if not quiet:
                print(f"kvsim: note: {note}", file=sys.stderr)
        check_out_dir(out_dir)


def cmd_run(args: argparse.Namespace) -> int:
    sources: list[str | None] = list(args.scenarios) or [None]
    out_dirs = _output_dirs(sources, args.out)
    _prepare_out_dirs(out_dirs, args.quiet)
    several = len(sources) > 1
    summaries: dict[str, dict[str, Any] | None] = {}
    exit_code = 0
    for source, out_dir in zip(sources, out_dirs, strict=True):
        code, summary = _run_one(source, args.overrides, out_dir, args)
        exit_code = max(exit_code, code)
        summaries[str(source)] = summary
        if summary is None or args.json or args.quiet:
            continue
        if several:
            print(f"==> {source} <==")
        print(format_summary(summary))
        if several:
            print()
        sys.stdout.flush()
    if args.json:
        if several:
            print(json.dumps(json_safe(summaries), indent=2, allow_nan=False))
        elif (summary := summaries[str(sources[0])]) is not None:
            print(summary_to_json(summary))
    return exit_code


def cmd_validate(args: argparse.Namespace) -> int:
    exit_code = 0
    for path in args.files:  # every file is checked, whatever happened to the ones before
        try:
            scenario = load_scenario(path, args.overrides)
            plan = resolve_plan(scenario)
            # Counts a trace's rows: a trace that is not a regular file is a TraceError here.
            estimate = estimate_work(plan, base_dir=Path(path).resolve().parent)
        except ScenarioError as exc:
            print(f"kvsim: error: {exc}", file=sys.stderr)
            exit_code = max(exit_code, 2)
            continue
        except KvsimError as exc:
            print(f"kvsim: error: {path}: {exc}", file=sys.stderr)
            exit_code = max(exit_code, 2)
            continue
        except Exception as exc:  # a bug in kvsim: report it and check the other files
            print(f"kvsim: error: {path}: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
            exit_code = max(exit_code, 1)
            continue
        base_dir = Path(path).resolve().parent
        try:
            check_work(estimate, plan, path)
            # The files the workload names, read as the run will read them.
            problems = workload_file_problems(scenario.workload, base_dir)
            if problems:
                raise ScenarioError(path, problems)
        except ScenarioError as exc:
            print(f"kvsim: error: {exc}", file=sys.stderr)
            exit_code = max(exit_code, 2)
            continue
        print(f"{path}: ok ({_describe(scenario)}; estimated {estimate.describe()})")
    return exit_code


def cmd_schema(args: argparse.Namespace) -> int:
    print(json.dumps(scenario_json_schema(), indent=2))
    return 0


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a scenario field by dotted path, value parsed as YAML "
        "(e.g. --set replicas.0.tp=2 --set workload.num_requests=50). Repeatable.",
    )


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``run``, ``validate`` and ``schema`` to the parser."""
    run = sub.add_parser(
        "run",
        help="Simulate scenario files (or the embedded default) and print or save the results.",
        description="Simulate one or more scenario files, one after the other; with no file, the "
        "embedded default scenario. Prints the summary table on stdout. With --out, writes "
        f"{', '.join(DATA_FILES)} into DIR (DIR/<file stem>/ for several files), atomically, with a "
        ".kvsim marker; an existing DIR is replaced only if empty or a result folder kvsim wrote.",
    )
    run.add_argument(
        "scenarios", nargs="*", metavar="SCENARIO.yaml", help="Scenario files (default: embedded)."
    )
    run.add_argument(
        "--out",
        metavar="DIR",
        type=path_arg,
        help="Write the results into this folder (replaced on success, if empty or a result kvsim wrote).",
    )
    _add_set(run)
    quiet_or_json = run.add_mutually_exclusive_group()
    quiet_or_json.add_argument(
        "--quiet", action="store_true", help="Print nothing but errors (no table, no progress bar)."
    )
    quiet_or_json.add_argument(
        "--json",
        action="store_true",
        help="Print the summary as JSON instead of the table (several files: an object keyed by file).",
    )
    run.add_argument("--no-progress", action="store_true", help="Never draw the progress bar.")
    run.add_argument(
        "--force",
        action="store_true",
        help="Run even if the work estimate exceeds sim.max_requests or sim.max_memory_gib.",
    )
    run.set_defaults(func=cmd_run)

    validate = sub.add_parser(
        "validate",
        help="Check scenario files without running them.",
        description="Validate scenario files (after --set overrides). Prints 'FILE: ok (...)' per valid "
        "file; exits 2 naming the file, the field path and the rule broken otherwise.",
    )
    validate.add_argument("files", nargs="+", metavar="FILE", help="Scenario YAML files.")
    _add_set(validate)
    validate.set_defaults(func=cmd_validate)

    schema = sub.add_parser(
        "schema",
        help="Print the JSON Schema of scenario files.",
        description="Print the JSON Schema of scenario files, with a description for every field.",
    )
    schema.set_defaults(func=cmd_schema)
